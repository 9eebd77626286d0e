"""The client SDK needs only the core dependencies and never imports the server packages."""

from __future__ import annotations

import subprocess
import sys

CODE = """
import sys
for blocked in ("trio", "pysyncobj", "pyspark"):
    sys.modules[blocked] = None  # importing it now raises ImportError
import raftlog.client
from raftlog.client import Producer, Consumer, Admin, TopicPartition
bad = sorted(m for m in sys.modules if m.startswith(("raftlog.node", "raftlog.metadata", "raftlog.jepsen")))
assert not bad, bad
print("ok")
"""


def test_client_imports_without_server_dependencies():
    r = subprocess.run([sys.executable, "-c", CODE], capture_output=True, timeout=60)
    assert r.returncode == 0, r.stderr.decode()
    assert r.stdout.strip() == b"ok"
