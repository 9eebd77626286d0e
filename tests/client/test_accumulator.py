"""The producer's pure parts: accumulator, send selection, batch encoding, fetch decoding.

No sockets and no node: these run in milliseconds.
"""

from __future__ import annotations

import threading
import time
from collections import deque

import pytest

from raftlog import records
from raftlog.client import BufferFullError, Producer, ProducerClosedError, RecordMetadata
from raftlog.client.accumulator import (
    RECORD_OVERHEAD,
    ProducerBatch,
    RecordAccumulator,
    select_sendable,
)
from raftlog.client.consumer import TopicPartition, _decode_fetch
from raftlog.client.producer import next_request
from raftlog.errors import ErrorCode, OffsetOutOfRangeError
from raftlog.protocol import Api, Frame, parse_response


def _acc(**kw) -> RecordAccumulator:
    opts = dict(
        batch_size=1000,
        linger_s=10.0,
        buffer_memory=10_000,
        max_block_s=0.05,
        delivery_timeout_s=60,
    )
    opts.update(kw)
    return RecordAccumulator(**opts)


def test_append_groups_by_partition_and_seals_at_batch_size():
    sealed = []
    acc = _acc(on_seal=lambda t, p: sealed.append((t, p)))
    futures = [acc.append("t", 0, b"x" * 92, None, None, None) for _ in range(11)]  # 100 bytes each
    acc.append("t", 1, b"y", None, None, None)
    assert sealed == [("t", 0)]  # the 10th record reached batch_size
    assert [len(b) for b in acc.ready] == [10]
    assert sorted(acc.open) == [("t", 0), ("t", 1)]
    assert acc.buffered == 11 * 100 + 1 + RECORD_OVERHEAD
    assert acc.incomplete == 3
    batch = acc.ready[0]
    acc.complete(batch, base_offset=500)
    assert [f.result(0).offset for f in futures[:10]] == list(range(500, 510))
    assert not futures[10].done()
    assert acc.incomplete == 2 and acc.buffered == 100 + 1 + RECORD_OVERHEAD


def test_a_record_that_would_overflow_the_batch_starts_the_next():
    """Kafka's rule: a batch never grows past batch_size (a topic's max.message.bytes
    sits just above the default), unless one record alone is larger."""
    acc = _acc()  # batch_size 1000
    for _ in range(3):
        acc.append("t", 0, b"x" * (400 - RECORD_OVERHEAD), None, None, None)  # 400 bytes
    assert [len(b) for b in acc.ready] == [2]  # 800 + 400 > 1000: the third starts a batch
    assert [b.size for b in acc.ready] == [800]
    acc.append("t", 0, b"y" * 5000, None, None, None)  # larger than batch_size alone
    assert [len(b) for b in acc.ready] == [2, 1, 1]  # the open one sealed first, in order
    assert acc.ready[2].values == [b"y" * 5000] and not acc.open


def test_optional_columns_are_backfilled_and_encode_round_trips():
    acc = _acc()
    acc.append("t", 0, b"a", None, None, None)
    acc.append("t", 0, b"b", b"k", [("h", b"v")], 1234)
    acc.append("t", 0, None, None, None, None)
    b = acc.open[("t", 0)]
    ts = b.result.timestamp
    assert b.keys == [None, b"k", None]
    assert b.headers == [None, [("h", b"v")], None]
    assert b.timestamps == [ts, 1234, ts]
    data = b.encode(records.LZ4)
    assert b.values is None  # lists freed after encoding
    recs = records.decode_batches(data, "t", 0)
    assert [(r.offset, r.value, r.key, r.headers, r.timestamp) for r in recs] == [
        (0, b"a", None, (), ts),
        (1, b"b", b"k", (("h", b"v"),), 1234),
        (2, None, None, (), ts),
    ]


def test_drain_seals_lingered_batches_and_reports_the_next_linger():
    acc = _acc(linger_s=0.5)
    acc.append("t", 0, b"a", None, None, None)
    created = acc.open[("t", 0)].created
    batches, left = acc.drain(created + 0.1)
    assert batches == [] and left == pytest.approx(0.4)
    batches, left = acc.drain(created + 0.5)
    assert [len(b) for b in batches] == [1] and left is None and not acc.open


def test_a_lingered_batch_of_a_busy_partition_stays_open_and_keeps_growing():
    acc = _acc(linger_s=0.0)
    busy = {("t", 0)}
    acc.append("t", 0, b"a", None, None, None)
    acc.append("u", 0, b"x", None, None, None)
    created = acc.open[("t", 0)].created
    batches, left = acc.drain(created + 1.0, lambda key: key not in busy)
    assert [(b.topic, len(b)) for b in batches] == [("u", 1)]
    assert left is None, "a blocked batch sets no timer: an answer wakes the sender"
    for v in (b"b", b"c", b"d"):
        acc.append("t", 0, v, None, None, None)
    assert len(acc.open[("t", 0)]) == 4  # one batch, not four one-record batches
    busy.clear()
    batches, _ = acc.drain(created + 1.0, lambda key: key not in busy)
    assert [len(b) for b in batches] == [4] and not acc.open


def test_append_batch_joins_the_open_batch_when_it_fits():
    acc = _acc()  # batch_size 1000
    acc.append("t", 0, b"first", None, None, None)
    f1 = acc.append_batch("t", 0, [b"b1", b"b2"], None, None, None, size=20)
    f2 = acc.append_batch("t", 0, [b"c1"], [b"k"], [[("h", b"v")]], None, size=12)
    assert not acc.ready
    b = acc.open[("t", 0)]
    assert b.values == [b"first", b"b1", b"b2", b"c1"]
    assert b.keys == [None, None, None, b"k"] and b.headers == [None, None, None, [("h", b"v")]]
    acc.complete(b, base_offset=7)
    assert f1.result(0).offsets == range(8, 10) and f2.result(0).offsets == range(10, 11)


def test_many_small_send_many_calls_fill_one_batch_and_seal_it():
    acc = _acc(batch_size=100, buffer_memory=10_000)
    futures = [acc.append_batch("t", 0, [b"x"] * 2, None, None, None, size=20)
               for _ in range(5)]
    assert [len(b) for b in acc.ready] == [10] and not acc.open  # full: sealed
    acc.complete(acc.ready[0], base_offset=0)
    assert [f.result(0).offsets for f in futures] == [range(i, i + 2) for i in range(0, 10, 2)]


def test_append_batch_seals_the_open_batch_first_when_it_does_not_fit():
    acc = _acc(batch_size=100)
    acc.append("t", 0, b"first", None, None, None)
    f = acc.append_batch("t", 0, [b"b1", b"b2"], None, None, None, size=96)
    assert [b.values for b in acc.ready] == [[b"first"]]
    assert acc.open[("t", 0)].values == [b"b1", b"b2"]  # open: it may grow
    acc.complete(acc.open[("t", 0)], base_offset=1)
    assert f.result(0).offsets == range(1, 3)
    # a timestamp of its own: a batch of its own (the batch's timestamp is the call's)
    acc.append("t", 1, b"first", None, None, None)
    g = acc.append_batch("t", 1, [b"z"], None, None, 1234, size=9)
    assert [b.values for b in acc.ready][-1] == [b"first"]
    b = acc.open[("t", 1)]
    assert b.values == [b"z"] and b.result.timestamp == 1234
    acc.complete(b, base_offset=5)
    assert g.result(0).timestamp == 1234 and [b.seq for b in acc.ready] == sorted(
        b.seq for b in acc.ready)


def test_full_buffer_blocks_then_raises_and_completion_makes_room():
    acc = _acc(batch_size=100, buffer_memory=200, max_block_s=0.05)
    acc.append("t", 0, b"x" * 150, None, None, None)
    acc.append("t", 1, b"x" * 30, None, None, None)  # 196 of 200 bytes
    t0 = time.monotonic()
    with pytest.raises(BufferFullError, match="buffer_memory=200"):
        acc.append("t", 2, b"x" * 40, None, None, None)
    assert time.monotonic() - t0 >= 0.05
    acc2 = _acc(batch_size=100, buffer_memory=200, max_block_s=5)
    acc2.append("t", 0, b"x" * 150, None, None, None)
    first = acc2.ready[0]
    threading.Timer(0.05, acc2.complete, args=(first, 0)).start()
    acc2.append("t", 1, b"x" * 100, None, None, None)  # waits for the completion, then fits
    assert acc2.buffered == 100 + RECORD_OVERHEAD


def test_closed_accumulator_refuses_new_records():
    acc = _acc()
    acc.close()
    with pytest.raises(ProducerClosedError):
        acc.append("t", 0, b"x", None, None, None)
    with pytest.raises(ProducerClosedError):
        acc.append_batch("t", 0, [b"x"], None, None, None, size=9)
    assert acc.finished()


def test_wait_empty_times_out_with_a_clear_message():
    acc = _acc()
    acc.append("t", 0, b"x", None, None, None)
    with pytest.raises(TimeoutError, match="1 batches left"):
        acc.wait_empty(0.05, alive=lambda: True)


def _batch(topic="t", partition=0, seq=0, deadline=100.0, retry_at=0.0) -> ProducerBatch:
    b = ProducerBatch(topic, partition, deadline, 0, seq)
    b.retry_at = retry_at
    return b


def test_select_sendable_in_order_sends_one_batch_per_idle_partition():
    a0, a1, b0, c0 = _batch("a", 0, 0), _batch("a", 0, 1), _batch("b", 0, 2), _batch("c", 0, 3)
    send, keep, expired = select_sendable(deque([a1, c0, b0, a0]), 1.0, True, {("c", 0): 1})
    assert send == [a0, b0] and list(keep) == [a1, c0] and expired == []


def test_select_sendable_in_order_fills_each_partitions_window_in_sequence_order():
    a = [_batch("a", 0, i) for i in range(7)]
    b0 = _batch("b", 0, 7)
    send, keep, _ = select_sendable(deque([*reversed(a), b0]), 1.0, True, {("a", 0): 2},
                                  lambda key: 5)
    assert send == [a[0], a[1], a[2], b0]  # 2 already in flight + 3 = the window of 5
    assert list(keep) == a[3:]


def test_next_request_in_order_takes_one_batch_of_each_partition_in_order():
    a = [_batch("a", 0, i) for i in range(3)]
    b0, c0 = _batch("b", 0, 3), _batch("c", 0, 4)
    chunk, rest = next_request([a[0], a[1], b0, a[2], c0], 1000, True)
    assert chunk == [a[0], b0, c0] and rest == [a[1], a[2]]
    chunk, rest = next_request(rest, 1000, True)
    assert chunk == [a[1]] and rest == [a[2]]
    chunk, rest = next_request([a[0], b0, c0], 2, True)  # and at most `limit`
    assert chunk == [a[0], b0] and rest == [c0]


def test_next_request_without_idempotence_takes_up_to_the_limit_in_order():
    a = [_batch("a", 0, i) for i in range(3)]
    chunk, rest = next_request(a, 1000, False)
    assert chunk == a and rest == []
    chunk, rest = next_request(a, 2, False)
    assert chunk == a[:2] and rest == a[2:]


def test_select_sendable_backoff_holds_back_later_batches_of_the_partition():
    retried, later, other = _batch(seq=0, retry_at=5.0), _batch(seq=1), _batch("o", 0, 2)
    send, keep, _ = select_sendable(deque([later, retried, other]), 1.0, True, {}, lambda key: 5)
    assert send == [other] and list(keep) == [retried, later]
    # without in-order delivery only the batch in backoff waits
    send, keep, _ = select_sendable(deque([later, retried, other]), 1.0, False, {})
    assert send == [later, other] and list(keep) == [retried]


def test_select_sendable_expires_batches_past_their_delivery_deadline():
    old, fresh = _batch(seq=0, deadline=1.0), _batch(seq=1, deadline=10.0)
    send, keep, expired = select_sendable(deque([old, fresh]), 2.0, True, {})
    assert expired == [old] and send == [fresh] and not keep


def test_producer_options_follow_kafka():
    with Producer("127.0.0.1:1", acks=1) as p:  # no connection until a record is sent
        assert p.enable_idempotence is False
    with Producer("127.0.0.1:1") as p:
        assert p.acks == -1 and p.enable_idempotence is True
    with pytest.raises(ValueError, match="requires acks='all'"):
        Producer("127.0.0.1:1", acks=1, enable_idempotence=True)
    with pytest.raises(ValueError, match="acks"):
        Producer("127.0.0.1:1", acks=2)
    with pytest.raises(ValueError, match="batch_size"):
        Producer("127.0.0.1:1", batch_size=10, buffer_memory=5)
    with pytest.raises(ValueError, match="at most 5 with enable_idempotence"):
        Producer("127.0.0.1:1", max_in_flight_requests_per_connection=6)
    with Producer("127.0.0.1:1", acks=1, max_in_flight_requests_per_connection=6):
        pass  # without idempotence any window is allowed
    with pytest.raises(ValueError):
        Producer("nonsense")


def test_decode_fetch_splits_parts_and_drops_records_before_the_position():
    b0 = bytearray(records.encode_batch([b"a", b"b", b"c"]))
    records.stamp(b0, 0, base_offset=10, leader_epoch=0)
    b1 = records.encode_batch([b"z"])
    tp0, tp1, tp2, tp3 = (TopicPartition("t", i) for i in range(4))
    header = {
        "parts": [
            ["t", 0, 0, 13, 0, len(b0), ""],
            ["t", 1, 0, 1, 0, len(b1), ""],
            ["t", 2, int(ErrorCode.OFFSET_OUT_OF_RANGE), -1, 0, 0, "out"],
            ["t", 3, int(ErrorCode.NOT_LEADER_OR_FOLLOWER), -1, -1, 0, ""],
        ]
    }
    frame = Frame(parse_response(Api.FETCH, header), bytes(b0) + b1)
    batches, resets, errors = _decode_fetch(
        frame, [tp0, tp1, tp2, tp3], {tp0: 11, tp1: 0, tp2: 5, tp3: 0}
    )
    assert [(tp, [r.offset for r in recs]) for tp, recs in batches] == [(tp0, [11, 12]), (tp1, [0])]
    assert [r.value for r in batches[0][1]] == [b"b", b"c"]
    assert resets == [tp2]
    assert [e.code for e in errors] == [ErrorCode.NOT_LEADER_OR_FOLLOWER] and "t-3" in str(
        errors[0]
    )
    assert not isinstance(errors[0], OffsetOutOfRangeError)


def test_record_metadata_is_a_small_value():
    m = RecordMetadata("t", 1, 2, 3)
    assert (m.topic, m.partition, m.offset, m.timestamp) == ("t", 1, 2, 3)
    with pytest.raises(AttributeError):
        m.offset = 5


def test_split_chunks_even_when_sizes_match_and_halved_when_they_vary():
    from raftlog.client.accumulator import split_chunks

    even = [b"x" * (100 - RECORD_OVERHEAD)] * 25  # 100 bytes each, 2500 in all
    assert split_chunks(even, None, 1000) == [(0, 9, 900), (9, 18, 900), (18, 25, 700)]
    assert split_chunks(even, None, 5000) == [(0, 25, 2500)]
    # the even split's first chunk would be 2 large records (1,800 B > 1,000): cut again
    varied = [b"L" * 892, b"L" * 892, b"s", b"s"]
    got = split_chunks(varied, None, 1000)
    assert [(a, b) for a, b, _ in got] == [(0, 1), (1, 2), (2, 4)]
    assert all(size <= 1000 for _, _, size in got)
    # large records bunched at the start: each cut piece as full as it can be (not halved
    # into many small batches)
    bunched = [b"L" * 292] * 4 + [b"s"] * 100  # 4 x 300 B, then 100 x 9 B; 2,100 in all
    got = split_chunks(bunched, None, 1000)
    # (even thirds of 35 records; the first, 1,479 B, is cut into 3 large + the rest)
    assert [(a, b) for a, b, _ in got] == [(0, 3), (3, 35), (35, 70), (70, 104)]
    assert [size for _, _, size in got] == [900, 300 + 31 * 9, 35 * 9, 34 * 9]
    # None (a tombstone) counts as its overhead; keys count; one record over the limit alone
    assert split_chunks([None, b"k" * 3000], [b"ab", None], 1000) == [(0, 1, 10), (1, 2, 3008)]
