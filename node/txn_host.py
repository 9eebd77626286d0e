"""Hosts the transaction coordinator on a node, as node/coordinator.py hosts the group
coordinator: the pure state machine is :class:`~raftlog.node.transactions.TransactionCoordinator`;
this module gives it the node.

* the topic ``__transaction_state``: created on the first FindCoordinator of a
  transactional id (or InitProducerId), ``transaction.state.log.num.partitions``
  partitions, replication factor ``min(transaction.state.log.replication.factor, live
  brokers)``, ``cleanup.policy=compact`` and ``min.insync.replicas=2`` when RF >= 3;
* load / unload after every metadata change: a partition this node now leads is
  replayed into the coordinator at its leader epoch (the coordinator epoch), and the
  transactions caught between Prepare* and Complete* are finished (markers re-sent);
  one it no longer leads is dropped;
* every :class:`~raftlog.node.transactions.Write` is appended to its partition with
  acks=all (the ISR holds it, min.insync.replicas applies) before ``persisted``; one
  appended but not replicated within ``request.timeout.ms`` stays outstanding (the
  request is answered COORDINATOR_NOT_AVAILABLE, the id's next ones
  CONCURRENT_TRANSACTIONS) until the ISR takes it or this node stops leading;
* markers (:class:`~raftlog.node.transactions.SendMarkers`) go to the partitions'
  leaders as WRITE_TXN_MARKERS (appended here when this node leads), retried with a
  backoff while this node still coordinates the transaction at that epoch, then
  ``complete`` is written;
* a timer drives ``tick`` (timeout aborts, expired ids);
* KIP-890: a leader verifies a transactional produce's partitions with the coordinator
  (here, or AddPartitionsToTxn ``verify_only`` to the coordinator's node), and keeps
  the yes answers per (producer id, epoch) in a bounded cache;
* KIP-664: LIST_TRANSACTIONS (the ids of the partitions this node leads) and
  DESCRIBE_TRANSACTIONS are answered from the coordinator's state, with this node's
  clock (``now_ms``) to age ``start_ms`` by.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from dataclasses import replace

import trio

from raftlog import records
from raftlog.errors import ApiError, CorruptRecordError, ErrorCode, OffsetOutOfRangeError
from raftlog.protocol import (
    Api,
    PartitionResult,
    TxnDescriptionRow,
    TxnListingRow,
    TxnMarkerResult,
)
from raftlog.txn_markers import ControlType

from .clock import SteadyWallClock
from .coordinator import _read_all
from .groups import OFFSETS_TOPIC
from .internal_topics import create_internal_topic
from .replica_manager import ReplicationPending
from .transactions import (
    TRANSACTION_STATE_TOPIC,
    CorruptTxnRecordError,
    Outcome,
    SendMarkers,
    TransactionCoordinator,
    TxnConfig,
    TxnState,
)

#: Producers whose verified partitions a leader remembers at most (LRU).
VERIFIED_MAX = 100_000
#: Marker delivery: backoff between rounds (doubling up to the cap).
MARKER_BACKOFF_S = (0.05, 1.0)
#: How long one WRITE_TXN_MARKERS or verification call may take.
PEER_TIMEOUT_S = 10.0
#: Longest wait of the timeout-abort timer; and the shortest (a deadline already
#: passed whose abort is still being written is looked at again after this).
TICK_MAX_S = 1.0
TICK_MIN_S = 0.02
#: How long a request that finds its transactional id's last transaction still
#: completing (markers being written: CONCURRENT_TRANSACTIONS) waits here for it before
#: that answer goes out (the client then retries). A commit returns once the decision is
#: durable, so the next transaction's first AddPartitionsToTxn nearly always meets its
#: predecessor's markers: waiting for them here answers it the moment they are written,
#: not at the client's next backoff step. (Below every Kafka client's request timeout:
#: 30 s and more.)
CONCURRENT_WAIT_S = 5.0
#: A timeout abort or expiry whose write failed is tried again after this long.
TIMER_RETRY_S = 1.0
#: A write in doubt (appended, not replicated in time) is looked at this often while it
#: waits for the ISR: whether it is still this coordinator's to settle.
SETTLE_CHECK_S = 1.0


class TxnHost:
    """The node's transaction coordinator and its glue (trio thread only)."""

    def __init__(self, replicas, store, events, nursery, peers, producer_ids, config, *,
                 offsets_partitions: int):
        self.replicas = replicas
        self.store = store
        self.events = events
        self.nursery = nursery
        self.peers = peers  # node/peer_calls.py
        self.producer_ids = producer_ids  # node/producer_ids.py
        self.node_id = config.node_id
        self.topic_partitions = config.transaction_state_log_num_partitions
        self.topic_replication_factor = config.transaction_state_log_replication_factor
        self.check_s = config.transaction_abort_timed_out_check_ms / 1000
        self.coordinator = TransactionCoordinator(
            TxnConfig(max_timeout_ms=config.transaction_max_timeout_ms,
                      partitions=config.transaction_state_log_num_partitions,
                      offsets_partitions=offsets_partitions),
            self._new_producer_id)
        self._clock = SteadyWallClock()
        self._loaded: dict[int, int] = {}
        self._creating = False
        self._allocating = False
        #: producer id -> (epoch, {(topic, partition)}) verified in its transaction
        self._verified: OrderedDict = OrderedDict()
        #: producer id -> [verifications in flight, markers appended meanwhile]: a yes
        #: answered across a marker of that producer is not remembered (with
        #: transaction version 1 the epoch outlives the transaction, so the yes may be
        #: about the transaction the marker just closed)
        self._verifying: dict[int, list] = {}
        self._poked = trio.Event()
        #: transactional id -> set when its markers' delivery (and the Complete* write)
        #: ends, however it ends: what a CONCURRENT_TRANSACTIONS request waits for
        self._completing: dict[str, trio.Event] = {}
        #: transactional id -> (producer id, epoch, transaction version, {partitions}) of
        #: the AddPartitions waiting for its last transaction's markers: written with
        #: that transaction's completion (``complete_and_add``); one entry per id
        self._adds_waiting: dict[str, tuple] = {}
        #: the group coordinator's host (node/coordinator.py): told of the markers
        #: appended to ``__consumer_offsets`` (transactional offset commits)
        self.groups = None
        replicas.txn_verified = self.is_verified

    def now_ms(self) -> int:
        return self._clock()

    # ------------------------------------------------------------------ producer ids

    def _new_producer_id(self) -> int | None:
        pid = self.producer_ids.blocks.next_id()
        if pid is None and not self._allocating:
            self._allocating = True
            self.nursery.start_soon(self._allocate)
        return pid

    async def _allocate(self) -> None:
        try:
            await self.producer_ids.init_producer_id({})  # reserves a block, takes one id
        except ApiError as e:
            self.events.warning("txn_producer_id_block_failed", error=e.message)
        finally:
            self._allocating = False

    # ------------------------------------------------------------------ timer

    async def run(self) -> None:
        while True:
            deadline = self.coordinator.next_deadline_ms()
            wait = self.check_s if deadline is None else (deadline - self.now_ms()) / 1000
            with trio.move_on_after(min(max(wait, TICK_MIN_S), self.check_s, TICK_MAX_S)):
                await self._poked.wait()
            self._poked = trio.Event()
            try:
                for w in self.coordinator.tick(self.now_ms()):
                    self.nursery.start_soon(self._carry_out, w)
            except Exception as e:  # a bug of ours: keep coordinating
                self.events.error("txn_tick_failed", error=repr(e))

    async def _carry_out(self, write) -> None:
        """A write of the timer's (timeout abort, expiry): persisted, then its effects."""
        try:
            await self._finish(Outcome(write=write))
        except ApiError as e:
            # (not again at the next tick: a partition short of in-sync replicas refuses
            # every write until it heals, and the timer would retry every TICK_MIN_S)
            self.coordinator.hold_timer(write.transactional_id,
                                        self.now_ms() + int(TIMER_RETRY_S * 1000))
            self.events.warning("txn_timer_write_failed", transactional_id=write.transactional_id,
                                kind=write.kind, error=e.message, retry_s=TIMER_RETRY_S)

    # ------------------------------------------------------------------ topic

    def _topic(self):
        return self.store.topics.get(TRANSACTION_STATE_TOPIC)

    def _ensure_topic(self) -> None:
        if not self._creating:
            self._creating = True
            self.nursery.start_soon(self._create_topic)

    async def _create_topic(self) -> None:
        try:
            await create_internal_topic(self.store, self.replicas, self.events,
                                        TRANSACTION_STATE_TOPIC, self.topic_partitions,
                                        self.topic_replication_factor,
                                        "transaction_state_topic", min_insync_from_3=True)
        finally:
            self._creating = False

    def _leader_of(self, topic: str, partition: int) -> int:
        info = self.store.topics.get(topic)
        if info is None or partition >= len(info.partitions):
            raise ApiError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                           f"unknown partition {topic}-{partition}")
        return info.partitions[partition].leader

    def locate(self, transactional_id: str) -> dict:
        """FindCoordinator of a transactional id: the leader of its partition."""
        if not transactional_id:
            raise ApiError(ErrorCode.INVALID_REQUEST, "a transactional id is a non-empty string")
        info = self._topic()
        if info is None:
            self._ensure_topic()
            raise ApiError(ErrorCode.COORDINATOR_NOT_AVAILABLE,
                           f"{TRANSACTION_STATE_TOPIC} is being created; retry")
        p = self.coordinator.partition_for(transactional_id)
        if p >= len(info.partitions):
            raise ApiError(ErrorCode.COORDINATOR_NOT_AVAILABLE,
                           f"{TRANSACTION_STATE_TOPIC} has {len(info.partitions)} partitions")
        leader = info.partitions[p].leader
        for b in self.store.brokers():
            if b.node_id == leader and not b.fenced:
                return {"node_id": b.node_id, "host": b.host, "port": b.port}
        raise ApiError(ErrorCode.COORDINATOR_NOT_AVAILABLE,
                       f"{TRANSACTION_STATE_TOPIC}-{p} has no live leader")

    # ------------------------------------------------------------------ load / unload

    def on_reconcile(self, deleted_topics=()) -> None:
        """After a metadata change: load what this node now leads, unload the rest."""
        info = self._topic()
        leading: dict[int, int] = {}
        if info is not None:
            for p in range(len(info.partitions)):
                part = self.replicas.partitions.get((TRANSACTION_STATE_TOPIC, p))
                if part is not None and part.is_leader and self.replicas.registered:
                    leading[p] = part.leader_epoch
        for p in [p for p in self._loaded if leading.get(p) != self._loaded[p]]:
            self._loaded.pop(p, None)
            self.coordinator.unload(p)
            self.events.info("txn_partition_unloaded", partition=p)
        for p, epoch in leading.items():
            if p not in self._loaded:
                self._loaded[p] = epoch
                self.nursery.start_soon(self._load, p, epoch)

    async def _load(self, partition: int, epoch: int) -> None:
        part = self.replicas.partitions.get((TRANSACTION_STATE_TOPIC, partition))
        if part is None:
            return
        self.coordinator.begin_loading(partition, epoch)
        started = time.monotonic()
        # Everything an earlier leader appended is below the HW once this leader's first
        # append of its epoch is: read to the log end (a new leader's log holds every
        # acknowledged record; an unacknowledged tail is replayed too, as Kafka does).
        end = part.log.log_end_offset
        try:
            recs = await trio.to_thread.run_sync(_read_all, part.log, end)
        except (CorruptRecordError, OffsetOutOfRangeError, OSError) as e:
            self.events.error("txn_load_failed", partition=partition, error=repr(e))
            if self._loaded.get(partition) == epoch:
                self._loaded.pop(partition, None)
                self.coordinator.unload(partition)
            return
        if self._loaded.get(partition) != epoch or not part.is_leader:
            return
        bad = 0
        for key, value in recs:
            try:
                self.coordinator.replay(partition, key, value)
            except CorruptTxnRecordError as e:
                bad += 1
                self.events.error("txn_record_corrupt", partition=partition, error=str(e))
        for m in self.coordinator.finish_loading(partition):
            self.nursery.start_soon(self._deliver, m)
        self._poked.set()
        self.events.info("txn_partition_loaded", partition=partition, records=len(recs),
                         corrupt=bad, ms=round((time.monotonic() - started) * 1000, 1))

    # ------------------------------------------------------------------ writes

    async def _persist(self, write) -> None:
        data = records.encode_batch([write.value], [write.key], timestamp=int(time.time() * 1000))
        await self.replicas.append_acks_all(TRANSACTION_STATE_TOPIC, write.partition, [data])

    async def _finish(self, outcome: Outcome) -> dict:
        """Carry out an operation's outcome: its write (acks=all) first, then the
        effects; the response (raises the request's error)."""
        if outcome.write is not None:
            w = outcome.write
            if (self.replicas.bug_marker_before_prepare_durable and w.kind == "end"
                    and w.target is not None):  # (planted bug: test.flags)
                m = w.target
                self.nursery.start_soon(self._send_markers_early, SendMarkers(
                    w.transactional_id, m.marker_producer_id, m.marker_epoch,
                    ControlType.COMMIT if m.state.value == "PrepareCommit" else ControlType.ABORT,
                    w.coordinator_epoch, tuple(sorted(m.partitions))))
            try:
                await self._persist(w)
            except ReplicationPending as e:
                # The record is in this leader's log and may yet commit: the id keeps its
                # write pending (its requests get CONCURRENT_TRANSACTIONS) until its fate
                # is known. Reverting now would let a fence or a timeout write a second,
                # contrary decision for the same transaction behind the first.
                self.events.warning("txn_write_in_doubt", transactional_id=w.transactional_id,
                                    kind=w.kind, partition=w.partition, error=e.message)
                self.nursery.start_soon(self._settle, w, e.waits)
                raise ApiError(ErrorCode.COORDINATOR_NOT_AVAILABLE,
                               f"{TRANSACTION_STATE_TOPIC}-{w.partition}: {e.message}; the "
                               "state change is in the log and may still commit: retry") from None
            except ApiError as e:  # refused: nothing was appended
                code = (ErrorCode.NOT_COORDINATOR
                        if e.code in (ErrorCode.NOT_LEADER_OR_FOLLOWER, ErrorCode.NOT_COORDINATOR)
                        else ErrorCode.COORDINATOR_NOT_AVAILABLE)
                self.coordinator.write_failed(w, code)
                raise ApiError(code, f"{TRANSACTION_STATE_TOPIC}-{w.partition}: {e.message}") from None
            outcome = self.coordinator.persisted(w)
        return self._apply(outcome)

    async def _settle(self, write, waits) -> None:
        """A write in doubt (:class:`ReplicationPending`): wait, however long, until the
        ISR has it -- then it is persisted and its effects follow, as if it had been in
        time -- or this node's leadership of its partition ends (the next leader replays
        the log, whatever it holds)."""
        tid = write.transactional_id
        while True:
            if self.coordinator.pending.get(tid) is not write:
                return  # (unloaded: whoever loads the partition next replays it)
            failed = await self.replicas.await_replicated(
                waits, trio.current_time() + SETTLE_CHECK_S)
            if not failed:
                break
            if any(e.code is not ErrorCode.REQUEST_TIMED_OUT for e in failed.values()):
                self.coordinator.write_failed(write)  # leadership moved
                return
        self.events.info("txn_write_settled", transactional_id=write.transactional_id,
                         kind=write.kind)
        try:
            self._apply(self.coordinator.persisted(write))
        except ApiError:  # (the request that asked for it was answered already)
            pass

    def _apply(self, outcome: Outcome) -> dict:
        """A persisted outcome's effects started; its response (raises its error)."""
        for e in outcome.effects:
            if isinstance(e, SendMarkers):
                self._completing.setdefault(e.transactional_id, trio.Event())
                self.nursery.start_soon(self._deliver, e)
        if outcome.error is not ErrorCode.NONE:
            raise ApiError(outcome.error, _ERROR_TEXT.get(outcome.error, ""))
        return outcome.response or {}

    # ------------------------------------------------------------------ markers

    async def _deliver(self, m: SendMarkers) -> None:
        """Write the markers to every partition's leader (the leaders in parallel),
        retrying (backoff) while this node coordinates the transaction at
        ``m.coordinator_epoch``; then complete. Wakes the requests waiting for it."""
        try:
            await self._deliver_markers(m)
        finally:
            self._adds_waiting.pop(m.transactional_id, None)  # (asked again: they write)
            ev = self._completing.pop(m.transactional_id, None)
            if ev is not None:
                ev.set()

    async def _deliver_markers(self, m: SendMarkers) -> None:
        left = set(m.partitions)
        backoff = MARKER_BACKOFF_S[0]
        p = self.coordinator.partition_for(m.transactional_id)
        while left:
            if self.coordinator.partitions.get(p, (None,))[0] != m.coordinator_epoch:
                return  # no longer the coordinator: the next one finishes it
            by_leader: dict[int, list] = {}
            for tp in sorted(left):
                try:
                    by_leader.setdefault(self._leader_of(*tp), []).append(tp)
                except ApiError:  # (the topic is gone: nothing to mark)
                    left.discard(tp)
            results: list = []

            async with trio.open_nursery() as each:
                for leader, tps in by_leader.items():
                    each.start_soon(self._send_markers_into, results, leader, m, tps)
            if any(fenced for _done, fenced in results):
                self.events.warning("txn_markers_fenced",
                                    transactional_id=m.transactional_id,
                                    coordinator_epoch=m.coordinator_epoch)
                return
            for done, _fenced in results:
                left -= done
            if left:
                await trio.sleep(backoff)
                backoff = min(backoff * 2, MARKER_BACKOFF_S[1])
        while True:
            try:
                want = self._adds_waiting.pop(m.transactional_id, None)
                if want is None:
                    outcome = self.coordinator.complete(m.transactional_id,
                                                        m.coordinator_epoch, self.now_ms())
                else:  # the next transaction's add waits: one write for both
                    pid, epoch, version, tps = want
                    outcome = self.coordinator.complete_and_add(
                        m.transactional_id, m.coordinator_epoch, self.now_ms(), pid, epoch,
                        tps, transaction_version=version)
                await self._finish(outcome)
                return
            except ApiError as e:
                if e.code is not ErrorCode.CONCURRENT_TRANSACTIONS and e.code is not ErrorCode.COORDINATOR_NOT_AVAILABLE:
                    self.events.info("txn_complete_skipped", transactional_id=m.transactional_id,
                                     error=e.message)
                    return
            await trio.sleep(backoff)
            backoff = min(backoff * 2, MARKER_BACKOFF_S[1])

    async def _send_markers_early(self, m: SendMarkers) -> None:
        """bug-marker-before-prepare-durable: the markers go out before the decision is
        in the log (a coordinator that dies now leaves them without a durable decision)."""
        by_leader: dict[int, list] = {}
        for tp in m.partitions:
            try:
                by_leader.setdefault(self._leader_of(*tp), []).append(tp)
            except ApiError:
                pass
        for leader, tps in by_leader.items():
            await self._send_markers(leader, m, tps)

    async def _send_markers_into(self, results: list, leader: int, m: SendMarkers,
                                 tps: list) -> None:
        results.append(await self._send_markers(leader, m, tps))

    async def _send_markers(self, leader: int, m: SendMarkers, tps: list) -> tuple[set, bool]:
        """(partitions marked, whether a leader refused the coordinator epoch)."""
        marker = [m.producer_id, m.producer_epoch, m.coordinator_epoch,
                  m.result is ControlType.COMMIT, [list(tp) for tp in tps]]
        try:
            if leader == self.node_id:
                rows = await self.write_markers({"markers": [marker], "timeout_ms": 30_000})
                rows = rows["results"]
            else:
                h = await self.peers.call(leader, Api.WRITE_TXN_MARKERS,
                                          {"markers": [marker]}, PEER_TIMEOUT_S)
                rows = h["results"]
        except ApiError as e:
            self.events.info("txn_markers_retry", leader=leader, error=e.message)
            return set(), False
        done, fenced = set(), False
        for r in rows:
            if r.error in (0, int(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)):
                done.add((r.topic, r.partition))
            elif r.error == int(ErrorCode.INVALID_PRODUCER_EPOCH):
                # the partition already holds a later epoch's marker: this one is moot
                done.add((r.topic, r.partition))
            elif r.error == int(ErrorCode.TRANSACTION_COORDINATOR_FENCED):
                fenced = True
        return done, fenced

    async def write_markers(self, fields: dict) -> dict:
        """WRITE_TXN_MARKERS on a partition leader: each marker appended (refused for a
        stale coordinator epoch or producer epoch), then replicated (acks=all)."""
        rows, waits = [], []
        for pid, epoch, cepoch, commit, tps in fields["markers"]:
            for topic, partition in tps:
                try:
                    if topic not in self.store.topics:
                        raise ApiError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                                       f"unknown topic {topic!r}")
                    part = self.replicas.leader_partition(topic, partition)
                    offset = part.append_marker(pid, epoch, cepoch, commit)
                    if topic == OFFSETS_TOPIC and self.groups is not None:
                        self.groups.on_marker(partition, pid, commit)
                    if part.high_watermark <= offset:
                        waits.append((part, part.leader_epoch, offset, topic, partition, False))
                    self._forget_verified(pid)
                    rows.append(TxnMarkerResult(pid, topic, partition, 0, ""))
                except ApiError as e:
                    rows.append(TxnMarkerResult(pid, topic, partition, int(e.code), e.message))
        if waits:
            timeout = min(fields.get("timeout_ms", 30_000), self.replicas.config.request_timeout_ms)
            failed = await self.replicas.await_replicated(waits, trio.current_time() + timeout / 1000)
            rows = [r if (r.topic, r.partition) not in failed or r.error else
                    TxnMarkerResult(r.producer_id, r.topic, r.partition,
                                    int(failed[(r.topic, r.partition)].code),
                                    failed[(r.topic, r.partition)].message) for r in rows]
        return {"results": rows}

    # ------------------------------------------------------------------ KIP-890 verification

    def is_verified(self, pid: int, epoch: int, topic: str, partition: int) -> bool:
        got = self._verified.get(pid)
        return got is not None and got[0] == epoch and (topic, partition) in got[1]

    def _forget_verified(self, pid: int) -> None:
        self._verified.pop(pid, None)
        if pid in self._verifying:
            self._verifying[pid][1] += 1

    async def verify_and_remember(self, tid: str, pid: int, epoch: int, tps) -> dict:
        """:meth:`verify`, then the yes answers remembered -- unless a marker of the
        producer was appended here meanwhile (then nothing is: the produce is refused
        and the client retries it, verified anew)."""
        entry = self._verifying.setdefault(pid, [0, 0])
        entry[0] += 1
        seen = entry[1]
        try:
            got = await self.verify(tid, pid, epoch, tps)
        finally:
            entry[0] -= 1
            if entry[0] == 0:
                self._verifying.pop(pid, None)
        if entry[1] == seen:
            self._remember(pid, epoch, [tp for tp, ok in got.items() if ok])
        return got

    def _remember(self, pid: int, epoch: int, tps) -> None:
        got = self._verified.get(pid)
        if got is None or got[0] != epoch:  # (only the producer's latest epoch counts)
            got = self._verified[pid] = (epoch, set())
        got[1].update(tps)
        self._verified.move_to_end(pid)
        while len(self._verified) > VERIFIED_MAX:
            self._verified.popitem(last=False)

    async def verify_produce(self, tid: str | None, parts, datas) -> None:
        """Before a produce: ask the coordinator of ``tid`` about the transactional
        batches' partitions not verified yet; the yes answers are cached (the produce
        then appends them; the others are refused with INVALID_TXN_STATE)."""
        ask: dict[tuple[int, int], list] = {}
        for (topic, partition, _), data in zip(parts, datas):
            if len(data) < records.HEADER_SIZE:
                continue
            h = records.read_header(data, 0)
            if h.attributes & records.ATTR_TRANSACTIONAL and not self.is_verified(
                    h.producer_id, h.producer_epoch, topic, partition):
                ask.setdefault((h.producer_id, h.producer_epoch), []).append((topic, partition))
        if not ask or not tid:
            return
        for (pid, epoch), tps in ask.items():
            try:
                await self.verify_and_remember(tid, pid, epoch, tps)
            except ApiError as e:
                self.events.info("txn_verify_failed", transactional_id=tid, error=e.message)

    async def verify(self, tid: str, pid: int, epoch: int, tps) -> dict:
        """{(topic, partition): in the ongoing transaction?} from the coordinator."""
        try:
            info = self.locate(tid)
        except ApiError:
            return {tp: False for tp in tps}
        if info["node_id"] == self.node_id:
            codes = self.coordinator.verify_partitions(tid, pid, epoch, tps)
            return {tp: c is ErrorCode.NONE for tp, c in codes.items()}
        h = await self.peers.call(info["node_id"], Api.ADD_PARTITIONS_TO_TXN, {
            "transactional_id": tid, "producer_id": pid, "producer_epoch": epoch,
            "parts": [list(tp) for tp in tps], "verify_only": True}, PEER_TIMEOUT_S)
        return {(r.topic, r.partition): r.error == 0 for r in h["parts"]}

    # ------------------------------------------------------------------ requests

    async def _waiting(self, tid: str, step, add: tuple | None = None) -> dict:
        """``await step()`` (a coordinator call and its outcome); while it answers
        CONCURRENT_TRANSACTIONS and ``tid``'s last transaction is completing here, wait
        (CONCURRENT_WAIT_S in all at most) for that to end and ask again. ``add``
        (producer id, epoch, version, partitions): the call is an AddPartitions, which
        the completion writes with it (then asked again, it finds them added)."""
        deadline = trio.current_time() + CONCURRENT_WAIT_S
        while True:
            try:
                return await step()
            except ApiError as e:
                ev = self._completing.get(tid)
                if (e.code is not ErrorCode.CONCURRENT_TRANSACTIONS or ev is None
                        or trio.current_time() >= deadline):
                    raise
                if add is not None:
                    self._want_added(tid, add)
                with trio.move_on_at(deadline):
                    await ev.wait()

    def _want_added(self, tid: str, add: tuple) -> None:
        """Note an AddPartitions waiting for ``tid``'s completion; the adds of one
        producer, epoch and version share the write (another's waits its turn)."""
        pid, epoch, version, tps = add
        have = self._adds_waiting.get(tid)
        if have is None:
            self._adds_waiting[tid] = (pid, epoch, version, frozenset(tps))
        elif have[:3] == (pid, epoch, version):
            self._adds_waiting[tid] = (*have[:3], have[3] | frozenset(tps))

    async def init_producer_id(self, fields: dict) -> dict:
        tid = fields["transactional_id"]
        self.locate(tid)  # (creates the topic on first use)
        return await self._waiting(tid, lambda: self._finish(self.coordinator.init_producer_id(
            tid, fields["transaction_timeout_ms"], self.now_ms(),
            producer_id=fields["producer_id"], producer_epoch=fields["producer_epoch"])))

    async def add_partitions(self, fields: dict) -> dict:
        tid, pid, epoch = fields["transactional_id"], fields["producer_id"], fields["producer_epoch"]
        tps = [tuple(tp) for tp in fields["parts"]]
        if fields["verify_only"]:
            codes = self.coordinator.verify_partitions(tid, pid, epoch, tps)
            return {"parts": [PartitionResult(t, p, int(c), "" if c is ErrorCode.NONE else
                                              "not in the ongoing transaction")
                              for (t, p), c in codes.items()]}
        for t, p in tps:
            if t not in self.store.topics or p >= len(self.store.topics[t].partitions):
                raise ApiError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                               f"unknown partition {t}-{p}: nothing was added")
        version = fields.get("transaction_version", 2)
        await self._waiting(tid, lambda: self._finish(self.coordinator.add_partitions(
            tid, pid, epoch, tps, self.now_ms(), transaction_version=version)),
            add=(pid, epoch, version, tps))
        return {"parts": [PartitionResult(t, p, 0, "") for t, p in tps]}

    async def add_offsets(self, fields: dict) -> dict:
        if self.groups is not None:  # (the group's partition as the group host places it)
            n = self.groups.coordinator.config.offsets_partitions
            if self.coordinator.config.offsets_partitions != n:
                self.coordinator.config = replace(self.coordinator.config, offsets_partitions=n)
        tid, pid, epoch = fields["transactional_id"], fields["producer_id"], fields["producer_epoch"]
        version = fields.get("transaction_version", 2)
        tp = self.coordinator.offsets_partition(fields["group"])
        await self._waiting(tid, lambda: self._finish(self.coordinator.add_offsets(
            tid, pid, epoch, fields["group"], self.now_ms(), transaction_version=version)),
            add=(pid, epoch, version, [tp]))
        return {}

    async def end_txn(self, fields: dict) -> dict:
        """EndTxn; ``fields["transaction_version"]`` (not in the native request: 2) is
        1 for Kafka's clients' EndTxn v0-v4, whose epoch the transaction keeps."""
        return await self._finish(self.coordinator.end_txn(
            fields["transactional_id"], fields["producer_id"], fields["producer_epoch"],
            fields["commit"], self.now_ms(),
            transaction_version=fields.get("transaction_version", 2)))

    # ------------------------------------------------------------------ operating (KIP-664)

    def describe_transactions(self, fields: dict) -> dict:
        """DESCRIBE_TRANSACTIONS: a row per id (NOT_COORDINATOR for an id another node
        coordinates, TRANSACTIONAL_ID_NOT_FOUND for one nobody knows); ``now_ms`` is
        this coordinator's clock, against which ``start_ms`` is an age."""
        rows = []
        for tid in fields["transactional_ids"]:
            try:
                d = self.coordinator.describe(tid)
            except ApiError as e:
                rows.append(TxnDescriptionRow(tid, int(e.code), message=e.message))
                continue
            rows.append(TxnDescriptionRow(
                tid, 0, d["state"], d["producer_id"], d["producer_epoch"], d["timeout_ms"],
                d["start_ms"], [list(tp) for tp in d["partitions"]]))
        return {"transactions": rows, "now_ms": self.now_ms()}

    def list_transactions(self, fields: dict) -> dict:
        """LIST_TRANSACTIONS: the ids of the ``__transaction_state`` partitions this node
        leads (every node answers for its own: a client asks them all), filtered;
        ``unknown_states``: state filters no transaction can have (Kafka's
        UnknownStateFilters)."""
        known = {s.value for s in TxnState}
        now = self.now_ms()
        rows = self.coordinator.list_transactions(
            fields["states"], fields["producer_ids"], duration_ms=fields["duration_ms"],
            now_ms=now)
        return {"transactions": [TxnListingRow(r["transactional_id"], r["producer_id"],
                                               r["state"], r["start_ms"]) for r in rows],
                "unknown_states": sorted(set(fields["states"]) - known), "now_ms": now}

    async def handle(self, api: Api, fields: dict) -> dict:
        if api is Api.DESCRIBE_TRANSACTIONS:
            return self.describe_transactions(fields)
        if api is Api.LIST_TRANSACTIONS:
            return self.list_transactions(fields)
        if api is Api.ADD_PARTITIONS_TO_TXN:
            out = await self.add_partitions(fields)
        elif api is Api.ADD_OFFSETS_TO_TXN:
            out = await self.add_offsets(fields)
        elif api is Api.END_TXN:
            out = await self.end_txn(fields)
        elif api is Api.WRITE_TXN_MARKERS:
            out = await self.write_markers(fields)
        else:
            raise ApiError(ErrorCode.UNKNOWN_API, f"{api.name} is not a transaction API")
        self._poked.set()
        return out


_ERROR_TEXT = {
    ErrorCode.CONCURRENT_TRANSACTIONS:
        "the previous instance's transaction is being aborted: retry",
    ErrorCode.NOT_COORDINATOR: "the coordinator moved: find it again",
}
