"""Log compaction (``cleanup.policy=compact``): keep the last record per key.

Two passes over the closed, committed segments: build key -> last offset, then
rewrite each segment keeping only records that are the latest for their key.
Survivors keep their original offsets (batches are re-encoded with explicit
offset deltas); keyless records are kept; a tombstone (value None) is dropped once
its timestamp is older than ``delete.retention.ms``. Segments younger than
``min.compaction.lag.ms`` are left alone.

The heavy work reads and writes side files without the log's lock; only the swap
(rename the ``.cleaned`` file over the segment, rebuild its index) holds it, so
appends -- which touch only the active segment -- are never blocked for long.
"""

from __future__ import annotations

import os

from raftlog import records
from raftlog.checkpoint import write_all
from raftlog.segment import CLEANED_SUFFIX, LogSegment, SegmentFile

#: Bytes of output batches buffered before a write to the cleaned file.
WRITE_CHUNK_BYTES = 4 * 1024 * 1024


def _batches(seg: LogSegment):
    """(header, raw bytes, records) of every batch of a closed segment."""
    for pos, h in list(seg.iter_headers()):
        data = os.pread(seg.file.fd, h.size, pos)
        records.verify_crc(data, 0, h)
        yield h, data, records.decode_records(data, 0, h)


def _cleanable(log, now_ms: int) -> list[LogSegment]:
    with log._lock:
        closed = list(log.segments[:-1])
        hw = log.high_watermark
    lag = log.config.min_compaction_lag_ms
    return [s for s in closed if s.next_offset <= hw and (lag == 0 or s.max_timestamp <= now_ms - lag)]


def compact_log(log, now_ms: int) -> dict:
    """Compact ``log`` once. Returns {"segments": rewritten, "records_removed": n}."""
    stats = {"segments": 0, "records_removed": 0}
    if not log.config.compact:
        return stats
    segs = _cleanable(log, now_ms)
    if not segs:
        return stats
    latest: dict[bytes, int] = {}
    for seg in segs:
        for _h, _data, recs in _batches(seg):
            for r in recs:
                if r.key is not None:
                    latest[r.key] = r.offset
    horizon = now_ms - log.config.delete_retention_ms
    for seg in segs:
        removed = _rewrite(seg, latest, horizon)
        if removed is None:
            continue
        with log._lock:
            if seg not in log.segments:  # retention or truncation got there first
                os.unlink(seg.path + CLEANED_SUFFIX)
                continue
            _swap(seg)
        stats["segments"] += 1
        stats["records_removed"] += removed
    return stats


def _keep(r, latest: dict, horizon: int) -> bool:
    if r.key is None:
        return True
    if latest.get(r.key) != r.offset:
        return False
    return r.value is not None or r.timestamp > horizon


def _rewrite(seg: LogSegment, latest: dict, horizon: int) -> int | None:
    """Write ``<segment>.log.cleaned``; None if nothing would change."""
    out: list[bytes] = []
    removed = 0
    for h, data, recs in _batches(seg):
        keep = [r for r in recs if _keep(r, latest, horizon)]
        removed += len(recs) - len(keep)
        if len(keep) == len(recs):
            out.append(data)
        elif keep:
            out.append(_reencode(h, keep))
    if not removed:
        return None
    tmp = seg.path + CLEANED_SUFFIX
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        for chunk in out:
            write_all(fd, chunk)
        os.fsync(fd)
    finally:
        os.close(fd)
    return removed


def _reencode(h: records.BatchHeader, keep: list) -> bytes:
    base = keep[0].offset
    return records.encode_batch(
        [r.value for r in keep],
        [r.key for r in keep],
        timestamps=[r.timestamp for r in keep],
        headers=[list(r.headers) for r in keep] if any(r.headers for r in keep) else None,
        base_offset=base,
        leader_epoch=h.leader_epoch,
        offset_deltas=[r.offset - base for r in keep],
        producer_id=h.producer_id,
        producer_epoch=h.producer_epoch,
        timestamp_type=h.timestamp_type,
    )


def _swap(seg: LogSegment) -> None:
    os.replace(seg.path + CLEANED_SUFFIX, seg.path)
    old = seg.file
    seg.file = SegmentFile(seg.path)
    seg.size = os.fstat(seg.file.fd).st_size
    next_offset = seg.next_offset
    seg.recover()
    seg.next_offset = max(seg.next_offset, next_offset if seg.size else seg.base_offset)
    seg.flush()
    del old  # closes when the last FileSlice using it is gone
