"""Transactions' bad input on a real node (issue #33): answered with Kafka's error codes,
and nothing written."""

from __future__ import annotations

import contextlib
import time

import pytest

from raftlog import records
from raftlog.client import Admin
from raftlog.client.conn import BrokerConnection
from raftlog.errors import ApiError, ErrorCode
from raftlog.protocol import Api


@pytest.fixture
def txn_node(node_factory):
    n = node_factory(**{"transaction.state.log.num.partitions": "1",
                        "offsets.topic.num.partitions": "1"})
    with Admin(n.bootstrap) as a:
        a.create_topic("t", partitions=1, replication_factor=1)
    return n


@contextlib.contextmanager
def _conn(n):
    c = BrokerConnection(n.host, n.port, 10)
    try:
        yield c
    finally:
        c.close()


def _call(conn, api, fields, body=b"", retry=(ErrorCode.COORDINATOR_NOT_AVAILABLE,
                                              ErrorCode.COORDINATOR_LOAD_IN_PROGRESS,
                                              ErrorCode.CONCURRENT_TRANSACTIONS)):
    deadline = time.monotonic() + 20
    while True:
        try:
            return conn.request(api, fields, body).header
        except ApiError as e:
            if e.code not in retry or time.monotonic() > deadline:
                raise
            time.sleep(0.1)


def _init(conn, tid: str) -> tuple[int, int]:
    h = _call(conn, Api.INIT_PRODUCER_ID, {"transactional_id": tid})
    return h["producer_id"], h["producer_epoch"]


def _end_offset(conn) -> int:
    h = conn.request(Api.LIST_OFFSETS, {"parts": [["t", 0, -1]]}).header
    return h["parts"][0].offset


def _produce(conn, tid, pid, epoch, seq=0):
    data = records.encode_batch([b"v"], producer_id=pid, producer_epoch=epoch,
                                base_sequence=seq, transactional=True, timestamp=1)
    h = conn.request(Api.PRODUCE, {"transactional_id": tid, "acks": -1,
                                   "parts": [["t", 0, len(data)]]}, data).header
    return h["parts"][0]


def test_end_txn_without_a_transaction_is_invalid_txn_state(txn_node):
    with _conn(txn_node) as conn:
        with pytest.raises(ApiError) as e:  # over transaction.max.timeout.ms (15 min)
            _call(conn, Api.INIT_PRODUCER_ID, {"transactional_id": "no-txn",
                                               "transaction_timeout_ms": 900_001})
        assert e.value.code is ErrorCode.INVALID_TRANSACTION_TIMEOUT
        pid, epoch = _init(conn, "no-txn")
        with pytest.raises(ApiError) as e:
            _call(conn, Api.END_TXN, {"transactional_id": "no-txn", "producer_id": pid,
                                      "producer_epoch": epoch, "commit": True})
        assert e.value.code is ErrorCode.INVALID_TXN_STATE
        with pytest.raises(ApiError) as e:  # an id never initialized
            _call(conn, Api.END_TXN, {"transactional_id": "unknown", "producer_id": 7,
                                      "producer_epoch": 0, "commit": False})
        assert e.value.code is ErrorCode.INVALID_PRODUCER_ID_MAPPING


def test_transactional_batch_not_added_or_of_another_epoch_is_refused(txn_node):
    with _conn(txn_node) as conn:
        pid, epoch = _init(conn, "verify")
        r = _produce(conn, "verify", pid, epoch)  # never added to a transaction
        assert r.error == ErrorCode.INVALID_TXN_STATE
        _call(conn, Api.ADD_PARTITIONS_TO_TXN, {"transactional_id": "verify",
                                                "producer_id": pid, "producer_epoch": epoch,
                                                "parts": [["t", 0]]})
        r = _produce(conn, "verify", pid, epoch + 5)  # an epoch the coordinator never gave
        assert r.error == ErrorCode.INVALID_TXN_STATE
        assert _end_offset(conn) == 0  # nothing was written
        r = _produce(conn, "verify", pid, epoch)
        assert r.error == 0 and _end_offset(conn) == 1


def test_markers_of_a_stale_coordinator_or_producer_epoch_are_refused(txn_node):
    with _conn(txn_node) as conn:
        def marker(pid, epoch, cepoch):
            h = conn.request(Api.WRITE_TXN_MARKERS, {
                "markers": [[pid, epoch, cepoch, False, [["t", 0]]]]}).header
            return h["results"][0]

        # a producer the partition does not know: accepted, as Kafka does (the
        # coordinator marks every partition it added, written to or not)
        assert marker(900, 3, 5).error == 0
        end = _end_offset(conn)
        assert marker(900, 3, 4).error == ErrorCode.TRANSACTION_COORDINATOR_FENCED
        assert marker(900, 2, 5).error == ErrorCode.INVALID_PRODUCER_EPOCH
        assert marker(900, 3, 5).error == 0  # (a retry of the same coordinator's)
        assert _end_offset(conn) == end + 1
        r = conn.request(Api.WRITE_TXN_MARKERS, {
            "markers": [[900, 3, 5, True, [["nope", 0]]]]}).header["results"][0]
        assert r.error == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION


def test_planted_bug_skips_the_verification(node_factory):
    """test.flags=bug-skip-txn-verification (the harness's planted bug) lets the same
    unverified batch in: the check above is what refuses it."""
    n = node_factory(**{"transaction.state.log.num.partitions": "1",
                        "test.flags": "bug-skip-txn-verification"})
    with Admin(n.bootstrap) as a:
        a.create_topic("t", partitions=1, replication_factor=1)
    with _conn(n) as conn:
        pid, epoch = _init(conn, "planted")
        assert _produce(conn, "planted", pid, epoch).error == 0
        assert _end_offset(conn) == 1


def test_sdk_calls_out_of_order_say_what_to_call_and_send_nothing(txn_node):
    """A user's mistakes with the transactional producer: each names the call to make."""
    from raftlog.client import Consumer, Producer, TopicPartition

    p = Producer(txn_node.bootstrap, transactional_id="order")
    try:
        with pytest.raises(ApiError, match=r"call init_transactions\(\) first"):
            p.begin_transaction()
        p.init_transactions()
        with pytest.raises(ApiError, match=r"call begin_transaction\(\) first"):
            p.send("t", b"outside", partition=0)
        p.begin_transaction()
        with pytest.raises(ApiError, match=r"commit_transaction\(\) or abort_transaction\(\)"):
            p.begin_transaction()
        # init_transactions() again inside a transaction: same hint
        with pytest.raises(ApiError, match=r"commit_transaction\(\) or abort_transaction\(\)"):
            p.init_transactions()
        p.send("t", b"inside", partition=0)
        p.commit_transaction()
    finally:
        p.close()
    c = Consumer(txn_node.bootstrap, auto_offset_reset="earliest")
    try:
        c.assign([TopicPartition("t", 0)])
        got: list = []
        deadline = time.monotonic() + 30
        while not got and time.monotonic() < deadline:
            got += [r.value for r in c.poll(timeout_ms=300)]
        got += [r.value for r in c.poll(timeout_ms=300)]
        assert got == [b"inside"]
    finally:
        c.close()


def test_operating_calls_answer_bad_input_per_item(txn_node):
    """KIP-664's calls: an unknown partition, an empty or unknown transactional id and an
    unknown state filter are each answered in their row, nothing else refused."""
    with _conn(txn_node) as conn:
        _init(conn, "known")  # (creates __transaction_state)
        h = conn.request(Api.DESCRIBE_PRODUCERS, {"parts": [["t", 0], ["t", 7], ["nope", 0]]}
                         ).header
        assert [(r.topic, r.partition, ErrorCode(r.error)) for r in h["parts"]] == [
            ("t", 0, ErrorCode.NONE), ("t", 7, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION),
            ("nope", 0, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)]
        h = _call(conn, Api.DESCRIBE_TRANSACTIONS, {"transactional_ids": ["known", "", "nope"]})
        assert [ErrorCode(r.error) for r in h["transactions"]] == [
            ErrorCode.NONE, ErrorCode.INVALID_REQUEST, ErrorCode.TRANSACTIONAL_ID_NOT_FOUND]
        assert h["transactions"][0].state == "Empty"
        h = _call(conn, Api.LIST_TRANSACTIONS, {"states": ["Empty", "Running"]})
        assert [r.transactional_id for r in h["transactions"]] == ["known"]
        assert h["unknown_states"] == ["Running"]
