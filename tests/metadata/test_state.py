"""The pure metadata state machine: determinism, invariants, compare-and-set, snapshots."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from raftlog.metadata import records as R
from raftlog.metadata.state import MetadataState, apply, check_invariants, restore, snapshot

BROKERS = st.integers(0, 4)
TOPICS = st.sampled_from(["a", "b", "c"])

_record = st.one_of(
    st.builds(
        R.RegisterBroker, BROKERS, st.sampled_from(["i1", "i2"]), st.just((("127.0.0.1", 9092),))
    ),
    st.builds(R.FenceBroker, BROKERS),
    st.builds(R.UnfenceBroker, BROKERS),
    st.builds(R.UnregisterBroker, BROKERS),
    st.builds(
        R.CreateTopic,
        TOPICS,
        st.sampled_from(["id1", "id2"]),
        st.lists(
            st.lists(BROKERS, min_size=1, max_size=3, unique=True).map(tuple),
            min_size=1,
            max_size=3,
        ).map(tuple),
    ),
    st.builds(R.DeleteTopic, TOPICS),
    st.builds(
        R.CreatePartitions,
        TOPICS,
        st.integers(0, 4),
        st.lists(
            st.lists(BROKERS, min_size=1, max_size=3, unique=True).map(tuple),
            min_size=1,
            max_size=2,
        ).map(tuple),
    ),
    st.builds(
        R.PartitionChange,
        TOPICS,
        st.integers(0, 2),
        st.integers(-1, 4),
        st.lists(BROKERS, min_size=0, max_size=3, unique=True).map(tuple),
        st.integers(0, 6),
        st.integers(1, 3),
    ),
    st.builds(
        R.ConfigChange,
        TOPICS,
        st.sampled_from(["retention.ms", "unclean.leader.election.enable"]),
        st.one_of(st.none(), st.just("true"), st.just("1000")),
    ),
    st.builds(R.ReassignPartition, TOPICS, st.integers(0, 2),
              st.lists(BROKERS, min_size=0, max_size=3, unique=True).map(tuple),
              st.sampled_from([0, 1000])),
    st.builds(R.CompleteReassignment, TOPICS, st.integers(0, 2), st.integers(0, 6),
              st.integers(1, 3)),
    st.builds(R.AllocateProducerIds, BROKERS, st.integers(1, 1000), st.sampled_from([-1, 0, 5])),
    st.builds(R.NoOp),
    st.builds(R.UpsertScramCredential, st.sampled_from(["alice", "bob"]),
              st.sampled_from(["SCRAM-SHA-256", "SCRAM-SHA-1"]), st.just(b"saltsalt"),
              st.sampled_from([4096, 10]), st.just(b"k" * 32), st.just(b"s" * 32)),
    st.builds(R.DeleteScramCredential, st.sampled_from(["alice", "bob"]),
              st.just("SCRAM-SHA-256")),
    st.builds(R.CreateAcls, st.lists(st.tuples(
        st.sampled_from(["User:a", "User:*", "bad"]), st.just("topic"),
        st.sampled_from(["t", "x-"]), st.sampled_from(["literal", "prefixed"]),
        st.sampled_from(["read", "all"]), st.sampled_from(["allow", "deny"])),
        max_size=3).map(tuple)),
    st.builds(R.DeleteAcls, st.lists(st.tuples(
        st.just("User:a"), st.just("topic"), st.just("t"), st.just("literal"),
        st.just("read"), st.just("allow")), max_size=1).map(tuple)),
)
_log = st.lists(st.tuples(_record, st.integers(1, 3)), max_size=60).map(
    # Raft terms never go down along the log
    lambda entries: [(r, t) for (r, _), t in zip(entries, _monotonic([t for _, t in entries]))]
)


def _monotonic(terms):
    out, cur = [], 1
    for t in terms:
        cur = max(cur, t)
        out.append(cur)
    return out


def _replay(entries, through_bytes: bool):
    s = MetadataState()
    results = []
    for rec, term in entries:
        if through_bytes:
            rec = R.decode(R.encode(rec))
        s, res = apply(s, rec, term=term)
        results.append(res)
    return s, results


@settings(max_examples=300, deadline=None)
@given(_log)
def test_replicas_agree_and_invariants_hold(entries):
    a, ra = _replay(entries, through_bytes=False)
    b, rb = _replay(entries, through_bytes=True)
    assert snapshot(a) == snapshot(b)
    assert ra == rb
    check_invariants(a)
    assert snapshot(restore(snapshot(a))) == snapshot(a)


@settings(max_examples=200, deadline=None)
@given(_log)
def test_epochs_only_grow(entries):
    s = MetadataState()
    for rec, term in entries:
        before = {
            (t.topic_id, t.name, p.partition): p for t in s.topics.values() for p in t.partitions
        }
        s, res = apply(s, rec, term=term)
        for t in s.topics.values():
            for p in t.partitions:
                old = before.get((t.topic_id, t.name, p.partition))
                if old is None or isinstance(rec, R.CreateTopic):
                    continue
                assert p.partition_epoch >= old.partition_epoch
                assert p.leader_epoch >= old.leader_epoch
                if p.leader != old.leader:
                    assert p.leader_epoch > old.leader_epoch
                    assert p.partition_epoch > old.partition_epoch


def _cluster(n=3):
    s = MetadataState()
    for b in range(1, n + 1):
        s, _ = apply(s, R.RegisterBroker(b, f"inc-{b}", (("127.0.0.1", 9090 + b),)), term=1)
        s, _ = apply(s, R.UnfenceBroker(b), term=1)
    s, res = apply(s, R.CreateTopic("t", "tid", ((1, 2, 3), (2, 3, 1))), term=1)
    assert res.ok
    return s


def test_create_partitions_is_a_compare_and_set_on_the_count():
    s = _cluster()
    s2, res = apply(s, R.CreatePartitions("t", 2, ((3, 1, 2),)), term=1)
    assert res.ok and [p.partition for p in s2.topics["t"].partitions] == [0, 1, 2]
    p2 = s2.topics["t"].partitions[2]
    assert (p2.leader, p2.isr, p2.leader_epoch) == (3, (3, 1, 2), 0)
    _, res = apply(s2, R.CreatePartitions("t", 2, ((1,),)), term=1)  # stale count
    assert not res.ok
    _, res = apply(s, R.CreatePartitions("t", 2, ((9,),)), term=1)  # unknown broker
    assert not res.ok
    check_invariants(s2)


def test_isr_cannot_add_a_fenced_broker():
    s = _cluster()
    s, _ = apply(s, R.FenceBroker(3), term=2)
    p0 = s.topics["t"].partitions[0]
    assert 3 not in p0.isr
    _, res = apply(s, R.PartitionChange("t", 0, p0.leader, (1, 2, 3), p0.partition_epoch, 2), term=2)
    assert not res.ok and "fenced" in res.error
    s, _ = apply(s, R.UnfenceBroker(3), term=2)
    p0 = s.topics["t"].partitions[0]
    _, res = apply(s, R.PartitionChange("t", 0, p0.leader, (1, 2, 3), p0.partition_epoch, 2), term=2)
    assert res.ok


def test_fencing_moves_leadership_within_the_isr():
    s = _cluster()
    p0 = s.topics["t"].partitions[0]
    assert (p0.leader, p0.isr, p0.leader_epoch) == (1, (1, 2, 3), 0)
    s, _ = apply(s, R.FenceBroker(1), term=2)
    p0 = s.topics["t"].partitions[0]
    assert (p0.leader, p0.isr, p0.leader_epoch) == (2, (2, 3), 1)
    assert s.topics["t"].partitions[1].isr == (2, 3)
    s, _ = apply(s, R.FenceBroker(2), term=2)
    s, _ = apply(s, R.FenceBroker(3), term=2)
    p0 = s.topics["t"].partitions[0]
    assert p0.leader == -1 and p0.isr == (3,)  # offline, last ISR member kept
    s, _ = apply(s, R.UnfenceBroker(1), term=2)
    assert s.topics["t"].partitions[0].leader == -1  # 1 is out of sync: no unclean election
    s, _ = apply(s, R.UnfenceBroker(3), term=2)
    assert s.topics["t"].partitions[0].leader == 3


def test_partition_change_is_compare_and_set():
    s = _cluster()
    p = s.topics["t"].partitions[0]
    change = R.PartitionChange("t", 0, 1, (1, 2), p.partition_epoch, controller_epoch=4)
    s2, res = apply(s, change, term=5)
    assert not res.ok and "stale controller" in res.error and s2.topics == s.topics
    s2, res = apply(s, change, term=4)
    assert res.ok and s2.topics["t"].partitions[0].isr == (1, 2)
    s3, res = apply(s2, change, term=4)  # same expected epoch again: rejected
    assert not res.ok and "partition epoch" in res.error
    _, res = apply(s2, R.PartitionChange("t", 0, 3, (1, 2), 1, 4), term=4)
    assert not res.ok and "leader" in res.error
    _, res = apply(s2, R.PartitionChange("t", 0, -1, (1, 2), 1, 4), term=4)
    assert not res.ok


def test_delete_topic_leaves_nothing_and_producer_ids_never_repeat():
    s = _cluster()
    s, _ = apply(s, R.DeleteTopic("t"), term=1)
    assert "t" not in s.topics and b"tid" not in snapshot(s)
    s, a = apply(s, R.AllocateProducerIds(1, 100), term=1)
    s, b = apply(s, R.AllocateProducerIds(2, 100), term=1)
    assert (a.value, b.value) == (0, 100)
    assert restore(snapshot(s)).next_producer_id == 200


@pytest.mark.parametrize(
    "data",
    [
        b"",
        b"\xff",
        b"\xa0",
        R.encode(R.NoOp()).replace(b"NoOp", b"Nope"),
    ],
)
def test_garbage_records_are_rejected(data):
    with pytest.raises(R.MetadataRecordError):
        R.decode(data)


def test_wrong_field_types_are_rejected():
    import cbor2

    bad = cbor2.dumps({"v": 1, "t": "FenceBroker", "broker_id": "one"})
    with pytest.raises(R.MetadataRecordError, match="wrong type"):
        R.decode(bad)
    extra = cbor2.dumps({"v": 1, "t": "FenceBroker", "broker_id": 1, "evil": 1})
    with pytest.raises(R.MetadataRecordError, match="unknown fields"):
        R.decode(extra)


def test_unclean_leader_election_only_when_enabled():
    s = _cluster()
    for b in (1, 2):
        s, _ = apply(s, R.FenceBroker(b), term=1)
    s, _ = apply(s, R.PartitionChange("t", 0, 3, (3,), 2, 1), term=1)
    s, _ = apply(s, R.FenceBroker(3), term=1)
    p = s.topics["t"].partitions[0]
    assert (p.leader, p.isr) == (-1, (3,))
    s, _ = apply(s, R.UnfenceBroker(1), term=1)
    assert s.topics["t"].partitions[0].leader == -1  # clean: stays offline
    epoch = s.topics["t"].partitions[0].leader_epoch
    s, res = apply(s, R.ConfigChange("t", "unclean.leader.election.enable", "true"), term=1)
    p = s.topics["t"].partitions[0]
    assert res.ok and (p.leader, p.isr) == (1, (1,)) and p.leader_epoch == epoch + 1
    check_invariants(s)


def test_producer_id_block_compare_and_set():
    s = _cluster()
    s, a = apply(s, R.AllocateProducerIds(1, 10, first_id=0), term=1)
    assert a.ok and a.value == 0
    s2, b = apply(s, R.AllocateProducerIds(2, 10, first_id=0), term=1)
    assert not b.ok and "stale" in b.error and s2.next_producer_id == 10


def test_invariants_checked_on_what_changed():
    from dataclasses import replace

    s, _ = _replay([(R.RegisterBroker(1, "i", (("h", 1),)), 1), (R.UnfenceBroker(1, "i"), 1),
                    (R.CreateTopic("a", "id", ((1,),)), 1)], through_bytes=False)
    t = s.topics["a"]
    bad = replace(t, partitions=(replace(t.partitions[0], isr=(2,)),))  # ISR outside replicas
    worse = replace(s, topics={**s.topics, "a": bad})
    with pytest.raises(AssertionError):
        check_invariants(worse, s)  # "a" changed: checked
    check_invariants(replace(worse, next_producer_id=7), worse)  # "a" unchanged: skipped
    with pytest.raises(AssertionError):  # brokers changed: every topic is checked again
        check_invariants(replace(worse, brokers=dict(worse.brokers)), worse)


def test_rejections_carry_the_error_code_a_request_answers_with():
    from raftlog.errors import ErrorCode

    s, _ = _replay([(R.RegisterBroker(1, "i", (("h", 1),)), 1), (R.UnfenceBroker(1, "i"), 1),
                    (R.CreateTopic("a", "id", ((1,),)), 1)], through_bytes=False)
    cases = [(R.CreateTopic("a", "id2", ((1,),)), ErrorCode.TOPIC_ALREADY_EXISTS),
             (R.DeleteTopic("b"), ErrorCode.UNKNOWN_TOPIC_OR_PARTITION),
             (R.CreatePartitions("a", 5, ((1,),)), ErrorCode.INVALID_PARTITIONS),
             (R.CreateTopic("c", "id3", ((7,),)), ErrorCode.INVALID_REQUEST)]
    for record, code in cases:
        _, result = apply(s, record, term=1)
        assert not result.ok and result.code == code, (record, result)
    assert apply(s, R.NoOp(), term=1)[1].code == 0


def test_reassignment_grows_the_replicas_then_completes_and_cancels():
    from raftlog.errors import ErrorCode
    from raftlog.metadata.controller import reassignment_completions

    s = _cluster(4)
    s, res = apply(s, R.ReassignPartition("t", 0, (2, 4, 3), throttle=5000), term=2)
    assert res.ok
    p = s.topics["t"].partitions[0]
    assert p.replicas == (2, 4, 3, 1) and p.isr == (1, 2, 3) and p.leader == 1
    assert p.adding == (4,) and p.previous == (1, 2, 3) and p.throttle == 5000
    check_invariants(s)
    _, res = apply(s, R.ReassignPartition("t", 0, (1, 2)), term=2)
    assert res.code == ErrorCode.REASSIGNMENT_IN_PROGRESS
    assert reassignment_completions(s, 2) == []  # 4 is not in sync yet
    # not in sync: completion refused even if proposed
    _, res = apply(s, R.CompleteReassignment("t", 0, p.partition_epoch, 2), term=2)
    assert not res.ok and "in sync" in res.error
    # 4 catches up and joins the ISR: the controller completes the move
    s, res = apply(s, R.PartitionChange("t", 0, 1, (1, 2, 3, 4), p.partition_epoch, 2), term=2)
    assert res.ok
    done = reassignment_completions(s, 2)
    assert done == [R.CompleteReassignment("t", 0, p.partition_epoch + 1, 2)]
    s2, res = apply(s, done[0], term=2)
    assert res.ok
    p = s2.topics["t"].partitions[0]
    assert (p.replicas, p.isr, p.target, p.previous) == ((2, 4, 3), (2, 3, 4), (), ())
    assert p.leader == 2 and p.leader_epoch == 1  # 1 left: leadership moved in sync
    check_invariants(s2)
    # cancel instead: back to the old replicas, the added replica leaves the ISR
    s3, res = apply(s, R.ReassignPartition("t", 0, ()), term=2)
    assert res.ok
    p = s3.topics["t"].partitions[0]
    assert (p.replicas, p.isr, p.leader, p.target) == ((1, 2, 3), (1, 2, 3), 1, ())
    _, res = apply(s3, R.ReassignPartition("t", 0, ()), term=2)
    assert res.code == ErrorCode.NO_REASSIGNMENT_IN_PROGRESS
    _, res = apply(s3, R.ReassignPartition("t", 0, (9, 1)), term=2)
    assert not res.ok and "9" in res.error
    assert restore(snapshot(s)) == s  # a reassignment in progress survives a snapshot
