"""The consumer protocol's subscription and assignment, Kafka bytes <-> raftlog maps,
checked against kafka-python's own classes."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from raftlog.kafka import consumer_protocol as cp

meta = pytest.importorskip("kafka.protocol.consumer.metadata")
S, A = meta.ConsumerProtocolSubscription, meta.ConsumerProtocolAssignment

_topic = st.text(min_size=1, max_size=6)
_tps = st.dictionaries(_topic, st.sets(st.integers(0, 1000), min_size=1, max_size=4), max_size=3)


@settings(max_examples=60, deadline=None)
@given(topics=st.lists(_topic, max_size=4), owned=_tps,
       user_data=st.none() | st.binary(max_size=10), version=st.integers(0, 3),
       generation=st.integers(-1, 1000))
def test_kafka_subscriptions_survive_raftlog_and_back(topics, owned, user_data, version,
                                                      generation):
    kwargs = {"topics": topics, "user_data": user_data}
    if version >= 1:
        kwargs["owned_partitions"] = [S.TopicPartition(topic=t, partitions=sorted(ps))
                                      for t, ps in sorted(owned.items())]
    if version >= 2:
        kwargs["generation_id"] = generation
    raw = S(version=version, **kwargs).encode(version=version)
    ours = cp.subscription_to_raftlog(raw)
    assert ours["topics"] == topics
    assert sorted(map(tuple, ours["owned"])) == (
        sorted((t, p) for t, ps in owned.items() for p in ps) if version >= 1 else [])
    assert ours["generation"] == (generation if version >= 2 else -1)
    back = S.decode(cp.subscription_to_kafka(ours), version=cp.SUBSCRIPTION_VERSION_OUT)
    assert back.topics == topics and back.user_data == user_data
    if version >= 1:
        assert {tp.topic: set(tp.partitions) for tp in back.owned_partitions} == owned


@settings(max_examples=60, deadline=None)
@given(assigned=_tps, user_data=st.none() | st.binary(max_size=10), version=st.integers(0, 3))
def test_kafka_assignments_survive_raftlog_and_back(assigned, user_data, version):
    raw = A(version=version, user_data=user_data, assigned_partitions=[
        A.TopicPartition(topic=t, partitions=sorted(ps)) for t, ps in sorted(assigned.items())
    ]).encode(version=version)
    ours = cp.assignment_to_raftlog(raw)
    assert ours["partitions"] == sorted([t, p] for t, ps in assigned.items() for p in ps)
    back = A.decode(cp.assignment_to_kafka(ours), version=cp.ASSIGNMENT_VERSION_OUT)
    assert {tp.topic: set(tp.partitions) for tp in back.assigned_partitions} == assigned
    assert back.user_data == user_data


def test_raftlog_members_are_readable_by_kafka_clients():
    sub = {"topics": ["a", "b"], "owned": [["a", 1], ["b", 0]], "generation": 4}
    back = S.decode(cp.subscription_to_kafka(sub), version=cp.SUBSCRIPTION_VERSION_OUT)
    assert back.topics == ["a", "b"]
    assert [(tp.topic, tp.partitions) for tp in back.owned_partitions] == [("a", [1]), ("b", [0])]
    got = A.decode(cp.assignment_to_kafka({"partitions": [["t", 2], ["t", 0]]}),
                   version=cp.ASSIGNMENT_VERSION_OUT)
    assert [(tp.topic, tp.partitions) for tp in got.assigned_partitions] == [("t", [0, 2])]


@settings(max_examples=200, deadline=None)
@given(garbage=st.binary(max_size=60))
def test_bytes_that_do_not_parse_pass_through_unchanged(garbage):
    sub = cp.subscription_to_raftlog(garbage)
    assert isinstance(sub, dict) or sub == garbage
    if not isinstance(sub, dict):
        assert cp.subscription_to_kafka(sub) == garbage
    a = cp.assignment_to_raftlog(garbage)
    assert isinstance(a, dict) or a == garbage
