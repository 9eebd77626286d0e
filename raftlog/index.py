"""Sparse offset and time indexes of one segment.

Kept in memory as arrays and written to disk on roll and close (a log's flush writes
those of its closed segments; the active segment's stay in memory). They are
disposable: loading validates them against the segment and a bad one is rebuilt
from the log (segment.py), never trusted.

File formats (little-endian, fixed-width entries, no header):

* ``.index``     entries of ``u32 relative_offset | u32 position``; both strictly increasing.
* ``.timeindex`` entries of ``i64 max_timestamp | u32 position``; both strictly increasing.

``relative_offset`` is the base offset of an indexed batch minus the segment's
base offset; ``position`` is the batch's byte position in the ``.log`` file. An
offset-index entry is added every ``index.interval.bytes`` of batches (and for the
first batch). At the same moments a time-index entry records the largest timestamp
so far and the position of the batch holding it (as Kafka's), if it grew; a final
one is added when the segment stops being active. So every batch before a
time-index entry's position has a max timestamp <= its key.

In memory the indexes are two ``array`` columns (bisect on the keys); files are
written whole on roll and close (no mmap: a 1 GiB segment at 4 KiB interval
has 262,144 entries, 2 MiB).
"""

from __future__ import annotations

import sys
from array import array
from bisect import bisect_right

_BIG = sys.byteorder == "big"


def _pack(a: array, b: array) -> bytes:
    """Interleave two equal-length arrays into fixed-width little-endian entries."""
    a2, b2 = array(a.typecode, a), array(b.typecode, b)
    if _BIG:
        a2.byteswap()
        b2.byteswap()
    wa, wb = a2.itemsize, b2.itemsize
    out = bytearray((wa + wb) * len(a2))
    step = wa + wb
    ab, bb = a2.tobytes(), b2.tobytes()
    for i in range(wa):
        out[i::step] = ab[i::wa]
    for i in range(wb):
        out[wa + i :: step] = bb[i::wb]
    return bytes(out)


def _unpack(data: bytes, ta: str, tb: str) -> tuple[array, array] | None:
    a, b = array(ta), array(tb)
    wa, wb = a.itemsize, b.itemsize
    step = wa + wb
    if len(data) % step:
        return None
    n = len(data) // step
    ab, bb = bytearray(wa * n), bytearray(wb * n)
    for i in range(wa):
        ab[i::wa] = data[i::step]
    for i in range(wb):
        bb[i::wb] = data[wa + i :: step]
    a.frombytes(bytes(ab))
    b.frombytes(bytes(bb))
    if _BIG:
        a.byteswap()
        b.byteswap()
    return a, b


def _increasing(a: array) -> bool:
    return all(x < y for x, y in zip(a, a[1:]))


class SparseIndex:
    """Sorted (key, position) pairs; ``floor(key)`` gives the position to scan from."""

    KEY_TYPE = "I"

    def __init__(self) -> None:
        self.keys = array(self.KEY_TYPE)
        self.positions = array("I")

    def __len__(self) -> int:
        return len(self.keys)

    def append(self, key: int, position: int) -> None:
        assert not self.keys or (key > self.keys[-1] and position > self.positions[-1]), (
            key,
            position,
        )
        self.keys.append(key)
        self.positions.append(position)

    def floor(self, key: int) -> tuple[int, int] | None:
        """The last entry whose key is <= ``key``, or None."""
        i = bisect_right(self.keys, key)
        if i == 0:
            return None
        return self.keys[i - 1], self.positions[i - 1]

    def below(self, key: int) -> tuple[int, int] | None:
        """The last entry whose key is < ``key``, or None."""
        i = bisect_right(self.keys, key - 1)
        if i == 0:
            return None
        return self.keys[i - 1], self.positions[i - 1]

    def truncate_to_position(self, position: int) -> None:
        """Drop entries at or after ``position``."""
        i = bisect_right(self.positions, position - 1)
        del self.keys[i:]
        del self.positions[i:]

    def encode(self) -> bytes:
        return _pack(self.keys, self.positions)

    @classmethod
    def decode(cls, data: bytes, log_size: int):
        """Load and validate; None when the bytes cannot be this segment's index."""
        arrays = _unpack(data, cls.KEY_TYPE, "I")
        if arrays is None:
            return None
        idx = cls()
        idx.keys, idx.positions = arrays
        if not (_increasing(idx.keys) and _increasing(idx.positions)):
            return None
        if idx.positions and idx.positions[-1] >= log_size:
            return None
        return idx


class OffsetIndex(SparseIndex):
    KEY_TYPE = "I"


class TimeIndex(SparseIndex):
    KEY_TYPE = "q"

    @property
    def max_timestamp(self) -> int:
        return self.keys[-1] if self.keys else -1
