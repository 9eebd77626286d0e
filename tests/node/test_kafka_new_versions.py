"""Produce v13, Fetch v17 and ListOffsets v11 (Kafka 4.2's versions) on a real node's
Kafka listener, sent as raw requests: topics by id (KIP-516) and ids no topic has
(UNKNOWN_TOPIC_ID), fetch sessions by id, ListOffsets' special timestamps and their
versions, and transaction version 2 (Produce v12) left unoffered."""

from __future__ import annotations

import socket
import time
import uuid

import pytest

from raftlog.kafka import batch as kb
from raftlog.kafka.wire import FrameDecoder, decode_response, encode_request
from tests.conftest import kafka_node, wait_for_port

UNKNOWN_TOPIC_ID, UNKNOWN_TOPIC_OR_PARTITION, UNSUPPORTED_VERSION = 100, 3, 35
COORDINATOR_LOAD_IN_PROGRESS, COORDINATOR_NOT_AVAILABLE, NOT_COORDINATOR = 14, 15, 16
INVALID_TXN_STATE = 48
PRODUCE, FETCH, LIST_OFFSETS, METADATA, API_VERSIONS, CREATE_TOPICS = 0, 1, 2, 3, 18, 19


@pytest.fixture(scope="module")
def knode(tmp_path_factory):
    n = kafka_node(str(tmp_path_factory.mktemp("kafka-v") / "node-1"), 1)
    host, port = n.kafka.split(":")
    wait_for_port(host, int(port))
    yield n
    n.stop()
    assert "kafka_handler_failed" not in n.log_text()


class _Conn:
    """One raw Kafka connection: a request in, its decoded answer out."""

    def __init__(self, node):
        host, port = node.kafka.split(":")
        self.s = socket.create_connection((host, int(port)), timeout=15)
        self.dec = FrameDecoder()
        self.cid = 0

    def call(self, key: int, version: int, body: dict) -> dict:
        self.cid += 1
        self.s.sendall(encode_request(key, version, self.cid, body, client_id="t"))
        while (frame := self.dec.next_frame()) is None:
            data = self.s.recv(65536)
            assert data, "the node closed the connection"
            self.dec.receive_data(data)
        cid, answer = decode_response(key, version, frame)
        assert cid == self.cid
        return answer

    def close(self):
        self.s.close()


@pytest.fixture
def conn(knode):
    c = _Conn(knode)
    yield c
    c.close()


def _topic(conn: _Conn, name: str, partitions: int = 1) -> bytes:
    """Create ``name``; its topic id, as Metadata v12 reports it."""
    got = conn.call(CREATE_TOPICS, 7, {"topics": [
        {"name": name, "num_partitions": partitions, "replication_factor": 1,
         "assignments": [], "configs": []}], "timeout_ms": 10_000, "validate_only": False})
    assert got["topics"][0]["error_code"] == 0
    md = conn.call(METADATA, 12, {"topics": [{"topic_id": bytes(16), "name": name}],
                                  "allow_auto_topic_creation": False,
                                  "include_topic_authorized_operations": False})
    (t,) = md["topics"]
    assert t["error_code"] == 0 and t["topic_id"] != bytes(16)
    return t["topic_id"]


def _records(values, timestamps) -> bytes:
    return kb.encode_batch(values, timestamps=timestamps)


def _values(records: bytes) -> list:
    out = []
    for pos, h in kb.iter_batches(records):
        out += kb.decode_records(records, pos, h).values
    return out


def _produce13(conn, topic_id: bytes, values, timestamps, partition: int = 0,
               tid: str | None = None) -> dict:
    got = conn.call(PRODUCE, 13, {"transactional_id": tid, "acks": -1, "timeout_ms": 10_000,
                                  "topic_data": [{"topic_id": topic_id, "partition_data": [
                                      {"index": partition,
                                       "records": _records(values, timestamps)}]}]})
    (t,) = got["responses"]
    assert t["topic_id"] == topic_id
    (row,) = t["partition_responses"]
    return row


def _fetch(conn, version: int, topics: list, session_id: int = 0, epoch: int = -1,
           forgotten=()) -> dict:
    return conn.call(FETCH, version, {
        "replica_id": -1, "max_wait_ms": 0, "min_bytes": 0, "max_bytes": 1 << 20,
        "isolation_level": 0, "session_id": session_id, "session_epoch": epoch,
        "topics": [{"topic_id": tid, "topic": "", "partitions": [
            {"partition": p, "fetch_offset": off, "partition_max_bytes": 1 << 20,
             "current_leader_epoch": -1, "last_fetched_epoch": -1, "log_start_offset": -1}
            for p, off in parts]} for tid, parts in topics],
        "forgotten_topics_data": [{"topic_id": tid, "topic": "", "partitions": ps}
                                  for tid, ps in forgotten],
        "rack_id": ""})


def test_api_versions_offers_kafka_4_2s_versions_without_transaction_version_2(conn):
    got = conn.call(API_VERSIONS, 3, {"client_software_name": "t",
                                      "client_software_version": "1"})
    keys = {a["api_key"]: (a["min_version"], a["max_version"]) for a in got["api_keys"]}
    assert keys[PRODUCE] == (3, 13) and keys[FETCH] == (4, 17) and keys[LIST_OFFSETS] == (1, 11)
    # transaction version 2 (KIP-890: Produce v12 adding partitions by itself) is a
    # finalized feature a client must see before using it: none is offered
    assert not any(f["name"] == "transaction.version" for f in got["finalized_features"])


def test_produce_v13_and_fetch_v17_by_topic_id(conn):
    tid = _topic(conn, "by-id")
    row = _produce13(conn, tid, [b"a", b"b"], [10, 20])
    assert row["error_code"] == 0 and row["base_offset"] == 0
    for version in (13, 15, 16, 17):
        got = _fetch(conn, version, [(tid, [(0, 0)])])
        (t,) = got["responses"]
        assert t["topic_id"] == tid
        (p,) = t["partitions"]
        assert p["error_code"] == 0 and p["high_watermark"] == 2
        assert _values(p["records"]) == [b"a", b"b"]
    # the same topic by name at v12: the same records
    got = conn.call(FETCH, 12, {"replica_id": -1, "max_wait_ms": 0, "min_bytes": 0,
                                "max_bytes": 1 << 20, "isolation_level": 0, "session_id": 0,
                                "session_epoch": -1, "topics": [{"topic": "by-id", "partitions": [
                                    {"partition": 0, "fetch_offset": 1,
                                     "partition_max_bytes": 1 << 20}]}],
                                "forgotten_topics_data": [], "rack_id": ""})
    assert got["responses"][0]["topic"] == "by-id"
    assert _values(got["responses"][0]["partitions"][0]["records"])[-1] == b"b"


def test_ids_no_topic_has_get_unknown_topic_id(conn):
    tid = _topic(conn, "known")
    ghost = uuid.uuid4().bytes
    row = _produce13(conn, ghost, [b"x"], [1])
    assert row["error_code"] == UNKNOWN_TOPIC_ID and row["base_offset"] == -1
    got = _fetch(conn, 13, [(ghost, [(0, 0), (1, 0)]), (tid, [(0, 0)])])
    by_id = {t["topic_id"]: t["partitions"] for t in got["responses"]}
    assert [(p["partition_index"], p["error_code"]) for p in by_id[ghost]] == [
        (0, UNKNOWN_TOPIC_ID), (1, UNKNOWN_TOPIC_ID)]
    assert by_id[tid][0]["error_code"] == 0  # the known topic in the same request is served
    # a known topic's missing partition stays UNKNOWN_TOPIC_OR_PARTITION, as Kafka
    got = _fetch(conn, 17, [(tid, [(5, 0)])])
    assert got["responses"][0]["partitions"][0]["error_code"] == UNKNOWN_TOPIC_OR_PARTITION
    # nothing was written anywhere by the produce to the ghost id
    assert _produce13(conn, tid, [b"y"], [1])["base_offset"] == 0


def test_a_deleted_topics_id_is_unknown_after_it_is_recreated(conn):
    old = _topic(conn, "again")
    assert _produce13(conn, old, [b"1"], [1])["error_code"] == 0
    got = conn.call(20, 5, {"topic_names": ["again"], "timeout_ms": 10_000})
    assert got["responses"][0]["error_code"] == 0
    new = _topic(conn, "again")
    assert new != old
    assert _produce13(conn, old, [b"2"], [1])["error_code"] == UNKNOWN_TOPIC_ID
    row = _fetch(conn, 17, [(old, [(0, 0)])])["responses"][0]
    assert row["topic_id"] == old and row["partitions"][0]["error_code"] == UNKNOWN_TOPIC_ID
    assert _produce13(conn, new, [b"3"], [1])["base_offset"] == 0


def test_a_fetch_session_by_topic_id(conn):
    tid = _topic(conn, "sess-id", 2)
    full = _fetch(conn, 17, [(tid, [(0, 0), (1, 0)])], session_id=0, epoch=0)
    sid = full["session_id"]
    assert sid > 0 and full["error_code"] == 0
    assert {p["partition_index"] for p in full["responses"][0]["partitions"]} == {0, 1}
    assert _fetch(conn, 17, [], session_id=sid, epoch=1)["responses"] == []  # no news
    _produce13(conn, tid, [b"new"], [5], partition=1)
    moved = _fetch(conn, 17, [], session_id=sid, epoch=2)
    (t,) = moved["responses"]
    assert t["topic_id"] == tid and [p["partition_index"] for p in t["partitions"]] == [1]
    assert _values(t["partitions"][0]["records"]) == [b"new"]
    # the client moves on past what it got (else the session answers it again, as
    # Kafka's broker: KIP-227), and forgets partition 0 by id: its news no longer answered
    _fetch(conn, 17, [(tid, [(1, 1)])], session_id=sid, epoch=3, forgotten=[(tid, [0])])
    _produce13(conn, tid, [b"quiet"], [6], partition=0)
    assert _fetch(conn, 17, [], session_id=sid, epoch=4)["responses"] == []


def _list(conn, version: int, name: str, timestamps) -> list:
    got = conn.call(LIST_OFFSETS, version, {
        "replica_id": -1, "isolation_level": 0, "timeout_ms": 1000,
        "topics": [{"name": name, "partitions": [
            {"partition_index": 0, "current_leader_epoch": -1, "timestamp": ts}
            for ts in timestamps]}]})
    return [(p["error_code"], p["offset"], p["timestamp"]) for t in got["topics"]
            for p in t["partitions"]]


def test_list_offsets_special_timestamps_as_a_broker_without_tiered_storage(conn):
    tid = _topic(conn, "times")
    _produce13(conn, tid, [b"a", b"b", b"c"], [100, 300, 200])
    assert _list(conn, 11, "times", [-1]) == [(0, 3, -1)]  # latest
    assert _list(conn, 11, "times", [-2]) == [(0, 0, -1)]  # earliest
    assert _list(conn, 11, "times", [-3]) == [(0, 1, 300)]  # the largest timestamp's record
    assert _list(conn, 11, "times", [-4]) == [(0, 0, -1)]  # earliest local: the log start
    assert _list(conn, 11, "times", [-5]) == [(0, -1, -1)]  # latest tiered: none
    assert _list(conn, 11, "times", [-6]) == [(0, -1, -1)]  # earliest pending upload: none
    assert _list(conn, 11, "times", [150]) == [(0, 1, 300)]  # by timestamp, as before
    # each special timestamp needs the version that brought it
    for version, ts in ((6, -3), (7, -4), (8, -5), (10, -6), (11, -7)):
        assert _list(conn, version, "times", [ts]) == [(UNSUPPORTED_VERSION, -1, -1)]
    for version, ts in ((7, -3), (8, -4), (9, -5)):
        assert _list(conn, version, "times", [ts])[0][0] == 0
    # the tiered ones still check the partition
    assert _list(conn, 11, "no-such-topic", [-5])[0][0] == UNKNOWN_TOPIC_OR_PARTITION


def test_a_transactional_produce_v12_cannot_add_its_partition_by_itself(conn):
    """Transaction version 2 is not offered (ApiVersions above): a Produce v12 of a
    transaction that did not add its partition (AddPartitionsToTxn) is refused and
    nothing is written, as with any version."""
    tid = _topic(conn, "txn-v12")
    deadline = time.monotonic() + 30
    while True:  # (the coordinator is ready once its state topic is: retriable until then)
        init = conn.call(22, 4, {"transactional_id": "tx-v12", "transaction_timeout_ms": 60_000,
                                 "producer_id": -1, "producer_epoch": -1})
        if init["error_code"] not in (COORDINATOR_NOT_AVAILABLE, COORDINATOR_LOAD_IN_PROGRESS,
                                      NOT_COORDINATOR) or time.monotonic() > deadline:
            break
        time.sleep(0.1)
    assert init["error_code"] == 0
    batch = kb.encode_batch([b"t"], timestamps=[1], producer_id=init["producer_id"],
                            producer_epoch=init["producer_epoch"], base_sequence=0,
                            transactional=True)
    got = conn.call(PRODUCE, 12, {"transactional_id": "tx-v12", "acks": -1, "timeout_ms": 5000,
                                  "topic_data": [{"name": "txn-v12", "partition_data": [
                                      {"index": 0, "records": batch}]}]})
    row = got["responses"][0]["partition_responses"][0]
    assert row["error_code"] == INVALID_TXN_STATE and row["base_offset"] == -1
    assert _list(conn, 11, "txn-v12", [-1]) == [(0, 0, -1)]  # nothing written
    assert tid
