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
