"""The Spark source's planning half needs no pyspark."""

from __future__ import annotations

import subprocess
import sys

CHILD = """
import sys
sys.modules["pyspark"] = None  # any pyspark import now fails
import raftlog.client.spark_plan as plan
opts = plan.parse_read_options({"bootstrap.servers": "h:1", "subscribe": "t"})
ranges = plan.split_ranges([plan.OffsetRange("t", 0, 0, 100)], 4)
assert len(ranges) == 4 and sum(r.size for r in ranges) == 100, ranges
try:
    import raftlog.client.spark
except ImportError:
    print("ok")
"""


def test_planning_imports_and_runs_without_pyspark():
    r = subprocess.run([sys.executable, "-c", CHILD], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0 and r.stdout.strip() == "ok", r.stderr
