"""Each checker catches its anomaly in a hand-made history and passes clean ones."""

from __future__ import annotations

import copy

from hypothesis import given, settings
from hypothesis import strategies as st

from raftlog.jepsen import checkers as c
from raftlog.jepsen.history import History

from .sim import Sim, random_history


def clean_sim() -> Sim:
    s = Sim()
    s.assign(10, ["t-0", "t-1"])
    for p in (0, 1):
        s.send_invoke(p, "t-0")
    s.send_complete(0, "ok")
    s.send_complete(1, "ok")
    s.send_invoke(0, "t-1")
    s.send_complete(0, "ok")
    s.poll(10)
    s.send_invoke(2, "t-0")
    s.send_complete(2, "fail")
    s.send_invoke(2, "t-1")
    s.send_apply(2)
    s.send_complete(2, "info")
    s.poll(10)
    return s


def test_clean_history_has_no_anomalies():
    s = clean_sim()
    assert c.check_queue(s.h.ops, s.final()) == {}
    valid, _, counts = c.summarize({}, "queue")
    assert valid and counts == {}


def test_pairs_matches_invocations_and_completions():
    s = clean_sim()
    ps = c.pairs(s.h.ops)
    assert all(comp is None or comp["process"] == inv["process"] for inv, comp in ps)
    assert len(ps) == sum(op["type"] == "invoke" for op in s.h.ops)


def test_lost_missing_value():
    s = clean_sim()
    final = s.final()
    final["t-0"] = final["t-0"][1:]  # drop the first acknowledged record
    assert "lost" in c.check_lost(s.h.ops, final)


def test_lost_at_another_offset():
    s = clean_sim()
    final = s.final()
    (o0, v0), (o1, v1) = final["t-0"][:2]
    final["t-0"][0], final["t-0"][1] = [o0, v1], [o1, v0]
    r = c.check_lost(s.h.ops, final)
    assert r["lost"][0]["reason"] == "at another offset"
    assert "inconsistent-offsets" in c.check_offsets(s.h.ops, final)


def test_unacknowledged_missing_is_not_lost():
    s = Sim()
    s.send_invoke(0, "t-0")
    s.send_complete(0, "info")
    assert c.check_lost(s.h.ops, s.final()) == {}


def test_inconsistent_offsets_between_ack_and_final():
    h = History()
    i = h.invoke(0, "send", ["k", 1])
    h.ok(i, offset=0)
    r = c.check_offsets(h.ops, {"k": [[0, 2]]})
    assert r["inconsistent-offsets"][0] == {"key": "k", "offset": 0, "values": [1, 2]}


def test_duplicate():
    h = History()
    i = h.invoke(0, "send", ["k", 7])
    h.ok(i, offset=0)
    r = c.check_offsets(h.ops, {"k": [[0, 7], [1, 7]]})
    assert r["duplicate"][0]["offsets"] == [0, 1]
    valid, _, _ = c.summarize(r, "queue")
    assert valid  # the queue workload has no idempotence yet: reported, not fatal
    valid, _, _ = c.summarize(r, "idempotent")
    assert not valid


def test_failed_send_written():
    h = History()
    i = h.invoke(0, "send", ["k", 5])
    h.fail(i, error="STORAGE_ERROR: no space left on device on node 1 (data dir /d)")
    i = h.invoke(0, "send", ["k", 6])
    h.info(i, error="timeout")
    assert c.check_failed_sends(h.ops, {"k": [[0, 6]]}) == {}  # indeterminate: may be there
    r = c.check_failed_sends(h.ops, {"k": [[0, 6], [1, 5]]})
    assert r["failed-send-written"][0]["offsets"] == [1]
    assert "failed-send-written" in c.check_queue(h.ops, {"k": [[0, 6], [1, 5]]})


def test_aborted_read():
    h = History()
    i = h.invoke(0, "send", ["k", 5])
    h.fail(i, error="definite")
    p = h.invoke(1, "poll", None)
    h.ok(p, {"k": [[0, 5]]})
    r = c.check_aborted_read(h.ops, {"k": [[0, 5]]})
    assert r["aborted-read"][0]["value"] == 5
    # an indeterminate send may be read
    h2 = History()
    i = h2.invoke(0, "send", ["k", 5])
    h2.info(i)
    p = h2.invoke(1, "poll", None)
    h2.ok(p, {"k": [[0, 5]]})
    assert c.check_aborted_read(h2.ops) == {}


def test_read_not_committed():
    s = clean_sim()
    final = s.final()
    final["t-1"] = []
    r = c.check_read_committed(s.h.ops, final)
    assert r["read-not-committed"]


def test_nonmonotonic_poll_and_skip():
    h = History()
    a = h.invoke(10, "assign", None)
    h.ok(a, {"keys": ["k"], "positions": {}})
    p = h.invoke(10, "poll", None)
    h.ok(p, {"k": [[0, 0], [2, 2]]})  # skipped offset 1
    p = h.invoke(10, "poll", None)
    h.ok(p, {"k": [[1, 1]]})  # went back
    final = {"k": [[0, 0], [1, 1], [2, 2]]}
    r = c.check_polls(h.ops, final)
    assert r["skipping-poll"][0]["skipped"] == [1]
    assert r["nonmonotonic-poll"][0]["offset"] == 1


def test_assign_resets_poll_order():
    h = History()
    a = h.invoke(10, "assign", None)
    h.ok(a, {"keys": ["k"], "positions": {}})
    p = h.invoke(10, "poll", None)
    h.ok(p, {"k": [[0, 0], [1, 1]]})
    a = h.invoke(10, "assign", None)
    h.ok(a, {"keys": ["k"], "positions": {"k": 1}})
    p = h.invoke(10, "poll", None)
    h.ok(p, {"k": [[1, 1]]})
    assert c.check_polls(h.ops, {"k": [[0, 0], [1, 1]]}) == {}
    # but the first poll after assign must not skip past the position
    a = h.invoke(10, "assign", None)
    h.ok(a, {"keys": ["k"], "positions": {"k": 0}})
    p = h.invoke(10, "poll", None)
    h.ok(p, {"k": [[1, 1]]})
    assert "skipping-poll" in c.check_polls(h.ops, {"k": [[0, 0], [1, 1]]})


def test_nonmonotonic_send():
    h = History()
    a = h.invoke(0, "send", ["k", 1])
    h.ok(a, offset=5)
    b = h.invoke(1, "send", ["k", 2])
    h.ok(b, offset=3)
    r = c.check_nonmonotonic_send(h.ops)
    assert r["nonmonotonic-send"][0]["earlier"]["offset"] == 5
    # concurrent sends may complete in any order
    h = History()
    a = h.invoke(0, "send", ["k", 1])
    b = h.invoke(1, "send", ["k", 2])
    h.ok(a, offset=5)
    h.ok(b, offset=3)
    assert c.check_nonmonotonic_send(h.ops) == {}


def test_exactly_once():
    h = History()
    for p, v, t in ((0, 1, "ok"), (1, 2, "ok"), (2, 3, "info"), (3, 4, "fail")):
        i = h.invoke(p, "send", ["k", v])
        h.complete(i, t)
    assert c.check_exactly_once(h.ops, {"k": [[0, 1], [1, 2], [2, 3]]}) == {}
    r = c.check_exactly_once(h.ops, {"k": [[0, 1], [1, 1], [2, 4]]})
    assert set(r) == {"duplicate", "lost", "aborted-write"}


def test_groups_commit_regression_and_unprocessed():
    h = History()
    i = h.invoke(0, "commit", {"group": "g", "key": "k", "offset": 3})
    h.ok(i)
    p = h.invoke(0, "poll", None, group="g")
    h.ok(p, {"k": [[0, 0], [1, 1]]}, group="g")
    i = h.invoke(1, "commit", {"group": "g", "key": "k", "offset": 2})
    h.ok(i)
    r = c.check_groups(h.ops, {"k": [[0, 0], [1, 1], [2, 2]]})
    assert r["committed-offset-regression"][0]["later"] == 2
    assert [e["offset"] for e in r["unprocessed"]] == [2]


def test_leader_safety():
    obs = [{"key": "k", "epoch": 1, "leader": 1, "node": 1},
           {"key": "k", "epoch": 1, "leader": 1, "node": 2},
           {"key": "k", "epoch": 2, "leader": 2, "node": 2}]
    assert c.check_leaders(obs) == {}
    obs.append({"key": "k", "epoch": 2, "leader": 3, "node": 3})
    assert c.check_leaders(obs)["multiple-leaders"][0]["leaders"] == [2, 3]
    # a topic created again starts over at epoch 0: another incarnation
    obs = [{"key": "k", "epoch": 0, "leader": 1, "node": 1, "topic_id": "a"},
           {"key": "k", "epoch": 0, "leader": 2, "node": 1, "topic_id": "b"}]
    assert c.check_leaders(obs) == {}


def test_liveness():
    h = History()
    i = h.invoke(0, "send", ["k", 1])
    h.ok(i, offset=4)
    r = c.check_liveness(h.ops, {"k": []}, {"k": {"reached": False, "hw": 2, "seconds": 30}})
    assert set(r) == {"final-read-incomplete", "unreachable-acked-offset"}
    assert c.check_liveness(h.ops, {"k": [[4, 1]]}, {"k": {"reached": True, "hw": 5}}) == {}


def test_incomplete_final_read_is_not_loss():
    h = History()
    for o in range(4):
        i = h.invoke(0, "send", ["k", o])
        h.ok(i, offset=o)
    final = {"k": [[0, 0], [1, 1]]}  # the final read stopped at offset 2
    r = c.check_queue(h.ops, final, {"k": {"reached": False, "hw": 4}})
    assert "lost" not in r and len(r["unknown-final-tail"]) == 2
    assert "final-read-incomplete" in r
    assert not c.summarize(r, "queue")[0]
    final = {"k": [[0, 0], [3, 3]]}  # a hole below where it stopped is loss
    r = c.check_queue(h.ops, final, {"k": {"reached": True, "hw": 4}})
    assert [e["value"] for e in r["lost"]] == [1, 2]


def test_summarize_trims_examples():
    an = {"lost": [{"i": i} for i in range(100)]}
    valid, trimmed, counts = c.summarize(an, "queue")
    assert not valid and len(trimmed["lost"]) == c.MAX_EXAMPLES and counts == {"lost": 100}


# ------------------------------------------------------------------ generated histories


@settings(max_examples=60, deadline=None)
@given(st.integers(0, 10**9), st.integers(20, 300))
def test_generated_clean_histories_pass(seed, steps):
    s = random_history(seed, steps)
    assert c.check_queue(s.h.ops, s.final()) == {}


@settings(max_examples=60, deadline=None)
@given(st.integers(0, 10**9), st.data())
def test_generated_loss_is_caught(seed, data):
    s = random_history(seed, 200)
    acked = [op for op in s.h.ops if op["f"] == "send" and op["type"] == "ok"]
    if not acked:
        return
    victim = data.draw(st.sampled_from(acked))
    key, v = victim["value"]
    final = s.final()
    final[key] = [r for r in final[key] if r[1] != v]
    assert "lost" in c.check_queue(s.h.ops, final)


@settings(max_examples=60, deadline=None)
@given(st.integers(0, 10**9), st.data())
def test_generated_truncation_is_caught(seed, data):
    """The final log lost its tail: whatever was read or acked there is reported."""
    s = random_history(seed, 200)
    key = data.draw(st.sampled_from(sorted(s.log)))
    if not s.log[key]:
        return
    cut = data.draw(st.integers(0, len(s.log[key]) - 1))
    final = s.final()
    dropped = {v for _, v in final[key][cut:]}
    final[key] = final[key][:cut]
    r = c.check_queue(s.h.ops, final)
    acked = {op["value"][1] for op in s.h.ops
             if op["f"] == "send" and op["type"] == "ok" and op["value"][0] == key}
    read = {v for p, k, o, v, _ in c.polls(s.h.ops) if k == key}
    if dropped & acked:
        assert "lost" in r
    if dropped & read:
        assert "read-not-committed" in r
    if not dropped & (acked | read):
        assert r == {}


@settings(max_examples=60, deadline=None)
@given(st.integers(0, 10**9), st.data())
def test_generated_poll_corruption_is_caught(seed, data):
    """A consumer that skips a record or re-delivers an older one is reported."""
    s = random_history(seed, 200)
    ops = copy.deepcopy(s.h.ops)
    candidates = [(i, k) for i, op in enumerate(ops) if op["f"] == "poll" and op["type"] == "ok"
                  for k, recs in op["value"].items() if len(recs) >= 2]
    if not candidates:
        return
    i, k = data.draw(st.sampled_from(candidates))
    recs = ops[i]["value"][k]
    if data.draw(st.booleans()):
        del recs[0 if len(recs) == 2 else 1]  # skip one record in the middle of a poll
        name = "skipping-poll"
    else:
        recs[0], recs[1] = recs[1], recs[0]  # out of order
        name = "nonmonotonic-poll"
    r = c.check_polls(ops, s.final())
    assert name in r


def test_replica_divergence_below_the_high_watermark():
    final = {"t-0": [[0, 10], [1, 11], [2, 12], [3, 13]]}
    reads = {"t-0": {"hw": 3, "reached": True}}
    same = {"t-0": {1: [[0, 10], [1, 11], [2, 12]], 2: [[0, 10], [1, 11]]}}
    assert c.check_replicas(final, reads, same) == {}
    # beyond the HW a replica may hold anything (an uncommitted tail), and offsets the
    # final log lacks are not compared
    tail = {"t-0": {1: [[0, 10], [1, 11], [2, 12], [3, 99], [7, 70]]}}
    assert c.check_replicas(final, reads, tail) == {}
    kept = {"t-0": {1: [[0, 10], [1, 11], [2, 12]], 3: [[0, 10], [1, 50], [2, 51]]}}
    an = c.check_replicas(final, reads, kept)
    [ex] = an["replica-divergence"]
    assert (ex["node"], ex["offset"], ex["replica_value"], ex["final_value"]) == (3, 1, 50, 11)
    assert ex["diverging_offsets"] == 2
    valid, _, counts = c.summarize(an, "queue")
    assert not valid and counts == {"replica-divergence": 1}
    assert c.check_replicas(final, reads, None) == {}
