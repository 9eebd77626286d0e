"""The default schedule's leader-aware targets, without a cluster."""

from __future__ import annotations

import random
from types import SimpleNamespace

from raftlog.jepsen.nemesis import Nemesis
from raftlog.jepsen.runner import CONTROLLER_SHARE, LeaderObserver


def _cluster(n: int):
    return SimpleNamespace(nodes=[SimpleNamespace(id=i) for i in range(1, n + 1)])


def test_minorities_hold_a_partition_leader():
    for n, k in ((3, 1), (5, 2)):
        nem = Nemesis(_cluster(n), None, [], partition_leader_of=lambda: 2)
        for seed in range(20):
            m = nem._minority(list(range(1, n + 1)), random.Random(seed))
            assert len(m) == k and 2 in m and m == sorted(m)
    unknown = Nemesis(_cluster(5), None, [], partition_leader_of=lambda: None)
    assert len(unknown._minority([1, 2, 3, 4, 5], random.Random(1))) == 2


def _observer(leaders: dict, controller):
    ob = LeaderObserver(SimpleNamespace(nodes=[]), "t")
    ob._observe_round = lambda: None  # no cluster: what the last round saw
    ob.leaders = {k: ("id", 1, ld) for k, ld in leaders.items()}
    ob.controller = controller
    return ob


def test_leader_target_is_mostly_a_partition_leader_other_than_the_controller():
    ob = _observer({"t-0": 1, "t-1": 3}, controller=1)
    rnd = random.Random(7)
    picks = [ob.leader(rnd) for _ in range(2000)]
    share = picks.count(1) / len(picks)  # the controller: only as the controller share
    assert abs(share - CONTROLLER_SHARE) < 0.05, share
    assert set(picks) == {1, 3}
    assert {ob.partition_leader(rnd) for _ in range(50)} == {3}
    # every partition led by the controller's node: that node, not nobody
    both = _observer({"t-0": 1, "t-1": 1}, controller=1)
    assert {both.partition_leader(rnd) for _ in range(20)} == {1}
    assert _observer({}, controller=2).partition_leader(rnd) == 2  # none seen yet


def test_legacy_targets_for_comparisons():
    nem = Nemesis(_cluster(3), None, [], partition_leader_of=lambda: 2, leader_aware=False)
    assert {nem._minority([1, 2, 3], random.Random(s))[0] for s in range(30)} == {1, 2, 3}
    ob = _observer({"t-0": 1, "t-1": 3}, controller=1)
    picks = [ob.leader_legacy(random.Random(s)) for s in range(300)]
    assert 0.4 < picks.count(1) / len(picks) < 0.8  # the controller, or leader 1 (its node)


def test_coordinator_targets_hit_a_coordinator_and_its_followers():
    """txn workload: ``coordinator`` is the __transaction_state leader the observer
    saw, ``coordinator-followers`` the other in-sync replicas (at most a minority)."""
    nem = Nemesis(_cluster(5), None, [], coordinator_of=lambda: (4, [1, 2]))
    for seed in range(10):
        assert nem._nodes("coordinator", random.Random(seed)) == [4]
        assert nem._nodes("coordinator-followers", random.Random(seed)) == [1, 2]
    wide = Nemesis(_cluster(5), None, [], coordinator_of=lambda: (4, [1, 2, 3, 5]))
    assert all(len(wide._nodes("coordinator-followers", random.Random(s))) == 2
               for s in range(10))
    # none known (yet): still a fault, on a random node and a random minority
    blind = Nemesis(_cluster(5), None, [], coordinator_of=lambda: None)
    leader, fs = blind._coordinator([1, 2, 3, 4, 5], random.Random(3))
    assert leader in range(1, 6) and len(fs) == 2 and leader not in fs


def test_observer_names_the_coordinator_of_a_workload_partition():
    ob = _observer({}, controller=1)
    ob.txn_state = {0: (3, 2, (2, 4, 5)), 1: (1, 5, (5, 1, 2))}
    rnd = random.Random(1)
    assert ob.coordinator([0], rnd) == (2, [4, 5])
    picks = [ob.coordinator([0, 1], rnd) for _ in range(40)]
    assert (2, [4, 5]) in picks and (5, [1, 2]) in picks and len(set(map(str, picks))) == 2
    assert ob.coordinator([2], rnd) is None  # not seen: the nemesis picks at random


def test_coordinator_targets_join_the_txn_workloads_default_mix_only():
    import pytest

    from raftlog.jepsen.nemesis import schedule, targets_for

    mine = targets_for(["kill", "pause", "partition"], workload="txn")
    assert "coordinator" in mine["kill"] and "coordinator-followers" in mine["pause"]
    assert "coordinator-followers" in mine["partition"]
    queue = targets_for(["kill", "pause"], workload="queue")
    assert "coordinator" not in queue["kill"] + queue["pause"]
    with pytest.raises(ValueError, match="did you mean .coordinator."):
        targets_for(["kill"], ["coordinater"], workload="txn")
    with pytest.raises(ValueError, match="--workload txn"):
        targets_for(["kill"], ["coordinator"], workload="queue")
    assert targets_for(["pause"], ["coordinator-followers"], workload="txn") == {
        "pause": ("coordinator-followers",)}
    picked = {e["target"] for s in range(20)
              for e in schedule(s, ["kill", "pause"], 120, workload="txn")}
    assert {"coordinator", "coordinator-followers"} <= picked
