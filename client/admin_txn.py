"""Admin: operating transactions (issue #33; Kafka's KIP-664, ``kafka-transactions.sh``).

* :meth:`TransactionsAdmin.list_transactions`: LIST_TRANSACTIONS to every broker (each
  answers for the ``__transaction_state`` partitions it leads), merged;
* :meth:`TransactionsAdmin.describe_transactions`: DESCRIBE_TRANSACTIONS at each id's
  coordinator (FIND_COORDINATOR with key type 1);
* :meth:`TransactionsAdmin.describe_producers`: DESCRIBE_PRODUCERS at each partition's
  leader: the producers it tracks and where their open transactions start;
* :meth:`TransactionsAdmin.abort_transaction`: abort a hanging transaction of one
  partition, as ``kafka-transactions.sh abort --start-offset``: the producer whose open
  transaction starts there is found with DESCRIBE_PRODUCERS, and an ABORT marker with
  its producer id and epoch is written by the leader (WRITE_TXN_MARKERS);
* :meth:`TransactionsAdmin.find_hanging_transactions`: open transactions of the
  partitions a broker leads, older than ``transaction.max.timeout.ms``, that their
  coordinator does not know (:func:`hanging`).

Ages are measured on the clock of the node that reports them (the coordinator's for a
transaction, the producer's timestamps for a partition's producers), never mixed with
this process's clock where the node gives its own.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from dataclasses import dataclass

from raftlog.errors import ApiError, ErrorCode
from raftlog.protocol import Api

from .errors import (
    BrokerNotAvailableError,
    NoOpenTransactionError,
    TransactionalIdNotFoundError,
    UnknownTopicOrPartitionError,
    api_error,
)
from .offsets import requests_by_leader
from .types import TopicPartition

#: Kafka's transaction states (what ListTransactions may filter by).
TXN_STATES = ("Empty", "Ongoing", "PrepareCommit", "PrepareAbort", "CompleteCommit",
              "CompleteAbort", "Dead")
#: States of an undecided transaction (its partitions' LSO may wait for it).
OPEN_STATES = frozenset({"Ongoing", "PrepareCommit", "PrepareAbort"})
#: Kafka's transaction.max.timeout.ms default: find-hanging's default threshold.
MAX_TRANSACTION_TIMEOUT_MS = 900_000
#: Rounds of a per-partition request whose leader moved.
PARTITION_ROUNDS = 5
PARTITION_BACKOFF_S = 0.1
#: How long a request to one broker's coordinators is retried while they load.
COORDINATOR_WAIT_S = 10.0
_RETRY_CODES = frozenset({ErrorCode.NOT_COORDINATOR, ErrorCode.COORDINATOR_NOT_AVAILABLE,
                          ErrorCode.COORDINATOR_LOAD_IN_PROGRESS})
_LEADER_CODES = frozenset({ErrorCode.NOT_LEADER_OR_FOLLOWER, ErrorCode.LEADER_NOT_AVAILABLE})


@dataclass(frozen=True, slots=True)
class TransactionListing:
    transactional_id: str
    coordinator: int  # the node id of its coordinator
    producer_id: int
    state: str  # Kafka's names: Empty, Ongoing, PrepareCommit, ...
    #: how long its open transaction has been open (coordinator's clock); None: none open
    duration_ms: int | None = None


@dataclass(frozen=True, slots=True)
class TransactionDescription:
    transactional_id: str
    coordinator: int
    state: str
    producer_id: int
    producer_epoch: int
    timeout_ms: int  # its transaction.timeout.ms
    start_ms: int | None  # when the open transaction began (ms since the epoch); None: none
    duration_ms: int | None  # how long it has been open (coordinator's clock); None: none
    partitions: tuple = ()  # TopicPartitions of the open transaction, sorted


@dataclass(frozen=True, slots=True)
class ProducerState:
    """One producer a partition leader tracks (Kafka's DescribeProducers row)."""

    producer_id: int
    producer_epoch: int
    last_sequence: int  # -1: none retained
    last_timestamp: int  # of its last batch (ms, the producer's clock), -1 unknown
    coordinator_epoch: int  # of the last marker written for it, -1 none
    #: first offset of its open transaction on this partition; None: none open
    current_txn_start_offset: int | None


@dataclass(frozen=True, slots=True)
class HangingTransaction:
    """An open transaction of a partition that its coordinator does not know."""

    topic: str
    partition: int
    producer_id: int
    producer_epoch: int
    start_offset: int
    last_timestamp: int
    #: why: "unknown producer" (no coordinator lists it) or what the coordinator says
    reason: str


def hanging(candidates: dict, known: dict) -> list[HangingTransaction]:
    """Which open transactions are hanging (pure; Kafka's find-hanging rule).

    ``candidates``: ``{TopicPartition: [ProducerState with an open transaction older
    than the threshold]}``; ``known``: ``{producer id: TransactionDescription}`` of the
    coordinators' transactions of those producer ids. A transaction hangs when no
    coordinator knows its producer id, or the one that does has no open transaction
    holding that partition (it ended, or never added it).
    """
    out = []
    for tp, producers in sorted(candidates.items()):
        for p in producers:
            d = known.get(p.producer_id)
            if d is None:
                reason = "unknown producer: no coordinator has a transaction of it"
            elif d.state not in OPEN_STATES:
                reason = f"its coordinator's transaction {d.transactional_id!r} is {d.state}"
            elif TopicPartition(tp.topic, tp.partition) not in d.partitions:
                reason = (f"its coordinator's transaction {d.transactional_id!r} does not "
                          f"hold {tp.topic}-{tp.partition}")
            else:
                continue
            out.append(HangingTransaction(tp.topic, tp.partition, p.producer_id,
                                          p.producer_epoch, p.current_txn_start_offset,
                                          p.last_timestamp, reason))
    return out


class TransactionsAdmin:
    """The transaction half of :class:`~raftlog.client.admin.Admin` (a mixin: it uses
    the Admin's connections, coordinator lookup and cluster metadata)."""

    # ------------------------------------------------------------------ coordinators

    def list_transactions(self, states: Iterable[str] | None = None,
                          producer_ids: Iterable[int] | None = None, *,
                          duration_ms: int | None = None) -> list[TransactionListing]:
        """Every transactional id the coordinators know, sorted: LIST_TRANSACTIONS to
        each broker, merged. Filters (None: any): ``states`` (Kafka's names, see
        TXN_STATES), ``producer_ids``, ``duration_ms`` (only transactions open longer).

        Raises:
            ValueError: an unknown state name.
            BrokerNotAvailableError: a live broker could not be asked (its
                transactions would be missing).
        """
        states = sorted(set(states or ()))
        bad = [s for s in states if s not in TXN_STATES]
        if bad:
            raise ValueError(f"unknown transaction state {bad[0]!r}: one of "
                             f"{', '.join(TXN_STATES)}")
        fields = {"states": states, "producer_ids": sorted(set(producer_ids or ())),
                  "duration_ms": -1 if duration_ms is None else int(duration_ms)}
        seen: dict[str, TransactionListing] = {}
        for b in self.describe_cluster().brokers:
            try:
                h = self._coordinator_ask(b, Api.LIST_TRANSACTIONS, fields)
            except BrokerNotAvailableError as e:
                if b.fenced:
                    continue
                raise BrokerNotAvailableError(
                    f"cannot list the transactions of broker {b.id} ({b.host}:{b.port}), "
                    f"so the list would be incomplete: {e}") from None
            now = h.get("now_ms", 0)
            for r in h["transactions"]:
                seen.setdefault(r.transactional_id, TransactionListing(
                    r.transactional_id, b.id, r.producer_id, r.state,
                    None if r.start_ms < 0 else max(now - r.start_ms, 0)))
        return [seen[t] for t in sorted(seen)]

    def _coordinator_ask(self, broker, api: Api, fields: dict) -> dict:
        """One request to ``broker``, retried while it loads or moves coordinators."""
        deadline = time.monotonic() + COORDINATOR_WAIT_S
        backoff = 0.05
        while True:
            try:
                conn = self._node_connection(broker.host, broker.port, broker.id)
                return conn.request(api, fields, timeout_s=self.timeout_s).header
            except BrokerNotAvailableError:
                if broker.fenced or time.monotonic() + backoff > deadline:
                    raise
            except ApiError as e:
                if e.code not in _RETRY_CODES or time.monotonic() + backoff > deadline:
                    raise
            time.sleep(backoff)
            backoff = min(backoff * 2, 1.0)

    def describe_transactions(self, transactional_ids: Iterable[str]) -> dict:
        """``{transactional id: TransactionDescription or the ApiError of it}``, each
        asked of its coordinator (TransactionalIdNotFoundError: no coordinator knows
        it -- it never called init_transactions(), or it expired)."""
        out: dict = {}
        for tid in dict.fromkeys(transactional_ids):
            if not isinstance(tid, str) or not tid:
                raise ValueError(f"a transactional id is a non-empty string, not {tid!r}")

            def row_error(h):
                r = h["transactions"][0]
                return (r.error, r.message) if r.error else None

            try:
                h = self._group_request(tid, Api.DESCRIBE_TRANSACTIONS,
                                        {"transactional_ids": [tid]}, entry_error=row_error,
                                        key_type=1)
            except ApiError as e:
                out[tid] = e
                continue
            r = h["transactions"][0]
            if r.error:
                out[tid] = _describe_error(tid, r.error, r.message)
                continue
            coordinator = self._coordinators.get((1, tid), (-1,))[0]
            now = h.get("now_ms", 0)
            out[tid] = TransactionDescription(
                tid, coordinator, r.state, r.producer_id, r.producer_epoch, r.timeout_ms,
                None if r.start_ms < 0 else r.start_ms,
                None if r.start_ms < 0 or r.state not in OPEN_STATES
                else max(now - r.start_ms, 0),
                tuple(sorted(TopicPartition(t, p) for t, p in r.partitions)))
        return out

    def describe_transaction(self, transactional_id: str) -> TransactionDescription:
        """One id (see describe_transactions); raises its ApiError."""
        got = self.describe_transactions([transactional_id])[transactional_id]
        if isinstance(got, Exception):
            raise got
        return got

    # ------------------------------------------------------------------ partitions

    def describe_producers(self, partitions: Iterable) -> dict:
        """``{TopicPartition: [ProducerState, ...]}`` from each partition's leader.

        Raises:
            UnknownTopicOrPartitionError: a topic or partition that does not exist.
            ApiError: the leader's refusal (after PARTITION_ROUNDS rounds for a moving
                leader).
        """
        wanted = sorted({TopicPartition(*tp) if not isinstance(tp, TopicPartition) else tp
                         for tp in partitions})
        for tp in wanted:  # (a clear error for a partition that does not exist)
            try:
                known = self._cluster.partitions_for(tp.topic)
            except UnknownTopicOrPartitionError:
                raise api_error(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                                f"no topic {tp.topic!r} (raftlog topics list shows the "
                                "topics)") from None
            if tp.partition not in known:
                raise api_error(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                                f"topic {tp.topic!r} has no partition {tp.partition} "
                                f"(it has {len(known)}: 0..{len(known) - 1})")
        out: dict = {}
        pending = list(wanted)
        for attempt in range(PARTITION_ROUNDS):
            retry, last = [], None
            by_leader, failed = requests_by_leader(self._cluster, pending)
            for tp, e in failed.items():
                if e.code not in _LEADER_CODES:
                    raise e
                retry.append(tp)
                last = e
            for leader, tps in by_leader.items():
                try:
                    h = self._cluster.connection(leader).request(
                        Api.DESCRIBE_PRODUCERS, {"parts": [[t.topic, t.partition] for t in tps]},
                        timeout_s=self.timeout_s).header
                except BrokerNotAvailableError as e:
                    retry += tps
                    last = e
                    continue
                for tp, part in zip(tps, h["parts"]):
                    if part.error in _LEADER_CODES:
                        retry.append(tp)
                        last = api_error(part.error, part.message)
                    elif part.error:
                        raise api_error(part.error, f"{tp.topic}-{tp.partition}: {part.message}")
                    else:
                        out[tp] = [ProducerState(
                            p.producer_id, p.producer_epoch, p.last_sequence, p.last_timestamp,
                            p.coordinator_epoch, None if p.current_txn_start_offset < 0
                            else p.current_txn_start_offset) for p in part.producers]
            if not retry:
                return out
            if attempt + 1 == PARTITION_ROUNDS:
                raise last
            pending = retry
            self._cluster.topics.clear()
            time.sleep(PARTITION_BACKOFF_S * (attempt + 1))
        raise AssertionError("unreachable")

    def abort_transaction(self, topic: str, partition: int, start_offset: int) -> ProducerState:
        """Abort the open transaction of ``topic``-``partition`` that starts at
        ``start_offset`` (a hanging one: its producer is gone and its coordinator does
        not know it). Writes an ABORT marker with that producer's id and epoch at the
        partition leader, which replicates it (acks=all); the partition's last stable
        offset then moves past it. Returns the producer whose transaction was aborted.

        Only this partition is aborted: a transaction its coordinator still knows is
        best ended by its producer or the coordinator's timeout.

        Raises:
            NoOpenTransactionError: no open transaction starts at ``start_offset``.
        """
        tp = TopicPartition(topic, partition)
        producers = self.describe_producers([tp])[tp]
        open_ = sorted((p for p in producers if p.current_txn_start_offset is not None),
                       key=lambda p: p.current_txn_start_offset)
        match = [p for p in open_ if p.current_txn_start_offset == start_offset]
        if not match:
            starts = ", ".join(f"{p.current_txn_start_offset} (producer {p.producer_id})"
                               for p in open_)
            raise NoOpenTransactionError(
                f"no open transaction of {topic}-{partition} starts at offset {start_offset}"
                + (f"; open ones start at {starts}" if open_ else
                   "; it has no open transaction (nothing to abort)")
                + f" -- see: raftlog transactions describe-producers --topic {topic} "
                  f"--partition {partition}")
        p = match[0]
        marker = [p.producer_id, p.producer_epoch, max(p.coordinator_epoch, 0), False,
                  [[topic, partition]]]
        leader = self._cluster.leader_for(topic, partition)
        h = self._cluster.connection(leader).request(
            Api.WRITE_TXN_MARKERS, {"markers": [marker], "timeout_ms": int(self.timeout_s * 1000)},
            timeout_s=self.timeout_s).header
        for r in h["results"]:
            if r.error:
                raise api_error(r.error, f"abort marker of producer {p.producer_id} on "
                                         f"{topic}-{partition} not written: {r.message}")
        return p

    def find_hanging_transactions(self, broker_id: int, *,
                                  max_transaction_timeout_ms: int = MAX_TRANSACTION_TIMEOUT_MS,
                                  now_ms: int | None = None) -> list[HangingTransaction]:
        """Open transactions of the partitions ``broker_id`` leads, whose producer's last
        write is older than ``max_transaction_timeout_ms`` (the nodes'
        transaction.max.timeout.ms: no live transaction is that old) and whose
        coordinator does not know them. Abort each with :meth:`abort_transaction`."""
        brokers = {b.id for b in self.describe_cluster().brokers}
        if broker_id not in brokers:
            raise ValueError(f"no broker {broker_id} in the cluster (brokers: "
                             f"{', '.join(map(str, sorted(brokers)))})")
        now = int(time.time() * 1000) if now_ms is None else now_ms
        led = [TopicPartition(d.name, p.partition) for d in self.describe_topics()
               for p in d.partitions if p.leader == broker_id]
        candidates = {}
        for tp, producers in (self.describe_producers(led) if led else {}).items():
            old = [p for p in producers if p.current_txn_start_offset is not None
                   and now - p.last_timestamp > max_transaction_timeout_ms]
            if old:
                candidates[tp] = old
        if not candidates:
            return []
        pids = {p.producer_id for ps in candidates.values() for p in ps}
        listed = self.list_transactions(producer_ids=pids)
        known = {}
        for d in self.describe_transactions([t.transactional_id for t in listed]).values():
            if not isinstance(d, Exception):
                known[d.producer_id] = d
        return hanging(candidates, known)


def _describe_error(tid: str, code: int, message: str) -> ApiError:
    if code == ErrorCode.TRANSACTIONAL_ID_NOT_FOUND:
        return TransactionalIdNotFoundError(
            f"transactional id {tid!r} is unknown to its coordinator: no producer with it "
            "called init_transactions(), or it expired (transactional.id.expiration.ms); "
            "raftlog transactions list shows the known ones")
    return api_error(code, message)
