"""LogSegment: append, index, positions, slices, recovery, truncation, file lifetime."""

from __future__ import annotations

import gc
import os

import pytest

from raftlog import records
from raftlog.errors import CorruptRecordError
from raftlog.records import encode_batch, iter_batches
from raftlog.segment import (
    FileSlice,
    LogSegment,
    parse_segment_name,
    segment_name,
)


def _append(seg: LogSegment, values, ts=None) -> records.BatchHeader:
    data = bytearray(encode_batch(values, timestamp=ts))
    records.stamp(data, 0, seg.next_offset, 0)
    h = records.read_header(data)
    seg.append(bytes(data), [(0, h)])
    return h


def _fill(tmp_path, n=50, interval=100, ts_of=lambda i: 1000 + i):
    seg = LogSegment(str(tmp_path), 100, interval)
    for i in range(n):
        _append(seg, [b"x" * 30] * (1 + i % 3), ts=ts_of(i))
    return seg


def test_names_are_defined_in_one_place():
    assert segment_name(42) == "00000000000000000042.log"
    assert segment_name(42, ".index") == "00000000000000000042.index"
    assert parse_segment_name("00000000000000000042.log") == 42
    assert parse_segment_name("00000000000000000042.index") is None
    assert parse_segment_name("42.log") is None
    assert parse_segment_name("0000000000000000004x.log") is None


def test_append_indexes_sparsely_and_positions_resolve(tmp_path):
    seg = _fill(tmp_path)
    assert seg.next_offset == 100 + sum(1 + i % 3 for i in range(50))
    assert 1 < len(seg.index) < 50  # sparse: about one entry per 100 bytes of batches
    for offset in range(100, seg.next_offset):
        pos, h = seg.position_of(offset)
        assert h.base_offset <= offset <= h.last_offset
        assert records.read_header(os.pread(seg.file.fd, 61, pos)) == h
    assert seg.position_of(seg.next_offset) is None


def test_slice_whole_batches_and_limits(tmp_path):
    seg = _fill(tmp_path)
    sl = seg.slice(102, 1, None)  # at least one whole batch: the one holding 101..102
    assert sl.first_offset == 101 and sl.length == records.read_header(sl.read_bytes()).size
    sl = seg.slice(100, 10_000, None)
    batches = list(iter_batches(sl.read_bytes()))
    assert batches and sum(h.size for _, h in batches) == sl.length <= 10_000
    assert sl.next_offset == batches[-1][1].next_offset
    sl = seg.slice(100, 1 << 20, 110)
    assert all(h.base_offset < 110 for _, h in iter_batches(sl.read_bytes()))
    assert seg.slice(seg.next_offset, 100, None).length == 0


def test_recover_rebuilds_identical_indexes(tmp_path):
    seg = _fill(tmp_path)
    index, tindex, nxt = seg.index.encode(), seg.time_index.encode(), seg.next_offset
    again = LogSegment(str(tmp_path), 100, 100)
    assert again.recover() == 0
    assert (again.index.encode(), again.time_index.encode(), again.next_offset) == (
        index,
        tindex,
        nxt,
    )


def test_recover_cuts_a_torn_tail_and_reports_bytes(tmp_path):
    seg = _fill(tmp_path, n=10)
    size = seg.size
    torn = encode_batch([b"torn"] * 3)[:-5]
    with open(seg.path, "ab") as f:
        f.write(torn)
    again = LogSegment(str(tmp_path), 100, 100)
    assert again.recover() == len(torn)
    assert again.size == size and again.next_offset == seg.next_offset
    assert os.path.getsize(seg.path) == size


def test_recover_stops_at_a_corrupt_batch(tmp_path):
    seg = _fill(tmp_path, n=10)
    pos, h = seg.position_of(110)
    with open(seg.path, "r+b") as f:
        f.seek(pos + h.size - 1)
        f.write(b"\xee")
    again = LogSegment(str(tmp_path), 100, 100)
    assert again.recover() == seg.size - pos
    assert again.next_offset == h.base_offset


def test_load_indexes_validates_and_refuses_stale_ones(tmp_path):
    seg = _fill(tmp_path)
    seg.seal()
    seg.write_indexes()
    ok = LogSegment(str(tmp_path), 100, 100)
    assert ok.load_indexes() and ok.next_offset == seg.next_offset
    assert ok.max_timestamp == seg.max_timestamp
    # an index whose entries point between batches (e.g. left by a crash mid-compaction)
    shifted = bytearray(seg.index.encode())
    for i in range(12, len(shifted), 8):  # positions of entries 2.. move by one byte
        shifted[i] = (shifted[i] + 1) % 256
    with open(seg.index_path, "wb") as f:
        f.write(bytes(shifted))
    assert not LogSegment(str(tmp_path), 100, 100).load_indexes()
    os.unlink(seg.index_path)
    assert not LogSegment(str(tmp_path), 100, 100).load_indexes()


def test_time_index_tracks_the_max_timestamp_so_far(tmp_path):
    # out-of-order timestamps: a large one between index entries must not be skipped
    stamps = [100, 900, 200, 300, 400, 500, 600, 700]
    seg = _fill(tmp_path, n=len(stamps), interval=150, ts_of=lambda i: stamps[i])
    assert list(seg.time_index.keys) == sorted(set(seg.time_index.keys))
    assert seg.time_index.max_timestamp == 900
    for key, pos in zip(seg.time_index.keys, seg.time_index.positions):
        assert records.read_header(os.pread(seg.file.fd, 61, pos)).max_timestamp == key


def test_truncate_to_position(tmp_path):
    seg = _fill(tmp_path, ts_of=lambda i: 1000 + i)
    pos, h = seg.position_of(130)
    seg.truncate_to_position(pos, h.base_offset)
    assert seg.size == pos and seg.next_offset == h.base_offset
    assert seg.position_of(h.base_offset) is None
    assert all(p < pos for p in seg.index.positions)
    assert seg.max_timestamp < 1000 + 50
    nxt = _append(seg, [b"after"], ts=5)
    assert nxt.base_offset == h.base_offset
    assert seg.slice(h.base_offset, 100, None).read_bytes()[-5:] == b"after"


def test_slice_outlives_delete_and_close(tmp_path):
    seg = _fill(tmp_path, n=5)
    sl = seg.slice(100, 1 << 20, None)
    expect = sl.read_bytes()
    fd = sl.fileno
    ident = (os.fstat(fd).st_dev, os.fstat(fd).st_ino)
    seg.delete()
    gc.collect()
    assert not os.path.exists(seg.path)
    assert os.pread(fd, sl.length, sl.position) == expect  # the fd is still ours
    assert sl.read_bytes() == expect
    del sl
    gc.collect()
    # Closed once the last slice went. Other threads of the test process (clients left
    # by earlier tests) may open a file meanwhile and get the same fd number back, so
    # "closed" means: no longer open, or open on another file.
    try:
        st = os.fstat(fd)
    except OSError:
        return
    assert (st.st_dev, st.st_ino) != ident, "the segment's fd outlived its last slice"


def test_unserved_corruption_below_the_verified_position(tmp_path):
    seg = _fill(tmp_path, n=10)
    seg.seal()
    seg.write_indexes()
    pos, h = seg.position_of(105)
    with open(seg.path, "r+b") as f:
        f.seek(pos + 70)
        f.write(b"\x00\x01")
    fresh = LogSegment(str(tmp_path), 100, 100)
    assert fresh.load_indexes()  # headers are intact: the index looks fine
    with pytest.raises(CorruptRecordError, match="not served"):
        fresh.slice(105, 1 << 20, None)
    assert fresh.slice(100, 1, None).length  # batches before it are still served


def test_empty_slice_reads_nothing():
    assert FileSlice(None, 0, 0, 5, 5).read_bytes() == b""
    assert FileSlice(None, 0, 0, 5, 5).fileno == -1


def test_a_tail_read_is_served_from_the_latest_append_and_matches_the_file(tmp_path):
    seg = _fill(tmp_path, n=5)
    h = _append(seg, [b"tail-record"])
    sl = seg.slice(h.base_offset, 1 << 20, None)
    assert sl.cached is not None, "the latest append is read from memory"
    assert sl.read_bytes() == os.pread(sl.fileno, sl.length, sl.position)
    older = seg.slice(100, 1 << 20, h.base_offset)  # earlier batches: from the file
    assert older.cached is None and older.length > 0
    seg.truncate_to_position(sl.position, h.base_offset)
    assert seg.tail is None
    h2 = _append(seg, [b"replacement"])
    again = seg.slice(h2.base_offset, 1 << 20, None)
    assert b"replacement" in again.read_bytes()
    assert again.read_bytes() == os.pread(again.fileno, again.length, again.position)
