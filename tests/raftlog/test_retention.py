"""Retention: retention.ms and retention.bytes delete whole closed, committed segments."""

from __future__ import annotations

import os

from raftlog.config import LogConfig
from raftlog.log import PartitionLog
from raftlog.records import decode_batches, encode_batch


def _log(tmp_path, now, **cfg):
    cfg.setdefault("segment_bytes", 1024)
    return PartitionLog.open(str(tmp_path / "p"), LogConfig(**cfg), clock_ms=lambda: now[0])


def _fill(log, n, ts):
    for _ in range(n):
        log.append(encode_batch([b"x" * 100] * 2, timestamp=ts))
    log.maybe_increment_high_watermark(log.log_end_offset)


def test_time_retention_deletes_old_segments_only(tmp_path):
    now = [1_000_000]
    log = _log(tmp_path, now, retention_ms=10_000)
    _fill(log, 20, ts=now[0])
    old_segments = log.segment_count
    now[0] += 5_000
    _fill(log, 20, ts=now[0])
    now[0] += 6_000  # the first half is 11 s old, the second 6 s
    deleted = log.apply_retention()
    assert 0 < deleted < old_segments + 1
    assert log.log_start_offset == log.segments[0].base_offset
    first = decode_batches(log.read_bytes(log.log_start_offset, 1 << 20))
    assert first and first[0].offset == log.log_start_offset


def test_infinite_time_retention(tmp_path):
    now = [1_000_000]
    log = _log(tmp_path, now, retention_ms=-1)
    _fill(log, 30, ts=0)
    now[0] += 10**12
    assert log.apply_retention() == 0


def test_size_retention_keeps_at_most_retention_bytes_of_closed_segments(tmp_path):
    now = [1_000_000]
    log = _log(tmp_path, now, retention_ms=-1, retention_bytes=2500)
    _fill(log, 60, ts=now[0])
    log.apply_retention()
    closed = log.size_bytes - log.active_segment.size
    # a segment goes only if what remains stays >= retention.bytes (as Kafka)
    assert log.size_bytes >= 2500 and log.size_bytes - log.segments[0].size < 2500
    assert closed >= 0


def test_active_segment_is_never_deleted(tmp_path):
    now = [1_000_000]
    log = _log(tmp_path, now, segment_bytes=1 << 20, retention_ms=1, retention_bytes=0)
    _fill(log, 10, ts=0)
    now[0] += 10**9
    assert log.segment_count == 1 and log.apply_retention() == 0
    assert log.log_end_offset == 20 and log.log_start_offset == 0


def test_compact_policy_does_not_delete(tmp_path):
    now = [1_000_000]
    log = _log(tmp_path, now, retention_ms=1, cleanup_policy="compact")
    _fill(log, 30, ts=0)
    now[0] += 10**9
    assert log.apply_retention() == 0


def test_retention_persists_log_start_offset(tmp_path):
    now = [1_000_000]
    log = _log(tmp_path, now, retention_bytes=0, retention_ms=-1)
    _fill(log, 30, ts=now[0])
    assert log.apply_retention() > 0
    start = log.log_start_offset
    names = sorted(f for f in os.listdir(log.path) if f.endswith(".log"))
    assert len(names) == log.segment_count
    del log  # crash: the checkpoint written by apply_retention must hold
    log = _log(tmp_path, now)
    assert log.log_start_offset == start


def test_slice_survives_retention(tmp_path):
    now = [1_000_000]
    log = _log(tmp_path, now, retention_bytes=0, retention_ms=-1)
    _fill(log, 30, ts=now[0])
    sl = log.read(0, 1 << 20)
    expect = sl.read_bytes()
    assert log.apply_retention() > 0
    assert not os.path.exists(os.path.join(log.path, "00000000000000000000.log"))
    assert os.pread(sl.fileno, sl.length, sl.position) == expect


def test_delete_records_before(tmp_path):
    now = [1_000_000]
    log = _log(tmp_path, now, retention_ms=-1)
    _fill(log, 30, ts=now[0])
    log.delete_records_before(25)
    assert log.log_start_offset == 25
    recs = decode_batches(log.read_bytes(25, 1 << 20), start_offset=25)
    assert recs[0].offset == 25
    log.close()
    log = _log(tmp_path, now)
    assert log.log_start_offset == 25


def test_delete_records_before_never_moves_back_and_stops_at_the_hw(tmp_path):
    now = [1_000_000]
    log = _log(tmp_path, now, retention_ms=-1)
    _fill(log, 10, ts=now[0])
    assert log.delete_records_before(7) == 7
    assert log.delete_records_before(3) == 7 == log.log_start_offset
    log.append(encode_batch([b"y"], timestamp=now[0]))  # past the high watermark
    assert log.delete_records_before(log.log_end_offset) == log.high_watermark
    log.close()


def test_wall_clock_jumps_and_retention_as_kafka(tmp_path):
    """Retention runs on the broker's wall clock against each segment's largest
    timestamp, as Kafka's does: a forward jump shorter than retention.ms deletes no
    fresh segment (the clock nemesis relies on this), a backward jump deletes nothing,
    and a forward jump past retention.ms deletes every closed segment -- what Kafka does
    too. LogAppendTime stamps come from the same (jumped) clock."""
    minute = 60_000
    now = [1_000_000_000]
    log = _log(tmp_path, now, retention_ms=30 * minute, message_timestamp_type="LogAppendTime")
    _fill(log, 20, ts=0)  # the client's stamps are replaced by the clock's
    assert log.segment_count > 2
    assert {b.timestamp for b in decode_batches(log.read_bytes(0, 1 << 20))} == {now[0]}
    now[0] += 29 * minute  # forward, less than retention.ms
    assert log.apply_retention() == 0
    now[0] -= 2 * 29 * minute  # backward: the segments are from the "future"
    assert log.apply_retention() == 0
    _fill(log, 5, ts=0)  # stamped 29 min before the first batches
    assert log.lookup_timestamp(now[0])[0] == 0  # the first record at or after it
    now[0] += 29 * minute + 31 * minute  # 31 min past the first stamps
    kept = log.segments[-1].base_offset
    assert log.apply_retention() > 0  # forward past retention.ms: closed segments go
    assert log.log_start_offset == kept  # only the active segment stays


def test_flush_ms_is_not_held_off_by_a_backward_clock_jump(tmp_path):
    now = [1_000_000_000]
    log = _log(tmp_path, now, flush_ms=1000)
    log.append(encode_batch([b"a"], timestamp=now[0]))
    assert not log.maybe_flush()  # 0 ms since the log opened
    now[0] += 1000
    assert log.maybe_flush() and not log.needs_flush
    log.append(encode_batch([b"b"], timestamp=now[0]))
    now[0] -= 10 * 60_000  # the wall clock jumps 10 minutes back
    assert log.maybe_flush()  # due at once, not in 10 minutes
    log.append(encode_batch([b"c"], timestamp=now[0]))
    now[0] += 500
    assert not log.maybe_flush()  # counted again from the flush, on the new clock
    now[0] += 500
    assert log.maybe_flush()


def test_max_timestamp_spans_segments_and_finds_its_first_record(tmp_path):
    """ListOffsets' MAX_TIMESTAMP (-3): the largest timestamp of any segment, and
    lookup_timestamp of it is the first record that has it."""
    log = _log(tmp_path, [0])
    assert log.max_timestamp() == -1  # empty
    for ts in (500, 900, 300, 900, 100):
        _fill(log, 3, ts=ts)
    assert log.segment_count > 2
    assert log.max_timestamp() == 900
    assert log.lookup_timestamp(900)[0] == 6  # (3 batches of 2 records at 500 before)
