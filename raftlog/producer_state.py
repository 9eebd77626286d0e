"""Idempotent producer state of one partition: pure, no I/O.

The leader of a partition keeps, per producer id, the producer's epoch and the
sequence numbers and offsets of its last :data:`BATCHES_RETAINED` batches
(Kafka keeps 5 as well: a producer has at most 5 requests in flight per
partition). Before an append the leader asks :meth:`ProducerStateManager.check`;
after a successful append it calls :meth:`ProducerStateManager.update` with the
stamped offsets. Followers and recovery replay batch headers with
:meth:`ProducerStateManager.apply_header`, which does not validate (the leader
already did).

Rules (Kafka's ``ProducerAppendInfo.checkSequence`` and ``findDuplicateBatch``):

* ``epoch < current epoch``: the producer is a zombie -> INVALID_PRODUCER_EPOCH.
* ``epoch > current epoch``: a new epoch must start at sequence 0, else
  OUT_OF_ORDER_SEQUENCE; the retained batches of the old epoch are dropped.
* same epoch: a batch whose first and last sequence equal a retained batch is a
  retry -> DUPLICATE with that batch's original offsets (nothing is appended);
  otherwise the first sequence must be last sequence + 1, where the successor of
  ``MAX_SEQUENCE`` (2**31 - 1) is 0 -> else OUT_OF_ORDER_SEQUENCE.
* unknown producer id: any first sequence is accepted. As in Kafka since 2.5, the
  state may have been removed by retention or expiry while the producer lives on;
  a brand-new producer starts at 0 anyway.

Transactions (issue #33; pure, not wired yet): each producer's open transaction starts
at ``txn_first_offset`` (its first transactional batch since its last marker). A
control batch (a commit or abort marker) closes it: :meth:`ProducerStateManager.complete_txn`
(leader, after :meth:`~ProducerStateManager.check_marker`) or ``apply_header`` (replay)
returns the :class:`CompletedTxn`, from which an aborted one becomes an entry of the
segment's aborted-transaction index (raftlog/txn_index.py). The marker's epoch (bumped
by the coordinator, KIP-890) becomes the producer's: a delayed batch of the ended
transaction is then INVALID_PRODUCER_EPOCH. The *last stable offset* is the first
offset of the earliest transaction not yet decided *and replicated* (a completed one
whose marker is not below the high watermark still holds it back, as in Kafka), never
above the high watermark: :meth:`~ProducerStateManager.last_stable_offset`. A producer
with an open transaction is neither expired nor forgotten by head truncation.

Snapshot bytes (persisted next to the log, Kafka's ``<offset>.snapshot``)::

    offset  size  field
    0       4     magic     b"RLPS"
    4       2     version   u16 (SNAPSHOT_VERSION; 1 is still read)
    6       4     crc       u32 CRC32C of the body
    10            body      CBOR [end_offset, [[pid, epoch, last_ts, [[fs, ls, bo, lo], ...],
                                               txn_first_offset, coordinator_epoch], ...],
                                  [[first_offset, marker_offset], ...]]   (v2; v1 has
                                  neither the two last producer fields nor the last list)

The last list holds the completed transactions whose markers were not known to be
below the high watermark (they keep the last stable offset back until they are).

Producer ids come in blocks from the metadata quorum: :class:`ProducerIdBlocks`
describes (and implements, purely) how a node hands them out.
"""

from __future__ import annotations

import enum
import struct
from collections.abc import Iterable
from dataclasses import dataclass, field

import cbor2
import crc32c as _crc32c

from raftlog.errors import CorruptSnapshotError, ErrorCode
from raftlog.records import ATTR_CONTROL, ATTR_TRANSACTIONAL, NO_PRODUCER_ID, BatchHeader

from .decoded import as_int as _int
from .decoded import as_nonneg as _nonneg

#: Largest sequence number; the next one after it is 0.
MAX_SEQUENCE = 2**31 - 1
#: Batches remembered per producer (Kafka: 5, the client's max in-flight requests).
BATCHES_RETAINED = 5
NO_SEQUENCE = -1
#: Highest producer epoch (i16); a producer that reaches it needs a new producer id.
MAX_PRODUCER_EPOCH = 2**15 - 1
#: Kafka's producer.id.expiration.ms default: forget producers idle for a day.
PRODUCER_ID_EXPIRATION_MS = 86_400_000
#: Bound on the producers one partition tracks; a snapshot with more is corrupt.
PRODUCERS_MAX = 1_000_000

SNAPSHOT_MAGIC = b"RLPS"
SNAPSHOT_VERSION = 2
_SNAPSHOT_HEAD = struct.Struct("<4sHI")
SNAPSHOT_HEADER_SIZE = _SNAPSHOT_HEAD.size  # 10


def snapshot_file_name(end_offset: int) -> str:
    """File name of the snapshot taken when the log end offset was ``end_offset``."""
    return f"{end_offset:020d}.snapshot"


def next_sequence(seq: int, count: int = 1) -> int:
    """``seq`` advanced by ``count``, wrapping after MAX_SEQUENCE."""
    return (seq + count) % (MAX_SEQUENCE + 1)


class Verdict(enum.Enum):
    APPEND = "append"
    DUPLICATE = "duplicate"
    OUT_OF_ORDER_SEQUENCE = "out_of_order_sequence"
    INVALID_PRODUCER_EPOCH = "invalid_producer_epoch"
    INVALID_TXN_STATE = "invalid_txn_state"  # a plain batch inside an open transaction
    COORDINATOR_FENCED = "coordinator_fenced"  # a marker of a stale coordinator epoch
    INVALID = "invalid"  # fields no producer may send (negative sequence, count < 1)


_VERDICT_CODES = {
    Verdict.APPEND: ErrorCode.NONE,
    Verdict.DUPLICATE: ErrorCode.NONE,  # answered with the original offsets, as success
    Verdict.OUT_OF_ORDER_SEQUENCE: ErrorCode.OUT_OF_ORDER_SEQUENCE,
    Verdict.INVALID_PRODUCER_EPOCH: ErrorCode.INVALID_PRODUCER_EPOCH,
    Verdict.INVALID_TXN_STATE: ErrorCode.INVALID_TXN_STATE,
    Verdict.COORDINATOR_FENCED: ErrorCode.TRANSACTION_COORDINATOR_FENCED,
    Verdict.INVALID: ErrorCode.INVALID_REQUEST,
}


@dataclass(frozen=True, slots=True)
class BatchMetadata:
    """Sequences and offsets of one appended batch."""

    first_seq: int
    last_seq: int
    base_offset: int
    last_offset: int


@dataclass(frozen=True, slots=True)
class Check:
    """The answer of :meth:`ProducerStateManager.check`.

    ``duplicate`` holds the original batch when ``verdict`` is DUPLICATE: answer the
    produce with its ``base_offset`` instead of appending.
    """

    verdict: Verdict
    message: str = ""
    duplicate: BatchMetadata | None = None

    @property
    def error_code(self) -> ErrorCode:
        return _VERDICT_CODES[self.verdict]


_APPEND = Check(Verdict.APPEND)


@dataclass(slots=True)
class ProducerEntry:
    """What a partition remembers of one producer."""

    producer_id: int
    epoch: int
    batches: list[BatchMetadata] = field(default_factory=list)  # oldest first
    last_timestamp_ms: int = -1
    #: first offset of the producer's open transaction (-1: none)
    txn_first_offset: int = -1
    #: coordinator epoch of the last marker (-1: none yet)
    coordinator_epoch: int = -1

    @property
    def last_seq(self) -> int:
        return self.batches[-1].last_seq if self.batches else NO_SEQUENCE

    @property
    def last_offset(self) -> int:
        return self.batches[-1].last_offset if self.batches else -1


@dataclass(frozen=True, slots=True)
class CompletedTxn:
    """A transaction a marker at ``last_offset`` closed on this partition.

    ``last_stable_offset``: the partition's LSO right after it (Kafka's: the first
    offset of the earliest other open transaction, else ``last_offset + 1``; the high
    watermark plays no part), as the aborted-transaction index records it.
    """

    producer_id: int
    first_offset: int
    last_offset: int
    aborted: bool
    last_stable_offset: int


class ProducerStateManager:
    """Producer ids, epochs and recent sequences of one partition.

    ``end_offset`` is the offset after the last batch applied: a snapshot taken now
    covers the log below it, and recovery replays batches from there.
    """

    def __init__(self, end_offset: int = 0):
        self.producers: dict[int, ProducerEntry] = {}
        self.end_offset = end_offset
        #: producer id -> first offset of its open transaction (mirrors the entries)
        self.ongoing: dict[int, int] = {}
        #: (first offset, marker offset) of completed transactions whose marker may
        #: still be at or above the high watermark (pruned by last_stable_offset)
        self.unreplicated: list[tuple[int, int]] = []

    # ------------------------------------------------------------------ leader path

    def check(self, producer_id: int, epoch: int, first_seq: int, count: int,
              transactional: bool = False) -> Check:
        """Decide what to do with a produced batch (nothing changes).

        Args:
            producer_id: the batch's producer id (>= 0; non-idempotent batches skip this).
            epoch: its producer epoch.
            first_seq: its base sequence.
            count: its record count (last sequence = first_seq + count - 1, wrapping).
            transactional: the batch is transactional. (That its partition is in the
                producer's ongoing transaction is the coordinator's to verify, KIP-890.)
        """
        if producer_id < 0 or epoch < 0 or not 0 <= first_seq <= MAX_SEQUENCE or count < 1:
            return Check(
                Verdict.INVALID,
                f"idempotent batch of producer {producer_id} has epoch {epoch}, "
                f"sequence {first_seq}, {count} records",
            )
        entry = self.producers.get(producer_id)
        if entry is None:
            return _APPEND
        if not transactional and entry.txn_first_offset >= 0 and epoch == entry.epoch:
            return Check(
                Verdict.INVALID_TXN_STATE,
                f"producer {producer_id} sent a non-transactional batch inside its open "
                f"transaction (from offset {entry.txn_first_offset})",
            )
        if epoch < entry.epoch:
            return Check(
                Verdict.INVALID_PRODUCER_EPOCH,
                f"producer {producer_id} epoch {epoch} is fenced by epoch {entry.epoch}",
            )
        if epoch > entry.epoch:
            if first_seq != 0:
                return Check(
                    Verdict.OUT_OF_ORDER_SEQUENCE,
                    f"producer {producer_id} new epoch {epoch} must start at sequence 0, "
                    f"not {first_seq}",
                )
            return _APPEND
        last_seq = next_sequence(first_seq, count - 1)
        for b in entry.batches:
            if b.first_seq == first_seq and b.last_seq == last_seq:
                return Check(Verdict.DUPLICATE, "", b)
        expected = 0 if entry.last_seq == NO_SEQUENCE else next_sequence(entry.last_seq)
        if first_seq != expected:
            return Check(
                Verdict.OUT_OF_ORDER_SEQUENCE,
                f"producer {producer_id} epoch {epoch} sent sequence {first_seq}, "
                f"expected {expected}",
            )
        return _APPEND

    def update(
        self,
        producer_id: int,
        epoch: int,
        first_seq: int,
        count: int,
        base_offset: int,
        timestamp_ms: int = -1,
        transactional: bool = False,
    ) -> None:
        """Remember a batch the leader appended after ``check`` said APPEND.

        ``count`` records got offsets ``base_offset .. base_offset + count - 1``.
        Nothing is durable: the batch in the log is, and a rebuild finds it again.
        """
        assert count >= 1 and base_offset >= 0
        self._record(
            producer_id,
            epoch,
            BatchMetadata(first_seq, next_sequence(first_seq, count - 1), base_offset,
                          base_offset + count - 1),
            timestamp_ms,
        )
        if transactional:
            self._begin_txn(producer_id, base_offset)

    def _begin_txn(self, pid: int, offset: int) -> None:
        entry = self.producers[pid]
        if entry.txn_first_offset < 0:
            entry.txn_first_offset = offset
            self.ongoing[pid] = offset

    # ------------------------------------------------------------------ transactions

    def check_marker(self, producer_id: int, epoch: int, coordinator_epoch: int) -> Check:
        """May a coordinator's marker for ``producer_id`` be appended? (Nothing changes.)

        INVALID_PRODUCER_EPOCH for an epoch below the producer's, COORDINATOR_FENCED for
        a coordinator epoch below the last marker's. A producer this partition does not
        know is accepted, as in Kafka: the coordinator marks every partition it added,
        whether or not the producer wrote there (or its state expired)."""
        if producer_id < 0 or epoch < 0 or coordinator_epoch < 0:
            return Check(Verdict.INVALID, f"marker of producer {producer_id} epoch {epoch} "
                                          f"coordinator epoch {coordinator_epoch}")
        entry = self.producers.get(producer_id)
        if entry is None:
            return _APPEND
        if epoch < entry.epoch:
            return Check(Verdict.INVALID_PRODUCER_EPOCH,
                         f"marker of producer {producer_id} epoch {epoch} is older than "
                         f"epoch {entry.epoch}")
        if coordinator_epoch < entry.coordinator_epoch:
            return Check(Verdict.COORDINATOR_FENCED,
                         f"marker of coordinator epoch {coordinator_epoch}, the last was "
                         f"{entry.coordinator_epoch}")
        return _APPEND

    def complete_txn(self, producer_id: int, epoch: int, coordinator_epoch: int,
                     marker_offset: int, aborted: bool,
                     timestamp_ms: int = -1) -> CompletedTxn:
        """A marker was appended at ``marker_offset``: the producer's open transaction
        (if any) is closed, its epoch becomes the marker's. Returns what closed (a
        transaction without data here covers the marker alone, as in Kafka)."""
        entry = self.producers.get(producer_id)
        if entry is None:
            entry = self.producers[producer_id] = ProducerEntry(producer_id, epoch)
        if epoch != entry.epoch:  # (the new epoch's first batch starts at sequence 0)
            entry.epoch = epoch
            entry.batches.clear()
        entry.coordinator_epoch = max(entry.coordinator_epoch, coordinator_epoch)
        entry.last_timestamp_ms = max(entry.last_timestamp_ms, timestamp_ms)
        first = entry.txn_first_offset if entry.txn_first_offset >= 0 else marker_offset
        entry.txn_first_offset = -1
        self.ongoing.pop(producer_id, None)
        self.end_offset = max(self.end_offset, marker_offset + 1)
        self.unreplicated.append((first, marker_offset))
        others = min(self.ongoing.values(), default=None)
        lso = marker_offset + 1 if others is None else min(others, marker_offset + 1)
        return CompletedTxn(producer_id, first, marker_offset, aborted, lso)

    def first_unstable_offset(self, high_watermark: int) -> int | None:
        """First offset of the earliest transaction that is open, or closed by a marker
        not yet below ``high_watermark``; None when there is none. Prunes the closed
        ones the high watermark has passed (it only grows)."""
        if not self.unreplicated and not self.ongoing:
            return None  # (the common case: asked by every read_committed fetch)
        self.unreplicated = [(f, m) for f, m in self.unreplicated if m >= high_watermark]
        firsts = [f for f, _m in self.unreplicated]
        if self.ongoing:
            firsts.append(min(self.ongoing.values()))
        return min(firsts) if firsts else None

    def last_stable_offset(self, high_watermark: int) -> int:
        """The offset a read_committed fetch stops at: the first unstable offset, never
        above the high watermark."""
        first = self.first_unstable_offset(high_watermark)
        return high_watermark if first is None else min(first, high_watermark)

    # ------------------------------------------------------------------ replay path

    def apply_header(self, h: BatchHeader, coordinator_epoch: int = -1,
                     aborted: bool = False) -> CompletedTxn | None:
        """Replay a batch from the log (recovery, follower append). No validation.

        A batch without producer id only advances ``end_offset``. A control batch
        closes its producer's transaction: pass the marker's ``coordinator_epoch`` and
        whether it aborts (the caller reads the marker:
        ``records.read_control_marker``); the :class:`CompletedTxn` is returned. Without
        them the transaction still closes (the last stable offset is right), but the
        coordinator epoch is not learnt and the result says committed.
        """
        if h.attributes & ATTR_CONTROL:
            return self.complete_txn(h.producer_id, h.producer_epoch, coordinator_epoch,
                                     h.base_offset, aborted, h.max_timestamp)
        if h.producer_id != NO_PRODUCER_ID and h.base_sequence >= 0:
            self._record(
                h.producer_id,
                h.producer_epoch,
                BatchMetadata(h.base_sequence, h.last_sequence, h.base_offset, h.last_offset),
                h.max_timestamp,
            )
            if h.attributes & ATTR_TRANSACTIONAL:
                self._begin_txn(h.producer_id, h.base_offset)
        self.end_offset = max(self.end_offset, h.next_offset)
        return None

    def _record(self, pid: int, epoch: int, batch: BatchMetadata, timestamp_ms: int) -> None:
        entry = self.producers.get(pid)
        if entry is None:
            entry = self.producers[pid] = ProducerEntry(pid, epoch)
        elif epoch != entry.epoch:
            # A new epoch forgets the old one's batches; an older one only appears when
            # replaying a log the leader already validated, so follow it as Kafka does.
            entry.epoch = epoch
            entry.batches.clear()
        entry.batches.append(batch)
        if len(entry.batches) > BATCHES_RETAINED:
            del entry.batches[0]
        entry.last_timestamp_ms = max(entry.last_timestamp_ms, timestamp_ms)
        self.end_offset = max(self.end_offset, batch.last_offset + 1)

    @classmethod
    def rebuild(
        cls, headers: Iterable[BatchHeader], snapshot: bytes | None = None
    ) -> ProducerStateManager:
        """State from an optional snapshot plus the batch headers after it.

        Headers below the snapshot's ``end_offset`` are skipped, so a caller may pass
        the headers of whole segments.

        Raises:
            CorruptSnapshotError: the snapshot does not verify.
        """
        state = cls.restore(snapshot) if snapshot is not None else cls()
        start = state.end_offset
        for h in headers:
            if h.base_offset >= start:
                state.apply_header(h)  # (a marker's epochs and result: see apply_header)
        return state

    # ------------------------------------------------------------------ housekeeping

    def remove_expired(self, now_ms: int, expiration_ms: int = PRODUCER_ID_EXPIRATION_MS) -> list[int]:
        """Forget producers idle for longer than ``expiration_ms``; returns their ids."""
        gone = [
            pid
            for pid, e in self.producers.items()
            if e.last_timestamp_ms >= 0 and now_ms - e.last_timestamp_ms > expiration_ms
            and e.txn_first_offset < 0  # (an open transaction keeps its producer)
        ]
        for pid in gone:
            del self.producers[pid]
        return gone

    def truncate_head(self, log_start_offset: int) -> None:
        """Retention moved the log start: forget producers with no batch left in the log."""
        for pid in [p for p, e in self.producers.items()
                    if e.last_offset < log_start_offset and e.txn_first_offset < 0]:
            del self.producers[pid]

    # ------------------------------------------------------------------ snapshots

    def snapshot(self) -> bytes:
        """Bytes to persist (CRC-protected). Nothing is written here."""
        body = cbor2.dumps(
            [
                self.end_offset,
                [
                    [
                        e.producer_id,
                        e.epoch,
                        e.last_timestamp_ms,
                        [[b.first_seq, b.last_seq, b.base_offset, b.last_offset] for b in e.batches],
                        e.txn_first_offset,
                        e.coordinator_epoch,
                    ]
                    for _, e in sorted(self.producers.items())
                ],
                [list(u) for u in self.unreplicated],
            ]
        )
        return _SNAPSHOT_HEAD.pack(SNAPSHOT_MAGIC, SNAPSHOT_VERSION, _crc32c.crc32c(body)) + body

    @classmethod
    def restore(cls, data: bytes) -> ProducerStateManager:
        """Parse :meth:`snapshot` bytes. Raises CorruptSnapshotError and nothing else."""
        if len(data) < SNAPSHOT_HEADER_SIZE:
            raise CorruptSnapshotError(f"producer snapshot of {len(data)} bytes is too short")
        magic, version, crc = _SNAPSHOT_HEAD.unpack_from(data, 0)
        if magic != SNAPSHOT_MAGIC or version not in (1, SNAPSHOT_VERSION):
            raise CorruptSnapshotError(f"not a producer snapshot (magic {magic!r}, version {version})")
        body = memoryview(data)[SNAPSHOT_HEADER_SIZE:]
        if _crc32c.crc32c(body) != crc:
            raise CorruptSnapshotError("producer snapshot CRC mismatch")
        try:
            if version == 1:
                end_offset, producers = cbor2.loads(body)
                producers = [[*p, -1, -1] for p in producers]
                unreplicated = []
            else:
                end_offset, producers, unreplicated = cbor2.loads(body)
            state = cls(_nonneg(end_offset))
            if len(producers) > PRODUCERS_MAX or len(unreplicated) > PRODUCERS_MAX:
                raise ValueError(f"{len(producers)} producers, {len(unreplicated)} "
                                 "unreplicated transactions")
            for pid, epoch, last_ts, batches, txn_first, coordinator_epoch in producers:
                if len(batches) > BATCHES_RETAINED:
                    raise ValueError(f"{len(batches)} batches for producer {pid}")
                entry = ProducerEntry(
                    _nonneg(pid),
                    _nonneg(epoch),
                    [BatchMetadata(*(_nonneg(x) for x in b)) for b in batches],
                    _int(last_ts),
                    _int(txn_first),
                    _int(coordinator_epoch),
                )
                if pid in state.producers:
                    raise ValueError(f"producer {pid} twice")
                if not -1 <= txn_first < state.end_offset or coordinator_epoch < -1:
                    raise ValueError(f"producer {pid}: open transaction at {txn_first}, "
                                     f"end offset {state.end_offset}")
                state.producers[pid] = entry
                if txn_first >= 0:
                    state.ongoing[pid] = txn_first
            for first, marker in unreplicated:
                if not 0 <= _int(first) <= _int(marker) < state.end_offset:
                    raise ValueError(f"completed transaction {first}..{marker}")
                state.unreplicated.append((first, marker))
        except CorruptSnapshotError:
            raise
        except Exception as e:  # cbor2 and unpacking raise many types on garbage
            raise CorruptSnapshotError(f"producer snapshot does not parse: {e!r}") from None
        return state


# --------------------------------------------------------------------------- producer ids

#: Ids a node reserves per AllocateProducerIds record (Kafka: 1000 per block).
PRODUCER_ID_BLOCK_SIZE = 1000


class ProducerIdBlocks:
    """Hands out producer ids from blocks reserved in the metadata quorum. Pure.

    Interface with the node (cluster mode), per InitProducerId request:

    1. ``pid = blocks.next_id()``; if it returns an id, answer ``(pid, epoch 0)``.
    2. If it returns None (no block, or the block is used up), propose
       ``metadata.records.AllocateProducerIds(broker_id, PRODUCER_ID_BLOCK_SIZE)``
       through the quorum (a replicated write, so the block is durable before any id
       of it is handed out); the applied ``Result.value`` is the block's first id:
       ``blocks.add_block(first, PRODUCER_ID_BLOCK_SIZE)`` and retry step 1. Until the
       write commits, answer COORDINATOR_LOAD_IN_PROGRESS (retriable) or wait.
    3. ``blocks.wants_prefetch`` turns true when less than 10% of the block is
       left: propose the next block in the background, so requests rarely wait.

    The quorum's ``next_producer_id`` only grows and survives restarts and controller
    failover, so an id is never handed out twice; ids of a block a node held when it
    crashed are simply skipped. A single node without quorum can do the same with a
    checkpointed counter (advance and fsync the counter before handing out a block).
    """

    def __init__(self) -> None:
        self._blocks: list[tuple[int, int]] = []  # (next id, end), at most 2
        self.prefetch_pending = False

    def add_block(self, first_id: int, count: int) -> None:
        assert first_id >= 0 and count >= 1
        assert len(self._blocks) < 2, "at most the current block and one prefetched"
        self._blocks.append((first_id, first_id + count))
        self.prefetch_pending = False

    def next_id(self) -> int | None:
        while self._blocks:
            nxt, end = self._blocks[0]
            if nxt < end:
                self._blocks[0] = (nxt + 1, end)
                return nxt
            del self._blocks[0]
        return None

    @property
    def remaining(self) -> int:
        return sum(end - nxt for nxt, end in self._blocks)

    @property
    def wants_prefetch(self) -> bool:
        return not self.prefetch_pending and len(self._blocks) < 2 and (
            self.remaining < PRODUCER_ID_BLOCK_SIZE // 10
        )
