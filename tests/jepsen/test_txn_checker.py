"""The txn workload's checker: simulated correct histories are valid; each anomaly, built
by hand, is caught with its kind and a concrete example; Kafka's allowed interleavings
are not reported."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from raftlog.jepsen import checkers, report
from raftlog.jepsen.history import History
from raftlog.jepsen.txn_checker import ANOMALIES, check_txn

from .txn_sim import BUGS, run

# ----------------------------------------------------------------------------- helpers


def begin(h, p, sends, poll=False):
    return h.invoke(p, "txn", {"sends": [[k, v] for k, v, _o in sends], "poll": poll})


def end(h, inv, type_, sends, **extra):
    return h.complete(inv, type_, {"sends": [list(s) for s in sends], **extra})


def txn(h, p, sends, type_="ok", **extra):
    """One transaction, invoked and completed at once; sends are (key, v, offset)."""
    return end(h, begin(h, p, sends, poll="polls" in extra), type_, sends, **extra)


def poll(h, p, recs):
    return h.ok(h.invoke(p, "poll", None), recs)


def assign(h, p, positions):
    return h.ok(h.invoke(p, "assign", None), {"keys": list(positions), "positions": positions})


def kinds(r):
    return set(r)


# ----------------------------------------------------------------------------- valid


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), steps=st.integers(1, 400), rpw=st.integers(0, 2),
       consumers=st.integers(0, 3), with_final=st.booleans())
def test_simulated_correct_histories_are_valid(seed, steps, rpw, consumers, with_final):
    s = run(seed, steps, rpw=rpw, consumers=consumers)
    r = check_txn(s.h.ops, s.final() if with_final else None)
    assert r == {}, json.dumps(r)[:2000]


def test_simulated_history_exercises_every_outcome():
    """The generator is not vacuous: commits, aborts, indeterminate transactions (some
    proven committed by a read), read-process-write polls and consumer sessions."""
    s = run(7, 1500)
    types = {(o["f"], o["type"]) for o in s.h.ops}
    assert {("txn", "ok"), ("txn", "fail"), ("txn", "info"), ("poll", "ok"),
            ("assign", "ok")} <= types
    assert any(o["f"] == "txn" and o["type"] == "ok" and o["value"].get("polls")
               for o in s.h.ops)
    assert check_txn(s.h.ops, s.final()) == {}


def test_kafka_interleavings_are_not_cycles():
    """Concurrent transactions interleave in each partition in any order (Kafka does not
    isolate writes): t1 before t2 in k0 and t2 before t1 in k1 is no G0; and a
    transaction may read a record committed after its own earlier append (ww then wr)."""
    h = History()
    a = begin(h, 0, [("k0", 1, 0), ("k1", 2, 1)])
    b = begin(h, 1, [("k1", 3, 0), ("k0", 4, 1)])
    end(h, a, "ok", [("k0", 1, 0), ("k1", 2, 1)])
    end(h, b, "ok", [("k1", 3, 0), ("k0", 4, 1)])
    final = {"k0": [[0, 1], [1, 4]], "k1": [[0, 3], [1, 2]]}
    assert check_txn(h.ops, final) == {}
    h = History()
    t0 = begin(h, 0, [("k0", 1, 0)], poll=True)  # appends to k0 first...
    txn(h, 1, [("k0", 2, 1), ("k1", 3, 0)])  # t1 appends after it, commits
    end(h, t0, "ok", [("k0", 1, 0)], polls={"k1": [[0, 3]]})  # ...then t0 reads t1
    assert check_txn(h.ops, {"k0": [[0, 1], [1, 2]], "k1": [[0, 3]]}) == {}


@pytest.mark.parametrize("bug,kind", [
    ("skip-txn-verification", "duplicate"),  # a delayed retry taken into the next txn
    ("lso-ignores-open-txn", "intermediate-read"),  # read_committed read an open txn
    ("marker-before-prepare-durable", "torn-transaction"),  # committed in part
])
def test_simulated_planted_bugs_are_caught(bug, kind):
    """The simulated log with each of issue 33's planted bugs: every seed INVALID, with
    the anomaly that bug makes."""
    assert bug in BUGS
    for seed in range(5):
        s = run(seed, 300, bug=bug)
        r = check_txn(s.h.ops, s.final())
        assert kind in r, (seed, sorted(r))


# ----------------------------------------------------------------------------- anomalies


def test_lost_write():
    h = History()
    txn(h, 0, [("k", 1, 0), ("k", 2, 1)])
    r = check_txn(h.ops, {"k": [[0, 1]]})
    assert r == {"lost-write": [{"key": "k", "offset": 1, "value": 2, "writer": 1}]}
    # a final read that stopped short proves nothing beyond it...
    assert check_txn(h.ops, {"k": [[0, 1]]}, {"k": {"reached": False}}) == {}
    # ...but a consumer that read past the offset does (no final read at all)
    h2 = History()
    txn(h2, 0, [("k", 1, 0), ("k", 2, 1)])
    txn(h2, 0, [("k", 3, 2)])
    assign(h2, 9, {"k": 0})
    poll(h2, 9, {"k": [[0, 1], [2, 3]]})
    assert [e["value"] for e in check_txn(h2.ops)["lost-write"]] == [2]


def test_duplicate_and_inconsistent_offsets():
    h = History()
    txn(h, 0, [("k", 1, 0)])
    r = check_txn(h.ops, {"k": [[0, 1], [1, 1]]})
    assert r["duplicate"] == [{"key": "k", "value": 1, "offsets": [0, 1], "writer": 1}]
    h = History()
    txn(h, 0, [("k", 1, 0)])
    txn(h, 0, [("k", 2, 1)])
    r = check_txn(h.ops, {"k": [[0, 2], [1, 1]]})
    assert {e["offset"]: e["values"] for e in r["inconsistent-offsets"]} == {0: [1, 2],
                                                                             1: [1, 2]}


def test_aborted_read_g1a():
    h = History()
    txn(h, 0, [("k", 1, 0)], "fail")
    txn(h, 0, [("k", 2, 2)])
    p = poll(h, 9, {"k": [[0, 1], [2, 2]]})
    r = check_txn(h.ops, {"k": [[2, 2]]})
    assert r == {"aborted-read": [{"key": "k", "offset": 0, "value": 1, "reader": p["index"],
                                   "writer": 1}]}
    # in the final read_committed log too
    r = check_txn(h.ops[:4], {"k": [[0, 1], [2, 2]]})
    assert r["aborted-read"][0]["reader"] == "final"
    # an indeterminate transaction may have committed: reading it is fine
    h = History()
    txn(h, 0, [("k", 1, 0)], "info")
    poll(h, 9, {"k": [[0, 1]]})
    assert check_txn(h.ops, {"k": [[0, 1]]}) == {}


def test_intermediate_read():
    h = History()
    t = begin(h, 0, [("k", 1, 0)])
    p = poll(h, 9, {"k": [[0, 1]]})  # completed before t called commit
    c = end(h, t, "ok", [("k", 1, 0)], commit_time=h.now())
    r = check_txn(h.ops, {"k": [[0, 1]]})
    ex = r["intermediate-read"][0]
    assert (ex["reader"], ex["writer"], ex["offset"]) == (p["index"], c["index"], 0)
    assert set(r) == {"intermediate-read"}
    # a transaction that polls its own record (read-process-write)
    h = History()
    txn(h, 0, [("k", 1, 0)], polls={"k": [[0, 1]]}, offsets={"k": 1}, group="g")
    r = check_txn(h.ops, {"k": [[0, 1]]})
    assert r["intermediate-read"][0]["why"] == "a transaction read its own record"
    assert "G1c" in r  # its commit preceded itself


def test_a_read_of_its_own_write_does_not_prove_a_transaction_committed():
    h = History()
    txn(h, 0, [("k0", 1, 0), ("k1", 2, 0)], "info", polls={"k0": [[0, 1]]})
    r = check_txn(h.ops, {"k0": [], "k1": []})
    assert set(r) == {"intermediate-read"}  # not torn: it may have aborted as a whole


def test_torn_transaction_seen_by_a_consumer():
    h = History()
    t = txn(h, 0, [("k0", 1, 0), ("k1", 2, 0)])
    txn(h, 1, [("k1", 3, 2)])
    assign(h, 9, {"k0": 0, "k1": 0})
    poll(h, 9, {"k0": [[0, 1]], "k1": [[2, 3]]})  # read past t's record in k1
    r = check_txn(h.ops, {"k0": [[0, 1]], "k1": [[0, 2], [2, 3]]})
    assert r == {"torn-transaction": [{
        "txn": t["index"], "type": "ok", "process": 9, "reader": "session",
        "seen": [["k0", 0, 1]], "missing": [["k1", 0, 2]]}]}


def test_completions_without_a_value_and_open_transactions():
    """An info completion that kept the invocation's value, and a transaction the run
    ended in: indeterminate, offsets unknown."""
    h = History()
    h.info(begin(h, 0, [("k", 1, None)]))
    begin(h, 1, [("k", 2, None)])
    assert check_txn(h.ops, {"k": [[0, 1]]}) == {}
    assert check_txn(h.ops, {"k": [[0, 1], [1, 2]]}) == {}
    assert check_txn(h.ops, {"k": []}) == {}


def test_torn_indeterminate_transaction():
    """info: committed or aborted, never half."""
    h = History()
    t = txn(h, 0, [("k0", 1, None), ("k1", 2, None)], "info")
    r = check_txn(h.ops, {"k0": [[0, 1]], "k1": []})
    assert r["torn-transaction"][0]["txn"] == t["index"]
    assert r["torn-transaction"][0]["missing"] == [["k1", None, 2]]
    assert check_txn(h.ops, {"k0": [], "k1": []}) == {}  # aborted as a whole: fine


def test_nonmonotonic_poll_and_poll_skip():
    h = History()
    for v in range(4):
        txn(h, 0, [("k", v, v)])
    assign(h, 9, {"k": 0})
    poll(h, 9, {"k": [[0, 0], [2, 2]]})  # skipped 1
    poll(h, 9, {"k": [[1, 1]]})  # went back
    final = {"k": [[v, v] for v in range(4)]}
    r = check_txn(h.ops, final)
    assert r["poll-skip"][0]["skipped"] == [[1, 1]]
    assert r["nonmonotonic-poll"][0]["offset"] == 1
    # a new assignment starts a new session; gaps of aborted records and markers are fine
    h = History()
    txn(h, 0, [("k", 0, 0)])
    txn(h, 0, [("k", 1, 2)], "fail")
    txn(h, 0, [("k", 2, 4)])
    assign(h, 9, {"k": 0})
    poll(h, 9, {"k": [[0, 0], [4, 2]]})
    assign(h, 9, {"k": 0})
    poll(h, 9, {"k": [[0, 0]]})
    assert check_txn(h.ops, {"k": [[0, 0], [4, 2]]}) == {}


def test_poll_skip_after_assign_position():
    h = History()
    txn(h, 0, [("k", 0, 0)])
    txn(h, 0, [("k", 1, 1)])
    assign(h, 9, {"k": 0})
    poll(h, 9, {"k": [[1, 1]]})  # the first read skipped the position's record
    r = check_txn(h.ops, {"k": [[0, 0], [1, 1]]})
    assert r["poll-skip"][0]["skipped"] == [[0, 0]]


def rpw(h, p, out, polls, offsets, type_="ok", positions=None):
    extra = {"polls": polls, "offsets": offsets, "group": "g"}
    if positions is not None:
        extra["positions"] = positions
    return txn(h, p, out, type_, **extra)


def test_committed_offsets_repeat_and_skip():
    h = History()
    for v in range(6):
        txn(h, 0, [("in", v, v)])
    a = rpw(h, 1, [("out", 100, 0)], {"in": [[0, 0], [1, 1]]}, {"in": 2})
    b = rpw(h, 1, [("out", 101, 1)], {"in": [[1, 1], [2, 2]]}, {"in": 3})  # 1 again
    rpw(h, 1, [("out", 102, 2)], {"in": [[4, 4]]}, {"in": 5})  # skipped 3
    final = {"in": [[v, v] for v in range(6)], "out": [[0, 100], [1, 101], [2, 102]]}
    r = check_txn(h.ops, final)
    assert r["committed-offset-repeat"] == [{"group": "g", "key": "in", "offset": 1,
                                             "value": 1, "txns": [a["index"], b["index"]]}]
    assert r["committed-offset-skip"] == [{"group": "g", "key": "in", "offset": 3, "value": 3,
                                           "committed_offset": 5}]


def test_committed_offsets_after_an_abort_are_processed_again():
    h = History()
    for v in range(3):
        txn(h, 0, [("in", v, v)])
    rpw(h, 1, [("out", 100, 0)], {"in": [[0, 0], [1, 1]]}, {"in": 2}, "fail",
        positions={"in": 0})
    rpw(h, 1, [("out", 101, 2)], {"in": [[0, 0], [1, 1], [2, 2]]}, {"in": 3},
        positions={"in": 0})
    final = {"in": [[v, v] for v in range(3)], "out": [[2, 101]]}
    assert check_txn(h.ops, final) == {}


def test_g0_a_delayed_append_lands_after_the_next_transaction():
    """KIP-890's case: a transaction's append lands after the producer's next transaction
    began (and so inside it), against real time."""
    h = History()
    t1 = txn(h, 0, [("k0", 1, 5), ("k1", 2, 0)])
    t2 = txn(h, 0, [("k0", 3, 4)])  # invoked after t1 returned, yet before it in k0
    r = check_txn(h.ops, {"k0": [[4, 3], [5, 1]], "k1": [[0, 2]]})
    assert set(r) == {"G0"}
    ex = r["G0"][0]
    assert ex["txns"] == [t1["index"], t2["index"]] and ex["realtime"]
    rels = {(s["rel"], s["from"], s["to"]) for s in ex["steps"]}
    assert rels == {("ww", t2["index"], t1["index"]), ("realtime", t1["index"], t2["index"])}
    assert [s["offsets"] for s in ex["steps"] if s["rel"] == "ww"] == [[4, 5]]


def test_g1c_circular_information_flow():
    h = History()
    a = begin(h, 0, [("k0", 1, 0)], poll=True)
    b = begin(h, 1, [("k1", 2, 0)], poll=True)
    end(h, a, "ok", [("k0", 1, 0)], polls={"k1": [[0, 2]]})
    end(h, b, "ok", [("k1", 2, 0)], polls={"k0": [[0, 1]]})
    r = check_txn(h.ops, {"k0": [[0, 1]], "k1": [[0, 2]]})
    assert set(r) == {"G1c"}
    steps = r["G1c"][0]["steps"]
    assert sorted((s["rel"], s["key"]) for s in steps) == [("wr", "k0"), ("wr", "k1")]
    assert r["G1c"][0]["realtime"] is False


def test_g1c_read_from_the_future():
    h = History()
    p = poll(h, 9, {"k": [[0, 1]]})
    t = txn(h, 0, [("k", 1, 0)])  # invoked after the poll had returned its record
    r = check_txn(h.ops, {"k": [[0, 1]]})
    assert r["G1c"][0]["txns"] == [p["index"], t["index"]]
    assert {s["rel"] for s in r["G1c"][0]["steps"]} == {"wr", "realtime"}


def test_g1c_through_the_last_stable_offset():
    """Reading past a record means its transaction was decided first: a poll that read
    k at offset 1 depends on the writer of offset 0 as well."""
    h = History()
    p = poll(h, 9, {"k": [[1, 2]]})
    txn(h, 0, [("k", 1, 0)])  # invoked after p returned, yet p read past it
    r = check_txn(h.ops, {"k": [[0, 1], [1, 2]]}, {"k": {"reached": False}})
    assert "G1c" in r and r["G1c"][0]["txns"][0] == p["index"]


def test_cycle_search_is_bounded():
    h = History()
    for i in range(30):  # 30 independent G0s
        txn(h, 0, [(f"k{i}", 2 * i, 1)])
        txn(h, 0, [(f"k{i}", 2 * i + 1, 0)])
    final = {f"k{i}": [[0, 2 * i + 1], [1, 2 * i]] for i in range(30)}
    r = check_txn(h.ops, final)
    assert len(r["G0"]) == 30 and all(e["steps"] for e in r["G0"])
    r = check_txn(h.ops, final, cycle_budget_s=0)
    assert len(r["G0"]) == 30
    assert sum(e["steps"] is None for e in r["G0"]) >= 29  # counted, not searched


def test_results_are_json_and_summarized():
    h = History()
    txn(h, 0, [("k", 1, 0)], "fail")
    t = begin(h, 1, [("k", 2, 1)])
    poll(h, 9, {"k": [[0, 1], [1, 2]]})
    end(h, t, "ok", [("k", 2, 1)], commit_time=h.now())
    r = check_txn(h.ops, {"k": [[1, 2]]})
    assert json.loads(json.dumps(r)) == r
    valid, trimmed, counts = checkers.summarize(r, "txn")
    assert not valid and counts == {"aborted-read": 1, "intermediate-read": 1}
    assert set(ANOMALIES) >= set(counts)


def test_report_names_txn_anomalies(tmp_path):
    results = {"valid": False, "anomalies": {"torn-transaction": [{"txn": 3}]},
               "stats": {"anomaly_counts": {"torn-transaction": 1}}}
    report.write_report(str(tmp_path), [], results)
    html = (tmp_path / "report.html").read_text()
    assert "torn-transaction" in html and ANOMALIES["torn-transaction"] in html
