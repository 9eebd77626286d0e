"""A short real run with network partitions and kills (kernel iptables where root
allows, else the harness's per-link proxy): the queue workload stays valid."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest


@pytest.mark.slow
@pytest.mark.timeout(180)
def test_partition_and_kill_run_is_valid(tmp_path):
    out = tmp_path / "run"
    cmd = [sys.executable, "-m", "raftlog.jepsen", "run", "--nodes", "3", "--workload", "queue",
           "--nemesis", "partition,kill", "--time", "15", "--rate", "100", "--seed", "11",
           "--hold", "2,4", "--quiet", "1.5,3", "--out", str(out)]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=170)
    results = json.loads((out / "results.json").read_text())
    assert p.returncode == 0, (p.stderr[-3000:], results.get("anomalies"))
    assert results["valid"] is True
    st = results["stats"]
    assert not st["network_faults"].startswith("none"), st["network_faults"]
    faults = [f["fault"] for f in st["nemesis"]]
    assert any(f.startswith("partition") for f in faults), faults
    assert any(f.startswith("kill") for f in faults), faults
