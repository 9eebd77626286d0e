"""The segment scrubber: re-checks the CRCs of closed segments in the background.

One task per node, at ``log.scrub.bytes.per.sec`` (0: off). Each step reads one
chunk of one closed segment (raftlog/scrub.py decides where and checks what was
read), then rests for as long as the rate asks. Reads are plain ``pread`` calls on
the event loop, bounded to SCRUB_STEP_S worth of the rate (at most 256 KiB); the
active segment is never read (it is being written, and was checked on append).

On a bad batch the scrubber

- stops the bad bytes from being served: the segment's ``verified_position`` is
  moved back to them, so every read there is CRC-checked again and refused;
- asks for a repair (``on_corrupt``, wired by the node): a follower truncates its
  log at the bad offset and fetches it again from the leader; a leader first gives
  up leadership of the partition to another in-sync replica, then does the same as
  a follower (see Node._on_scrub_corrupt);
- logs one ERROR line ``event=scrub_repair`` and counts it in :attr:`stats`.

Compaction may swap a segment's file from a worker thread while a step reads it: a
step whose segment changed generation meanwhile is discarded (the cursor starts the
rewritten segment again).
"""

from __future__ import annotations

import os

import trio

from raftlog.scrub import (
    ScrubCheck,
    ScrubCursor,
    ScrubTarget,
    SegmentInfo,
    check_batches,
    chunk_bytes,
    pace_s,
)

#: How long to wait before looking again when no partition has a closed segment (it
#: looks only at partitions with one: cheap, whatever the partition count).
IDLE_S = 2.0
#: How soon to try again when the segment under the cursor changed under it (a roll, a
#: compaction swap, a truncation): the cursor starts it again.
RETRY_S = 0.1


class Scrubber:
    """See the module docstring. ``stats`` (a dict of counters) is what metrics read:
    ``scrub_bytes``, ``scrub_passes``, ``scrub_corrupt_batches``, ``scrub_repairs``."""

    def __init__(self, replicas, events, rate_bytes_per_s: int, on_corrupt=None):
        assert rate_bytes_per_s > 0, rate_bytes_per_s
        #: the node's ReplicaManager: its ``partitions`` are what is scrubbed
        self.replicas = replicas
        self.events = events
        self.rate = rate_bytes_per_s
        self.chunk = chunk_bytes(rate_bytes_per_s)
        #: called with (partition, offset, reason); returns what it did (for the log
        #: line). None: nothing beyond refusing to serve the bad bytes.
        self.on_corrupt = on_corrupt
        self.cursor = ScrubCursor()
        self.stats = {"scrub_bytes": 0, "scrub_passes": 0, "scrub_corrupt_batches": 0,
                      "scrub_repairs": 0}

    async def run(self) -> None:
        self.events.info("scrubber_started", bytes_per_sec=self.rate)
        while True:
            n = self.step()
            if n:
                await trio.sleep(pace_s(n, self.rate))
            else:
                await trio.sleep(IDLE_S if self.cursor.key is None else RETRY_S)

    # ------------------------------------------------------------------ one step

    def step(self) -> int:
        """Read and check one chunk; returns the bytes read (0: nothing to read)."""
        t = self.cursor.place(self._keys, self._segments_of)
        self.stats["scrub_passes"] = self.cursor.passes
        if t is None:
            return 0
        part = self.replicas.partitions.get(t.key)
        seg = _closed_segment(part, t.base_offset) if part is not None else None
        if seg is None or seg.generation != t.generation:
            return 0
        f = seg.file  # (kept: a compaction swap must not close it under this read)
        if f.fd < 0:
            return 0
        want = min(self.chunk, t.segment_size - t.position)
        try:
            data = os.pread(f.fd, want, t.position)
            if len(data) == want:
                check = check_batches(data, t.expected_offset, t.segment_next_offset,
                                      t.segment_size - t.position)
                if check.need_bytes:  # one batch bigger than a chunk: read it whole
                    want = check.need_bytes
                    data = os.pread(f.fd, want, t.position)
                    if len(data) == want:
                        check = check_batches(data, t.expected_offset, t.segment_next_offset,
                                              t.segment_size - t.position)
            if len(data) < want:
                check = ScrubCheck(0, t.expected_offset,
                                   f"file ends before the segment does (read {len(data)} of "
                                   f"{want} bytes at position {t.position})")
        except OSError as e:  # an unreadable sector is as bad as a flipped bit
            data, check = b"", ScrubCheck(0, t.expected_offset, f"read failed: {e}")
        if seg.generation != t.generation:
            return len(data)  # rewritten while read: the cursor starts it again
        self.stats["scrub_bytes"] += len(data)
        self.cursor.advance(t, check)
        if check.corrupt is not None:
            self._found(part, seg, t, check)
        return max(len(data), 1)

    def _found(self, part, seg, t: ScrubTarget, check: ScrubCheck) -> None:
        position, offset = t.position + check.consumed, check.next_offset
        seg.verified_position = min(seg.verified_position, position)  # never served
        pending = part.corrupt_from
        if pending is not None and pending <= offset:
            return  # found again before the repair under way truncated it: one line
        self.stats["scrub_corrupt_batches"] += 1
        action = "refused_to_serve"
        if self.on_corrupt is not None:
            action = self.on_corrupt(part, offset, check.corrupt) or action
        self.stats["scrub_repairs"] += 1
        self.events.error("scrub_repair", partition=part, offset=offset, segment=seg.path,
                          position=position, action=action, error=check.corrupt)

    # ------------------------------------------------------------------ views for the cursor

    def _keys(self) -> list:
        """The partitions with a closed segment (the others have nothing to scrub)."""
        return sorted(k for k, p in self.replicas.partitions.items() if len(p.log.segments) > 1)

    def _segments_of(self, key) -> list | None:
        part = self.replicas.partitions.get(key)
        if part is None:
            return None
        return [SegmentInfo(s.base_offset, s.size, s.generation, s.next_offset)
                for s in part.log.segments[:-1]]


def _closed_segment(part, base_offset: int):
    for seg in part.log.segments[:-1]:
        if seg.base_offset == base_offset:
            return seg
    return None
