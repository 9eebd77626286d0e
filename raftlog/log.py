"""PartitionLog: one partition's ordered, durable sequence of record batches.

A directory of segments (segment.py) plus ``partition.checkpoint`` (checkpoint.py),
``producer.snapshot`` after a clean shutdown and, while open, no ``.clean_shutdown``
marker. Vocabulary as Kafka's: log start offset, log end offset (LEO), high watermark
(HW), leader epoch, recovery point.

Like Kafka's UnifiedLog, the log owns what follows from its contents: the high
watermark (moved forward by :meth:`maybe_increment_high_watermark`, back only by
truncation), the leader-epoch cache (:meth:`assign_epoch`, :meth:`end_offset_for_epoch`)
and the idempotent producers' state (:attr:`producers`: checked and updated by
:meth:`append_as_leader`, replayed by :meth:`append_as_follower`, snapshotted at
:meth:`close`, rebuilt from batch headers after a truncation). Each appended batch is
parsed and CRC-checked once, and copied at most once (the leader stamps its offsets
into its own copy). The caller (node/partition.py) decides *when* the HW may move: the
ISR's progress is replication policy, not storage.

Opening runs recovery, and ``open`` returns only when it is done. After a clean
shutdown (marker present, checkpoint valid) the validated indexes are used;
otherwise every segment holding data past the recovery point is scanned,
CRC-checked and cut at the first torn or corrupt batch (later segments are dropped:
the log is always a prefix). Segments wholly below the recovery point were fsynced
before it advanced, so they are not rescanned at open (that would make a restart
cost a read of the whole disk); instead every batch is CRC-checked lazily, once per
process, before it is first served, and a corrupt one raises CorruptRecordError
naming the segment and offset -- it is never served. A segment whose indexes fail
validation is rescanned at open whatever its place.

Threading: every method is meant for one thread (the node's event loop), except
:meth:`flush` and :meth:`compact`, which may run in a worker thread while the loop
appends and reads. Both take ``self._lock`` only for bookkeeping -- never across an
fsync or a segment rewrite -- and appends touch only the active segment, which
compaction never rewrites. A compaction rewrite is swapped in only if the segment
did not change meanwhile (truncation, retention), otherwise it is discarded.

Blocking: append and read do no fsync. Rolling a segment writes its indexes (no
fsync); the rolled segment is fsynced by the next :meth:`flush`. Epoch changes,
truncation and retention write the checkpoint (a few small fsyncs).
"""

from __future__ import annotations

import bisect
import os
import shutil
import threading
import time
from collections.abc import Iterator
from typing import NamedTuple

from raftlog import records
from raftlog.checkpoint import PartitionCheckpoint, atomic_write, fsync_dir
from raftlog.config import LogConfig
from raftlog.errors import (
    ApiError,
    CorruptRecordError,
    CorruptSnapshotError,
    ErrorCode,
    OffsetOutOfRangeError,
    StorageError,
)
from raftlog.producer_state import ProducerStateManager, Verdict
from raftlog.segment import (
    MAX_RELATIVE_OFFSET,
    FileSlice,
    LogSegment,
    parse_segment_name,
)
from raftlog.txn_log import CorruptTxnIndexError, TxnIndexes, replay_batch
from raftlog.txn_log import rebuild as rebuild_txn_state

CHECKPOINT_FILE = "partition.checkpoint"
CLEAN_SHUTDOWN_FILE = ".clean_shutdown"
#: Producer state written at clean shutdown; valid until a truncation below its end.
PRODUCER_SNAPSHOT_FILE = "producer.snapshot"
#: Bytes read per step by :meth:`PartitionLog.iter_batches` (at least one batch).
SCAN_BYTES = 4 * 1024 * 1024


class LeaderAppend(NamedTuple):
    """What :meth:`PartitionLog.append_as_leader` did."""

    base_offset: int
    last_offset: int
    #: a retry of an idempotent batch this log holds: nothing was appended, the
    #: offsets are the original's
    duplicate: bool = False


def _merge_epochs(per_segment) -> list[tuple[int, int]]:
    """Concatenate segments' epoch starts, keeping strictly increasing epochs."""
    out: list[tuple[int, int]] = []
    for starts in per_segment:
        for e, o in starts:
            if e >= 0 and (not out or e > out[-1][0]):
                out.append((e, o))
    return out


def _wall_ms() -> int:
    return int(time.time() * 1000)


class PartitionLog:
    """See the module docstring. Create with :meth:`open`."""

    def __init__(self, path: str, config: LogConfig, clock_ms):
        self.path = path
        self.config = config
        self._clock_ms = clock_ms
        self._lock = threading.RLock()
        self._checkpoint_lock = threading.Lock()
        #: held across every fsync of segment data (:meth:`sync`, :meth:`flush`): one at
        #: a time, so a flush never counts as durable what a concurrent sync has taken
        #: the dirty mark of but not yet synced
        self._sync_lock = threading.RLock()
        #: everything below this offset is on disk (fsynced); <= the log end offset
        self._flushed = 0
        self.segments: list[LogSegment] = []
        self._bases: list[int] = []
        self.log_start_offset = 0
        self._high_watermark = 0
        self.recovery_point = 0
        self.epochs: list[tuple[int, int]] = []
        #: offset ranges [(start, end)] lost to damage that recovery found below the
        #: recovery point (data once fsynced, so perhaps acknowledged): gaps between
        #: segments, kept in the checkpoint; a read in one raises CorruptRecordError
        #: (the node then repairs it from a replica), the segments after it are kept
        self.lost: list[tuple[int, int]] = []
        #: what recovery cut at open: [(segment path, offset cut at, bytes cut,
        #: offsets lost (end) or None for a torn tail dropped)]
        self.recovery_cuts: list[tuple[str, int, int, int | None]] = []
        self._unflushed_messages = 0
        self._last_flush_ms = clock_ms()
        self._dir_dirty = False  # a segment file was created since the last flush
        self._parent_dirty = False  # the directory was created: its name is not durable
        self._truncations = 0  # bumped by truncate_to: a concurrent flush must not advance
        # the recovery point over bytes rewritten after its snapshot
        # Idempotent producers' recent sequences, rebuilt from the batch headers on
        # first use and after every truncation (so never ahead of the log); kept current
        # by leader and follower appends alike, so a new leader has it.
        self._producers: ProducerStateManager | None = None
        # Aborted-transaction indexes (raftlog/txn_log.py), loaded or rebuilt with the
        # producer state; ``_txn_stale``: segments were rewritten (compaction), rebuild.
        self._txn: TxnIndexes | None = None
        self._txn_stale = False

    # ------------------------------------------------------------------ open / recovery

    @classmethod
    def open(cls, path: str, config: LogConfig | None = None, *, clock_ms=None) -> PartitionLog:
        """Open or create the log at ``path`` and recover it.

        Raises:
            StorageError: the directory cannot be created or read.
        """
        log = cls(path, config or LogConfig(), clock_ms or _wall_ms)
        try:
            if not os.path.isdir(path):
                # a new partition's directory entry is made durable by its first flush
                # (which fsyncs the parent too), keeping creation free of fsyncs
                os.makedirs(path, exist_ok=True)
                log._parent_dirty = True
            log._load()
        except OSError as e:
            raise StorageError(f"cannot open log {path}: {e}", e.errno) from e
        return log

    def _load(self) -> None:
        cp = PartitionCheckpoint.read(os.path.join(self.path, CHECKPOINT_FILE))
        clean_marker = os.path.join(self.path, CLEAN_SHUTDOWN_FILE)
        clean = os.path.exists(clean_marker) and cp is not None
        for name in os.listdir(self.path):
            if name.endswith((".tmp", ".cleaned")):
                os.unlink(os.path.join(self.path, name))  # leftovers of a crash mid-write
        bases = sorted(b for b in map(parse_segment_name, os.listdir(self.path)) if b is not None)
        fresh = cp is None and not bases  # a new partition: nothing to remember yet
        self.segments = [LogSegment(self.path, b, self.config.index_interval_bytes) for b in bases]
        if cp is not None:
            self.log_start_offset, self._high_watermark = cp.log_start_offset, cp.high_watermark
            self.recovery_point, self.epochs = cp.recovery_point, list(cp.epochs)
            self.lost = list(cp.lost)
        scanned = self._recover(clean)
        if cp is None:  # the epoch cache is lost: every segment was scanned, rebuild it
            self.epochs = _merge_epochs(seg.epoch_starts for seg in self.segments)
        if not self.segments:
            self.segments = [
                LogSegment(self.path, self.log_start_offset, self.config.index_interval_bytes)
            ]
        self._bases = [s.base_offset for s in self.segments]
        leo = self.log_end_offset
        self.log_start_offset = max(min(self.log_start_offset, leo), self.segments[0].base_offset)
        self._high_watermark = min(self._high_watermark, leo)
        self.recovery_point = min(self.recovery_point, leo)
        self.epochs = [(e, o) for e, o in self.epochs if o <= leo]
        self._clip_lost()
        if scanned:
            self._sync_recovered(scanned)
        # what a clean shutdown left, what lies below the recovery point, and what
        # recovery scanned (synced just above) is on disk
        self._flushed = leo
        if os.path.exists(clean_marker):
            os.unlink(clean_marker)
            fsync_dir(self.path)
        if not fresh:  # (a new log's first flush writes it: no fsync to create a partition)
            self.checkpoint()

    def _recover(self, clean: bool) -> list[LogSegment]:
        """Trust validated indexes of segments wholly below the recovery point (or of
        all, after a clean shutdown); scan, CRC-check and cut every other segment.
        Returns the segments scanned."""
        kept: list[LogSegment] = []
        scanned: list[LogSegment] = []
        for i, seg in enumerate(self.segments):
            if kept and seg.base_offset < kept[-1].next_offset:
                self._drop_from(i, "overlapping offsets")
                break
            loaded = (clean or seg.base_offset < self.recovery_point) and seg.load_indexes()
            truncated = 0
            if not loaded or (not clean and seg.next_offset > self.recovery_point):
                truncated = seg.recover()
                scanned.append(seg)
            kept.append(seg)
            if truncated:
                cut = seg.next_offset
                if cut < self.recovery_point and i + 1 < len(self.segments):
                    # damage to data once fsynced (a torn write is always above the
                    # recovery point): not a tail to drop. The segments after it are
                    # intact copies of what was acknowledged; keep them, and the hole
                    # as a lost range that is never served and is refetched
                    end = self.segments[i + 1].base_offset
                    if (cut, end) not in self.lost:
                        self.lost.append((cut, end))
                    self.recovery_cuts.append((seg.path, cut, truncated, end))
                    continue
                self.recovery_cuts.append((seg.path, cut, truncated, None))
                self._drop_from(i + 1, f"corrupt or torn tail in {seg.path}")
                break
        self.segments = kept
        return scanned

    def _sync_recovered(self, scanned: list[LogSegment]) -> None:
        """fsync what recovery scanned (a crashed process's writes may sit in the page
        cache only) so the recovery point can move to the log end offset, as Kafka does."""
        for seg in scanned:
            if seg in self.segments:
                seg.flush()
        fsync_dir(self.path)
        self.recovery_point = self.log_end_offset

    def _lost_at(self, offset: int) -> tuple[int, int] | None:
        """The lost range (:attr:`lost`) holding ``offset``; None if none does."""
        return next(((s, e) for s, e in self.lost if s <= offset < e), None)

    def _check_lost(self, offset: int) -> None:
        hole = self._lost_at(offset)
        if hole is not None:
            start, end = hole
            raise CorruptRecordError(
                f"offsets {start}..{end - 1} of {self.path} were lost to a damaged "
                f"segment (found at recovery): not served. Another in-sync replica "
                f"serves them once this one hands it the partition; with no other "
                f"copy, skip them with DeleteRecords to offset {end} "
                f"(Admin.delete_records, kafka-delete-records.sh)")

    def lost_from(self, offset: int) -> int | None:
        """The first offset lost (:attr:`lost`) at or after ``offset``; None if none."""
        starts = [max(s, offset) for s, e in self.lost if e > offset]
        return min(starts) if starts else None

    def _clip_lost(self) -> None:
        """Keep :attr:`lost` inside [log start, log end) (after truncation, retention)."""
        if self.lost:
            lo, hi = self.log_start_offset, self.log_end_offset
            self.lost = [(max(s, lo), min(e, hi)) for s, e in self.lost
                         if max(s, lo) < min(e, hi)]

    def _drop_from(self, i: int, why: str) -> None:
        """Delete segments[i:] (recovery found the log ends before them)."""
        for seg in self.segments[i:]:
            seg.delete()

    # ------------------------------------------------------------------ properties

    @property
    def active_segment(self) -> LogSegment:
        return self.segments[-1]

    @property
    def log_end_offset(self) -> int:
        return self.segments[-1].next_offset if self.segments else self.log_start_offset

    @property
    def high_watermark(self) -> int:
        return self._high_watermark

    def maybe_increment_high_watermark(self, hw: int) -> bool:
        """Move the HW forward to ``hw``; never back (only truncation lowers it).
        Returns whether it moved."""
        if hw <= self._high_watermark:
            return False
        assert hw <= self.log_end_offset, (hw, self.log_end_offset)
        self._high_watermark = hw
        return True

    @property
    def flushed_offset(self) -> int:
        """Everything below this offset is on disk (fsynced): what a power loss cannot
        take. Moved by :meth:`sync` and :meth:`flush`, lowered by truncation."""
        return self._flushed

    @property
    def size_bytes(self) -> int:
        return sum(s.size for s in self.segments)

    @property
    def segment_count(self) -> int:
        return len(self.segments)

    @property
    def needs_flush(self) -> bool:
        return (self._unflushed_messages > 0 or self._dir_dirty or self._parent_dirty
                or any(s.dirty for s in self.segments))

    @property
    def latest_epoch(self) -> int:
        return self.epochs[-1][0] if self.epochs else -1

    # ------------------------------------------------------------------ append

    def append(
        self, batches: bytes, *, leader_epoch: int = 0, now_ms: int | None = None
    ) -> tuple[int, int]:
        """:meth:`append_as_leader`'s offsets (for tools and tests)."""
        r = self.append_as_leader(batches, leader_epoch=leader_epoch, now_ms=now_ms)
        return r.base_offset, r.last_offset

    def append_as_leader(
        self, batches, *, leader_epoch: int = 0, now_ms: int | None = None,
        transactional_ok: bool = False, check_records: bool = True,
    ) -> LeaderAppend:
        """Append client batches as leader: assign offsets from the LEO, stamp the epoch.

        One or more batches, or exactly one from an idempotent producer, which is
        checked against :attr:`producers` first: a retry of a batch this log holds
        answers with the original offsets and appends nothing. Each batch is parsed and
        CRC-checked once, its records region checked to parse (``check_records``:
        ``records.check_records``; off only for batches their caller checked record by
        record, the Kafka listener's), and nothing is written if any is bad. Written
        with one write.
        Durable when it returns: in the OS page cache; fsynced per
        ``flush.messages``/``flush.ms`` (see :meth:`maybe_flush`).

        Raises:
            CorruptRecordError: a batch is malformed (the log is unchanged).
            ApiError: INVALID_REQUEST (several idempotent batches at once) or the
                producer check's error (OUT_OF_ORDER_SEQUENCE, INVALID_PRODUCER_EPOCH,
                ...); INVALID_TXN_STATE for a transactional batch without
                ``transactional_ok`` (its transaction not verified); the log is unchanged.
            StorageError: the disk write failed (the log is unchanged).
        """
        buf = bytearray(batches)  # the one copy: offsets are stamped into it
        headers = list(records.iter_batches(buf, verify=True))
        if not headers:
            raise CorruptRecordError("no record batch in the appended bytes")
        first = headers[0][1]
        if check_records:  # (no consumer may meet a batch it cannot decode)
            view = batches if isinstance(batches, memoryview) else memoryview(batches)
            for pos, h in headers:
                records.check_records(view, pos, h)
        if any(h.attributes & records.ATTR_CONTROL for _, h in headers):
            raise CorruptRecordError("control batches (transaction markers) are written by "
                                     "the transaction coordinator only (WriteTxnMarkers)")
        txn = bool(first.attributes & records.ATTR_TRANSACTIONAL)
        if txn and not transactional_ok:
            # (KIP-890: the partition leader verified the partition is in the
            # producer's ongoing transaction before it calls with transactional_ok)
            raise ApiError(ErrorCode.INVALID_TXN_STATE,
                           f"{os.path.basename(self.path)}: a transactional batch of producer "
                           f"{first.producer_id} whose partition is not in its ongoing "
                           "transaction: AddPartitionsToTxn first")
        if first.producer_id >= 0:
            if len(headers) != 1:
                raise ApiError(ErrorCode.INVALID_REQUEST,
                               "an idempotent produce carries exactly one batch per partition")
            check = self.producers.check(first.producer_id, first.producer_epoch,
                                         first.base_sequence, first.last_offset_delta + 1, txn)
            if check.verdict is Verdict.DUPLICATE:
                d = check.duplicate
                return LeaderAppend(d.base_offset, d.last_offset, True)
            if check.verdict is not Verdict.APPEND:
                raise ApiError(check.error_code, f"{os.path.basename(self.path)}: "
                                                 f"{check.message}")
        next_offset = self.log_end_offset
        append_time = self.config.message_timestamp_type == "LogAppendTime"
        now = (now_ms if now_ms is not None else self._clock_ms()) if append_time else 0
        stamped = []
        for pos, h in headers:
            if h.record_count == 0:
                raise CorruptRecordError("a produced batch must hold at least one record")
            records.stamp(buf, pos, next_offset, leader_epoch)
            if append_time:
                records.set_log_append_time(buf, pos, h, now)
                stamped.append((pos, records.read_header(buf, pos)))
            else:  # only the two stamped fields changed (the CRC does not cover them)
                stamped.append((pos, h._replace(base_offset=next_offset, leader_epoch=leader_epoch)))
            next_offset += h.last_offset_delta + 1
        if leader_epoch > self.latest_epoch:
            self.assign_epoch(leader_epoch, self.log_end_offset)
        base, last = self._append(buf, stamped, now_ms)
        if first.producer_id >= 0:
            h = stamped[0][1]
            self._producers.update(h.producer_id, h.producer_epoch, h.base_sequence,
                                   last - base + 1, base, h.max_timestamp, txn)
        return LeaderAppend(base, last)

    def append_marker(self, producer_id: int, producer_epoch: int, coordinator_epoch: int,
                      commit: bool, *, leader_epoch: int = 0, now_ms: int | None = None) -> int:
        """Append a transaction marker (a control batch) as leader: the producer's open
        transaction here closes; an abort adds its entry to the aborted-transaction
        index of the marker's segment. Returns the marker's offset.

        Raises:
            ApiError: INVALID_PRODUCER_EPOCH (an epoch below the producer's),
                COORDINATOR_FENCED (a coordinator epoch below the last marker's),
                INVALID_REQUEST; the log is unchanged.
            StorageError: the disk write failed (the log is unchanged).
        """
        from raftlog.txn_markers import ControlType, EndTxnMarker

        check = self.producers.check_marker(producer_id, producer_epoch, coordinator_epoch)
        if check.verdict is not Verdict.APPEND:
            raise ApiError(check.error_code, f"{os.path.basename(self.path)}: {check.message}")
        now = now_ms if now_ms is not None else self._clock_ms()
        offset = self.log_end_offset
        marker = EndTxnMarker(ControlType.COMMIT if commit else ControlType.ABORT,
                              coordinator_epoch)
        buf = records.encode_control_batch(marker, producer_id=producer_id,
                                           producer_epoch=producer_epoch, timestamp=now,
                                           base_offset=offset, leader_epoch=leader_epoch)
        headers = list(records.iter_batches(buf, verify=False))
        if leader_epoch > self.latest_epoch:
            self.assign_epoch(leader_epoch, offset)
        self._append(buf, headers, now_ms)
        done = self._producers.complete_txn(producer_id, producer_epoch, coordinator_epoch,
                                            offset, not commit, now)
        if not commit:
            self._index_abort(offset, done)
        return offset

    def _index_abort(self, marker_offset: int, done) -> None:
        txn = self.txn_indexes
        i = bisect.bisect_right(self._bases, marker_offset) - 1
        try:
            txn.add(self._bases[max(i, 0)], done)
        except (OSError, CorruptTxnIndexError):
            self._txn_stale = True  # (rebuilt from the log on next use)

    @property
    def txn_indexes(self) -> TxnIndexes:
        """The aborted-transaction indexes (raftlog/txn_log.py), loaded with the
        producer state."""
        self.producers  # noqa: B018 (loads both)
        if self._txn is None or self._txn_stale:
            with self._lock:
                self._txn_stale = False
                _state, self._txn = rebuild_txn_state(
                    self.path, list(self._bases),
                    self.iter_batches(self.log_start_offset, skip_lost=True))
                self._txn.write_all()
        return self._txn

    def last_stable_offset(self) -> int:
        """Where a read_committed fetch stops: the first offset of the earliest open
        transaction (or one whose marker is not yet replicated), never above the high
        watermark."""
        return self.producers.last_stable_offset(self.high_watermark)

    def aborted_transactions(self, fetch_offset: int, upper: int) -> list[tuple[int, int]]:
        """(producer id, first offset) of the aborted transactions overlapping
        ``[fetch_offset, upper)``, from the indexes."""
        if upper <= fetch_offset:
            return []
        with self._lock:
            return self.txn_indexes.aborted(fetch_offset, upper)

    def append_as_follower(self, batches) -> tuple[int, int]:
        """Append batches fetched from the leader, keeping their offsets and epochs;
        the producer state (if loaded) replays their headers.

        Each batch must start at or after the end of the previous one (the first at or
        after the log end offset). Equal is the rule; *after* happens only across a gap
        left by compaction on the leader (whole batches removed), which Kafka's
        followers accept too. Durable when it returns: page cache only, like append.

        Returns:
            (base offset of the first batch, last offset of the last batch).
        Raises:
            CorruptRecordError: bad CRC, or offsets that overlap this log's end.
            StorageError: the disk write failed (the log is unchanged).
        """
        buf = bytes(batches)  # (a no-op for bytes; a view's bytes stay in the tail cache)
        headers = list(records.iter_batches(buf, verify=True))
        if not headers:
            raise CorruptRecordError("no record batch in the replicated bytes")
        expected = self.log_end_offset
        for _, h in headers:
            if h.base_offset < expected:
                raise CorruptRecordError(
                    f"replicated batch starts at offset {h.base_offset}, below the log end "
                    f"offset {expected}: truncate first"
                )
            if h.leader_epoch > self.latest_epoch:
                self.assign_epoch(h.leader_epoch, h.base_offset)
            expected = h.next_offset
        control = any(h.attributes & records.ATTR_CONTROL for _, h in headers)
        if control:
            self.producers  # noqa: B018 (loaded before: a marker's abort is indexed)
        base, last = self._append(buf, headers, None)
        if self._producers is not None:
            for pos, h in headers:
                if control and h.attributes & records.ATTR_CONTROL:
                    done = replay_batch(self._producers, h, buf, pos)
                    if done is not None and done.aborted:
                        self._index_abort(h.base_offset, done)
                else:
                    self._producers.apply_header(h)
        return base, last

    def _append(self, data: bytes, headers, now_ms: int | None) -> tuple[int, int]:
        first, last = headers[0][1], headers[-1][1]
        assert first.base_offset >= self.log_end_offset
        with self._lock:
            self._maybe_roll(len(data), last.last_offset, now_ms)
            self.active_segment.append(data, headers)
        self._unflushed_messages += last.last_offset - first.base_offset + 1
        return first.base_offset, last.last_offset

    def _maybe_roll(self, size: int, last_offset: int, now_ms: int | None) -> None:
        seg = self.active_segment
        if not seg.size:
            if seg.created_ms is None:
                seg.created_ms = now_ms or self._clock_ms()
            return
        now = now_ms or self._clock_ms()
        if seg.created_ms is None:
            seg.created_ms = now
        if (
            seg.size + size > self.config.segment_bytes
            or now - seg.created_ms >= self.config.segment_ms
            or last_offset - seg.base_offset > MAX_RELATIVE_OFFSET
        ):
            self.roll(now)

    def roll(self, now_ms: int | None = None) -> None:
        """Close the active segment and start a new one at the LEO.

        Writes the closed segment's indexes (no fsync); the closed segment stays dirty,
        so the next :meth:`flush` fsyncs it before the recovery point passes it.
        """
        with self._lock:
            old = self.active_segment
            if not old.size:
                return
            old.seal()
            old.write_indexes()
            new = LogSegment(self.path, old.next_offset, self.config.index_interval_bytes)
            new.created_ms = now_ms or self._clock_ms()
            self.segments.append(new)
            self._bases.append(new.base_offset)
            self._dir_dirty = True

    # ------------------------------------------------------------------ read

    def read(self, offset: int, max_bytes: int, max_offset: int | None = None) -> FileSlice:
        """Whole batches starting with the one holding ``offset``, from one segment.

        At least one batch (even if larger than ``max_bytes``) unless the next batch
        starts at or after ``max_offset`` (the HW for consumers). An empty slice at
        the end. The caller reads again from ``slice.next_offset`` for more.

        Raises:
            OffsetOutOfRangeError: offset below the log start or above the log end.
            CorruptRecordError: the data on disk failed its CRC; it is never served.
        """
        with self._lock:
            leo = self.log_end_offset
            if offset < self.log_start_offset or offset > leo:
                raise OffsetOutOfRangeError(offset, self.log_start_offset, leo)
            if self.lost:
                self._check_lost(offset)
            i = bisect.bisect_right(self._bases, offset) - 1
            while 0 <= i < len(self.segments):
                seg = self.segments[i]
                if offset < seg.next_offset:
                    sl = seg.slice(offset, max(max_bytes, 1), max_offset)
                    if sl.length or max_offset is not None and sl.first_offset >= max_offset:
                        return sl
                i += 1
            return FileSlice(None, 0, 0, offset, offset)

    def read_bytes(self, offset: int, max_bytes: int, max_offset: int | None = None) -> bytes:
        return self.read(offset, max_bytes, max_offset).read_bytes()

    def read_records(self, offset: int, max_bytes: int, max_offset: int | None = None) -> list:
        """Decoded records from ``offset`` (convenience for tests and tools)."""
        return records.decode_batches(
            self.read_bytes(offset, max_bytes, max_offset), start_offset=offset
        )

    def iter_batches(self, start: int | None = None, end: int | None = None,
                     chunk_bytes: int = SCAN_BYTES, skip_lost: bool = False,
                     ) -> Iterator[tuple[records.BatchHeader, bytes]]:
        """Yield ``(header, batch bytes)`` of every batch holding offsets in
        ``[start, end)`` (default: the whole log), read ``chunk_bytes`` at a time;
        ``skip_lost``: step over the ranges lost to damage (:attr:`lost`) instead of
        raising (a rebuild of what the log holds).

        Raises:
            OffsetOutOfRangeError: ``start`` is outside the log.
            CorruptRecordError: a batch on disk failed its CRC.
        """
        offset = self.log_start_offset if start is None else start
        end = self.log_end_offset if end is None else end
        while offset < end:
            hole = self._lost_at(offset) if skip_lost and self.lost else None
            if hole is not None:
                offset = hole[1]
                continue
            data = self.read(offset, chunk_bytes, max_offset=end).read_bytes()
            if not data:
                return
            nxt = offset
            view = memoryview(data)
            for pos, h in records.iter_batches(data, verify=False, allow_partial=True):
                if h.base_offset >= end:
                    return
                yield h, view[pos:pos + h.size]
                nxt = h.next_offset
            assert nxt > offset, (offset, nxt)  # a read returns at least one whole batch
            offset = nxt

    def offset_for_timestamp(self, ts_ms: int) -> int | None:
        """First offset whose record timestamp is >= ``ts_ms`` (None if none)."""
        found = self.lookup_timestamp(ts_ms)
        return found[0] if found else None

    def max_timestamp(self) -> int:
        """The largest record timestamp in the log (-1: no record has one)."""
        with self._lock:
            return max((seg.max_timestamp for seg in self.segments if seg.size), default=-1)

    def lookup_timestamp(self, ts_ms: int) -> tuple[int, int] | None:
        """(offset, timestamp) of the first record whose timestamp is >= ``ts_ms``."""
        with self._lock:
            for seg in list(self.segments):
                if seg.max_timestamp < ts_ms or seg.size == 0:
                    continue
                entry = seg.time_index.below(ts_ms)
                start = entry[1] if entry else 0
                for pos, h in seg.iter_headers(start):
                    if h.max_timestamp >= ts_ms:
                        data = os.pread(seg.file.fd, h.size, pos)
                        recs = records.decode_batch(data)
                        for r in recs:
                            if r.timestamp >= ts_ms and r.offset >= self.log_start_offset:
                                return r.offset, r.timestamp
        return None

    # ------------------------------------------------------------------ producer state

    @property
    def producers(self) -> ProducerStateManager:
        """Idempotent producers' recent batches (raftlog/producer_state.py): restored
        from the clean-shutdown snapshot plus the batch headers after it, or rebuilt
        from every batch header, on first use."""
        if self._producers is None:
            with self._lock:
                state = self._load_producer_snapshot()
                txn = None
                if state is not None:
                    try:
                        txn = TxnIndexes.load(self.path, [(s.base_offset, s.next_offset)
                                                          for s in self.segments])
                    except (CorruptTxnIndexError, OSError):
                        txn = None
                if txn is None:  # every batch replayed; the indexes rebuilt with it
                    state, txn = rebuild_txn_state(self.path, list(self._bases),
                                                   self.iter_batches(self.log_start_offset,
                                                                     skip_lost=True))
                    txn.write_all()
                else:
                    start = state.end_offset
                    for h, data in self.iter_batches(max(self.log_start_offset, start),
                                                     skip_lost=True):
                        if h.producer_id >= 0 and h.base_offset >= start:
                            done = replay_batch(state, h, data, 0)
                            if done is not None and done.aborted:
                                i = bisect.bisect_right(self._bases, h.base_offset) - 1
                                txn.add(self._bases[max(i, 0)], done)
                self._producers, self._txn = state, txn
        return self._producers

    def _snapshot_path(self) -> str:
        return os.path.join(self.path, PRODUCER_SNAPSHOT_FILE)

    def _load_producer_snapshot(self) -> ProducerStateManager | None:
        try:
            with open(self._snapshot_path(), "rb") as f:
                state = ProducerStateManager.restore(f.read())
        except (OSError, CorruptSnapshotError):
            return None  # none, or unreadable: rebuilt from the whole log instead
        if state.end_offset > self.log_end_offset:
            return None  # the log was cut below it
        return state

    def _forget_producers(self) -> None:
        """Before a truncation: the state and its snapshot may be ahead of the log."""
        self._producers = None
        self._txn = None  # (rebuilt with the producer state)
        try:
            os.unlink(self._snapshot_path())
        except OSError:
            pass

    def _write_producer_snapshot(self) -> None:
        """At clean shutdown: a restart then replays only what follows (Kafka's
        ``<offset>.snapshot``). A failed write leaves no snapshot (a full rebuild)."""
        if self._producers is None or not self._producers.producers:
            return
        self._producers.end_offset = self.log_end_offset
        try:
            atomic_write(self._snapshot_path(), self._producers.snapshot())
        except StorageError:
            self._forget_producers()

    # ------------------------------------------------------------------ truncation

    def truncate_to(self, offset: int) -> None:
        """Drop every record at or after ``offset``; the LEO becomes ``offset``
        (or the start of the batch holding it). Durable when it returns."""
        with self._lock:
            if offset >= self.log_end_offset:
                return
            self._forget_producers()
            offset = max(offset, self.log_start_offset)
            while len(self.segments) > 1 and self.segments[-1].base_offset >= offset:
                self.segments.pop().delete()
                self._bases.pop()
            seg = self.active_segment
            found = seg.position_of(offset) if offset > seg.base_offset else (0, None)
            if found is not None:
                pos, h = found
                # mid-batch: cut at the batch start; in a compaction gap: at ``offset``
                cut = min(h.base_offset, offset) if h is not None else seg.base_offset
                seg.truncate_to_position(pos, cut)
                seg.flush()
            self._truncations += 1
            self._high_watermark = min(self._high_watermark, self.log_end_offset)
            self._flushed = min(self._flushed, self.log_end_offset)
            self.recovery_point = min(self.recovery_point, self.log_end_offset)
            self.epochs = [(e, o) for e, o in self.epochs if o < self.log_end_offset]
            self._clip_lost()
            self.checkpoint()

    def truncate_fully_and_start_at(self, offset: int) -> None:
        """Drop every record and restart the log empty at ``offset`` (a follower whose
        log end fell below the leader's log start, after retention). Durable on return."""
        assert offset >= 0, offset
        with self._lock:
            self._forget_producers()
            for seg in self.segments:
                seg.delete()
            self.segments = [LogSegment(self.path, offset, self.config.index_interval_bytes)]
            self._bases = [offset]
            self.log_start_offset = self._high_watermark = self.recovery_point = offset
            self._flushed = offset
            self.epochs = []
            self.lost = []
            self._truncations += 1
            self._dir_dirty = True
            self.checkpoint()

    # ------------------------------------------------------------------ leader epochs

    def assign_epoch(self, epoch: int, start_offset: int) -> None:
        """Record that ``epoch`` starts at ``start_offset`` (durable when it returns)."""
        if epoch <= self.latest_epoch:
            return
        # The first epoch of a log without records is not fsynced here: losing it loses
        # nothing (recovery rebuilds the epochs of a log without a checkpoint from its
        # batches, and a leader assigns its epoch again); the next flush writes it. So
        # creating a partition costs no fsync on the event loop.
        first_of_empty = not self.epochs and self.log_end_offset == self.log_start_offset
        self.epochs = [(e, o) for e, o in self.epochs if o < start_offset]
        self.epochs.append((epoch, start_offset))
        if not first_of_empty:
            self.checkpoint()

    def end_offset_for_epoch(self, epoch: int) -> tuple[int, int]:
        """OffsetsForLeaderEpoch (KIP-101/279): (largest epoch <= ``epoch``, its end offset).

        The end offset is the start offset of the next larger epoch, or the LEO for
        the latest epoch; (-1, -1) when ``epoch`` is older than every known epoch.
        """
        if not self.epochs or epoch < self.epochs[0][0]:
            return (-1, -1)
        i = bisect.bisect_right([e for e, _ in self.epochs], epoch) - 1
        found = self.epochs[i][0]
        if i + 1 < len(self.epochs):
            return (found, self.epochs[i + 1][1])
        return (found, self.log_end_offset)

    # ------------------------------------------------------------------ durability

    def flush(self) -> None:
        """fsync every dirty segment (and the directory after a roll), write changed
        indexes of closed segments, advance the recovery point, checkpoint.

        Durable when it returns: everything appended before the call. Safe to call from
        a worker thread while the event loop appends: the lock is held only for
        bookkeeping and index writes (page cache), never across an fsync.

        Raises:
            StorageError: an fsync or write failed (the recovery point does not move).
        """
        with self._sync_lock:
            self._flush()
        self.checkpoint()

    def _flush(self) -> None:
        with self._lock:
            dirty = [s for s in self.segments if s.dirty]
            leo, truncations, dir_dirty = self.log_end_offset, self._truncations, self._dir_dirty
            parent_dirty, self._parent_dirty = self._parent_dirty, False
            for seg in dirty:
                seg.dirty = False
            for seg in self.segments[:-1]:
                seg.write_indexes()
            files = [seg.file for seg in dirty]  # keep the fds open while we sync
            self._unflushed_messages = 0
            self._dir_dirty = False
        self._sync_files(os.fsync, files, dirty, dir_dirty, parent_dirty)
        with self._lock:
            if truncations == self._truncations:
                self.recovery_point = max(self.recovery_point, min(leo, self.log_end_offset))
                self._flushed = max(self._flushed, min(leo, self.log_end_offset))
            self._last_flush_ms = self._clock_ms()
            assert self._flushed <= self.log_end_offset, (self._flushed, self.log_end_offset)

    def _sync_files(self, sync, files, dirty, dir_dirty: bool, parent_dirty: bool) -> None:
        """``sync`` (os.fsync or os.fdatasync) each segment file, then the directory
        (after a roll) and its parent (after the directory was made), outside the lock.
        On a failure everything is marked dirty again (the next flush or sync retries)
        and StorageError is raised."""
        try:
            for f in files:
                if f.fd >= 0:
                    sync(f.fd)
            if dir_dirty:
                fsync_dir(self.path)
            if parent_dirty:
                fsync_dir(os.path.dirname(os.path.abspath(self.path)))
        except OSError as e:
            with self._lock:
                for seg in dirty:
                    seg.dirty = True
                self._dir_dirty = self._dir_dirty or dir_dirty
                self._parent_dirty = self._parent_dirty or parent_dirty
            raise StorageError(f"{sync.__name__} of {self.path} failed: {e}", e.errno) from e

    def sync(self, blocking: bool = True) -> int | None:
        """Group commit's sync: fdatasync every segment appended to (or rolled) since
        the last sync or flush, and the directory after a roll; nothing else (no
        checkpoint, no index write: the periodic :meth:`flush` does those). Returns the
        flushed offset: everything appended before the call is on disk.

        Runs in a worker thread while the event loop appends (the lock is held for
        bookkeeping only), or on the event loop itself (node/log_manager.py's inline
        syncs: ``blocking=False``, which returns None at once instead of waiting while
        a flush holds the log); one sync or flush of a log at a time (``_sync_lock``).

        Raises:
            StorageError: an fdatasync failed (the flushed offset does not move).
        """
        if not self._sync_lock.acquire(blocking=blocking):
            return None
        try:
            return self._sync()
        finally:
            self._sync_lock.release()

    def _sync(self) -> int:
        with self._lock:
            leo, truncations = self.log_end_offset, self._truncations
            if self._flushed >= leo and not self._dir_dirty and not self._parent_dirty:
                return self._flushed
            dirty = [s for s in self.segments if s.dirty]
            dir_dirty, self._dir_dirty = self._dir_dirty, False
            parent_dirty, self._parent_dirty = self._parent_dirty, False
            for seg in dirty:
                seg.dirty = False
            files = [seg.file for seg in dirty]  # keep the fds open while we sync
        self._sync_files(os.fdatasync, files, dirty, dir_dirty, parent_dirty)
        with self._lock:
            if truncations == self._truncations:
                self._flushed = max(self._flushed, min(leo, self.log_end_offset))
            assert self._flushed <= self.log_end_offset, (self._flushed, self.log_end_offset)
            return self._flushed

    def maybe_flush(self, now_ms: int | None = None) -> bool:
        """Flush if ``flush.messages`` or ``flush.ms`` says so. True if it flushed.

        ``flush.ms`` is measured on the wall clock (as Kafka's): a clock that went back
        since the last flush counts as due, so a backward jump cannot hold fsyncs off for
        as long as the jump (the flush restarts the count on the new clock)."""
        if not self._unflushed_messages:
            return False
        fm, fms = self.config.flush_messages, self.config.flush_ms
        now = now_ms if now_ms is not None else self._clock_ms()
        elapsed = now - self._last_flush_ms
        if (fm is not None and self._unflushed_messages >= fm) or (
            fms is not None and (elapsed >= fms or elapsed < 0)
        ):
            self.flush()
            return True
        return False

    def checkpoint(self) -> None:
        """Write recovery point, log start offset, HW and epochs atomically (durable on return)."""
        with self._lock:
            cp = PartitionCheckpoint(
                self.recovery_point, self.log_start_offset, self._high_watermark,
                list(self.epochs), list(self.lost)
            )
        with self._checkpoint_lock:
            cp.write(os.path.join(self.path, CHECKPOINT_FILE))

    # ------------------------------------------------------------------ retention

    def apply_retention(self, now_ms: int | None = None) -> int:
        """Delete whole closed segments past ``retention.ms`` / ``retention.bytes``
        (policy ``delete``). Never the active segment. Returns segments deleted."""
        if not self.config.delete:
            return 0
        now = now_ms if now_ms is not None else self._clock_ms()
        cfg = self.config
        deleted = 0
        with self._lock:
            total = self.size_bytes
            while len(self.segments) > 1:
                seg = self.segments[0]
                too_old = (
                    cfg.retention_ms >= 0
                    and seg.max_timestamp >= 0
                    and now - seg.max_timestamp > cfg.retention_ms
                )
                too_big = cfg.retention_bytes >= 0 and total - seg.size >= cfg.retention_bytes
                if not (too_old or too_big):
                    break
                if self.segments[1].base_offset > self._high_watermark:
                    break  # never delete what is not yet committed
                self.segments.pop(0)
                self._bases.pop(0)
                total -= seg.size
                seg.delete()
                deleted += 1
                # (never back: DeleteRecords may have moved it into the next segment)
                self.log_start_offset = max(self.log_start_offset, self.segments[0].base_offset)
            if deleted:
                self._clip_lost()
                self.checkpoint()
        return deleted

    def delete_records_before(self, offset: int) -> int:
        """Advance the log start offset to ``offset`` (at most the high watermark;
        Kafka's DeleteRecords, and a follower following its leader's log start):
        durable on return (the checkpoint), whole segments below it deleted. Returns
        the log start offset (never moved back)."""
        with self._lock:
            offset = min(offset, self._high_watermark)
            if offset <= self.log_start_offset:
                return self.log_start_offset
            self.log_start_offset = offset
            while len(self.segments) > 1 and self.segments[1].base_offset <= offset:
                self.segments.pop(0).delete()
                self._bases.pop(0)
            self._clip_lost()
            self.checkpoint()
            return offset

    def compact(self, now_ms: int | None = None) -> dict:
        """Compaction (``cleanup.policy=compact``); see compaction.py."""
        from raftlog.compaction import compact_log

        stats = compact_log(self, now_ms if now_ms is not None else self._clock_ms())
        self._txn_stale = True  # segments rewritten: the indexes are rebuilt on next use
        return stats

    # ------------------------------------------------------------------ lifecycle

    def close(self) -> None:
        """Flush, write every segment's indexes (fsynced), mark a clean shutdown, and
        drop the segment files (each fd closes once no FileSlice holds it).

        Durable when it returns: everything appended, indexes, checkpoint, marker.
        """
        with self._sync_lock, self._lock:  # (in :meth:`sync`'s lock order)
            self._write_producer_snapshot()
            self.flush()
            self.active_segment.seal()
            for seg in self.segments:
                seg.write_indexes(sync=True)
            marker = os.path.join(self.path, CLEAN_SHUTDOWN_FILE)
            with open(marker, "wb") as f:
                os.fsync(f.fileno())
            fsync_dir(self.path)
            for seg in self.segments:
                seg.close()

    def delete(self) -> None:
        """Remove the whole partition directory. Open FileSlices stay readable."""
        with self._lock:
            for seg in self.segments:
                seg.close()
            self.segments = []
            self._bases = []
            shutil.rmtree(self.path, ignore_errors=True)
