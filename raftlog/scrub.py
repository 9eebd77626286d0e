"""The scrubber's pure core: where to read next, what the bytes read say, how long to rest.

A node re-reads its *closed* segments in the background at a bounded byte rate
(``log.scrub.bytes.per.sec``) and re-checks every batch's CRC32C, so bit rot in data
that is rarely read (a follower's log, old segments) is found before it is needed.
The I/O loop (node/scrubber.py) reads; everything it decides comes from here:

- :class:`ScrubCursor` walks every partition's closed segments in key order, one
  chunk at a time, and wraps around (a *pass*). It follows the log as it changes:
  a segment that was rewritten (truncation, compaction: its ``generation`` changed)
  is restarted from its start; one that disappeared (retention, truncation) is
  skipped; partitions come and go.
- :func:`check_batches` checks whole batches at the start of a chunk: header
  sanity, CRC, offsets increasing inside the segment (the CRC does not cover the base
  offset). It names the offset where bad data starts: the offset that should follow
  the last good batch (a corrupt batch's own header cannot be trusted).
- :func:`pace_s` is the rate bound: after reading ``n`` bytes, rest ``n / rate`` s.

No I/O and no clock here; the tests drive it with plain values.
"""

from __future__ import annotations

import bisect
from collections.abc import Callable
from dataclasses import dataclass

from raftlog import records
from raftlog.errors import CorruptRecordError
from raftlog.records import HEADER_SIZE

#: Bytes read per step at most (a batch larger than that is read whole, once).
SCRUB_CHUNK_BYTES_MAX = 256 * 1024
#: Bytes read per step at least (below that, syscalls cost more than they check).
SCRUB_CHUNK_BYTES_MIN = 4 * 1024
#: One step reads at most this many seconds' worth of the rate, so the reads are
#: spread out instead of bursting.
SCRUB_STEP_S = 0.1


@dataclass(frozen=True)
class SegmentInfo:
    """A closed segment as the cursor sees it."""

    base_offset: int
    size: int
    #: bumped whenever the segment's bytes change other than by append
    generation: int
    #: the offset after its last batch
    next_offset: int


@dataclass(frozen=True)
class ScrubTarget:
    """Where the next step reads: ``key``'s segment at ``base_offset``, from
    ``position`` (a batch start), whose first batch should start at or after
    ``expected_offset``."""

    key: tuple
    base_offset: int
    position: int
    expected_offset: int
    generation: int
    segment_size: int
    segment_next_offset: int


@dataclass(frozen=True)
class ScrubCheck:
    """What :func:`check_batches` found at the start of a chunk."""

    #: bytes of good whole batches from the chunk's start
    consumed: int
    #: the offset expected after them (where bad data starts if ``corrupt``)
    next_offset: int
    #: why the data after the good batches is bad; None if nothing bad was found
    corrupt: str | None = None
    #: > 0: the next batch is larger than the chunk: read this many bytes from
    #: ``consumed`` and check again
    need_bytes: int = 0


def chunk_bytes(rate_bytes_per_s: int) -> int:
    """Bytes one step reads at ``rate_bytes_per_s``: SCRUB_STEP_S worth, bounded."""
    assert rate_bytes_per_s > 0, rate_bytes_per_s
    return max(SCRUB_CHUNK_BYTES_MIN, min(SCRUB_CHUNK_BYTES_MAX, int(rate_bytes_per_s * SCRUB_STEP_S)))


def pace_s(bytes_read: int, rate_bytes_per_s: int) -> float:
    """Seconds to rest after reading ``bytes_read``: keeps the average at the rate."""
    assert rate_bytes_per_s > 0, rate_bytes_per_s
    return bytes_read / rate_bytes_per_s


def check_batches(data, expected_offset: int, segment_next_offset: int,
                  segment_remaining: int) -> ScrubCheck:
    """Check the whole batches at the start of ``data`` (read from a batch start).

    Args:
        data: bytes read from the segment at a batch boundary.
        expected_offset: the first batch's base offset must be at least this (the
            previous batch's next offset, or the segment's base offset).
        segment_next_offset: every batch must end below this (the segment's end).
        segment_remaining: bytes of the segment from where ``data`` starts: ``data``
            ends the segment when it is this long, and no batch may run past it.
    Returns:
        A ScrubCheck; ``corrupt`` set at the first bad batch (checking stops there).
    """
    pos, expected = 0, expected_offset
    at_end = len(data) >= segment_remaining
    while pos < len(data):
        left = len(data) - pos
        if left < HEADER_SIZE:
            if at_end:
                return ScrubCheck(pos, expected, f"{left} stray bytes after the last batch")
            break
        try:
            h = records.read_header(data, pos)
        except CorruptRecordError as e:
            return ScrubCheck(pos, expected, f"bad batch header: {e}")
        if h.size > segment_remaining - pos:
            return ScrubCheck(pos, expected,
                              f"batch of {h.size} bytes runs past the end of its segment")
        if h.size > left:  # whole only in a bigger read
            return ScrubCheck(pos, expected, None, h.size if pos == 0 else 0)
        try:
            records.verify_crc(data, pos, h)
        except CorruptRecordError as e:
            return ScrubCheck(pos, expected, str(e))
        if h.base_offset < expected or h.last_offset >= segment_next_offset:
            return ScrubCheck(pos, expected,
                              f"batch offsets {h.base_offset}..{h.last_offset} outside "
                              f"[{expected}, {segment_next_offset})")
        expected = h.next_offset
        pos += h.size
    return ScrubCheck(pos, expected)


class ScrubCursor:
    """The scrubber's place: a partition key, a closed segment, a position in it.

    Call :meth:`place` to get the next :class:`ScrubTarget` (None: no closed segment
    anywhere), read and check, then :meth:`advance` with the result. ``passes`` counts
    completed walks over every partition."""

    def __init__(self) -> None:
        self.key: tuple | None = None
        self.base_offset = -1
        self.position = 0
        self.expected_offset = 0
        self.generation = -1
        self.passes = 0

    def place(self, keys: Callable[[], list],
              segments_of: Callable[[tuple], list | None]) -> ScrubTarget | None:
        """The next place to read.

        Args:
            keys: returns the sorted keys of the partitions hosted now (called only
                when the cursor moves to another partition).
            segments_of: returns a partition's closed segments (SegmentInfo, in
                offset order), or None if the partition is gone.
        """
        if self.key is not None:
            segs = segments_of(self.key)
            if segs:
                target = self._in_partition(segs)
                if target is not None:
                    return target
        ks = keys()
        if not ks:
            self.key = None
            return None
        start = 0 if self.key is None else bisect.bisect_right(ks, self.key)
        for i in range(start, start + len(ks) + 1):
            if i == len(ks) and self.key is not None:
                self.passes += 1  # wrapped around: every partition was walked
            key = ks[i % len(ks)]
            segs = segments_of(key)
            if segs:
                self.key = key
                return self._start(segs[0])
        self.key = None
        return None

    def _in_partition(self, segs: list) -> ScrubTarget | None:
        for s in segs:
            if s.base_offset == self.base_offset:
                if s.generation != self.generation:
                    return self._start(s)  # rewritten under us: again from its start
                if self.position < s.size:
                    return self._target(s)
                break
        for s in segs:  # the next closed segment of this partition
            if s.base_offset > self.base_offset:
                return self._start(s)
        return None

    def _start(self, s: SegmentInfo) -> ScrubTarget:
        self.base_offset, self.generation = s.base_offset, s.generation
        self.position, self.expected_offset = 0, s.base_offset
        return self._target(s)

    def _target(self, s: SegmentInfo) -> ScrubTarget:
        return ScrubTarget(self.key, s.base_offset, self.position, self.expected_offset,
                           s.generation, s.size, s.next_offset)

    def advance(self, target: ScrubTarget, check: ScrubCheck) -> None:
        """Record a step's result. After corrupt data the rest of the segment is
        skipped (the repair truncates it; a later pass checks what replaced it)."""
        if (self.key, self.base_offset, self.position) != (target.key, target.base_offset,
                                                          target.position):
            return
        if check.corrupt is not None:
            self.position = target.segment_size
        else:
            self.position += check.consumed
            self.expected_offset = check.next_offset
