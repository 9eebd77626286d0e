"""results.json / report.html / timeline from a synthetic history; the seeded schedule."""

from __future__ import annotations

import json

from raftlog.jepsen import checkers, report
from raftlog.jepsen.nemesis import schedule

from .sim import random_history


def test_report_files(tmp_path):
    s = random_history(3, 300)
    h = s.h
    n = h.invoke("nemesis", "start", {"kind": "kill"})
    h.ok(n, "kill [1]")
    s.poll(10)
    n = h.invoke("nemesis", "stop", None)
    h.ok(n, "healed")
    an = checkers.check_queue(h.ops, s.final())
    valid, trimmed, counts = checkers.summarize(an, "queue")
    st = report.stats(h.ops)
    assert st["nemesis"][0]["fault"] == "kill [1]"
    st["anomaly_counts"] = counts
    results = {"valid": valid, "anomalies": trimmed, "stats": st}
    report.write_results(str(tmp_path), results)
    report.write_report(str(tmp_path), h.ops, results)
    assert json.loads((tmp_path / "results.json").read_text())["valid"] is True
    assert "VALID" in (tmp_path / "report.html").read_text()
    assert (tmp_path / "timeline.png").stat().st_size > 1000


def test_schedule_is_seeded():
    a = schedule(5, ["kill", "pause", "partition"], 60)
    assert a == schedule(5, ["kill", "pause", "partition"], 60)
    assert a != schedule(6, ["kill", "pause", "partition"], 60)
    assert all(ev["at"] + ev["hold"] <= 60 for ev in a)
    assert schedule(5, [], 60) == []
