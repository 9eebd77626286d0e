"""Consumers' fetch sessions (KIP-227) on the Kafka listener
(node/consumer_fetch_session.py, KafkaApis.fetch_session): in process over a real
single-node broker on trio's mock clock, the pure session cache, and kafka-python's
consumer (which opens sessions) through a real node."""

from __future__ import annotations

import time

import trio
import trio.testing

from raftlog.kafka import batch as kb
from raftlog.node.consumer_fetch_session import (
    FETCH_SESSION_ID_NOT_FOUND,
    INVALID_FETCH_SESSION_EPOCH,
    ConsumerSession,
    SessionCache,
    next_epoch,
)
from raftlog.node.kafka.handlers import Context, KafkaApis
from raftlog.protocol import Api, Request

from .single_node import close_broker, open_broker
from .test_fetch_session import _Part

PARTITIONS = 8


def _body(session_id: int, epoch: int, parts=(), offset: int = 0, forgotten=(),
          max_wait_ms: int = 0, min_bytes: int = 0) -> dict:
    return {"replica_id": -1, "max_wait_ms": max_wait_ms, "min_bytes": min_bytes,
            "max_bytes": 1 << 20, "isolation_level": 0, "session_id": session_id,
            "session_epoch": epoch,
            "topics": [{"topic": "t", "partitions": [
                {"partition": p, "fetch_offset": offset, "partition_max_bytes": 1 << 20,
                 "current_leader_epoch": -1, "log_start_offset": -1} for p in parts]}]
            if parts else [],
            "forgotten_topics_data": [{"topic": "t", "partitions": list(forgotten)}]
            if forgotten else []}


def _rows(answer: dict) -> dict:
    return {r["partition_index"]: r for t in answer["responses"] for r in t["partitions"]}


def _produce(broker, partition: int, value: bytes) -> None:
    data = kb.to_raftlog(kb.encode_batch([value], timestamps=[1]))[0]
    broker.produce(Request(Api.PRODUCE, 0, 1, {"acks": 1, "timeout_ms": 1000,
                                               "parts": [("t", partition, len(data))]}, data))


def _apis(tmp_path):
    broker = open_broker(tmp_path)
    broker.create_topic("t", PARTITIONS, 1, {})
    broker.replicas.reconcile()
    return broker, KafkaApis(broker, broker.replicas, broker.config, lambda *a: ("127.0.0.1", 1))


def test_an_incremental_fetch_answers_only_partitions_with_news(tmp_path):
    broker, apis = _apis(tmp_path)
    ctx = Context("c", "h", 1)
    try:
        async def main():
            full = await apis.fetch_session(12, _body(0, 0, range(PARTITIONS)), ctx)
            sid = full["session_id"]
            assert sid > 0 and full["error_code"] == 0
            assert sorted(_rows(full)) == list(range(PARTITIONS))  # a full answer
            quiet = await apis.fetch_session(12, _body(sid, 1), ctx)
            assert quiet["session_id"] == sid and _rows(quiet) == {}  # nothing moved
            _produce(broker, 3, b"new")
            moved = await apis.fetch_session(12, _body(sid, 2), ctx)
            assert list(_rows(moved)) == [3]  # only the partition with news
            row = _rows(moved)[3]
            assert row["high_watermark"] == 1 and row["records"]
            # the consumer moves to offset 1: named with its new offset, no news
            assert _rows(await apis.fetch_session(12, _body(sid, 3, [3], offset=1), ctx)) == {}
            # forgotten: not answered even when it moves
            await apis.fetch_session(12, _body(sid, 4, forgotten=[5]), ctx)
            _produce(broker, 5, b"x")
            _produce(broker, 6, b"y")
            assert list(_rows(await apis.fetch_session(12, _body(sid, 5), ctx))) == [6]
        trio.run(main)
    finally:
        close_broker(broker)


def test_records_are_answered_again_while_the_session_offset_stays(tmp_path):
    """KIP-227: the broker reads every partition of a session at its session offset. A
    client that got records and did not move on (it seeks back to exactly that offset,
    or dropped the answer) names nothing: it must get them again, not a silent session
    until the partition's next write."""
    broker, apis = _apis(tmp_path)
    ctx = Context("c", "h", 1)
    try:
        async def main():
            sid = (await apis.fetch_session(12, _body(0, 0, range(PARTITIONS)), ctx))["session_id"]
            _produce(broker, 2, b"once")
            first = _rows(await apis.fetch_session(12, _body(sid, 1), ctx))
            assert list(first) == [2] and first[2]["records"]
            again = _rows(await apis.fetch_session(12, _body(sid, 2), ctx))
            assert list(again) == [2] and len(again[2]["records"]) == len(first[2]["records"]) > 0
            # once the client names its new offset, nothing more comes
            assert _rows(await apis.fetch_session(12, _body(sid, 3, [2], offset=1), ctx)) == {}
            assert _rows(await apis.fetch_session(12, _body(sid, 4), ctx)) == {}
        trio.run(main)
    finally:
        close_broker(broker)


def test_a_topic_deleted_and_recreated_reaches_an_open_session(tmp_path):
    """The session's partitions are registered with the node's Partition objects; a
    topic deleted and re-created (one reconcile) gives them new ones: the next
    incremental fetch re-registers them (partitions_version moved), so writes to the
    new topic wake and reach the session."""
    broker, apis = _apis(tmp_path)
    ctx = Context("c", "h", 1)
    try:
        async def main():
            sid = (await apis.fetch_session(12, _body(0, 0, range(PARTITIONS)), ctx))["session_id"]
            old = broker.replicas.partitions[("t", 3)]
            version = broker.replicas.partitions_version
            broker.store.delete("t")
            broker.store.create("t", PARTITIONS, {})
            broker.replicas.reconcile()
            assert broker.replicas.partitions[("t", 3)] is not old
            assert broker.replicas.partitions_version > version
            await apis.fetch_session(12, _body(sid, 1), ctx)  # (re-registers, reads again)
            _produce(broker, 3, b"new")
            rows = _rows(await apis.fetch_session(12, _body(sid, 2), ctx))
            assert list(rows) == [3] and rows[3]["records"] and rows[3]["high_watermark"] == 1
        trio.run(main)
    finally:
        close_broker(broker)


def test_an_acl_removed_applies_to_the_partitions_a_session_holds(tmp_path):
    """An incremental fetch names only what changed, so its ACL check covers every topic
    the session holds: a READ revoked since the session opened refuses the next fetch
    (TOPIC_AUTHORIZATION_FAILED rows, the session closed) -- not records of a topic the
    principal may no longer read."""
    from raftlog.acl import Authorizer, binding
    from raftlog.node.authz import AclCheck

    broker, apis = _apis(tmp_path)
    may_read = Authorizer([binding("User:alice", "topic", "t", operation="read")])
    try:
        async def main():
            full = await apis.fetch_session(12, _body(0, 0, range(PARTITIONS)), Context(
                "c", "h", 1, acl=AclCheck("User:alice", may_read)))
            sid = full["session_id"]
            assert sid > 0 and full["error_code"] == 0
            _produce(broker, 1, b"secret")
            revoked = Context("c", "h", 2, acl=AclCheck("User:alice", Authorizer([])))
            answer = await apis.fetch_session(12, _body(sid, 1), revoked)  # names nothing
            rows = _rows(answer)
            assert answer["session_id"] == 0  # closed: the client starts over
            assert sorted(rows) == list(range(PARTITIONS))
            assert all(r["error_code"] == 29 and not r["records"] for r in rows.values())
        trio.run(main)
    finally:
        close_broker(broker)


def test_a_session_long_poll_wakes_when_a_partition_moves(tmp_path):
    broker, apis = _apis(tmp_path)
    ctx = Context("c", "h", 1)
    try:
        async def main():
            sid = (await apis.fetch_session(12, _body(0, 0, range(PARTITIONS)), ctx))["session_id"]
            async with trio.open_nursery() as n:
                async def append_later():
                    await trio.sleep(1)
                    _produce(broker, 2, b"late")
                n.start_soon(append_later)
                t0 = trio.current_time()
                answer = await apis.fetch_session(
                    12, _body(sid, 1, max_wait_ms=5000, min_bytes=1), ctx)
                waited = trio.current_time() - t0
            assert list(_rows(answer)) == [2] and waited == 1.0
            t0 = trio.current_time()  # nothing moves: an empty answer after max_wait
            assert _rows(await apis.fetch_session(
                12, _body(sid, 2, [2], offset=1, max_wait_ms=500, min_bytes=1), ctx)) == {}
            assert trio.current_time() - t0 == 0.5
        trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0))
    finally:
        close_broker(broker)


def test_unknown_sessions_wrong_epochs_and_closing_get_kafkas_answers(tmp_path):
    broker, apis = _apis(tmp_path)
    ctx = Context("c", "h", 1)
    try:
        async def main():
            sid = (await apis.fetch_session(12, _body(0, 0, [0]), ctx))["session_id"]
            stale = await apis.fetch_session(12, _body(sid, 7), ctx)
            assert stale["error_code"] == INVALID_FETCH_SESSION_EPOCH
            assert (await apis.fetch_session(12, _body(sid, 1), ctx))["error_code"] == 0
            unknown = await apis.fetch_session(12, _body(sid + 1, 1), ctx)
            assert unknown["error_code"] == FETCH_SESSION_ID_NOT_FOUND
            closing = await apis.fetch_session(12, _body(sid, -1, [0]), ctx)  # close it
            assert closing["session_id"] == 0 and list(_rows(closing)) == [0]
            gone = await apis.fetch_session(12, _body(sid, 2), ctx)
            assert gone["error_code"] == FETCH_SESSION_ID_NOT_FOUND
            assert len(apis.sessions) == 0
        trio.run(main)
    finally:
        close_broker(broker)


def test_the_cache_is_bounded_and_evicts_only_idle_sessions():
    cache = SessionCache(slots=2, eviction_idle_ms=1000)
    a, b = cache.open(0, owner="c1"), cache.open(0, owner="c2")
    assert a and b and a.session_id != b.session_id
    assert cache.open(500) is None and cache.refused == 1  # both used within the idle time
    cache.get(b.session_id, 900)  # b used again: a is the least recently used
    c = cache.open(1200, owner="c1")
    assert c is not None and cache.evicted == 1 and cache.get(a.session_id, 1200) is None
    cache.close_owned_by("c1")
    assert len(cache) == 1 and cache.get(b.session_id, 1300) is b
    assert next_epoch(2**31 - 1) == 1 and next_epoch(5) == 6


def test_a_consumer_session_wakes_on_the_high_watermark_not_the_log_end():
    s = ConsumerSession(1, 0)
    s.parts[("t", 0)] = object()
    ev = trio.Event()
    s.waiter = ev
    s.mark(("t", 0), True)  # a log end move only: not news to a consumer
    assert not s.dirty and not ev.is_set()
    s.mark(("t", 0), False)  # the high watermark moved
    assert s.dirty == {("t", 0)} and ev.is_set()


def test_a_session_rechecks_its_partitions_only_when_the_nodes_partitions_changed():
    """An incremental fetch looks up only what it names while no Partition came or
    went (the node's partitions_version); once one did (a topic deleted and
    re-created, a partition moved here), every kept partition is checked, and the
    replaced one is registered with its new Partition and read again."""
    old, other = _Part(), _Part()
    node = {("t", 0): old, ("t", 1): other}
    looked = []

    def lookup(key):
        looked.append(key)
        return node.get(key)
    s = ConsumerSession(1, 0)
    s.apply([["t", 0, 5, 100, -1], ["t", 1, 0, 100, -1]], [], lookup, 7)
    s.take_dirty()
    looked.clear()
    s.apply([["t", 1, 3, 100, -1]], [], lookup, 7)  # nothing came or went: O(named)
    assert looked == [("t", 1)] and s.take_dirty() == [("t", 1)]
    new = node[("t", 0)] = _Part()  # re-created: the node's version moves
    s.apply([], [], lookup, 7)
    assert s.registered[("t", 0)] is old and not s.dirty  # (same version: not looked at)
    s.apply([], [], lookup, 8)
    assert s.registered[("t", 0)] is new and s in new.sessions and s not in old.sessions
    assert s.take_dirty() == [("t", 0)] and s.parts[("t", 0)].offset == 5
    looked.clear()
    s.apply([], [], lookup, 8)
    assert looked == [] and not s.dirty
    s.apply([], [], lookup)  # (no version: checked every time)
    assert sorted(looked) == [("t", 0), ("t", 1)] and not s.dirty


def test_kafka_python_consumes_everything_through_a_session(tmp_path):
    """kafka-python's consumer opens a fetch session and reads every record of 4
    partitions, produced in rounds with idle fetches between them."""
    from kafka import KafkaConsumer, KafkaProducer, TopicPartition

    from raftlog.client import Admin

    from ..conftest import kafka_node

    node = kafka_node(str(tmp_path / "node"))
    try:
        with Admin(node.bootstrap) as a:
            a.create_topic("fs", partitions=4)
        producer = KafkaProducer(bootstrap_servers=node.kafka)
        consumer = KafkaConsumer(bootstrap_servers=node.kafka, auto_offset_reset="earliest",
                                 fetch_max_wait_ms=100)
        consumer.assign([TopicPartition("fs", p) for p in range(4)])
        got: dict = {}
        for round_ in range(3):
            for i in range(20):
                producer.send("fs", b"%d-%d" % (round_, i), partition=i % 4)
            producer.flush()
            deadline = time.monotonic() + 30
            while sum(map(len, got.values())) < 20 * (round_ + 1) and time.monotonic() < deadline:
                for tp, recs in consumer.poll(timeout_ms=300).items():
                    got.setdefault(tp.partition, []).extend(r.value for r in recs)
            consumer.poll(timeout_ms=300)  # idle fetches: empty incremental answers
        handler = consumer._fetcher._session_handlers.get(1)
        session = handler.next_metadata if handler is not None else None
        consumer.close()
        producer.close()
        for p in range(4):
            assert got[p] == [b"%d-%d" % (r, i) for r in range(3) for i in range(20)
                              if i % 4 == p], p
        assert session is not None and session.session_id > 0 and session.epoch > 3
    finally:
        node.stop()
