"""jepsen/availability.py on a hand-made history (no cluster): per window, per fault
kind, overall, and the successful-operations-per-second bins; the report shows them."""

from __future__ import annotations

import json

from raftlog.jepsen import report
from raftlog.jepsen.availability import availability, fault_windows, ok_per_second


class _H:
    """Ops with chosen times (seconds): one process per client operation."""

    def __init__(self):
        self.ops: list[dict] = []
        self.n = 0

    def _add(self, t: float, op: dict) -> dict:
        op.update(index=len(self.ops), time=int(t * 1e9))
        self.ops.append(op)
        return op

    def op(self, f: str, t_inv: float, t_done: float | None, type_: str = "ok") -> None:
        self.n += 1
        self._add(t_inv, {"type": "invoke", "process": self.n, "f": f, "value": None})
        if t_done is not None:
            self._add(t_done, {"type": type_, "process": self.n, "f": f, "value": None})

    def fault(self, kind: str, start: float, end: float) -> None:
        self._add(start - 0.01, {"type": "invoke", "process": "nemesis", "f": "start",
                                 "value": {"kind": kind, "target": "leader"}})
        self._add(start, {"type": "ok", "process": "nemesis", "f": "start",
                          "value": f"{kind} [1]"})
        self._add(end - 0.5, {"type": "invoke", "process": "nemesis", "f": "stop",
                              "value": None})
        self._add(end, {"type": "ok", "process": "nemesis", "f": "stop", "value": "healed"})

    def sorted(self) -> list[dict]:
        ops = sorted(self.ops, key=lambda o: (o["time"], o["index"]))
        for i, o in enumerate(ops):
            o["index"] = i
        return ops


def _history() -> list[dict]:
    h = _H()
    # 0-10 s and 14-20 s fault-free: 10 sends/s, all ok at once
    for i in range(100):
        h.op("send", i / 10, i / 10 + 0.01)
    for i in range(140, 200):
        h.op("send", i / 10, i / 10 + 0.01)
    # 10-14 s: a kill; 2 ok sends/s, 2/s end as info (indeterminate)
    h.fault("kill", 10.0, 14.0)
    for i in range(100, 140, 5):
        h.op("send", i / 10, i / 10 + 0.01)
        h.op("send", i / 10 + 0.1, i / 10 + 0.2, "info")
    # 20-22 s: a pause; one send invoked in it succeeds only after it (at 22.5 s), and
    # one never completes; a poll is ok meanwhile
    h.fault("pause", 20.0, 22.0)
    h.op("send", 20.5, 22.5)
    h.op("send", 21.0, None)
    h.op("poll", 21.0, 21.1)
    for i in range(230, 250):  # 23-25 s: fault-free again
        h.op("send", i / 10, i / 10 + 0.01)
    return h.sorted()


def test_windows_kinds_and_overall_compare_with_the_fault_free_rate():
    ops = _history()
    assert [(w["kind"], w["start"], w["end"]) for w in fault_windows(ops)] == [
        ("kill", 10.0, 14.0), ("pause", 20.0, 22.0)]
    av = availability(ops)
    free = av["fault_free"]
    # fault-free: 0-10, 14-20, 22-24.91 s; ok completions there: 100 + 60 + 1 + 20
    assert free["seconds"] == round(24.91 - 6.0, 3)
    assert free["ok"] == 181 and free["ok_fraction"] == 1.0
    assert free["by_f"]["send"]["ok"] == 181
    rate = 181 / 18.91
    kill, pause = av["windows"]
    assert kill["kind"] == "kill" and kill["what"] == "kill [1]"
    assert (kill["ops"], kill["ok"], kill["ok_fraction"]) == (16, 8, 0.5)
    assert kill["availability"] == round((8 / 4) / rate, 3)
    # the pause: 3 invoked, 1 ok completion in it (the poll); the late send counts for
    # the rate when it succeeded (after the window), for the fraction where it began
    assert (pause["ops"], pause["ok"]) == (3, 1)
    assert pause["ok_fraction"] == round(2 / 3, 4)
    assert pause["by_f"]["send"] == {"ops": 2, "ok": 0, "ok_per_s": 0.0, "availability": 0.0}
    assert av["by_kind"]["kill"]["windows"] == 1
    assert av["by_kind"]["kill"]["availability"] == kill["availability"]
    assert av["by_kind"]["pause"]["worst_window_availability"] == pause["availability"]
    assert av["faults"]["seconds"] == 6.0 and av["faults"]["ok"] == 9
    assert av["overall"]["ok"] == 190 and av["overall"]["ops"] == 199
    assert av["overall"]["availability"] == round((190 / 24.91) / rate, 3)
    json.dumps(av)  # results.json takes it as is


def test_ok_per_second_bins_every_second_of_the_run():
    bins = ok_per_second(_history())
    send = dict(bins["send"])
    assert len(bins["send"]) == 25 and send[0.0] == 10 and send[12.0] == 2
    assert send[21.0] == 0 and send[22.0] == 1  # the late send, when it succeeded
    assert dict(bins["poll"])[21.0] == 1


def test_a_history_without_faults_or_clients():
    assert availability([])["fault_free"] is None
    h = _H()
    for i in range(10):
        h.op("send", i, i + 0.5)
    av = availability(h.sorted())
    assert av["faults"] is None and av["windows"] == [] and av["by_kind"] == {}
    assert av["fault_free"]["ok"] == 10


def test_report_html_has_the_availability_table_and_both_panels(tmp_path):
    ops = _history()
    results = {"valid": True, "anomalies": {}, "stats": report.stats(ops),
               "availability": availability(ops)}
    report.write_results(str(tmp_path), results)
    report.write_report(str(tmp_path), ops, results)
    assert "availability" in json.loads((tmp_path / "results.json").read_text())
    page = (tmp_path / "report.html").read_text()
    assert "<h2>Availability</h2>" in page and "all kill" in page and "pause @20.0s" in page
    assert (tmp_path / "timeline.png").stat().st_size > 1000


def test_windows_are_split_by_how_many_nodes_they_hit():
    """The issue's target is about one node of five: a pause of one node and one of two
    are told apart (a partition counts its smaller side)."""
    from raftlog.jepsen.availability import nodes_hit

    assert nodes_hit("pause [4]") == 1 and nodes_hit("kill [1, 2]") == 2
    assert nodes_hit("partition [[5], [1, 2, 3, 4]]") == 1
    assert nodes_hit("powerloss [3, 4, 5]: dropped 3: 4314 B, 0 dirs") == 3
    assert nodes_hit("drop 1->3") is None and nodes_hit("healed") is None
    h = _H()
    for i in range(100):
        h.op("send", i / 10, i / 10 + 0.01)  # 10 ok/s without faults
    h.fault("pause", 10.0, 12.0)  # one node ("pause [1]"): 10 ok/s through it
    for i in range(100, 120):
        h.op("send", i / 10, i / 10 + 0.01)
    h._add(12.5, {"type": "invoke", "process": "nemesis", "f": "start",
                  "value": {"kind": "pause", "target": "minority"}})
    h._add(12.6, {"type": "ok", "process": "nemesis", "f": "start", "value": "pause [2, 3]"})
    h._add(14.0, {"type": "invoke", "process": "nemesis", "f": "stop", "value": None})
    h._add(14.6, {"type": "ok", "process": "nemesis", "f": "stop", "value": "healed"})
    for i in range(150, 200):
        h.op("send", i / 10, i / 10 + 0.01)  # nothing during the two-node pause
    av = availability(h.sorted())
    one, two = av["by_kind_and_nodes"]["pause/1"], av["by_kind_and_nodes"]["pause/2"]
    assert one["windows"] == 1 and two["windows"] == 1
    assert one["availability"] > 0.9 and two["availability"] == 0.0
    assert av["by_kind"]["pause"]["windows"] == 2
    assert 0 < av["by_kind"]["pause"]["availability"] < one["availability"]
