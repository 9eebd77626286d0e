"""PartitionLog: append, read, roll, truncate, epochs, checkpoints, retention, compaction."""

from __future__ import annotations

import os

import pytest

from raftlog.checkpoint import PartitionCheckpoint
from raftlog.config import LogConfig
from raftlog.errors import ConfigError, CorruptRecordError, OffsetOutOfRangeError
from raftlog.log import CHECKPOINT_FILE, PartitionLog
from raftlog.records import decode_batches, encode_batch


def _all(log: PartitionLog, start: int = 0, max_offset=None):
    out, off = [], start
    while off < log.log_end_offset:
        sl = log.read(off, 1 << 20, max_offset)
        if not sl.length:
            break
        out += decode_batches(sl.read_bytes(), start_offset=off)
        off = sl.next_offset
    return out


def test_append_assigns_contiguous_offsets_and_reads_back(tmp_path):
    log = PartitionLog.open(str(tmp_path / "p"))
    assert log.append(encode_batch([b"a", b"b"])) == (0, 1)
    assert log.append(encode_batch([b"c"]) + encode_batch([b"d", b"e"])) == (2, 4)
    assert [r.value for r in _all(log)] == [b"a", b"b", b"c", b"d", b"e"]
    assert [r.offset for r in log.read_records(3, 1 << 20)] == [3, 4]
    assert log.log_end_offset == 5 and log.log_start_offset == 0


def test_corrupt_append_leaves_log_unchanged(tmp_path):
    log = PartitionLog.open(str(tmp_path / "p"))
    log.append(encode_batch([b"a"]))
    bad = bytearray(encode_batch([b"b"]))
    bad[-1] ^= 1
    with pytest.raises(CorruptRecordError):
        log.append(encode_batch([b"ok"]) + bytes(bad))
    with pytest.raises(CorruptRecordError):
        log.append(b"")
    assert log.log_end_offset == 1 and [r.value for r in _all(log)] == [b"a"]


def test_read_bounds(tmp_path):
    log = PartitionLog.open(str(tmp_path / "p"))
    log.append(encode_batch([b"a"] * 10))
    log.append(encode_batch([b"b"] * 10))
    assert log.read(20, 100).length == 0
    with pytest.raises(OffsetOutOfRangeError):
        log.read(21, 100)
    with pytest.raises(OffsetOutOfRangeError):
        log.read(-1, 100)
    # at least one whole batch even when max_bytes is tiny
    sl = log.read(5, 1)
    assert sl.first_offset == 0 and sl.next_offset == 10
    # max_offset (the HW) stops before batches that start at or after it
    assert log.read(10, 1 << 20, max_offset=10).length == 0
    assert log.read(0, 1 << 20, max_offset=10).next_offset == 10


def test_segments_roll_by_size_and_time(tmp_path):
    now = [1_000_000]
    log = PartitionLog.open(
        str(tmp_path / "p"), LogConfig(segment_bytes=2048, segment_ms=1000), clock_ms=lambda: now[0]
    )
    for _ in range(20):
        log.append(encode_batch([b"x" * 100] * 3))
    assert log.segment_count >= 4  # ~373-byte batches, 5 per 2 KiB segment
    n = log.segment_count
    now[0] += 5000
    log.append(encode_batch([b"y"]))
    assert log.segment_count == n + 1
    assert len(_all(log)) == 61
    assert sorted(os.listdir(log.path))[0] == "00000000000000000000.index"


def test_truncate_to_drops_suffix_and_epochs(tmp_path):
    log = PartitionLog.open(str(tmp_path / "p"), LogConfig(segment_bytes=1024))
    for e in range(1, 6):
        for _ in range(5):
            log.append(encode_batch([b"v" * 50] * 2), leader_epoch=e)
    assert log.epochs == [(1, 0), (2, 10), (3, 20), (4, 30), (5, 40)]
    log.maybe_increment_high_watermark(50)
    log.truncate_to(25)  # mid-batch: cut to the batch start
    assert log.log_end_offset == 24
    assert log.epochs == [(1, 0), (2, 10), (3, 20)]
    assert log.high_watermark == 24
    assert [r.offset for r in _all(log)] == list(range(24))
    assert log.append(encode_batch([b"new"]), leader_epoch=6) == (24, 24)
    log.close()
    log = PartitionLog.open(str(tmp_path / "p"))
    assert log.log_end_offset == 25 and log.epochs[-1] == (6, 24)


def test_end_offset_for_epoch(tmp_path):
    log = PartitionLog.open(str(tmp_path / "p"))
    log.append(encode_batch([b"a"] * 3), leader_epoch=1)
    log.append(encode_batch([b"b"] * 3), leader_epoch=3)
    assert log.end_offset_for_epoch(0) == (-1, -1)
    assert log.end_offset_for_epoch(1) == (1, 3)
    assert log.end_offset_for_epoch(2) == (1, 3)  # largest epoch <= 2 is 1
    assert log.end_offset_for_epoch(3) == (3, 6)
    assert log.end_offset_for_epoch(9) == (3, 6)


def test_follower_append_keeps_offsets_and_epochs(tmp_path):
    leader = PartitionLog.open(str(tmp_path / "l"))
    leader.append(encode_batch([b"a"] * 2), leader_epoch=2)
    leader.append(encode_batch([b"b"] * 2), leader_epoch=4)
    follower = PartitionLog.open(str(tmp_path / "f"))
    data = leader.read_bytes(0, 1)  # one whole batch
    assert follower.append_as_follower(data) == (0, 1)
    follower.append_as_follower(leader.read_bytes(2, 1 << 20))
    assert follower.epochs == [(2, 0), (4, 2)]
    with pytest.raises(CorruptRecordError, match="log end offset"):
        follower.append_as_follower(data)


def test_offset_for_timestamp(tmp_path):
    log = PartitionLog.open(
        str(tmp_path / "p"), LogConfig(segment_bytes=1024, index_interval_bytes=0)
    )
    for i in range(30):
        log.append(encode_batch([b"v" * 40] * 2, timestamps=[1000 + 10 * i, 1005 + 10 * i]))
    assert log.offset_for_timestamp(0) == 0
    assert log.offset_for_timestamp(1005) == 1
    assert log.offset_for_timestamp(1006) == 2
    assert log.offset_for_timestamp(1295) == 59
    assert log.offset_for_timestamp(1296) is None


def test_checkpoint_round_trip_and_corruption(tmp_path):
    log = PartitionLog.open(str(tmp_path / "p"))
    log.append(encode_batch([b"a"] * 4), leader_epoch=7)
    log.maybe_increment_high_watermark(3)
    log.flush()
    cp = PartitionCheckpoint.read(os.path.join(log.path, CHECKPOINT_FILE))
    assert (cp.recovery_point, cp.high_watermark, cp.epochs) == (4, 3, [(7, 0)])
    log.close()
    path = os.path.join(log.path, CHECKPOINT_FILE)
    data = bytearray(open(path, "rb").read())
    data[3] ^= 0xFF
    open(path, "wb").write(bytes(data))
    assert PartitionCheckpoint.read(path) is None
    log = PartitionLog.open(str(tmp_path / "p"))  # falls back to a full scan
    assert log.log_end_offset == 4 and log.high_watermark == 0


def test_flush_messages_one_fsyncs_every_append(tmp_path):
    log = PartitionLog.open(str(tmp_path / "p"), LogConfig(flush_messages=1))
    log.append(encode_batch([b"a"]))
    assert log.maybe_flush() is True
    assert log.recovery_point == 1
    log2 = PartitionLog.open(str(tmp_path / "q"))
    log2.append(encode_batch([b"a"]))
    assert log2.maybe_flush() is False and log2.recovery_point == 0


def test_retention_by_bytes_and_time(tmp_path):
    now = [10_000_000]
    cfg = LogConfig(segment_bytes=1024, retention_bytes=3000, retention_ms=-1)
    log = PartitionLog.open(str(tmp_path / "p"), cfg, clock_ms=lambda: now[0])
    for _ in range(40):
        log.append(encode_batch([b"x" * 100] * 2, timestamp=now[0]))
    log.maybe_increment_high_watermark(log.log_end_offset)
    before = log.segment_count
    assert log.apply_retention() > 0
    assert log.size_bytes - log.active_segment.size < 3000 + 1024
    assert log.segment_count < before
    assert log.log_start_offset == log.segments[0].base_offset > 0
    with pytest.raises(OffsetOutOfRangeError):
        log.read(0, 100)
    # time-based: everything closed is older than retention.ms
    log.config = LogConfig(segment_bytes=1024, retention_ms=1000)
    now[0] += 5000
    log.apply_retention()
    assert log.segment_count == 1 and log.log_start_offset == log.active_segment.base_offset
    log.close()
    log = PartitionLog.open(str(tmp_path / "p"))
    assert log.log_start_offset == log.segments[0].base_offset


def test_retention_never_deletes_uncommitted(tmp_path):
    log = PartitionLog.open(str(tmp_path / "p"), LogConfig(segment_bytes=1024, retention_bytes=0))
    for _ in range(20):
        log.append(encode_batch([b"x" * 100] * 2))
    assert log.high_watermark == 0
    assert log.apply_retention() == 0


def test_compaction_keeps_last_per_key_with_original_offsets(tmp_path):
    now = [1_000_000_000]
    cfg = LogConfig(segment_bytes=1024, cleanup_policy="compact", delete_retention_ms=1000)
    log = PartitionLog.open(str(tmp_path / "p"), cfg, clock_ms=lambda: now[0])
    expected = {}
    for i in range(60):
        key = b"k%d" % (i % 7)
        value = None if i == 50 else b"v%d" % i
        log.append(encode_batch([value], [key], timestamp=now[0]))
        expected[key] = (i, value)
    log.append(encode_batch([b"keyless"]))
    log.roll()
    log.append(encode_batch([b"active"], [b"k0"]))
    log.maybe_increment_high_watermark(log.log_end_offset)
    stats = log.compact()
    assert stats["records_removed"] > 0
    recs = _all(log)
    survivors = {r.key: (r.offset, r.value) for r in recs if r.key is not None and r.offset < 61}
    assert survivors == expected  # last per key, original offsets, tombstone still there
    assert any(r.value == b"keyless" for r in recs)
    offsets = [r.offset for r in recs]
    assert offsets == sorted(offsets)
    now[0] += 10_000  # tombstones expire
    log.compact()
    recs = _all(log)
    assert b"k1" not in {r.key for r in recs if r.value is None}
    assert all(r.value is not None for r in recs)
    log.close()
    log = PartitionLog.open(str(tmp_path / "p"))
    assert [r.offset for r in _all(log)] == [r.offset for r in recs]


def test_bad_topic_config():
    with pytest.raises(ConfigError, match="retention.ms"):
        LogConfig.from_dict({"retention.ms": "soon"})
    with pytest.raises(ConfigError, match="unknown topic config"):
        LogConfig.from_dict({"retention.msx": "1"})
    with pytest.raises(ConfigError, match="cleanup.policy"):
        LogConfig.from_dict({"cleanup.policy": "shred"})
    assert LogConfig.from_dict({"flush.messages": "1"}).flush_messages == 1


def test_compaction_in_a_thread_does_not_block_appends(tmp_path):
    import threading

    cfg = LogConfig(segment_bytes=4096, cleanup_policy="compact")
    log = PartitionLog.open(str(tmp_path / "p"), cfg)
    for i in range(400):
        log.append(encode_batch([b"v%d" % i], [b"k%d" % (i % 10)]))
    log.maybe_increment_high_watermark(log.log_end_offset)
    done = threading.Event()
    stats = {}

    def clean():
        stats.update(log.compact())
        done.set()

    t = threading.Thread(target=clean)
    t.start()
    appended = 0
    while not done.is_set() or appended < 50:
        log.append(encode_batch([b"new%d" % appended], [b"fresh"]))
        appended += 1
    t.join()
    assert stats["records_removed"] > 0
    recs = _all(log)
    offsets = [r.offset for r in recs]
    assert offsets == sorted(offsets) and len(set(offsets)) == len(offsets)
    assert [r.value for r in recs if r.key == b"fresh"] == [b"new%d" % i for i in range(appended)]
    assert log.log_end_offset == 400 + appended


def test_log_append_time_topic_overwrites_timestamps(tmp_path):
    log = PartitionLog.open(str(tmp_path / "p"), LogConfig(message_timestamp_type="LogAppendTime"))
    log.append(encode_batch([b"a", b"b"], timestamps=[1, 2]), now_ms=5000)
    assert {r.timestamp for r in log.read_records(0, 1 << 20)} == {5000}
    assert log.offset_for_timestamp(4000) == 0


def test_follower_refuses_overlap_and_accepts_compaction_gaps(tmp_path):
    log = PartitionLog.open(str(tmp_path / "p"))
    log.append_as_follower(encode_batch([b"a"] * 3, base_offset=0, leader_epoch=1))
    with pytest.raises(CorruptRecordError, match="truncate first"):
        log.append_as_follower(encode_batch([b"b"], base_offset=2, leader_epoch=1))
    assert log.append_as_follower(encode_batch([b"c"], base_offset=7, leader_epoch=2)) == (7, 7)
    assert log.log_end_offset == 8 and log.epochs == [(1, 0), (2, 7)]
    assert [r.offset for r in log.read_records(3, 1 << 20)] == [7]


def test_offset_for_timestamp_with_out_of_order_timestamps(tmp_path):
    log = PartitionLog.open(
        str(tmp_path / "p"), LogConfig(segment_bytes=1024, index_interval_bytes=200)
    )
    stamps = [100, 150, 9000, 200, 250, 300, 350, 400] * 8
    for ts in stamps:
        log.append(encode_batch([b"v" * 60], timestamp=ts))
    for target in (0, 120, 160, 5000, 9000, 9001, 260):
        want = next((i for i, ts in enumerate(stamps) if ts >= target), None)
        assert log.offset_for_timestamp(target) == want, target
    log.close()
    log = PartitionLog.open(log.path, log.config)  # loaded indexes answer the same
    assert log.offset_for_timestamp(5000) == 2 and log.offset_for_timestamp(9001) is None


def test_truncate_into_a_closed_segment_then_append(tmp_path):
    log = PartitionLog.open(str(tmp_path / "p"), LogConfig(segment_bytes=1024))
    for i in range(40):
        log.append(encode_batch([b"%d" % i] * 2))
    assert log.segment_count >= 3 and log.segments[1].base_offset > 13
    log.truncate_to(13)
    assert log.log_end_offset == 12
    log.append(encode_batch([b"new"]))
    assert [r.value for r in _all(log)][-2:] == [b"5", b"new"]
    del log  # crash
    log = PartitionLog.open(str(tmp_path / "p"), LogConfig(segment_bytes=1024))
    assert log.log_end_offset == 13


def test_slices_stay_readable_after_close_and_delete(tmp_path):
    log = PartitionLog.open(str(tmp_path / "p"))
    log.append(encode_batch([b"a"] * 5))
    sl = log.read(0, 1 << 20)
    expect = sl.read_bytes()
    log.delete()
    other = os.open(str(tmp_path / "other"), os.O_RDWR | os.O_CREAT)  # may reuse a freed fd
    try:
        assert sl.fileno != other
        assert os.pread(sl.fileno, sl.length, sl.position) == expect
    finally:
        os.close(other)


def test_lost_checkpoint_rebuilds_the_epoch_cache(tmp_path):
    log = PartitionLog.open(str(tmp_path / "p"), LogConfig(segment_bytes=1024))
    for e in (1, 1, 3, 3, 3, 7):
        for _ in range(4):
            log.append(encode_batch([b"x" * 40] * 2), leader_epoch=e)
    epochs = list(log.epochs)
    log.close()
    os.unlink(os.path.join(log.path, CHECKPOINT_FILE))
    log = PartitionLog.open(log.path, LogConfig(segment_bytes=1024))
    assert log.epochs == epochs == [(1, 0), (3, 16), (7, 40)]
    assert log.end_offset_for_epoch(5) == (3, 40)


def test_roll_defers_fsync_to_flush(tmp_path):
    log = PartitionLog.open(str(tmp_path / "p"), LogConfig(segment_bytes=1024))
    for _ in range(20):
        log.append(encode_batch([b"x" * 100] * 2))
    assert log.segment_count > 1 and log.recovery_point == 0
    assert log.needs_flush
    log.flush()
    assert log.recovery_point == log.log_end_offset and not log.needs_flush


def test_flush_in_a_thread_while_appending(tmp_path):
    import threading

    log = PartitionLog.open(str(tmp_path / "p"), LogConfig(segment_bytes=4096))
    stop = threading.Event()
    errors = []

    def flusher():
        while not stop.is_set():
            try:
                log.flush()
            except Exception as e:  # pragma: no cover - reported below
                errors.append(e)

    t = threading.Thread(target=flusher)
    t.start()
    for i in range(300):
        log.append(encode_batch([b"%d" % i] * 3))
        if i == 150:
            log.truncate_to(200)
    stop.set()
    t.join()
    assert not errors
    log.flush()
    assert log.recovery_point == log.log_end_offset
    del log
    log = PartitionLog.open(str(tmp_path / "p"), LogConfig(segment_bytes=4096))
    assert [r.offset for r in _all(log)] == list(range(log.log_end_offset))


def test_a_new_log_writes_its_checkpoint_at_its_first_flush(tmp_path):
    # creating a partition costs no fsync; what the checkpoint would hold is rebuilt
    path = str(tmp_path / "p")
    cp_path = os.path.join(path, CHECKPOINT_FILE)
    log = PartitionLog.open(path)
    log.assign_epoch(4, 0)
    assert not os.path.exists(cp_path)
    log.append(encode_batch([b"a", b"b"]), leader_epoch=4)
    # a crash now (no close): the epoch comes back from the batches
    again = PartitionLog.open(path)
    assert again.epochs == [(4, 0)] and again.log_end_offset == 2
    again.assign_epoch(5, 2)  # a later epoch of a log with records: durable at once
    assert PartitionCheckpoint.read(cp_path).epochs == [(4, 0), (5, 2)]
    again.close()
