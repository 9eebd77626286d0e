"""Pure controller decisions: placement, liveness and fencing, preferred leaders, AlterPartition."""

from __future__ import annotations

from collections import Counter

import pytest

from raftlog.metadata import records as R
from raftlog.metadata.controller import (
    BrokerLiveness,
    PlacementError,
    alter_partition,
    place_replicas,
    preferred_leader_changes,
    resign_leadership,
)
from raftlog.metadata.state import MetadataState, apply


def _cluster(n=3):
    s = MetadataState()
    for b in range(1, n + 1):
        s, _ = apply(s, R.RegisterBroker(b, f"inc-{b}", (("127.0.0.1", 9090 + b),)), term=1)
        s, _ = apply(s, R.UnfenceBroker(b), term=1)
    return s


def test_placement_spreads_replicas_and_leaders():
    s = _cluster(3)
    a = place_replicas(s, 6, 3)
    assert all(len(set(r)) == 3 for r in a)
    assert Counter(r[0] for r in a) == {1: 2, 2: 2, 3: 2}
    s, _ = apply(s, R.CreateTopic("one", "x", place_replicas(s, 1, 1)), term=1)
    nxt = place_replicas(s, 1, 1)
    assert nxt[0][0] != s.topics["one"].partitions[0].leader  # next topic leads elsewhere


def test_placement_needs_enough_live_brokers():
    s = _cluster(3)
    s, _ = apply(s, R.FenceBroker(3), term=1)
    with pytest.raises(PlacementError, match="2 are live"):
        place_replicas(s, 1, 3)
    with pytest.raises(PlacementError):
        place_replicas(s, 0, 1)


def test_liveness_grace_period_and_fencing():
    s = _cluster(3)
    live = BrokerLiveness.on_become_controller(s, now_ms=1000, session_timeout_ms=500)
    assert live.fence_decisions(s, 1400) == []  # new controller: nobody fenced yet
    live.heartbeat(1, 1400)
    live.heartbeat(2, 1400)
    assert live.fence_decisions(s, 1600) == [R.FenceBroker(3, "inc-3")]
    s, _ = apply(s, R.FenceBroker(3), term=1)
    assert live.fence_decisions(s, 1600) == []  # already fenced


def test_the_old_controllers_session_runs_from_its_last_raft_contact():
    """A new controller knows when it last heard from the old one over Raft: a hung
    old controller is fenced one session after that, the others one session after
    the election (they may have heartbeat the old controller until then)."""
    s = _cluster(3)
    live = BrokerLiveness.on_become_controller(s, now_ms=10_000, session_timeout_ms=3000,
                                               last_seen_ms={1: 9_400, 7: 1})
    assert live.fence_decisions(s, 12_399) == []
    assert live.fence_decisions(s, 12_401) == [R.FenceBroker(1, "inc-1")]
    assert 7 not in live.last_heartbeat_ms  # (not a registered broker: ignored)
    live.heartbeat(1, 12_000)  # it is alive after all (heartbeats the new controller)
    assert live.fence_decisions(s, 12_401) == []
    assert live.fence_decisions(s, 13_001) == [R.FenceBroker(b, f"inc-{b}") for b in (2, 3)]
    # a time after the election counts as the election (never later than now)
    late = BrokerLiveness.on_become_controller(s, now_ms=10_000, session_timeout_ms=3000,
                                               last_seen_ms={1: 50_000})
    assert late.last_heartbeat_ms[1] == 10_000


def test_a_crash_is_fenced_after_the_grace_once_its_listener_refuses():
    s = _cluster(3)
    live = BrokerLiveness.on_become_controller(s, now_ms=0, session_timeout_ms=6000,
                                               disconnect_grace_ms=200)
    live.disconnected(3, 1000)
    assert live.to_probe(1150) == []  # within the grace: it may reconnect
    assert live.to_probe(1200) == [3]
    assert live.fence_decisions(s, 1200) == []  # disconnected alone fences nobody
    live.probe_refused(3)
    assert live.to_probe(1300) == []  # (not probed again)
    assert live.fence_decisions(s, 1300) == [R.FenceBroker(3, "inc-3")]
    live.heartbeat(3, 1400)  # back (a new incarnation registers anyway)
    assert live.fence_decisions(s, 1400) == []


def test_a_reconnect_within_the_grace_or_an_answered_probe_fences_nobody():
    s = _cluster(3)
    live = BrokerLiveness.on_become_controller(s, now_ms=0, session_timeout_ms=6000,
                                               disconnect_grace_ms=200)
    live.disconnected(2, 1000)
    live.heartbeat(2, 1100)  # its heartbeats came back on a new connection
    assert live.to_probe(5000) == []
    live.disconnected(3, 1000)
    assert live.to_probe(1300) == [3]
    live.probe_answered(3)  # alive or hung: only its session may fence it
    live.probe_refused(3)  # (a late refusal of an answered probe counts for nothing)
    assert live.to_probe(1400) == [] and live.fence_decisions(s, 5000) == []
    live.heartbeat(1, 5000)
    assert live.fence_decisions(s, 6001) == [R.FenceBroker(3, "inc-3")]  # its session
    assert live.fence_decisions(s, 7101) == [R.FenceBroker(2, "inc-2"),
                                             R.FenceBroker(3, "inc-3")]


def test_without_a_grace_disconnections_are_ignored():
    s = _cluster(3)
    live = BrokerLiveness.on_become_controller(s, now_ms=0, session_timeout_ms=6000)
    live.disconnected(3, 1000)
    live.probe_refused(3)
    assert live.to_probe(9000) == [] and live.fence_decisions(s, 1000) == []


def test_preferred_leader_election():
    s = _cluster(3)
    s, _ = apply(s, R.CreateTopic("t", "x", ((1, 2, 3),)), term=1)
    s, _ = apply(s, R.FenceBroker(1), term=2)
    assert s.topics["t"].partitions[0].leader == 2
    s, _ = apply(s, R.UnfenceBroker(1), term=2)
    assert preferred_leader_changes(s, 2) == []  # 1 is not back in the ISR yet
    p = s.topics["t"].partitions[0]
    s, res = apply(s, alter_partition(s, "t", 0, 2, (2, 3, 1), p.partition_epoch, 2), term=2)
    assert res.ok
    (change,) = preferred_leader_changes(s, 2)
    s, res = apply(s, change, term=2)
    assert res.ok and s.topics["t"].partitions[0].leader == 1


def test_a_leader_with_a_corrupt_log_resigns_to_a_live_in_sync_replica():
    s = _cluster(3)
    s, _ = apply(s, R.CreateTopic("t", "x", ((1, 2, 3),)), term=1)
    s, _ = apply(s, R.FenceBroker(2), term=1)  # 2 is dead: leadership goes to 3
    change = resign_leadership(s, "t", 0, 1, 1)
    assert (change.leader, change.isr) == (3, (3,))
    s, res = apply(s, change, term=1)
    assert res.ok and s.topics["t"].partitions[0].leader == 3
    assert resign_leadership(s, "t", 0, 1, 1) is None  # 1 no longer leads
    assert resign_leadership(s, "t", 9, 3, 1) is None  # no such partition
    s, _ = apply(s, R.FenceBroker(1), term=1)
    assert resign_leadership(s, "t", 0, 3, 1) is None  # nobody else alive and in sync


def test_alter_partition_validation():
    s = _cluster(3)
    s, _ = apply(s, R.CreateTopic("t", "x", ((1, 2, 3),)), term=1)
    with pytest.raises(ValueError, match="does not lead"):
        alter_partition(s, "t", 0, 2, (2,), 0, 1)
    with pytest.raises(ValueError, match="unknown partition"):
        alter_partition(s, "t", 5, 1, (1,), 0, 1)
    with pytest.raises(ValueError, match="stay in the ISR"):
        alter_partition(s, "t", 0, 1, (2, 3), 0, 1)


def test_leader_counts_kept_by_the_quorum_store_match_a_recount():
    # QuorumTopicStore derives leader counts from the previous state's, topic by topic
    import random

    from raftlog.metadata import records as R
    from raftlog.metadata.controller import leader_counts
    from raftlog.metadata.state import MetadataState, apply
    from raftlog.node.quorum_store import QuorumTopicStore

    store = QuorumTopicStore.__new__(QuorumTopicStore)
    store._cache = (None, None, {}, None)
    rng = random.Random(5)
    s = MetadataState()
    for b in (1, 2, 3):
        s, _ = apply(s, R.RegisterBroker(b, "i", (("h", b),)), term=1)
        s, _ = apply(s, R.UnfenceBroker(b, "i"), term=1)
    for step in range(300):
        name = f"t{rng.randrange(20)}"
        kind = rng.random()
        if kind < 0.5:
            rec = R.CreateTopic(name, f"id{step}", tuple((rng.choice((1, 2, 3)),) for _ in range(2)))
        elif kind < 0.7:
            rec = R.DeleteTopic(name)
        elif kind < 0.85:
            rec = R.FenceBroker(rng.choice((1, 2, 3)))
        else:
            rec = R.UnfenceBroker(rng.choice((1, 2, 3)), "i")
        s, _ = apply(s, rec, term=1)
        if rng.random() < 0.7:  # not every state is looked at
            assert +store._cached(s)[3] == +leader_counts(s), step
