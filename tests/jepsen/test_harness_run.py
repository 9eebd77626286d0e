"""A short real run: 3 node processes, kill + pause + partition, queue workload (about
35 s; seed 7 kills one node and the leader, pauses one and a minority, isolates the
leader; test_security_run.py cuts a majority from a minority)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest


@pytest.mark.slow
@pytest.mark.timeout(180)
def test_short_run_is_valid(tmp_path):
    out = tmp_path / "run"
    cmd = [sys.executable, "-m", "raftlog.jepsen", "run", "--nodes", "3", "--workload", "queue",
           "--nemesis", "kill,pause,partition", "--time", "25", "--rate", "100", "--seed", "7",
           "--hold", "2,4", "--quiet", "1.5,3", "--out", str(out)]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=170)
    results = json.loads((out / "results.json").read_text())
    assert p.returncode == 0, (p.stderr[-3000:], results.get("anomalies"))
    assert results["valid"] is True
    for name in ("history.jsonl", "report.html", "timeline.png", "final.json"):
        assert os.path.getsize(out / name) > 0, name
    st = results["stats"]
    assert st["acknowledged_sends"] > 100
    assert {e["kind"] for e in results["schedule"]} == {"kill", "pause", "partition"}
    assert len(st["nemesis"]) == len(results["schedule"]), "a scheduled fault was not injected"
    assert all(r["reached"] for r in st["final_reads"].values())
    # availability: every injected fault has its window, each kind its summary, compared
    # with a fault-free rate the run did achieve
    av = results["availability"]
    assert av["fault_free"]["ok_per_s"] > 0 and av["fault_free"]["seconds"] > 0
    assert len(av["windows"]) == len(st["nemesis"])
    assert set(av["by_kind"]) == {e["kind"] for e in results["schedule"]}
    for w in av["windows"]:
        assert w["availability"] is not None and w["availability"] >= 0, w
    assert av["overall"]["ok"] >= st["acknowledged_sends"]
    assert "<h2>Availability</h2>" in (out / "report.html").read_text()
