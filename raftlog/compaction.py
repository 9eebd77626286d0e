"""Log compaction (``cleanup.policy=compact``): keep the last record per key.

Two passes over the closed, committed segments (wholly below the high watermark and
older than ``min.compaction.lag.ms``): build an offset map key -> last offset, then
rewrite each segment keeping only records that are the latest for their key.
Survivors keep their original offsets (batches are re-encoded with explicit offset
deltas); keyless records are kept; a tombstone (value None) is dropped once its
timestamp is older than ``delete.retention.ms``. A batch with no survivor is
dropped whole, which leaves a gap in the offsets (readers and followers skip it).
Control batches (transaction markers) are kept as they are and take no part in the
offset map; a transactional batch stays transactional.

The offset map is bounded (``MAX_MAP_KEYS`` plus one segment's keys, as Kafka's
dedupe buffer): once it is full, only the segments mapped so far are cleaned this
round; the next round goes further.

Thread-safety: :func:`compact_log` may run in a worker thread while the event loop
appends and reads. It snapshots each segment (file object, size, generation) under
the log's lock, reads and writes side files (``<segment>.log.cleaned``) without the
lock, scans and indexes the rewrite without the lock, and takes the lock only to
swap it in (unlink old indexes, rename, directory fsync). If the segment changed
meanwhile (truncated, deleted by retention, became active) the rewrite is discarded.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from raftlog import records
from raftlog.checkpoint import write_all
from raftlog.errors import StorageError
from raftlog.segment import CLEANED_SUFFIX, LogSegment, SegmentFile, iter_file_headers

#: Bytes of output batches buffered before a write to the cleaned file.
WRITE_CHUNK_BYTES = 4 * 1024 * 1024
#: Most distinct keys held in the offset map in one round.
MAX_MAP_KEYS = 1_000_000


@dataclass(frozen=True)
class _Snapshot:
    """A closed segment as compaction saw it; the file object keeps its fd open."""

    segment: LogSegment
    file: SegmentFile
    size: int
    generation: int


def _batches(snap: _Snapshot):
    """(position, header, raw bytes, records) of every batch of a snapshotted segment."""
    seg = snap.segment
    for pos, h in iter_file_headers(snap.file.fd, seg.path, 0, snap.size):
        data = os.pread(snap.file.fd, h.size, pos)
        records.verify_crc(data, 0, h)
        yield pos, h, data, records.decode_records(data, 0, h)


def _cleanable(log, now_ms: int) -> list[_Snapshot]:
    lag = log.config.min_compaction_lag_ms
    with log._lock:
        hw = log.high_watermark
        return [
            _Snapshot(s, s.file, s.size, s.generation)
            for s in log.segments[:-1]
            if s.size and s.next_offset <= hw and (lag == 0 or s.max_timestamp <= now_ms - lag)
        ]


def _offset_map(snaps: list[_Snapshot]) -> tuple[dict, list[_Snapshot]]:
    """key -> last offset over a prefix of ``snaps``: segments are added until the map
    holds MAX_MAP_KEYS keys (every key in it is a real later record, so cleaning the
    mapped segments with it is correct)."""
    latest: dict[bytes, int] = {}
    for i, snap in enumerate(snaps):
        for _pos, h, _data, recs in _batches(snap):
            if h.attributes & records.ATTR_CONTROL:
                continue  # (a marker's key is no record key)
            latest.update((r.key, r.offset) for r in recs if r.key is not None)
        if len(latest) >= MAX_MAP_KEYS:
            return latest, snaps[: i + 1]
    return latest, snaps


def compact_log(log, now_ms: int) -> dict:
    """Compact ``log`` once. Returns {"segments": rewritten, "records_removed": n}.

    Durable when it returns: every swapped segment (rewrite fsynced, directory fsynced).

    Raises:
        StorageError: a side file could not be written (the log is unchanged).
        CorruptRecordError: a closed segment failed its CRC (nothing is rewritten from it).
    """
    stats = {"segments": 0, "records_removed": 0}
    if not log.config.compact:
        return stats
    snaps = _cleanable(log, now_ms)
    if not snaps:
        return stats
    latest, snaps = _offset_map(snaps)
    horizon = now_ms - log.config.delete_retention_ms
    for snap in snaps:
        rewritten = _rewrite(snap, latest, horizon)
        if rewritten is None:
            continue
        cleaned, removed = rewritten
        with log._lock:
            if _unchanged(log, snap):
                snap.segment.adopt(cleaned)
                removed_now = removed
            else:  # retention, truncation or a roll back got there first
                removed_now = None
        if removed_now is None:
            _discard(cleaned)
            continue
        stats["segments"] += 1
        stats["records_removed"] += removed_now
    return stats


def _unchanged(log, snap: _Snapshot) -> bool:
    seg = snap.segment
    return (
        seg is not log.segments[-1]
        and seg in log.segments
        and seg.generation == snap.generation
        and seg.size == snap.size
        and seg.file is snap.file
    )


def _discard(cleaned: LogSegment) -> None:
    cleaned.close()
    try:
        os.unlink(cleaned.path)
    except FileNotFoundError:
        pass


def _keep(r, latest: dict, horizon: int) -> bool:
    if r.key is None:
        return True
    if latest.get(r.key, r.offset) != r.offset:
        return False
    return r.value is not None or r.timestamp > horizon


def _rewrite(snap: _Snapshot, latest: dict, horizon: int) -> tuple[LogSegment, int] | None:
    """Write and index ``<segment>.log.cleaned``; None if nothing would change.

    Returns the cleaned file opened as a segment (scanned, CRC-checked, indexed) and
    the number of records removed.
    """
    seg = snap.segment
    tmp = seg.path + CLEANED_SUFFIX
    removed, pending, pending_bytes, fd = 0, [], 0, -1
    try:
        for pos, h, data, recs in _batches(snap):
            # A transaction marker is kept whole: its key is the control type, shared by
            # every marker. (Removing markers once the data they close is gone, aborted
            # data, and cleaning only below the last stable offset come with the wiring
            # of transactions, #33.)
            keep = recs if h.attributes & records.ATTR_CONTROL else [
                r for r in recs if _keep(r, latest, horizon)]
            if fd < 0:
                if len(keep) == len(recs):
                    continue  # nothing changed so far: no file yet
                fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
                _copy_range(snap.file.fd, fd, pos)  # the unchanged prefix
            removed += len(recs) - len(keep)
            if keep:
                chunk = data if len(keep) == len(recs) else _reencode(h, keep)
                pending.append(chunk)
                pending_bytes += len(chunk)
            if pending_bytes >= WRITE_CHUNK_BYTES:
                _write_chunks(fd, pending)
                pending, pending_bytes = [], 0
        if fd < 0:
            return None
        _write_chunks(fd, pending)
        os.fsync(fd)
    except OSError as e:
        _unlink_quietly(tmp)
        raise StorageError(f"compaction of {seg.path} failed: {e}") from e
    finally:
        if fd >= 0:
            os.close(fd)
    cleaned = LogSegment(seg.directory, seg.base_offset, seg.index_interval_bytes, path=tmp)
    truncated = cleaned.recover()
    if truncated:  # our own fsynced output does not scan back: a bug or a failing disk
        _discard(cleaned)
        raise StorageError(f"{tmp}: the compacted rewrite failed its scan ({truncated} bytes)")
    cleaned.seal()
    return cleaned, removed


def _copy_range(src: int, dst: int, end: int) -> None:
    """Copy bytes [0, end) of ``src`` to ``dst`` in bounded chunks."""
    pos = 0
    while pos < end:
        data = os.pread(src, min(WRITE_CHUNK_BYTES, end - pos), pos)
        if not data:
            raise OSError(f"source ended at {pos} of {end}")
        write_all(dst, data)
        pos += len(data)


def _write_chunks(fd: int, chunks: list) -> None:
    for chunk in chunks:
        write_all(fd, chunk)


def _unlink_quietly(path: str) -> None:
    try:
        os.unlink(path)
    except OSError:
        pass


def _reencode(h: records.BatchHeader, keep: list) -> bytes:
    base = keep[0].offset
    skipped = base - h.base_offset
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
        # sequence numbers follow offsets within a batch: keep them mapped to the survivors
        base_sequence=(h.base_sequence + skipped) % 2**31 if h.base_sequence >= 0 else -1,
        timestamp_type=h.timestamp_type,
        transactional=h.is_transactional,
    )
