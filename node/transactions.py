"""Transaction coordinator: Kafka's transaction state machine (KIP-98, KIP-890) as a pure
state machine. node/txn_host.py hosts it on every node (issue #33); the native protocol
and the Kafka listener (node/kafka/txn_handlers.py) call it.

No I/O and no clock, like :mod:`~raftlog.node.groups`: every operation takes
``now_ms`` and answers an :class:`Outcome`:

* ``response`` -- answer the request now (nothing to write), or
* ``write`` -- a :class:`Write`: append its record to ``__transaction_state``-
  ``partition`` (acks=all) and only then call :meth:`TransactionCoordinator.persisted`,
  which applies the transition and returns the response and the effects that follow
  from it (:class:`SendMarkers`); on an append refused (nothing appended) call
  :meth:`TransactionCoordinator.write_failed`. An append in the log but not replicated
  in time is neither: the write stays outstanding until the ISR takes it (then
  ``persisted``) or leadership moves (``unload``) -- reverting it would let a second,
  contrary decision follow it into the log. While a write of a transactional id is
  outstanding, other requests for that id get CONCURRENT_TRANSACTIONS (Kafka's
  ``pendingState``), so transitions of one id are applied strictly in log order.

An error of the calling request raises :class:`ApiError` (Kafka's codes) and changes
nothing.

States (Kafka's TransactionState)::

    Empty ──AddPartitions/AddOffsets──▶ Ongoing ──EndTxn(commit)──▶ PrepareCommit ──markers──▶ CompleteCommit
      ▲                                   │ ──EndTxn(abort), timeout,                           │
      │                                   │    InitProducerId (fence)──▶ PrepareAbort ──markers──▶ CompleteAbort
      └──────── InitProducerId ◀──────────┴─────────────────────────── (from Empty / Complete*) ─┘
    Empty / Complete* ──idle transactional.id.expiration.ms──▶ Dead (a tombstone)
    Prepare* ──markers, and the producer's next AddPartitions waiting──▶ Ongoing (one
        write for the Complete* and the add: ``complete_and_add``)

Epochs (KIP-890, "transactions V2"): every EndTxn, timeout abort and fence bumps the
producer epoch, and the markers carry the bumped epoch, so a delayed produce or
EndTxn of the ended transaction is refused everywhere (INVALID_PRODUCER_EPOCH at the
partitions, PRODUCER_FENCED here). When the bump reaches ``max_producer_epoch`` the
markers use it and the producer continues under a new producer id at epoch 0
(``next_producer_id``). A retried EndTxn (epoch one below the markers', same result)
is answered as the first one was.

Transaction version 1 (Kafka's clients' EndTxn v0-v4: kafka-python, librdkafka,
aiokafka): such a client keeps its epoch from one transaction to the next and would be
fenced by the bump. A request names the client's ``transaction_version`` (the native
SDK: 2, the default; the Kafka listener: 1) and the transaction records it, as Kafka's
coordinator records the client's; a version-1 EndTxn writes the markers with the
client's current epoch and bumps nothing, and its retry is the same epoch with the
same result. Timeout aborts and fences bump the epoch in both versions (as Kafka).

``__transaction_state`` records (CBOR; compacted, one key per transactional id)::

    key    [1, transactional_id]
    value  {"v": 1, "pid", "epoch", "timeout_ms", "state", "partitions": [[topic, p], ...],
            "start_ms", "update_ms", "mpid", "mepoch", "next_pid", "fenced", "tv"}
    Dead   the key with a null value (tombstone)

``mpid``/``mepoch``: the producer id and epoch the markers of the ended transaction
carry (-1 outside Prepare*/Complete*); ``next_pid``: the producer id after an epoch
overflow (-1 otherwise); ``fenced``: the transaction was aborted by a new
instance's InitProducerId (its old instance's EndTxn retries are PRODUCER_FENCED);
``tv``: the transaction version of the client's last AddPartitions/EndTxn (absent in
records written before it existed: 2). A new coordinator replays a partition's records between
:meth:`~TransactionCoordinator.begin_loading` and
:meth:`~TransactionCoordinator.finish_loading`; the latter answers the
:class:`SendMarkers` of every transaction caught in Prepare*, which it then finishes.
"""

from __future__ import annotations

import enum
import zlib
from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace

import cbor2

from raftlog.decoded import as_bool as _bool
from raftlog.decoded import as_int as _int
from raftlog.decoded import as_nonneg as _nonneg
from raftlog.decoded import as_str as _str
from raftlog.errors import ApiError, ErrorCode, RaftlogError
from raftlog.txn_markers import ControlType

from .groups import OFFSETS_TOPIC
from .groups import partition_for as group_partition_for

TRANSACTION_STATE_TOPIC = "__transaction_state"
TXN_KEY_TYPE = 1
VALUE_VERSION = 1
NO_PRODUCER_ID = -1
#: Kafka's transaction versions: 2 bumps the producer epoch at every EndTxn (KIP-890)
TRANSACTION_VERSIONS = (1, 2)


class CorruptTxnRecordError(RaftlogError):
    """A ``__transaction_state`` record that does not decode."""


class TxnState(enum.Enum):
    EMPTY = "Empty"
    ONGOING = "Ongoing"
    PREPARE_COMMIT = "PrepareCommit"
    PREPARE_ABORT = "PrepareAbort"
    COMPLETE_COMMIT = "CompleteCommit"
    COMPLETE_ABORT = "CompleteAbort"
    DEAD = "Dead"


_S = TxnState
#: Allowed transitions: new state -> states it may follow (Kafka's validPreviousStates).
VALID_PREVIOUS = {
    _S.EMPTY: {_S.EMPTY, _S.COMPLETE_COMMIT, _S.COMPLETE_ABORT},
    # (from Prepare*: complete_and_add, once every marker is written)
    _S.ONGOING: {_S.ONGOING, _S.EMPTY, _S.COMPLETE_COMMIT, _S.COMPLETE_ABORT,
                 _S.PREPARE_COMMIT, _S.PREPARE_ABORT},
    _S.PREPARE_COMMIT: {_S.ONGOING},
    _S.PREPARE_ABORT: {_S.ONGOING},
    _S.COMPLETE_COMMIT: {_S.PREPARE_COMMIT},
    _S.COMPLETE_ABORT: {_S.PREPARE_ABORT},
    _S.DEAD: {_S.EMPTY, _S.COMPLETE_COMMIT, _S.COMPLETE_ABORT},
}
_PREPARE = {_S.PREPARE_COMMIT, _S.PREPARE_ABORT}
_COMPLETE = {_S.COMPLETE_COMMIT, _S.COMPLETE_ABORT}


@dataclass(frozen=True, slots=True)
class TxnConfig:
    """Coordinator settings; Kafka's names: ``transaction.max.timeout.ms`` ..."""

    max_timeout_ms: int = 900_000  # transaction.max.timeout.ms
    id_expiration_ms: int = 7 * 24 * 3600 * 1000  # transactional.id.expiration.ms
    partitions: int = 50  # transaction.state.log.num.partitions
    offsets_partitions: int = 50  # offsets.topic.num.partitions (AddOffsetsToTxn)
    max_producer_epoch: int = 2**15 - 1  # i16 (lower only in tests: epoch overflow)


@dataclass(frozen=True, slots=True)
class TxnMetadata:
    """One transactional id's state, as the last record of its key says."""

    transactional_id: str
    producer_id: int
    producer_epoch: int
    timeout_ms: int
    state: TxnState
    partitions: frozenset = frozenset()  # {(topic, partition)}
    start_ms: int = -1  # when the ongoing transaction began (-1: none)
    update_ms: int = -1
    marker_producer_id: int = NO_PRODUCER_ID  # the markers' producer id and epoch
    marker_epoch: int = -1
    next_producer_id: int = NO_PRODUCER_ID  # after an epoch overflow
    fenced: bool = False  # ended by a new instance's InitProducerId: no retry succeeds
    #: the client's transaction version (2: the epoch is bumped at every EndTxn, KIP-890;
    #: 1: Kafka's clients before it, whose epoch an EndTxn keeps)
    transaction_version: int = 2

    @property
    def open(self) -> bool:
        """An undecided transaction: Ongoing, or decided but not yet marked (Prepare*)."""
        return self.state is _S.ONGOING or self.state in _PREPARE


# --------------------------------------------------------------------------- effects


@dataclass(frozen=True, slots=True)
class Write:
    """Append (``key``, ``value`` or None) to ``__transaction_state``-``partition``, then
    call :meth:`TransactionCoordinator.persisted` (or ``write_failed``) with this."""

    transactional_id: str
    partition: int
    coordinator_epoch: int
    key: bytes
    value: bytes | None
    target: TxnMetadata | None  # the state once durable (None: the id is gone)
    kind: str  # init | fence | add | end | complete | complete_add | timeout | expire


@dataclass(frozen=True, slots=True)
class SendMarkers:
    """Write ``result`` markers (WriteTxnMarkers) to every partition of ``partitions``
    with this producer id, epoch and coordinator epoch; once all are written call
    :meth:`TransactionCoordinator.complete`. Retry until then (a partition leader
    refuses a stale coordinator epoch: drop the effect then)."""

    transactional_id: str
    producer_id: int
    producer_epoch: int
    result: ControlType
    coordinator_epoch: int
    partitions: tuple  # ((topic, partition), ...), sorted


@dataclass(frozen=True, slots=True)
class Outcome:
    response: dict | None = None  # None with a write: the response comes from persisted()
    write: Write | None = None
    error: ErrorCode = ErrorCode.NONE  # (persisted() only: the request's error)
    effects: tuple = ()


# --------------------------------------------------------------------------- records


def txn_key(transactional_id: str) -> bytes:
    return cbor2.dumps([TXN_KEY_TYPE, transactional_id], canonical=True)


def txn_value(m: TxnMetadata) -> bytes:
    return cbor2.dumps({
        "v": VALUE_VERSION, "pid": m.producer_id, "epoch": m.producer_epoch,
        "timeout_ms": m.timeout_ms, "state": m.state.value,
        "partitions": sorted([t, p] for t, p in m.partitions),
        "start_ms": m.start_ms, "update_ms": m.update_ms, "mpid": m.marker_producer_id,
        "mepoch": m.marker_epoch, "next_pid": m.next_producer_id, "fenced": m.fenced,
        "tv": m.transaction_version},
        canonical=True)


def decode_txn_key(key: bytes) -> str:
    try:
        k = cbor2.loads(key)
    except Exception as e:  # cbor2 raises many types on garbage
        raise CorruptTxnRecordError(f"__transaction_state key is not CBOR: {e!r}") from None
    if (not isinstance(k, list) or len(k) != 2 or k[0] != TXN_KEY_TYPE
            or not isinstance(k[1], str) or not k[1]):
        raise CorruptTxnRecordError(f"unknown __transaction_state key {k!r}")
    return k[1]


def decode_txn_value(transactional_id: str, value: bytes) -> TxnMetadata:
    try:
        v = cbor2.loads(value)
        if not isinstance(v, dict) or v.get("v") != VALUE_VERSION:
            raise ValueError("no known version")
        parts = v["partitions"]
        if not isinstance(parts, list):
            raise ValueError("partitions are not a list")
        partitions = frozenset((_str(t), _nonneg(p)) for t, p in parts)
        m = TxnMetadata(transactional_id, _int(v["pid"]), _int(v["epoch"]),
                        _nonneg(v["timeout_ms"]), TxnState(v["state"]), partitions,
                        _int(v["start_ms"]), _int(v["update_ms"]), _int(v["mpid"]),
                        _int(v["mepoch"]), _int(v["next_pid"]), _bool(v["fenced"]),
                        _version(v.get("tv", 2)))
        if m.producer_id < 0 or m.producer_epoch < 0 or m.state is _S.DEAD:
            raise ValueError(f"producer {m.producer_id} epoch {m.producer_epoch} "
                             f"state {m.state.value}")
        if (m.state is _S.ONGOING or m.state in _PREPARE) != bool(m.partitions):
            raise ValueError(f"state {m.state.value} with {len(m.partitions)} partitions")
    except CorruptTxnRecordError:
        raise
    except Exception as e:
        raise CorruptTxnRecordError(
            f"__transaction_state value of {transactional_id!r} does not decode: {e!r}") from None
    return m


def _version(v) -> int:
    if v not in TRANSACTION_VERSIONS or type(v) is not int:
        raise ValueError(f"transaction version {v!r}")
    return v


def _valid_partitions(tps: frozenset) -> bool:
    """At least one (topic, partition >= 0)."""
    return bool(tps) and all(isinstance(t, str) and t and type(p) is int and p >= 0
                             for t, p in tps)


def partition_for(transactional_id: str, partitions: int) -> int:
    """The ``__transaction_state`` partition of a transactional id (stable)."""
    return zlib.crc32(transactional_id.encode()) % partitions


def _check_version(v: int) -> None:
    if v not in TRANSACTION_VERSIONS:
        raise ApiError(ErrorCode.INVALID_REQUEST, f"transaction version {v!r} is not 1 or 2")


# --------------------------------------------------------------------------- coordinator


class TransactionCoordinator:
    """The transactional ids of the ``__transaction_state`` partitions this node leads.

    ``new_producer_id`` hands out a fresh producer id (node: ``ProducerIdBlocks``), or
    None when none is at hand yet (the request then gets COORDINATOR_LOAD_IN_PROGRESS,
    retriable).
    """

    def __init__(self, config: TxnConfig, new_producer_id: Callable[[], int | None]):
        self.config = config
        self._new_producer_id = new_producer_id
        self.txns: dict[str, TxnMetadata] = {}
        #: owned partition -> (coordinator epoch, loaded?)
        self.partitions: dict[int, tuple[int, bool]] = {}
        #: transactional id -> its outstanding write
        self.pending: dict[str, Write] = {}
        #: transactional id -> no timer write before this time (ms): the last one failed
        self.timer_held: dict[str, int] = {}

    def partition_for(self, transactional_id: str) -> int:
        return partition_for(transactional_id, self.config.partitions)

    # ------------------------------------------------------------------ ownership

    def _owned(self, transactional_id: str) -> tuple[int, int]:
        """(partition, coordinator epoch) of an id this node coordinates."""
        if not isinstance(transactional_id, str) or not transactional_id:
            raise ApiError(ErrorCode.INVALID_REQUEST, "a transactional id is a non-empty string")
        p = self.partition_for(transactional_id)
        owned = self.partitions.get(p)
        if owned is None:
            raise ApiError(ErrorCode.NOT_COORDINATOR,
                           f"this node does not coordinate transactional id {transactional_id!r}")
        if not owned[1]:
            raise ApiError(ErrorCode.COORDINATOR_LOAD_IN_PROGRESS,
                           f"transactional id {transactional_id!r} is loading")
        return p, owned[0]

    def begin_loading(self, partition: int, coordinator_epoch: int) -> None:
        """Become coordinator of ``partition`` at ``coordinator_epoch`` (its leader
        epoch): replay its records next."""
        self.unload(partition)
        self.partitions[partition] = (coordinator_epoch, False)

    def replay(self, partition: int, key: bytes, value: bytes | None) -> None:
        """Apply one ``__transaction_state`` record while loading ``partition``.

        Raises:
            CorruptTxnRecordError: the record does not decode.
        """
        assert self.partitions.get(partition, (0, True))[1] is False, "replay only while loading"
        tid = decode_txn_key(key)
        if value is None:
            self.txns.pop(tid, None)
        else:
            self.txns[tid] = decode_txn_value(tid, value)

    def finish_loading(self, partition: int) -> list[SendMarkers]:
        """The partition serves; the markers of every transaction caught between Prepare*
        and Complete* are to be (re)sent, then completed."""
        epoch, _ = self.partitions[partition]
        self.partitions[partition] = (epoch, True)
        return [self._markers(m, epoch) for tid, m in sorted(self.txns.items())
                if m.state in _PREPARE and self.partition_for(tid) == partition]

    def unload(self, partition: int) -> None:
        """Stop coordinating ``partition``: its ids and outstanding writes are dropped
        (their requests should get NOT_COORDINATOR)."""
        self.partitions.pop(partition, None)
        for tid in [t for t in self.txns if self.partition_for(t) == partition]:
            del self.txns[tid]
        for tid in [t for t in self.pending if self.partition_for(t) == partition]:
            del self.pending[tid]
        for tid in [t for t in self.timer_held if self.partition_for(t) == partition]:
            del self.timer_held[tid]

    # ------------------------------------------------------------------ writes

    def _write(self, kind: str, partition: int, coordinator_epoch: int,
               target: TxnMetadata | None, tid: str) -> Outcome:
        old = self.txns.get(tid)
        if target is not None and old is not None:
            assert old.state in VALID_PREVIOUS[target.state], (old.state, target.state)
        w = Write(tid, partition, coordinator_epoch, txn_key(tid),
                  None if target is None else txn_value(target), target, kind)
        self.pending[tid] = w
        return Outcome(write=w)

    def persisted(self, write: Write) -> Outcome:
        """``write`` is durable: apply it. Returns the waiting request's response (or
        error) and the effects that follow (markers to send)."""
        tid = write.transactional_id
        if self.pending.get(tid) is not write:
            # (unloaded meanwhile: the new coordinator replays the record)
            return Outcome(error=ErrorCode.NOT_COORDINATOR)
        del self.pending[tid]
        owned = self.partitions.get(write.partition)
        if owned is None or owned[0] != write.coordinator_epoch:
            return Outcome(error=ErrorCode.NOT_COORDINATOR)
        m = write.target
        if m is None:
            self.txns.pop(tid, None)
            return Outcome(response={})
        self.txns[tid] = m
        kind = write.kind
        if kind == "init":
            return Outcome(response={"producer_id": m.producer_id,
                                     "producer_epoch": m.producer_epoch})
        if kind == "add":
            return Outcome(response={})
        if kind in ("end", "fence", "timeout"):
            effects = (self._markers(m, write.coordinator_epoch),)
            if kind == "fence":  # the new instance retries once the abort is complete
                return Outcome(error=ErrorCode.CONCURRENT_TRANSACTIONS, effects=effects)
            pid, epoch = self._after_end(m)
            return Outcome(response={"producer_id": pid, "producer_epoch": epoch},
                           effects=effects)
        return Outcome(response={})  # complete, expire

    def write_failed(self, write: Write, error: ErrorCode = ErrorCode.NOT_COORDINATOR) -> Outcome:
        """The append of ``write`` was refused (nothing of it is in the log) or its
        leadership moved: nothing changes. Returns the error for the waiting request
        (Kafka: NOT_COORDINATOR or COORDINATOR_NOT_AVAILABLE). Never for an append that
        is in the log and may still commit: that write stays outstanding."""
        if self.pending.get(write.transactional_id) is write:
            del self.pending[write.transactional_id]
        return Outcome(error=error)

    def _check_pending(self, tid: str) -> None:
        if tid in self.pending:
            raise ApiError(ErrorCode.CONCURRENT_TRANSACTIONS,
                           f"transactional id {tid!r} has a state change in flight: retry")

    # ------------------------------------------------------------------ helpers

    def _markers(self, m: TxnMetadata, coordinator_epoch: int) -> SendMarkers:
        return SendMarkers(m.transactional_id, m.marker_producer_id, m.marker_epoch,
                           ControlType.COMMIT if m.state in (_S.PREPARE_COMMIT,
                                                              _S.COMPLETE_COMMIT)
                           else ControlType.ABORT, coordinator_epoch, tuple(sorted(m.partitions)))

    def _after_end(self, m: TxnMetadata) -> tuple[int, int]:
        """The producer id and epoch the producer continues with after this end."""
        if m.next_producer_id != NO_PRODUCER_ID:
            return m.next_producer_id, 0
        return m.producer_id, m.producer_epoch

    def _fresh_pid(self) -> int:
        pid = self._new_producer_id()
        if pid is None:
            raise ApiError(ErrorCode.COORDINATOR_LOAD_IN_PROGRESS,
                           "no producer id at hand yet (a block is being reserved): retry")
        return pid

    def _prepare(self, m: TxnMetadata, state: TxnState, now_ms: int,
                 fenced: bool = False, bump: bool = True) -> TxnMetadata:
        """``m`` (Ongoing) decided: the epoch bumped for the markers (KIP-890), or
        (``bump`` False: a transaction-version-1 EndTxn) the markers carry the
        producer's current epoch."""
        if not bump:
            return replace(m, state=state, update_ms=now_ms,
                           marker_producer_id=m.producer_id, marker_epoch=m.producer_epoch,
                           next_producer_id=NO_PRODUCER_ID, fenced=fenced)
        epoch = m.producer_epoch + 1
        next_pid = self._fresh_pid() if epoch >= self.config.max_producer_epoch else NO_PRODUCER_ID
        return replace(m, producer_epoch=epoch, state=state, update_ms=now_ms,
                       marker_producer_id=m.producer_id, marker_epoch=epoch,
                       next_producer_id=next_pid, fenced=fenced)

    def _current(self, tid: str, producer_id: int, producer_epoch: int) -> TxnMetadata:
        """The metadata of a request from (producer_id, producer_epoch), which must be
        the id's current producer."""
        m = self.txns.get(tid)
        if m is None:
            raise ApiError(ErrorCode.INVALID_PRODUCER_ID_MAPPING,
                           f"transactional id {tid!r} is unknown: call InitProducerId first")
        if producer_id != m.producer_id:
            raise ApiError(ErrorCode.INVALID_PRODUCER_ID_MAPPING,
                           f"transactional id {tid!r} has producer id {m.producer_id}, "
                           f"not {producer_id}")
        if producer_epoch != m.producer_epoch:
            raise ApiError(ErrorCode.PRODUCER_FENCED,
                           f"producer {producer_id} epoch {producer_epoch} of {tid!r} is "
                           f"fenced by epoch {m.producer_epoch}")
        return m

    # ------------------------------------------------------------------ requests

    def init_producer_id(self, tid: str, timeout_ms: int, now_ms: int, *,
                         producer_id: int = NO_PRODUCER_ID, producer_epoch: int = -1) -> Outcome:
        """InitProducerId with a transactional id: a producer id and a bumped epoch that
        fences every earlier instance. An open transaction is aborted first (the
        answer is then CONCURRENT_TRANSACTIONS: retry). ``producer_id``/``epoch``
        (KIP-360) name the caller's current ones, which must match."""
        partition, cepoch = self._owned(tid)
        if not 0 < timeout_ms <= self.config.max_timeout_ms:
            raise ApiError(ErrorCode.INVALID_TRANSACTION_TIMEOUT,
                           f"transaction.timeout.ms {timeout_ms} is not in 1.."
                           f"{self.config.max_timeout_ms}: give the producer a timeout of "
                           f"at most {self.config.max_timeout_ms} ms, or raise the nodes' "
                           f"transaction.max.timeout.ms")
        self._check_pending(tid)
        m = self.txns.get(tid)
        if m is None:
            target = TxnMetadata(tid, self._fresh_pid(), 0, timeout_ms, _S.EMPTY,
                                 update_ms=now_ms)
            return self._write("init", partition, cepoch, target, tid)
        if producer_id != NO_PRODUCER_ID:  # (KIP-360: must be the current producer)
            self._current(tid, producer_id, producer_epoch)
        if m.state in _PREPARE:
            raise ApiError(ErrorCode.CONCURRENT_TRANSACTIONS,
                           f"transaction of {tid!r} is completing: retry")
        if m.state is _S.ONGOING:  # fence the old instance: abort its transaction
            return self._write("fence", partition, cepoch,
                               self._prepare(m, _S.PREPARE_ABORT, now_ms, fenced=True), tid)
        if m.producer_epoch + 1 >= self.config.max_producer_epoch:
            pid, epoch = self._fresh_pid(), 0
        else:
            pid, epoch = m.producer_id, m.producer_epoch + 1
        target = TxnMetadata(tid, pid, epoch, timeout_ms, _S.EMPTY, update_ms=now_ms)
        return self._write("init", partition, cepoch, target, tid)

    def add_partitions(self, tid: str, producer_id: int, producer_epoch: int,
                       partitions: Iterable[tuple[str, int]], now_ms: int, *,
                       transaction_version: int = 2) -> Outcome:
        """AddPartitionsToTxn: the partitions join the (maybe new) ongoing transaction,
        run by a client of ``transaction_version``."""
        partition, cepoch = self._owned(tid)
        _check_version(transaction_version)
        self._check_pending(tid)
        m = self._current(tid, producer_id, producer_epoch)
        if m.state in _PREPARE:
            raise ApiError(ErrorCode.CONCURRENT_TRANSACTIONS,
                           f"transaction of {tid!r} is completing: retry")
        new = frozenset(partitions)
        if not _valid_partitions(new):
            raise ApiError(ErrorCode.INVALID_REQUEST,
                           "AddPartitionsToTxn names at least one (topic, partition >= 0)")
        if (m.state is _S.ONGOING and new <= m.partitions
                and m.transaction_version == transaction_version):
            return Outcome(response={})
        start = m.start_ms if m.state is _S.ONGOING else now_ms
        target = replace(m, state=_S.ONGOING, partitions=m.partitions | new, start_ms=start,
                         update_ms=now_ms, marker_producer_id=NO_PRODUCER_ID,
                         marker_epoch=-1, next_producer_id=NO_PRODUCER_ID, fenced=False,
                         transaction_version=transaction_version)
        return self._write("add", partition, cepoch, target, tid)

    def offsets_partition(self, group_id: str) -> tuple[str, int]:
        """The ``__consumer_offsets`` partition AddOffsetsToTxn adds for ``group_id``."""
        return OFFSETS_TOPIC, group_partition_for(group_id, self.config.offsets_partitions)

    def add_offsets(self, tid: str, producer_id: int, producer_epoch: int, group_id: str,
                    now_ms: int, *, transaction_version: int = 2) -> Outcome:
        """AddOffsetsToTxn: the group's ``__consumer_offsets`` partition joins."""
        return self.add_partitions(tid, producer_id, producer_epoch,
                                   [self.offsets_partition(group_id)], now_ms,
                                   transaction_version=transaction_version)

    def verify_partitions(self, tid: str, producer_id: int, producer_epoch: int,
                          partitions: Iterable[tuple[str, int]]) -> dict:
        """AddPartitionsToTxn v4 "verify only" (KIP-890): {partition: NONE when it is in
        the ongoing transaction of exactly this producer, else INVALID_TXN_STATE}.
        Nothing changes. A partition leader appends a transactional batch only on NONE."""
        self._owned(tid)
        m = self.txns.get(tid)
        w = self.pending.get(tid)
        ok = (m is not None and m.state is _S.ONGOING and m.producer_id == producer_id
              and m.producer_epoch == producer_epoch
              and (w is None or w.kind == "add"))  # (not while a decision is in flight)
        return {tp: ErrorCode.NONE if ok and tp in m.partitions else ErrorCode.INVALID_TXN_STATE
                for tp in partitions}

    def end_txn(self, tid: str, producer_id: int, producer_epoch: int, commit: bool,
                now_ms: int, *, transaction_version: int = 2) -> Outcome:
        """EndTxn: decide the ongoing transaction (durably, PrepareCommit/PrepareAbort with
        the epoch bumped; ``transaction_version`` 1: not bumped), then its markers are
        sent. The response carries the producer id and epoch to continue with. A retry
        of a decided EndTxn answers the same."""
        partition, cepoch = self._owned(tid)
        _check_version(transaction_version)
        self._check_pending(tid)
        m = self.txns.get(tid)
        wanted = _S.COMPLETE_COMMIT if commit else _S.COMPLETE_ABORT
        # a retry names the epoch the client held when it sent the first EndTxn: one
        # below the markers' (version 2), or theirs (version 1: no bump)
        held = producer_epoch + 1 if transaction_version == 2 else producer_epoch
        if m is not None and (m.state in _PREPARE or m.state in _COMPLETE) and (
                producer_id == m.marker_producer_id and held == m.marker_epoch):
            # a retry of the EndTxn (or a client's abort after a timeout abort)
            if m.fenced:
                raise ApiError(ErrorCode.PRODUCER_FENCED,
                               f"producer {producer_id} of {tid!r} was fenced by a new instance")
            same = (m.state is wanted or m.state is (_S.PREPARE_COMMIT if commit
                                                      else _S.PREPARE_ABORT))
            if not same:
                raise ApiError(ErrorCode.INVALID_TXN_STATE,
                               f"the transaction of {tid!r} was already "
                               f"{'aborted' if commit else 'committed'}")
            if m.state in _PREPARE:
                raise ApiError(ErrorCode.CONCURRENT_TRANSACTIONS,
                               f"transaction of {tid!r} is completing: retry")
            # (Complete*: the producer id and epoch to continue with are the current ones)
            return Outcome(response={"producer_id": m.producer_id,
                                     "producer_epoch": m.producer_epoch})
        m = self._current(tid, producer_id, producer_epoch)
        if m.state is not _S.ONGOING:
            raise ApiError(ErrorCode.INVALID_TXN_STATE,
                           f"transactional id {tid!r} has no ongoing transaction to "
                           f"{'commit' if commit else 'abort'} (state {m.state.value})")
        target = self._prepare(m, _S.PREPARE_COMMIT if commit else _S.PREPARE_ABORT, now_ms,
                               bump=transaction_version == 2)
        return self._write("end", partition, cepoch,
                           replace(target, transaction_version=transaction_version), tid)

    def _decided(self, tid: str, coordinator_epoch: int) -> tuple[int, int, TxnMetadata]:
        """(partition, coordinator epoch, metadata) of ``tid``'s decided transaction,
        whose markers (of ``coordinator_epoch``) are written."""
        partition, cepoch = self._owned(tid)
        if cepoch != coordinator_epoch:
            raise ApiError(ErrorCode.NOT_COORDINATOR,
                           f"markers of coordinator epoch {coordinator_epoch}, now {cepoch}")
        self._check_pending(tid)
        m = self.txns.get(tid)
        if m is None or m.state not in _PREPARE:
            raise ApiError(ErrorCode.INVALID_TXN_STATE,
                           f"transactional id {tid!r} has no transaction to complete")
        return partition, cepoch, m

    def complete(self, tid: str, coordinator_epoch: int, now_ms: int) -> Outcome:
        """Every marker of the decided transaction is written: CompleteCommit/Abort.

        Raises:
            ApiError: NOT_COORDINATOR (the markers were of another coordinator epoch),
                CONCURRENT_TRANSACTIONS, INVALID_TXN_STATE (nothing to complete).
        """
        partition, cepoch, m = self._decided(tid, coordinator_epoch)
        pid, epoch = self._after_end(m)
        target = replace(m, producer_id=pid, producer_epoch=epoch,
                         state=(_S.COMPLETE_COMMIT if m.state is _S.PREPARE_COMMIT
                                else _S.COMPLETE_ABORT),
                         partitions=frozenset(), start_ms=-1, update_ms=now_ms,
                         next_producer_id=NO_PRODUCER_ID)
        return self._write("complete", partition, cepoch, target, tid)

    def complete_and_add(self, tid: str, coordinator_epoch: int, now_ms: int,
                         producer_id: int, producer_epoch: int,
                         partitions: Iterable[tuple[str, int]], *,
                         transaction_version: int = 2) -> Outcome:
        """Every marker of the decided transaction is written and an AddPartitionsToTxn
        of the producer's next transaction waits for that: one write goes from
        Prepare* straight to the next Ongoing, the Complete* record skipped (a
        coordinator replaying it finds the new transaction open; the old one needs
        nothing more, its markers are in the partitions). The waiting add, asked again,
        then finds its partitions added and writes nothing. Anything else -- another
        producer (a fence, a zombie's add), bad partitions -- is :meth:`complete` alone.

        Raises:
            ApiError: as :meth:`complete`.
        """
        partition, cepoch, m = self._decided(tid, coordinator_epoch)
        new = frozenset(partitions)
        if (m.fenced or transaction_version not in TRANSACTION_VERSIONS
                or (producer_id, producer_epoch) != self._after_end(m)
                or not _valid_partitions(new)):
            return self.complete(tid, coordinator_epoch, now_ms)
        target = replace(m, producer_id=producer_id, producer_epoch=producer_epoch,
                         state=_S.ONGOING, partitions=new, start_ms=now_ms, update_ms=now_ms,
                         marker_producer_id=NO_PRODUCER_ID, marker_epoch=-1,
                         next_producer_id=NO_PRODUCER_ID, fenced=False,
                         transaction_version=transaction_version)
        return self._write("complete_add", partition, cepoch, target, tid)

    # ------------------------------------------------------------------ timers

    def tick(self, now_ms: int) -> list[Write]:
        """Writes due at ``now_ms``: the abort (epoch bumped: the producer is fenced) of
        every transaction open longer than its timeout, and the tombstone of every id
        idle longer than ``id_expiration_ms``. Each is a :class:`Write` to carry out as
        a request's; ids with a write in flight wait for the next tick."""
        out = []
        for tid, m in sorted(self.txns.items()):
            p = self.partition_for(tid)
            owned = self.partitions.get(p)
            if tid in self.pending or owned is None or not owned[1]:
                continue
            if tid in self.timer_held:
                if now_ms < self.timer_held[tid]:
                    continue
                del self.timer_held[tid]
            if m.state is _S.ONGOING and now_ms > m.start_ms + m.timeout_ms:
                try:
                    target = self._prepare(m, _S.PREPARE_ABORT, now_ms)
                except ApiError:  # no producer id at hand: the next tick retries
                    continue
                out.append(self._write("timeout", p, owned[0], target, tid).write)
            elif (m.state is _S.EMPTY or m.state in _COMPLETE) and (
                    now_ms > m.update_ms + self.config.id_expiration_ms):
                out.append(self._write("expire", p, owned[0], None, tid).write)
        return out

    def hold_timer(self, tid: str, until_ms: int) -> None:
        """The timer's write for ``tid`` failed (refused: e.g. too few in-sync replicas
        of its partition): :meth:`tick` tries it again at ``until_ms``, not before."""
        self.timer_held[tid] = until_ms

    def next_deadline_ms(self) -> int | None:
        held = self.timer_held
        times = [max(m.start_ms + m.timeout_ms + 1, held.get(t, 0))
                 for t, m in self.txns.items() if m.state is _S.ONGOING]
        times += [max(m.update_ms + self.config.id_expiration_ms + 1, held.get(t, 0))
                  for t, m in self.txns.items() if m.state is _S.EMPTY or m.state in _COMPLETE]
        return min(times) if times else None

    # ------------------------------------------------------------------ admin

    def describe(self, tid: str) -> dict:
        """DescribeTransactions of one id."""
        self._owned(tid)
        m = self.txns.get(tid)
        if m is None:
            raise ApiError(ErrorCode.TRANSACTIONAL_ID_NOT_FOUND,
                           f"transactional id {tid!r} is unknown")
        return {"transactional_id": tid, "state": m.state.value, "producer_id": m.producer_id,
                "producer_epoch": m.producer_epoch, "timeout_ms": m.timeout_ms,
                "start_ms": m.start_ms, "partitions": sorted(m.partitions)}

    def list_transactions(self, states: Iterable[str] = (), producer_ids: Iterable[int] = (),
                          *, duration_ms: int = -1, now_ms: int = 0) -> list[dict]:
        """ListTransactions: ids of the loaded partitions, filtered (empty = all);
        ``duration_ms`` >= 0: only transactions open (Ongoing, Prepare*) for longer than
        that at ``now_ms`` (Kafka's DurationFilter, KIP-994).

        Raises:
            ApiError: COORDINATOR_LOAD_IN_PROGRESS while a partition this node leads is
                being loaded (its ids would be missing from the list).
        """
        loading = sorted(p for p, (_e, loaded) in self.partitions.items() if not loaded)
        if loading:
            raise ApiError(ErrorCode.COORDINATOR_LOAD_IN_PROGRESS,
                           f"{TRANSACTION_STATE_TOPIC} partitions {loading} are loading: retry")
        states, pids = set(states), set(producer_ids)
        out = []
        for tid, m in sorted(self.txns.items()):
            if not self.partitions.get(self.partition_for(tid), (0, False))[1]:
                continue
            if (states and m.state.value not in states) or (pids and m.producer_id not in pids):
                continue
            if duration_ms >= 0 and not (m.open and m.start_ms >= 0
                                         and now_ms - m.start_ms > duration_ms):
                continue
            out.append({"transactional_id": tid, "producer_id": m.producer_id,
                        "state": m.state.value, "start_ms": m.start_ms if m.open else -1})
        return out


__all__ = ["TRANSACTION_STATE_TOPIC", "TRANSACTION_VERSIONS", "TxnState", "TxnConfig", "TxnMetadata", "Write",
           "SendMarkers", "Outcome", "TransactionCoordinator", "CorruptTxnRecordError",
           "txn_key", "txn_value", "decode_txn_key", "decode_txn_value", "partition_for"]
