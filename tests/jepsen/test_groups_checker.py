"""check_groups over commit / committed ops and group polls; nemesis targets; CLI."""

from __future__ import annotations

import signal

import pytest

from raftlog.jepsen import checkers as c
from raftlog.jepsen.history import History
from raftlog.jepsen.nemesis import schedule, targets_for
from raftlog.jepsen.runner import build_parser
from raftlog.jepsen.runner import main as runner_main
from raftlog.jepsen.workloads import GroupsWorkload


def _send(h, p, key, v, offset):
    i = h.invoke(p, "send", [key, v])
    h.ok(i, offset=offset)


def _poll(h, p, group, recs):
    i = h.invoke(p, "poll", None, group=group)
    h.ok(i, recs, group=group)


def _read(h, group, offsets):
    i = h.invoke("offsets", "committed", {"group": group})
    h.ok(i, {"group": group, "offsets": offsets})


def _commit(h, p, group, offsets, type_="ok"):
    i = h.invoke(p, "commit", {"group": group, "offsets": offsets})
    h.complete(i, type_)


def test_clean_groups_history():
    h = History()
    for o in range(3):
        _send(h, 0, "k", 10 + o, o)
    _read(h, "g", {"k": None})
    _poll(h, 200, "g", {"k": [[0, 10], [1, 11]]})
    _commit(h, 200, "g", {"k": 2})
    _read(h, "g", {"k": 2})
    # a rebalance hands k to another member at the committed offset
    _poll(h, 201, "g", {"k": [[2, 12]]})
    _commit(h, 201, "g", {"k": 3})
    _read(h, "g", {"k": 3})
    final = {"k": [[0, 10], [1, 11], [2, 12]]}
    assert c.check_groups(h.ops, final) == {}
    assert c.check_queue(h.ops, final) == {}


def test_committed_read_going_back_is_a_regression():
    h = History()
    _read(h, "g", {"k": 5})
    _read(h, "g", {"k": 3})
    r = c.check_groups(h.ops, {"k": [[o, o] for o in range(5)]})
    ex = r["committed-offset-regression"][0]
    assert (ex["earlier"], ex["later"]) == (5, 3)
    assert ex["later_op"]["f"] == "committed"


def test_acknowledged_commit_must_be_durable():
    h = History()
    _commit(h, 200, "g", {"k": 4})
    _read(h, "g", {"k": 2})  # after the commit was acknowledged: lost commit
    assert "committed-offset-regression" in c.check_groups(h.ops, {"k": []})


def test_concurrent_and_refused_commits_are_not_regressions():
    h = History()
    a = h.invoke(200, "commit", {"group": "g", "offsets": {"k": 4}})
    b = h.invoke("offsets", "committed", {"group": "g"})
    h.ok(a)
    h.ok(b, {"group": "g", "offsets": {"k": 2}})  # concurrent with the commit: fine
    _commit(h, 201, "g", {"k": 1}, type_="fail")  # refused (CommitFailedError): fine
    assert c.check_groups(h.ops, {"k": []}) == {}


def test_unprocessed_below_committed_and_unconsumed_acknowledged():
    h = History()
    for o in range(4):
        _send(h, 0, "k", 10 + o, o)
    _poll(h, 200, "g", {"k": [[0, 10], [2, 12]]})  # skipped offset 1
    _read(h, "g", {"k": 3})
    _poll(h, 300, "h", {"k": [[o, 10 + o] for o in range(4)]})
    _read(h, "h", {"k": 4})
    final = {"k": [[o, 10 + o] for o in range(4)]}
    r = c.check_groups(h.ops, final)
    assert [(e["group"], e["offset"]) for e in r["unprocessed"]] == [("g", 1)]
    # offset 3 is beyond g's committed offset and g never polled it
    assert [(e["group"], e["value"]) for e in r["unconsumed-acked"]] == [("g", 13)]
    valid, _, counts = c.summarize(r, "groups")
    assert not valid and counts == {"unprocessed": 1, "unconsumed-acked": 1}


def test_group_polls_are_not_held_to_one_consumers_order():
    h = History()
    _poll(h, 200, "g", {"k": [[0, 10], [1, 11]]})
    _poll(h, 200, "g", {"k": [[1, 11]]})  # k came back to this member at committed 1
    final = {"k": [[0, 10], [1, 11]]}
    assert c.check_polls(h.ops, final) == {}
    # the same without a group is a nonmonotonic poll
    h2 = History()
    for recs in ({"k": [[0, 10], [1, 11]]}, {"k": [[1, 11]]}):
        i = h2.invoke(100, "poll", None)
        h2.ok(i, recs)
    assert "nonmonotonic-poll" in c.check_polls(h2.ops, final)


def test_nemesis_targets_restrict_the_schedule():
    ev = schedule(3, ["kill", "partition"], 60, targets=["leader", "isolate-leader"])
    assert {e["target"] for e in ev} == {"leader", "isolate-leader"}
    assert schedule(3, ["kill"], 60) == schedule(3, ["kill"], 60, targets=[])
    with pytest.raises(ValueError, match="no target"):
        targets_for(["pause"], ["isolate-leader"])
    with pytest.raises(ValueError, match="unknown target"):
        targets_for(["kill"], ["everyone"])
    # targets used only when named: the default schedules of a seed stay as they were
    assert "partition-leader" not in targets_for(["kill"])["kill"]
    assert targets_for(["kill", "partition"], ["partition-leader", "isolate-partition-leader"]) \
        == {"kill": ("partition-leader",), "partition": ("isolate-partition-leader",)}


def test_cli_node_flags_and_workload_node_config():
    a = build_parser().parse_args(["run", "--workload", "groups", "--node-flag",
                                   "bug-serve-beyond-hw", "--node-flag",
                                   "bug-ack-before-replication", "--targets", "leader"])
    assert a.node_flag == ["bug-serve-beyond-hw", "bug-ack-before-replication"]
    assert a.partitions is None and a.consumers is None  # per-workload defaults
    assert GroupsWorkload.node_config["group.initial.rebalance.delay.ms"] == 0


@pytest.mark.parametrize("bad, message", [
    (["--node-config", "no-equals-sign"], "expected KEY=VALUE"),
    (["--node-config", "=1"], "expected KEY=VALUE"),
    (["--node-flag", "bug-no-such"], "unknown --node-flag"),
    (["--nemesis", "kill,meteor"], "unknown nemesis"),
])
def test_bad_run_arguments_stop_before_any_node_starts(tmp_path, bad, message):
    out = tmp_path / "run"
    handler = signal.getsignal(signal.SIGTERM)  # main() installs its own
    try:
        assert runner_main(["run", "--time", "1", "--out", str(out), *bad]) == 2
    finally:
        signal.signal(signal.SIGTERM, handler)
    assert message in (out / "jepsen.log").read_text()
    assert not (out / "data").exists()  # no node was started


def test_the_harness_names_exactly_the_nodes_planted_bugs():
    from raftlog.jepsen.runner import PLANTED_BUGS as named
    from raftlog.node.replica_manager import PLANTED_BUGS as planted

    assert named == planted
