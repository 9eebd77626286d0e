"""Producer retry, ordering and routing logic against a scripted fake node (no node process)."""

from __future__ import annotations

import time

import pytest

from raftlog.client import ApiError, DeliveryTimeoutError, Producer
from raftlog.errors import ErrorCode

from .fake_node import FakeNode


def _wait_until(cond, timeout_s: float = 5.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not cond():
        assert time.monotonic() < deadline, "condition not met in time"
        time.sleep(0.001)


@pytest.fixture
def fake():
    nodes: list[FakeNode] = []

    def make(**kw) -> FakeNode:
        nodes.append(FakeNode(**kw))
        return nodes[-1]

    yield make
    for n in nodes:
        n.close()


def test_retriable_errors_are_retried_and_metadata_refreshed(fake):
    node = fake(
        produce_error=lambda t, p, attempt: ErrorCode.NOT_LEADER_OR_FOLLOWER if attempt <= 2 else 0
    )
    with Producer(node.bootstrap, acks="all", retry_backoff_ms=10) as p:
        meta = p.send("t", b"v", partition=0).result(10)
    assert meta.offset == 0
    assert node.attempts[("t", 0)] == 3
    assert node.metadata_requests >= 3  # leaders looked up again after each NOT_LEADER
    assert node.appended == [("t", 0, [b"v"])]


def test_non_retriable_error_fails_the_future_with_its_code(fake):
    node = fake(produce_error=lambda t, p, attempt: ErrorCode.MESSAGE_TOO_LARGE)
    with Producer(node.bootstrap, acks=1) as p:
        f = p.send("t", b"v", partition=0)
        with pytest.raises(ApiError, match="MESSAGE_TOO_LARGE") as e:
            f.result(10)
    assert e.value.code == ErrorCode.MESSAGE_TOO_LARGE and node.attempts[("t", 0)] == 1


def test_retries_stop_at_the_retry_bound(fake):
    node = fake(produce_error=lambda t, p, attempt: ErrorCode.NOT_ENOUGH_REPLICAS)
    with Producer(node.bootstrap, acks="all", retries=2, retry_backoff_ms=1) as p:
        with pytest.raises(ApiError, match="NOT_ENOUGH_REPLICAS"):
            p.send("t", b"v", partition=0).result(10)
    assert node.attempts[("t", 0)] == 3  # the first try and two retries


def test_retries_stop_at_the_delivery_timeout(fake):
    node = fake(produce_error=lambda t, p, attempt: ErrorCode.NOT_ENOUGH_REPLICAS)
    with Producer(node.bootstrap, acks="all", delivery_timeout_ms=300, retry_backoff_ms=20) as p:
        f = p.send("t", b"v", partition=0)
        with pytest.raises((DeliveryTimeoutError, ApiError)):
            f.result(10)
    assert node.attempts[("t", 0)] >= 2


def test_in_order_mode_never_reorders_a_retried_batch(fake):
    """enable_idempotence (acks=all): the batch that failed goes out again before any later one."""
    node = fake(
        produce_error=lambda t, p, attempt: ErrorCode.REQUEST_TIMED_OUT if attempt == 1 else 0
    )
    with Producer(
        node.bootstrap,
        acks="all",
        linger_ms=0,
        batch_size=64,
        buffer_memory=1 << 20,
        retry_backoff_ms=30,
    ) as p:
        futures = [p.send("t", b"%03d" % i, partition=0) for i in range(50)]
        offsets = [f.result(10).offset for f in futures]
    values = [v for _, _, vs in node.appended for v in vs]
    assert values == [b"%03d" % i for i in range(50)]
    assert offsets == list(range(50))


def test_without_in_order_mode_batches_in_flight_can_overtake_a_retried_one(fake):
    """Kafka's behaviour with retries and no idempotence: batches already in flight
    when an earlier one fails land before its retry."""

    def answer(t, p, attempt):
        if attempt == 1:
            time.sleep(0.2)  # the later batches are sent meanwhile, in flight behind it
            return ErrorCode.REQUEST_TIMED_OUT
        return 0

    node = fake(produce_error=answer)
    with Producer(node.bootstrap, acks=1, linger_ms=0, batch_size=64, retry_backoff_ms=200) as p:
        first = p.send("t", b"first", partition=0)
        _wait_until(lambda: node.attempts.get(("t", 0)))  # the node is on it (slowly)
        later = [p.send("t", b"later%d" % i, partition=0) for i in range(3)]
        for f in [first, *later]:
            f.result(10)
    values = [v for _, _, vs in node.appended for v in vs]
    assert values[-1] == b"first"


def test_records_sent_during_a_retry_backoff_queue_behind_the_retry(fake):
    """Kafka's accumulator: a partition whose first batch backs off drains nothing
    after it, so only batches already in flight can overtake a retry."""
    node = fake(
        produce_error=lambda t, p, attempt: ErrorCode.REQUEST_TIMED_OUT if attempt == 1 else 0
    )
    with Producer(node.bootstrap, acks=1, linger_ms=0, batch_size=64, retry_backoff_ms=200) as p:
        first = p.send("t", b"first", partition=0)
        _wait_until(lambda: node.attempts.get(("t", 0)))  # failed once, now in backoff
        time.sleep(0.02)
        later = [p.send("t", b"later%d" % i, partition=0) for i in range(3)]
        for f in [first, *later]:
            f.result(10)
    values = [v for _, _, vs in node.appended for v in vs]
    assert values == [b"first", b"later0", b"later1", b"later2"]
    assert len(node.appended) == 2, "the records sent meanwhile went out as one batch"


def test_batches_go_to_each_partition_leader(fake):
    a = fake(node_id=1, topics={"t": 2})
    b = fake(node_id=2, topics={"t": 2})
    for n in (a, b):
        n.brokers = {1: ("127.0.0.1", a.port), 2: ("127.0.0.1", b.port)}
        n.leaders = {("t", 0): 1, ("t", 1): 2}
    with Producer(a.bootstrap, acks=1) as p:
        p.send("t", b"zero", partition=0).result(10)
        p.send("t", b"one", partition=1).result(10)
    assert a.appended == [("t", 0, [b"zero"])]
    assert b.appended == [("t", 1, [b"one"])]


def test_delivery_timeout_names_the_last_error(fake):
    node = fake(produce_error=lambda t, p, attempt: ErrorCode.NOT_ENOUGH_REPLICAS)
    with Producer(node.bootstrap, acks="all", delivery_timeout_ms=300, retry_backoff_ms=20) as p:
        f = p.send("t", b"v", partition=0)
        with pytest.raises(DeliveryTimeoutError, match="last error: NOT_ENOUGH_REPLICAS") as e:
            f.result(10)
    assert isinstance(e.value.last_error, ApiError)
    assert e.value.last_error.code == ErrorCode.NOT_ENOUGH_REPLICAS
    assert node.attempts[("t", 0)] >= 2


def test_storage_error_fails_the_future_after_a_few_retries_not_the_delivery_timeout(fake):
    from raftlog.client import KafkaStorageError
    from raftlog.client.producer import STORAGE_ERROR_RETRIES

    node = fake(produce_error=lambda t, p, attempt: ErrorCode.KAFKA_STORAGE_ERROR)
    with Producer(node.bootstrap, acks="all", retry_backoff_ms=5) as p:  # default: 120 s
        f = p.send("t", b"v", partition=0)
        with pytest.raises(KafkaStorageError) as e:
            f.result(10)
        assert e.value.code == ErrorCode.KAFKA_STORAGE_ERROR
        assert node.attempts[("t", 0)] == STORAGE_ERROR_RETRIES + 1
        assert e.value.written is False  # every attempt refused: in no log
        # the disk is back: a later send goes through
        node.produce_error = lambda t, p, attempt: ErrorCode.NONE
        assert p.send("t", b"w", partition=0).result(10).offset == 0


def test_storage_error_after_an_append_leaves_the_send_indeterminate(fake):
    """A leader that appended the batch and failed only to flush it says so in the
    message (STORAGE_ERROR_APPENDED): the failed send may be in the log."""
    from raftlog.client import KafkaStorageError
    from raftlog.errors import STORAGE_ERROR_APPENDED

    def error(topic, partition, attempt):
        note = f" {STORAGE_ERROR_APPENDED}" if attempt == 1 else ""
        return ErrorCode.KAFKA_STORAGE_ERROR, "STORAGE_ERROR: no space left on device" + note

    node = fake(produce_error=error)
    with Producer(node.bootstrap, acks="all", retry_backoff_ms=5) as p:
        with pytest.raises(KafkaStorageError) as e:
            p.send("t", b"v", partition=0).result(10)
        assert e.value.written is None
        assert str(e.value) == "STORAGE_ERROR: no space left on device"
