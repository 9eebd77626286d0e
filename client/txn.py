"""The transactional producer's side of the protocol (KIP-98, KIP-890): the calls to the
transaction coordinator, made on the caller's thread, and the transaction's state.

States: ``uninitialized`` -> init_transactions() -> ``ready`` -> begin_transaction() ->
``in_transaction`` -> commit/abort -> ``ready``. A fatal error (ProducerFencedError)
leaves ``fatal``: only close() helps. The producer id and epoch come from InitProducerId
and, after each EndTxn, from its answer (the epoch is bumped every time: KIP-890).

Partitions join the transaction as Kafka's sender adds them: ``send()`` only notes a
new partition (:meth:`TransactionManager.want`, never a network call on the caller's
thread); the producer's I/O thread adds every partition noted since its last
AddPartitionsToTxn in one request (:meth:`TransactionManager.add_pending`) and holds
their batches until it is answered. It sends that request once the application asks
for the records to go (``flush``, ``commit_transaction``) or :data:`ADD_LINGER_S` after
the first partition was noted, whichever comes first: a transaction's sends to several
partitions, made back to back, then share one AddPartitionsToTxn (one durable write of
the coordinator) -- sent at the first send, a third of the transactions of
bench/transactions.py needed a second one for the partitions noted while the first was
in flight. A refusal fails those batches, so the commit raises
(TransactionAbortableError, or ProducerFencedError). Calls to the coordinator from the
two threads (the I/O thread's adds, the caller's InitProducerId, AddOffsetsToTxn and
EndTxn) take turns on one connection.
"""

from __future__ import annotations

import threading
import time

from raftlog.errors import ApiError, ErrorCode
from raftlog.protocol import Api

from .conn import BrokerConnection
from .errors import BrokerNotAvailableError, ProducerFencedError

#: What to do when a call needs another state (the first one it accepts).
#: What to do, by the producer's state (when the call needs another).
_HINTS = {"uninitialized": ": call init_transactions() first",
          "ready": ": call begin_transaction() first",
          "in_transaction": ": commit_transaction() or abort_transaction() the open one first",
          "abortable": ": a send of this transaction failed: abort_transaction() first"}
#: First pause after CONCURRENT_TRANSACTIONS (doubled each time, up to retry_backoff_ms).
CONCURRENT_BACKOFF_S = 0.002
#: The longest a noted partition waits for more to share its AddPartitionsToTxn (a
#: flush or commit sends it at once). Well below one add's round trip (a durable write
#: of the coordinator: ~3 ms on 3 nodes of a 2-core machine).
ADD_LINGER_S = 0.001
#: Errors after which a coordinator call is sent again (after a backoff).
_RETRY = {ErrorCode.COORDINATOR_NOT_AVAILABLE, ErrorCode.NOT_COORDINATOR,
          ErrorCode.COORDINATOR_LOAD_IN_PROGRESS, ErrorCode.CONCURRENT_TRANSACTIONS,
          ErrorCode.REQUEST_TIMED_OUT, ErrorCode.NOT_ENOUGH_REPLICAS,
          ErrorCode.NOT_LEADER_OR_FOLLOWER}
_FATAL = {ErrorCode.PRODUCER_FENCED, ErrorCode.INVALID_PRODUCER_EPOCH,
          ErrorCode.INVALID_PRODUCER_ID_MAPPING}


class TransactionManager:
    def __init__(self, transactional_id: str, timeout_ms: int, addresses, security,
                 request_timeout_s: float, retry_backoff_s: float, max_block_s: float):
        if not transactional_id:
            raise ValueError("transactional_id must be a non-empty string")
        self.transactional_id = transactional_id
        self.timeout_ms = timeout_ms
        self._addresses = addresses  # () -> [(host, port), ...]
        self._security = security
        self._request_timeout_s = request_timeout_s
        self._backoff_s = max(retry_backoff_s, 0.01)
        self._max_block_s = max_block_s
        self._coordinator: BrokerConnection | None = None
        self.state = "uninitialized"
        self.producer_id = -1
        self.producer_epoch = -1
        #: partitions added to the ongoing transaction
        self.partitions: set = set()
        #: partitions sent to but not added yet (the I/O thread adds them), and those
        #: whose AddPartitionsToTxn was refused -> the error their batches fail with
        self.pending: set = set()
        self.refused: dict = {}
        #: when the first of ``pending`` was noted (monotonic s), and whether the
        #: application asked for the records to go (flush, commit) since
        self.pending_since = 0.0
        self.add_now = False
        self._lock = threading.Lock()  # (partitions, pending, refused: two threads)
        self._call_lock = threading.Lock()  # (one coordinator connection, two threads)
        #: per API name: [requests sent (each retry counts), seconds in them] -- what a
        #: transaction costs in coordinator round trips (bench/transactions.py --phases)
        self.stats: dict[str, list] = {}

    # ------------------------------------------------------------------ calls

    def _find(self) -> BrokerConnection:
        last: Exception | None = None
        for host, port in self._addresses():
            try:
                conn = BrokerConnection(host, port, self._request_timeout_s,
                                        security=self._security)
            except BrokerNotAvailableError as e:
                last = e
                continue
            try:
                h = conn.request(Api.FIND_COORDINATOR,
                                 {"key": self.transactional_id, "key_type": 1},
                                 timeout_s=self._request_timeout_s).header
            except (ApiError, BrokerNotAvailableError) as e:
                last = e
                continue
            finally:
                conn.close()
            return BrokerConnection(h["host"], h["port"], self._request_timeout_s,
                                    security=self._security)
        raise last or BrokerNotAvailableError("no node to ask for the transaction coordinator")

    def call(self, api: Api, fields: dict, timeout_s: float | None = None) -> dict:
        """Send to the coordinator; retriable errors are retried (found again) until
        ``timeout_s`` (default max_block_ms). Fatal ones raise ProducerFencedError."""
        with self._call_lock:
            return self._call(api, fields, timeout_s)

    def _call(self, api: Api, fields: dict, timeout_s: float | None) -> dict:
        deadline = time.monotonic() + (self._max_block_s if timeout_s is None else timeout_s)
        concurrent = 0  # CONCURRENT_TRANSACTIONS answers in a row
        while True:
            try:
                if self._coordinator is None:
                    self._coordinator = self._find()
                t = time.perf_counter()
                try:
                    return self._coordinator.request(api, fields,
                                                     timeout_s=self._request_timeout_s).header
                finally:
                    st = self.stats.setdefault(api.name, [0, 0.0])
                    st[0] += 1
                    st[1] += time.perf_counter() - t
            except (ApiError, BrokerNotAvailableError) as e:
                code = getattr(e, "code", None)
                if code in _FATAL:
                    self.state = "fatal"
                    raise ProducerFencedError(
                        f"{self.transactional_id!r}: {getattr(e, 'message', e)} (a newer "
                        "instance with this transactional id took over: close this "
                        "producer)") from None
                retry = code is None or code in _RETRY
                if code is None or code in (ErrorCode.NOT_COORDINATOR,
                                            ErrorCode.COORDINATOR_NOT_AVAILABLE):
                    self._close_coordinator()
                # CONCURRENT_TRANSACTIONS: the last transaction's markers are still being
                # written (commit_transaction returns once the decision is durable, as
                # Kafka's EndTxn) -- a matter of milliseconds, so asked again after 2 ms,
                # doubling up to retry_backoff_ms (Kafka's producer: a fixed 20 ms)
                pause = self._backoff_s
                if code == ErrorCode.CONCURRENT_TRANSACTIONS:
                    pause = min(self._backoff_s, CONCURRENT_BACKOFF_S * 2 ** concurrent)
                    concurrent += 1
                if not retry or time.monotonic() + pause > deadline:
                    raise
                st = self.stats.setdefault("backoff", [0, 0.0])
                st[0] += 1
                st[1] += pause
                time.sleep(pause)

    def _close_coordinator(self) -> None:
        if self._coordinator is not None:
            self._coordinator.close()
            self._coordinator = None

    def close(self) -> None:
        self._close_coordinator()

    # ------------------------------------------------------------------ operations

    def init(self) -> tuple[int, int]:
        h = self.call(Api.INIT_PRODUCER_ID, {
            "transactional_id": self.transactional_id,
            "transaction_timeout_ms": self.timeout_ms,
            "producer_id": self.producer_id, "producer_epoch": self.producer_epoch})
        self.producer_id, self.producer_epoch = h["producer_id"], h["producer_epoch"]
        self.state = "ready"
        self._forget_partitions()
        return self.producer_id, self.producer_epoch

    def _forget_partitions(self) -> None:
        with self._lock:
            self.partitions.clear()
            self.pending.clear()
            self.refused.clear()

    def check(self, *states: str) -> None:
        if self.state == "fatal":
            raise ProducerFencedError(f"{self.transactional_id!r} was fenced: close this producer")
        if self.state not in states:
            raise ApiError(ErrorCode.INVALID_TXN_STATE,
                           f"transactional producer {self.transactional_id!r} is "
                           f"{self.state}, not {' or '.join(states)}{_HINTS.get(self.state, '')}")

    def want(self, topic: str, partition: int) -> bool:
        """(The caller's thread, at send.) Note ``(topic, partition)`` for the I/O
        thread to add, unless it is in the transaction already; True if it was noted.
        A partition refused earlier in this transaction is asked for again."""
        key = (topic, partition)
        with self._lock:
            if key in self.partitions or key in self.pending:
                return False
            self.refused.pop(key, None)
            if not self.pending:
                self.pending_since, self.add_now = time.monotonic(), False
            self.pending.add(key)
            return True

    def flushing(self) -> None:
        """(The caller's thread, at flush or commit.) The partitions noted so far are
        added at once, not after the linger."""
        self.add_now = True

    def add_due(self, now: float) -> float | None:
        """(The I/O thread.) Seconds until the pending partitions' AddPartitionsToTxn is
        due (0: now), or None when none are pending."""
        if not self.pending:
            return None
        if self.add_now:
            return 0.0
        return max(0.0, self.pending_since + ADD_LINGER_S - now)

    def add_pending(self) -> None:
        """(The I/O thread.) One AddPartitionsToTxn for every partition noted since the
        last: on success they join the transaction; on any error they are refused
        with it (their batches fail with it; a fatal one also leaves ``fatal``)."""
        with self._lock:
            todo = sorted(self.pending)
            self.add_now = False
        if not todo:
            return
        try:
            self.call(Api.ADD_PARTITIONS_TO_TXN, {
                "transactional_id": self.transactional_id, "producer_id": self.producer_id,
                "producer_epoch": self.producer_epoch, "parts": [list(k) for k in todo]})
        except Exception as e:  # (every batch of these partitions fails with it)
            with self._lock:
                self.pending.difference_update(todo)
                self.refused.update(dict.fromkeys(todo, e))
            return
        with self._lock:
            self.pending.difference_update(todo)
            self.partitions.update(todo)

    def send_offsets(self, offsets: list, group) -> None:
        """AddOffsetsToTxn, then TxnOffsetCommit at the group's coordinator."""
        fields = {"transactional_id": self.transactional_id, "producer_id": self.producer_id,
                  "producer_epoch": self.producer_epoch}
        self.call(Api.ADD_OFFSETS_TO_TXN, {**fields, "group": group.group_id})
        with self._lock:
            self.partitions.add(("__consumer_offsets", -1))  # (an EndTxn is needed now)
        deadline = time.monotonic() + self._max_block_s
        while True:
            conn = None
            try:
                conn = self._group_coordinator(group.group_id)
                h = conn.request(Api.TXN_OFFSET_COMMIT, {
                    **fields, "group": group.group_id, "generation": group.generation_id,
                    "member_id": group.member_id,
                    "group_instance_id": getattr(group, "group_instance_id", None),
                    "offsets": [[t, p, o, None] for t, p, o in offsets]},
                    timeout_s=self._request_timeout_s).header
                bad = [r for r in h["parts"] if r.error]
                if not bad:
                    return
                raise ApiError(ErrorCode(bad[0].error), bad[0].message)
            except (ApiError, BrokerNotAvailableError) as e:
                code = getattr(e, "code", None)
                if code in _FATAL:
                    self.state = "fatal"
                    raise ProducerFencedError(str(e)) from None
                if (code is not None and code not in _RETRY) or time.monotonic() > deadline:
                    raise
                time.sleep(self._backoff_s)
            finally:
                if conn is not None:
                    conn.close()

    def _group_coordinator(self, group_id: str) -> BrokerConnection:
        for host, port in self._addresses():
            try:
                conn = BrokerConnection(host, port, self._request_timeout_s,
                                        security=self._security)
            except BrokerNotAvailableError:
                continue
            try:
                h = conn.request(Api.FIND_COORDINATOR, {"key": group_id},
                                 timeout_s=self._request_timeout_s).header
            except (ApiError, BrokerNotAvailableError):
                continue
            finally:
                conn.close()
            return BrokerConnection(h["host"], h["port"], self._request_timeout_s,
                                    security=self._security)
        raise BrokerNotAvailableError(f"no node named the coordinator of group {group_id!r}")

    def end(self, commit: bool) -> tuple[int, int]:
        if not self.partitions:  # nothing was added: nothing to decide
            self._forget_partitions()  # (a refused partition's batches failed)
            self.state = "ready"
            return self.producer_id, self.producer_epoch
        h = self.call(Api.END_TXN, {
            "transactional_id": self.transactional_id, "producer_id": self.producer_id,
            "producer_epoch": self.producer_epoch, "commit": commit})
        self.producer_id, self.producer_epoch = h["producer_id"], h["producer_epoch"]
        self._forget_partitions()
        self.state = "ready"
        return self.producer_id, self.producer_epoch
