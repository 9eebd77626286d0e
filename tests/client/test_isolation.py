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


def _prints_ok(code: str) -> None:
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, timeout=60)
    assert r.returncode == 0, r.stderr.decode()
    assert r.stdout.strip() == b"ok"


def test_client_imports_without_server_dependencies():
    _prints_ok(CODE)


SPARK_PLAN_CODE = """
import sys
for blocked in ("pyspark", "pyarrow", "pandas", "py4j"):
    sys.modules[blocked] = None  # importing it now raises ImportError
import raftlog.client.spark_plan as plan
o = plan.parse_read_options({"bootstrap.servers": "h:1", "subscribe": "t", "minPartitions": "3"})
ranges = plan.split_ranges([plan.OffsetRange("t", 0, 0, 90)], o.min_partitions)
assert [(r.start, r.end) for r in ranges] == [(0, 30), (30, 60), (60, 90)], ranges
bad = sorted(m for m, mod in sys.modules.items() if mod is not None and m.split(".")[0] in
             ("pyspark", "pyarrow", "pandas", "py4j"))
assert not bad, bad
print("ok")
"""


def test_spark_plan_imports_without_pyspark():
    """The Spark data source's planning half imports and plans with no pyspark (nor pyarrow)."""
    _prints_ok(SPARK_PLAN_CODE)
