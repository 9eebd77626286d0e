"""The Wing-Gong-Lowe checker of the metadata workload."""

from __future__ import annotations

import random

from hypothesis import given, settings
from hypothesis import strategies as st

from raftlog.jepsen.history import History
from raftlog.jepsen.linear import INF, Op, check_metadata, linearizable


def op(i, call, ret, f, optional=False):
    return Op(i, call, ret, f, i, optional)


def test_sequential_create_delete():
    ops = [op(0, 0, 1, "create"), op(1, 2, 3, "delete"), op(2, 4, 5, "create")]
    assert linearizable(ops)[0] is True


def test_two_successful_creates_are_not_linearizable():
    ops = [op(0, 0, 1, "create"), op(1, 2, 3, "create")]
    ok, info = linearizable(ops)
    assert ok is False and info["could_not_place"]


def test_concurrent_ops_may_reorder():
    # describe says absent, concurrently with a create that succeeded: fine
    ops = [op(0, 0, 10, "create"), op(1, 1, 2, "describe-absent"), op(2, 11, 12, "describe-present")]
    assert linearizable(ops)[0] is True
    # but a describe that starts after the create returned must see it
    ops = [op(0, 0, 1, "create"), op(1, 2, 3, "describe-absent")]
    assert linearizable(ops)[0] is False


def test_indeterminate_may_or_may_not_happen():
    # a create that timed out, then a create that says "exists": the first happened
    ops = [op(0, 0, INF, "create", True), op(1, 5, 6, "read-present")]
    assert linearizable(ops)[0] is True
    # ...or did not: a later create succeeds
    ops = [op(0, 0, INF, "create", True), op(1, 5, 6, "create")]
    assert linearizable(ops)[0] is True
    # but not both ways at once
    ops = [op(0, 0, INF, "create", True), op(1, 5, 6, "read-present"), op(2, 7, 8, "read-absent")]
    assert linearizable(ops)[0] is False


def _history(events):
    h = History()
    for p, f, topic, outcome, extra in events:
        i = h.invoke(p, f, {"topic": topic})
        if outcome == "ok" and f == "describe":
            h.ok(i, {"topic": topic, "exists": extra})
        elif outcome:
            h.complete(i, outcome, error=extra)
    return h.ops


def test_check_metadata_classifies():
    good = _history([(0, "create", "a", "ok", None), (1, "describe", "a", "ok", True),
                     (0, "delete", "a", "ok", None), (1, "delete", "a", "fail", "unknown")])
    assert check_metadata(good) == {}
    stale = _history([(0, "create", "a", "ok", None), (1, "describe", "a", "ok", False)])
    assert set(check_metadata(stale)) == {"stale-describe"}
    bad = _history([(0, "create", "a", "ok", None), (1, "create", "a", "ok", None)])
    assert set(check_metadata(bad)) == {"nonlinearizable-metadata"}
    # other failures did not happen; an open op at the end is indeterminate
    other = _history([(0, "create", "a", "fail", "timeout-definite"),
                      (1, "create", "a", "ok", None), (2, "delete", "a", None, None)])
    assert check_metadata(other) == {}


@settings(max_examples=80, deadline=None)
@given(st.integers(0, 10**9))
def test_generated_linearizable_histories_pass(seed):
    """A simulated atomic register of presence, with concurrent overlapping ops."""
    rnd = random.Random(seed)
    state = False
    t = 0
    pending = []  # (i, call, f, effect applied?)
    ops = []
    for _i in range(rnd.randint(1, 25)):
        t += rnd.random()
        f = rnd.choice(["create", "delete", "describe"])
        call = t
        t += rnd.random()
        # take effect now
        if f == "create":
            kind = "create" if not state else "read-present"
            state = True
        elif f == "delete":
            kind = "delete" if state else "read-absent"
            state = False
        else:
            kind = "describe-present" if state else "describe-absent"
        t += rnd.random()
        ret = INF if rnd.random() < 0.1 and kind in ("create", "delete") else t
        pending.append((call, ret, kind))
    # overlap: stretch call earlier / return later at random, still containing the effect
    for _i, (call, ret, kind) in enumerate(pending):
        c2 = call - rnd.random() * 2
        r2 = ret if ret == INF else ret + rnd.random() * 2
        ops.append((c2, r2, kind))
    ops.sort()
    objs = [Op(i, c, r, k, i, r == INF) for i, (c, r, k) in enumerate(ops)]
    assert linearizable(objs)[0] is True


def test_partition_growth_is_part_of_the_model():
    grow3, grow2 = ("grow", 3), ("grow", 2)
    ops = [op(0, 0, 1, "create"), op(1, 2, 3, grow3), op(2, 4, 5, ("describe-count", 3))]
    assert linearizable(ops)[0] is True
    # a describe after the grow returned must see its partitions
    ops = [op(0, 0, 1, "create"), op(1, 2, 3, grow3), op(2, 4, 5, ("describe-count", 1))]
    assert linearizable(ops)[0] is False
    # growing is only ever upwards, and only of a topic that exists
    ops = [op(0, 0, 1, "create"), op(1, 2, 3, grow3), op(2, 4, 5, grow2)]
    assert linearizable(ops)[0] is False
    assert linearizable([op(0, 0, 1, grow2)])[0] is False
    # a recreated topic starts again at one partition
    ops = [op(0, 0, 1, "create"), op(1, 2, 3, grow3), op(2, 4, 5, "delete"),
           op(3, 6, 7, "create"), op(4, 8, 9, ("describe-count", 1))]
    assert linearizable(ops)[0] is True


def test_check_metadata_reads_grows_and_partition_counts_from_a_history():
    h = History()
    for f, value, outcome in [("create", {"topic": "a"}, ("ok", None)),
                              ("grow", {"topic": "a", "count": 3}, ("ok", None)),
                              ("grow", {"topic": "a", "count": 2}, ("fail", "partitions")),
                              ("describe", {"topic": "a"}, ("ok", 3))]:
        i = h.invoke(0, f, value)
        if f == "describe":
            h.ok(i, {"topic": "a", "exists": True, "partitions": outcome[1]})
        elif outcome[0] == "ok":
            h.ok(i)
        else:
            h.complete(i, "fail", error=outcome[1])
    assert check_metadata(h.ops) == {}
    j = h.invoke(1, "describe", {"topic": "a"})
    h.ok(j, {"topic": "a", "exists": True, "partitions": 1})  # lost the growth
    assert set(check_metadata(h.ops)) == {"stale-describe"}
