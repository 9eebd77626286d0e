"""A short real run with SASL_SSL on every listener (issue #19): clients, replication and
heartbeats all TLS + SCRAM, kill + partition faults, and the history is valid."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest


@pytest.mark.slow
@pytest.mark.timeout(180)
def test_sasl_ssl_run_with_kill_and_partition_is_valid(tmp_path):
    out = tmp_path / "run"
    cmd = [sys.executable, "-m", "raftlog.jepsen", "run", "--nodes", "3", "--workload", "queue",
           "--nemesis", "kill,partition", "--time", "20", "--rate", "100", "--seed", "19",
           "--hold", "2,4", "--quiet", "1.5,3", "--security-protocol", "SASL_SSL",
           "--out", str(out)]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=170)
    results = json.loads((out / "results.json").read_text())
    assert p.returncode == 0, (p.stderr[-3000:], results.get("anomalies"))
    assert results["valid"] is True
    st = results["stats"]
    assert st["acknowledged_sends"] > 100
    assert {e["kind"] for e in results["schedule"]} == {"kill", "partition"}
    assert all(r["reached"] for r in st["final_reads"].values())
    assert "listener=SASL_SSL protocol=SASL_SSL" in (out / "node-1.log").read_text()
