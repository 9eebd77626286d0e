"""Sparse offset and time indexes: lookups, truncation, encoding and validation."""

from __future__ import annotations

import pytest

from raftlog.index import OffsetIndex, TimeIndex


def _index(pairs, cls=OffsetIndex):
    idx = cls()
    for k, p in pairs:
        idx.append(k, p)
    return idx


def test_floor_and_below():
    idx = _index([(0, 0), (10, 4096), (25, 8192)])
    assert idx.floor(0) == (0, 0)
    assert idx.floor(9) == (0, 0)
    assert idx.floor(10) == (10, 4096)
    assert idx.floor(1000) == (25, 8192)
    assert idx.below(10) == (0, 0)
    assert idx.below(0) is None
    assert OffsetIndex().floor(5) is None


def test_append_must_increase():
    idx = _index([(5, 100)])
    with pytest.raises(AssertionError):
        idx.append(5, 200)
    with pytest.raises(AssertionError):
        idx.append(6, 100)


def test_truncate_to_position():
    idx = _index([(0, 0), (10, 100), (20, 200)])
    idx.truncate_to_position(150)
    assert list(idx.keys) == [0, 10]
    idx.truncate_to_position(100)
    assert list(idx.keys) == [0]
    idx.truncate_to_position(0)
    assert len(idx) == 0


def test_encoding_is_fixed_width_little_endian():
    idx = _index([(1, 2), (3, 4)])
    assert idx.encode() == bytes([1, 0, 0, 0, 2, 0, 0, 0, 3, 0, 0, 0, 4, 0, 0, 0])
    t = _index([(-5, 0), (2**40, 7)], TimeIndex)
    data = t.encode()
    assert len(data) == 2 * 12
    back = TimeIndex.decode(data, 100)
    assert list(back.keys) == [-5, 2**40] and list(back.positions) == [0, 7]
    assert back.max_timestamp == 2**40


@pytest.mark.parametrize(
    "data,log_size",
    [
        (b"\x00" * 7, 100),  # not whole entries
        (_index([(0, 0), (5, 50)]).encode()[8:] + _index([(0, 0)]).encode(), 100),  # decreasing
        (_index([(0, 0), (5, 500)]).encode(), 100),  # position past the log
        (b"\xff" * 16, 1 << 40),  # equal keys
    ],
)
def test_invalid_index_is_refused(data, log_size):
    assert OffsetIndex.decode(data, log_size) is None


def test_empty_index_round_trips():
    assert len(OffsetIndex.decode(b"", 0)) == 0
    assert TimeIndex().max_timestamp == -1
