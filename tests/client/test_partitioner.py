"""Kafka's default partitioner, bit for bit; sticky partitioning; light futures."""

from __future__ import annotations

import random
import threading

import pytest

from raftlog.client.future import BatchFuture, BatchResult, RecordFuture, RecordMetadata
from raftlog.client.partitioner import StickyPartitioner, murmur2, partition_for_key

# Vectors from Kafka's own partitioner tests (and kafka-python's, which copies them).
KAFKA_VECTORS = [
    (b"21", -973932308),
    (b"foobar", -790332482),
    (b"a-little-bit-long-string", -985981536),
    (b"a-little-bit-longer-string", -1486304829),
    (b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8", -58897971),
    (b"abc", 479470107),
]


@pytest.mark.parametrize("key, expected", KAFKA_VECTORS)
def test_murmur2_matches_kafka(key, expected):
    assert murmur2(key) == expected


def test_partition_for_key_is_positive_modulo():
    assert partition_for_key(b"21", 10) == (-973932308 & 0x7FFFFFFF) % 10
    assert all(0 <= partition_for_key(bytes([i]), 7) < 7 for i in range(256))


def test_sticky_partitioner_moves_on_after_a_batch():
    sp = StickyPartitioner(random.Random(1))
    p = sp.partition("t", 5)
    assert sp.partition("t", 5) == p
    q = sp.on_new_batch("t", 5, p)
    assert q != p and sp.partition("t", 5) == q
    assert StickyPartitioner().on_new_batch("t", 1, 0) == 0


def test_record_future_interface():
    b = BatchResult("t", 2, 1000)
    f = RecordFuture(b, 3)
    seen = []
    f.add_done_callback(seen.append)
    assert not f.done() and not f.cancel() and not f.cancelled()
    with pytest.raises(TimeoutError):
        f.result(timeout=0.01)
    threading.Timer(0.05, b.complete, args=(40,)).start()
    assert f.result(timeout=5) == RecordMetadata("t", 2, 43, 1000)
    assert f.done() and seen == [f] and f.exception() is None
    late = []
    f.add_done_callback(late.append)  # already done: runs at once
    assert late == [f]
    bf = BatchFuture(b, 10)
    assert bf.result().offsets == range(40, 50)


def test_future_carries_the_error():
    b = BatchResult("t", 0, 0)
    b.complete(-1, ValueError("boom"))
    f = RecordFuture(b, 0)
    assert isinstance(f.exception(), ValueError)
    with pytest.raises(ValueError, match="boom"):
        f.result()
