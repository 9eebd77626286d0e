"""The harness sender's pipeline of in-flight sends (jepsen/workloads.py SendPipeline):
pure, no cluster -- slots bound what is outstanding, each slot is its own history
process, a send given up on (timeout) is recorded once and its late answer dropped."""

from __future__ import annotations

import threading

import pytest

from raftlog.jepsen.checkers import pairs
from raftlog.jepsen.history import History
from raftlog.jepsen.workloads import SENDER_PROCESS_BASE, SendPipeline


def test_slots_bound_the_sends_in_flight_and_each_is_a_process():
    h = History()
    pipe = SendPipeline(h, sender=2, size=3)
    stop = threading.Event()
    ops = [pipe.invoke(pipe.acquire(stop), "send", i, producer="p") for i in range(3)]
    assert len({op["process"] for op in ops}) == 3
    assert all(op["process"] >= SENDER_PROCESS_BASE + 2000 for op in ops)
    got = []
    t = threading.Thread(target=lambda: got.append(pipe.acquire(stop)))
    t.start()
    t.join(0.3)
    assert t.is_alive() and not got  # all three slots busy: the fourth send waits
    slot_of_second = next(s for s, (op, _d, _p) in pipe.pending.items() if op is ops[1])
    assert pipe.complete(slot_of_second, ops[1], "ok", offset=7)
    t.join(5)
    assert got == [slot_of_second]  # the freed slot, hence the same process again
    # every completion pairs with its own invocation, even answered out of order
    for slot, (op, _d, _p) in list(pipe.pending.items()):
        pipe.complete(slot, op, "ok", offset=op["value"])
    done = {inv["value"]: comp["type"] for inv, comp in pairs(h.ops)}
    assert done == {0: "ok", 1: "ok", 2: "ok"}


def test_a_send_given_up_on_is_info_once_and_its_late_answer_is_dropped():
    h = History()
    pipe = SendPipeline(h, sender=0, size=2)
    stop = threading.Event()
    slot = pipe.acquire(stop)
    op = pipe.invoke(slot, "send", 1, producer="wedged")
    assert pipe.expire(0.0) == []  # not overdue yet
    assert pipe.expire(float("inf")) == ["wedged"]  # overdue: its producer is replaced
    assert pipe.complete(slot, op, "ok", offset=3) is False  # (too late: already info)
    (inv, comp), = pairs(h.ops)
    assert comp["type"] == "info" and comp["error"] == "timeout"
    assert sorted(pipe.free) == [0, 1]


def test_one_at_a_time_keeps_the_senders_process_id():
    h = History()
    pipe = SendPipeline(h, sender=3, size=1)
    op = pipe.invoke(pipe.acquire(threading.Event()), "send", 1, producer=None)
    assert op["process"] == 3
    stop = threading.Event()
    stop.set()
    assert pipe.acquire(stop) is None  # the one slot is busy and the run stops


def test_in_flight_out_of_range_is_refused_with_its_bounds(capsys):
    from raftlog.jepsen.runner import build_parser

    assert build_parser().parse_args(["run"]).in_flight == 64
    assert build_parser().parse_args(["run", "--in-flight", "1"]).in_flight == 1
    for bad in ("0", "1001", "many"):
        with pytest.raises(SystemExit) as e:
            build_parser().parse_args(["run", "--in-flight", bad])
        assert e.value.code == 2
        err = capsys.readouterr().err
        assert "--in-flight" in err
        assert ("must be 1 to 1000" if bad != "many" else "is not a number of sends") in err
