"""Idempotent producer state: Kafka's sequence rules, snapshots, rebuild from batches."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from raftlog import records
from raftlog.errors import CorruptSnapshotError, ErrorCode
from raftlog.producer_state import (
    BATCHES_RETAINED,
    MAX_SEQUENCE,
    PRODUCER_ID_BLOCK_SIZE,
    BatchMetadata,
    ProducerIdBlocks,
    ProducerStateManager,
    Verdict,
    next_sequence,
    snapshot_file_name,
)


def append(state: ProducerStateManager, pid, epoch, seq, count, log: list) -> Verdict:
    """Leader path against a fake log (a list of (pid, epoch, seq, offset))."""
    c = state.check(pid, epoch, seq, count)
    if c.verdict is Verdict.APPEND:
        base = len(log)
        for i in range(count):
            log.append((pid, epoch, next_sequence(seq, i), base + i))
        state.update(pid, epoch, seq, count, base, timestamp_ms=1000)
    return c


def test_first_batch_then_in_order_then_duplicate():
    s, log = ProducerStateManager(), []
    assert append(s, 7, 0, 0, 3, log).verdict is Verdict.APPEND
    assert append(s, 7, 0, 3, 2, log).verdict is Verdict.APPEND
    dup = s.check(7, 0, 0, 3)
    assert dup.verdict is Verdict.DUPLICATE and dup.error_code is ErrorCode.NONE
    assert dup.duplicate == BatchMetadata(0, 2, 0, 2)
    assert s.check(7, 0, 3, 2).duplicate == BatchMetadata(3, 4, 3, 4)
    assert s.end_offset == 5


def test_gap_is_out_of_order():
    s, log = ProducerStateManager(), []
    append(s, 1, 0, 0, 1, log)
    c = s.check(1, 0, 2, 1)
    assert c.verdict is Verdict.OUT_OF_ORDER_SEQUENCE
    assert c.error_code is ErrorCode.OUT_OF_ORDER_SEQUENCE
    assert "expected 1" in c.message


def test_overlapping_but_not_equal_batch_is_out_of_order():
    s, log = ProducerStateManager(), []
    append(s, 1, 0, 0, 4, log)
    assert s.check(1, 0, 0, 2).verdict is Verdict.OUT_OF_ORDER_SEQUENCE


def test_duplicate_older_than_retained_window_is_out_of_order():
    s, log = ProducerStateManager(), []
    for i in range(BATCHES_RETAINED + 1):
        append(s, 1, 0, i, 1, log)
    assert s.check(1, 0, 0, 1).verdict is Verdict.OUT_OF_ORDER_SEQUENCE
    assert s.check(1, 0, 1, 1).verdict is Verdict.DUPLICATE
    assert len(s.producers[1].batches) == BATCHES_RETAINED


def test_fenced_epoch():
    s, log = ProducerStateManager(), []
    append(s, 1, 3, 0, 1, log)
    c = s.check(1, 2, 1, 1)
    assert c.verdict is Verdict.INVALID_PRODUCER_EPOCH
    assert c.error_code is ErrorCode.INVALID_PRODUCER_EPOCH


def test_new_epoch_must_start_at_zero_and_forgets_old_batches():
    s, log = ProducerStateManager(), []
    append(s, 1, 0, 0, 5, log)
    assert s.check(1, 1, 5, 1).verdict is Verdict.OUT_OF_ORDER_SEQUENCE
    assert append(s, 1, 1, 0, 1, log).verdict is Verdict.APPEND
    assert s.producers[1].epoch == 1 and len(s.producers[1].batches) == 1
    # the old epoch is now fenced, even its duplicates
    assert s.check(1, 0, 0, 5).verdict is Verdict.INVALID_PRODUCER_EPOCH


def test_unknown_producer_accepts_any_sequence():
    # Kafka >= 2.5: state may have expired or been removed by retention.
    assert ProducerStateManager().check(9, 0, 1234, 1).verdict is Verdict.APPEND


def test_sequence_wraps_at_max():
    s, log = ProducerStateManager(), []
    append(s, 1, 0, MAX_SEQUENCE - 1, 2, log)
    assert s.producers[1].last_seq == MAX_SEQUENCE
    assert s.check(1, 0, 0, 1).verdict is Verdict.APPEND
    # a batch spanning the wrap
    append(s, 1, 0, 0, 1, log)
    s2, log2 = ProducerStateManager(), []
    append(s2, 2, 0, MAX_SEQUENCE - 1, 4, log2)
    assert s2.producers[2].last_seq == 1  # MAX-1, MAX, 0, 1
    assert s2.check(2, 0, MAX_SEQUENCE - 1, 4).verdict is Verdict.DUPLICATE
    assert s2.check(2, 0, 2, 1).verdict is Verdict.APPEND


@pytest.mark.parametrize(
    "pid,epoch,seq,count", [(-1, 0, 0, 1), (1, -1, 0, 1), (1, 0, -1, 1), (1, 0, 0, 0),
                            (1, 0, MAX_SEQUENCE + 1, 1)]
)
def test_invalid_fields(pid, epoch, seq, count):
    c = ProducerStateManager().check(pid, epoch, seq, count)
    assert c.verdict is Verdict.INVALID and c.error_code is ErrorCode.INVALID_REQUEST


def test_expiry_and_head_truncation():
    s, log = ProducerStateManager(), []
    append(s, 1, 0, 0, 1, log)
    s.update(2, 0, 0, 1, 1, timestamp_ms=5000)
    assert s.remove_expired(now_ms=3000, expiration_ms=1500) == [1]
    assert list(s.producers) == [2]
    s.truncate_head(1)
    assert list(s.producers) == [2]
    s.truncate_head(2)
    assert s.producers == {}


# --------------------------------------------------------------------------- snapshots


def test_snapshot_round_trip_and_file_name():
    s, log = ProducerStateManager(), []
    for pid in (3, 1, 2):
        for i in range(7):
            append(s, pid, 1, i * 2, 2, log)
    r = ProducerStateManager.restore(s.snapshot())
    assert r.end_offset == s.end_offset == len(log)
    assert {p: (e.epoch, e.batches, e.last_timestamp_ms) for p, e in r.producers.items()} == {
        p: (e.epoch, e.batches, e.last_timestamp_ms) for p, e in s.producers.items()
    }
    assert snapshot_file_name(42) == "00000000000000000042.snapshot"


@given(st.data())
@settings(max_examples=200, deadline=None)
def test_corrupt_snapshot_never_restores_silently(data):
    s, log = ProducerStateManager(), []
    append(s, 1, 0, 0, 3, log)
    append(s, 5, 2, 10, 1, log)
    good = s.snapshot()
    pos = data.draw(st.integers(0, len(good) - 1))
    flip = data.draw(st.integers(1, 255))
    bad = bytearray(good)
    bad[pos] ^= flip
    with pytest.raises(CorruptSnapshotError):
        ProducerStateManager.restore(bytes(bad))
    cut = data.draw(st.integers(0, len(good) - 1))
    with pytest.raises(CorruptSnapshotError):
        ProducerStateManager.restore(good[:cut])


@given(st.binary(max_size=64))
def test_garbage_snapshot_raises_only_corrupt_snapshot(blob):
    with pytest.raises(CorruptSnapshotError):
        ProducerStateManager.restore(b"RLPS\x01\x00" + blob)


# --------------------------------------------------------------------------- rebuild


def _batch(pid, epoch, seq, n, base):
    return records.encode_batch([b"v"] * n, producer_id=pid, producer_epoch=epoch,
                                base_sequence=seq, base_offset=base, timestamp=1)


def test_rebuild_from_batch_headers_matches_live_state_and_skips_snapshotted():
    live, log = ProducerStateManager(), []
    blobs = []
    for pid, epoch, seq, n in [(1, 0, 0, 2), (2, 0, 0, 1), (1, 0, 2, 3), (1, 1, 0, 1), (2, 0, 1, 4)]:
        base = len(log)
        assert append(live, pid, epoch, seq, n, log).verdict is Verdict.APPEND
        blobs.append(_batch(pid, epoch, seq, n, base))
    plain = records.encode_batch([b"x"], base_offset=len(log), timestamp=1)
    buf = b"".join(blobs) + plain
    headers = [h for _, h in records.iter_batches(buf)]
    rebuilt = ProducerStateManager.rebuild(headers)
    assert {p: (e.epoch, e.batches) for p, e in rebuilt.producers.items()} == {
        p: (e.epoch, e.batches) for p, e in live.producers.items()
    }
    assert rebuilt.end_offset == len(log) + 1
    # from a snapshot taken after the third batch, the same headers give the same state
    mid = ProducerStateManager.rebuild(headers[:3])
    again = ProducerStateManager.rebuild(headers, snapshot=mid.snapshot())
    assert {p: e.batches for p, e in again.producers.items()} == {
        p: e.batches for p, e in rebuilt.producers.items()
    }


# --------------------------------------------------------------------------- model


@given(
    st.lists(
        st.tuples(st.sampled_from([1, 2]), st.integers(1, 4), st.booleans(), st.integers(0, 3)),
        max_size=60,
    )
)
@settings(max_examples=150, deadline=None)
def test_retries_never_duplicate_or_reorder(steps):
    """Producers send batches with up to 5 in flight, retrying and reordering at random;
    the log holds every producer's sequences exactly once, in order, without gaps."""
    s, log = ProducerStateManager(), []
    next_seq = {1: 0, 2: 0}
    sent: dict[int, list] = {1: [], 2: []}  # batches sent, maybe not acknowledged
    for pid, n, retry, back in steps:
        if retry and sent[pid]:
            seq, cnt = sent[pid][-1 - min(back, len(sent[pid]) - 1)]
            c = append(s, pid, 0, seq, cnt, log)
            assert c.verdict in (Verdict.DUPLICATE, Verdict.OUT_OF_ORDER_SEQUENCE)
            if c.verdict is Verdict.DUPLICATE:
                assert c.duplicate.first_seq == seq
                assert [e[2] for e in log[c.duplicate.base_offset:c.duplicate.last_offset + 1]] == [
                    next_sequence(seq, i) for i in range(cnt)
                ]
        else:
            c = append(s, pid, 0, next_seq[pid], n, log)
            assert c.verdict is Verdict.APPEND
            sent[pid] = (sent[pid] + [(next_seq[pid], n)])[-BATCHES_RETAINED:]
            next_seq[pid] += n
    for pid in (1, 2):
        assert [e[2] for e in log if e[0] == pid] == list(range(next_seq[pid]))


def test_producer_id_blocks():
    b = ProducerIdBlocks()
    assert b.next_id() is None and b.wants_prefetch
    b.add_block(5000, PRODUCER_ID_BLOCK_SIZE)
    assert [b.next_id() for _ in range(3)] == [5000, 5001, 5002]
    assert not b.wants_prefetch
    for _ in range(PRODUCER_ID_BLOCK_SIZE - 3 - 50):
        b.next_id()
    assert b.wants_prefetch
    b.prefetch_pending = True
    assert not b.wants_prefetch
    b.add_block(9000, PRODUCER_ID_BLOCK_SIZE)
    ids = [b.next_id() for _ in range(51)]
    assert ids[:50] == list(range(5950, 6000)) and ids[50] == 9000
