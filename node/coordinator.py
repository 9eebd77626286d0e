"""Hosts the group coordinator on a node: the ``__consumer_offsets`` topic, loading
and unloading its partitions as leadership moves, and the appends it persists.

The pure state machine is :class:`~raftlog.node.groups.GroupCoordinator`; the
request handlers are :class:`~raftlog.node.group_handlers.GroupService`. This
module gives them what they need from the node:

* the topic: created on the first FindCoordinator (as Kafka does), with
  ``offsets.topic.num.partitions`` partitions, replication factor
  ``min(offsets.topic.replication.factor, live brokers)`` and ``cleanup.policy=compact``;
* ``persist``: append to the group's partition as its leader and wait, as
  acks=all, until the ISR holds the records (min.insync.replicas applies);
* ``locate``: the leader of a partition, the group's coordinator;
* load / unload: after every metadata change (``ReplicaManager.reconcile``), a partition
  this node now leads is replayed from the log into the coordinator before it
  serves; one it no longer leads is dropped, and requests waiting on its groups
  get NOT_COORDINATOR so the clients look the coordinator up again.
"""

from __future__ import annotations

import time
from collections import deque
from dataclasses import replace

import trio

from raftlog import records as batch_format
from raftlog.errors import ApiError, CorruptRecordError, ErrorCode, OffsetOutOfRangeError

from .group_handlers import GroupService, encode_offsets_batches
from .groups import OFFSETS_TOPIC, CorruptGroupRecordError, GroupConfig, GroupCoordinator
from .internal_topics import create_internal_topic

#: Bytes read from the log per step while loading a partition.
LOAD_READ_BYTES = 4 * 1024 * 1024
#: Topic deletions remembered for partitions that were loading meanwhile.
MAX_RECENT_DELETIONS = 10_000
#: How often offsets of long-empty groups are expired (offsets.retention.minutes).
OFFSETS_EXPIRY_CHECK_S = 60.0


class GroupHost:
    """The node's group coordinator and its glue (trio thread only)."""

    def __init__(self, replicas, store, events, nursery, config: GroupConfig, *,
                 topic_partitions: int, topic_replication_factor: int):
        #: the node's ReplicaManager: appends to and reads ``__consumer_offsets``
        self.replicas = replicas
        #: the metadata (node/quorum_store.py): the topic, the brokers
        self.store = store
        self.events = events
        self.nursery = nursery
        self.topic_partitions = topic_partitions
        self.topic_replication_factor = topic_replication_factor
        self.coordinator = GroupCoordinator(config)
        self.service = GroupService(self.coordinator, persist=self._persist, locate=self._locate,
                                    deleted_topic=self._deleted_topic,
                                    partition_exists=self._partition_exists)
        #: partition -> leader epoch it was loaded (or is loading) in
        self._loaded: dict[int, int] = {}
        self._creating = False
        #: topics deleted so far, and the latest MAX_RECENT_DELETIONS (number, name): a
        #: partition that was loading while a topic went applies those after its replay
        self._deletions = 0
        self._recent_deletions: deque = deque(maxlen=MAX_RECENT_DELETIONS)
        #: name -> number of its latest deletion among the remembered ones
        self._deleted_names: dict[str, int] = {}
        #: transactional offset commits (TxnOffsetCommit) in the log, waiting for their
        #: transaction's marker: {partition: {producer id: [(key, value), ...]}}
        self.pending_txn: dict[int, dict[int, list]] = {}
        #: markers appended to a partition while it loads, past the end its replay reads:
        #: {partition: [(producer id, commit), ...]}, applied in order when it is done
        self._markers_while_loading: dict[int, list[tuple[int, bool]]] = {}
        #: the transaction coordinator (node/txn_host.py), set by the node: verifies
        #: that a TxnOffsetCommit's partition is in the producer's transaction
        self.txn = None

    async def run(self) -> None:
        async with trio.open_nursery() as n:
            n.start_soon(self.service.run)
            while True:
                await trio.sleep(OFFSETS_EXPIRY_CHECK_S)
                try:
                    await self.service.run_effects(
                        self.coordinator.expire_offsets(self.service.now_ms()))
                except Exception as e:  # keep coordinating; the next round retries
                    self.events.error("offsets_expiry_failed", error=repr(e))

    # ------------------------------------------------------------------ topic

    def _topic(self):
        return self.store.topics.get(OFFSETS_TOPIC)

    def _ensure_topic(self) -> None:
        if self._creating:
            return
        self._creating = True
        self.nursery.start_soon(self._create_topic)

    async def _create_topic(self) -> None:
        try:
            await create_internal_topic(self.store, self.replicas, self.events, OFFSETS_TOPIC,
                                        self.topic_partitions, self.topic_replication_factor,
                                        "offsets_topic")
        finally:
            self._creating = False

    # ------------------------------------------------------------------ locate / persist

    def _locate(self, partition: int) -> tuple[int, str, int]:
        info = self._topic()
        if info is None:
            self._ensure_topic()
            raise ApiError(ErrorCode.COORDINATOR_NOT_AVAILABLE,
                           f"{OFFSETS_TOPIC} is being created; retry")
        if partition >= len(info.partitions):
            raise ApiError(ErrorCode.COORDINATOR_NOT_AVAILABLE,
                           f"{OFFSETS_TOPIC} has {len(info.partitions)} partitions, not {partition + 1}")
        leader = info.partitions[partition].leader
        for b in self.store.brokers():
            if b.node_id == leader and not b.fenced:
                return b.node_id, b.host, b.port
        raise ApiError(ErrorCode.COORDINATOR_NOT_AVAILABLE,
                       f"{OFFSETS_TOPIC}-{partition} has no live leader")

    # ------------------------------------------------------------------ transactions

    async def txn_offset_commit(self, fields: dict) -> dict:
        """TxnOffsetCommit: the offsets are validated as an OffsetCommit's, then appended
        as a transactional batch of the producer (verified with its transaction
        coordinator, KIP-890) and held back until the transaction's marker: a commit
        makes them the group's committed offsets, an abort drops them."""
        from .groups import OFFSETS_TOPIC as topic

        out = self.coordinator.commit_offsets(
            fields["group"], fields["member_id"], fields["generation"], fields["offsets"],
            now_ms=self.service.now_ms(), group_instance_id=fields["group_instance_id"],
            transactional=True)
        parts = out.response["parts"]
        if not out.effects:
            return {"parts": parts}
        (persist,) = out.effects
        pid, epoch, tid = fields["producer_id"], fields["producer_epoch"], fields["transactional_id"]
        if self.txn is None:
            raise ApiError(ErrorCode.COORDINATOR_NOT_AVAILABLE, "the node is starting")
        if not self.txn.is_verified(pid, epoch, topic, persist.partition):
            await self.txn.verify_and_remember(tid, pid, epoch, [(topic, persist.partition)])
        part = self.replicas.partitions.get((topic, persist.partition))
        if part is None or not part.is_leader:
            raise ApiError(ErrorCode.NOT_COORDINATOR, f"not the leader of {topic}-{persist.partition}")
        entry = part.log.producers.producers.get(pid)
        seq = 0 if entry is None or entry.epoch != epoch or entry.last_seq < 0 else (
            (entry.last_seq + 1) % (2**31))
        data = batch_format.encode_batch([v for _, v in persist.records],
                                         [k for k, _ in persist.records],
                                         timestamp=int(time.time() * 1000), producer_id=pid,
                                         producer_epoch=epoch, base_sequence=seq,
                                         transactional=True)
        await self.replicas.append_acks_all(topic, persist.partition, [data])
        self.pending_txn.setdefault(persist.partition, {}).setdefault(pid, []).extend(
            persist.records)
        return {"parts": parts}

    def on_marker(self, partition: int, producer_id: int, commit: bool) -> None:
        """A marker was appended to ``__consumer_offsets``-``partition`` here: the
        producer's pending offsets become committed (or are dropped)."""
        from .groups import Persist

        loading = self._markers_while_loading.get(partition)
        if loading is not None:  # (its replay's end is below this marker: after it)
            loading.append((producer_id, commit))
            return
        recs = self.pending_txn.get(partition, {}).pop(producer_id, None)
        if recs and commit:
            self.coordinator.persisted(Persist(partition, tuple(recs)))

    async def _persist(self, partition: int, recs: tuple) -> None:
        await self.replicas.append_acks_all(OFFSETS_TOPIC, partition,
                                            encode_offsets_batches(recs))

    # ------------------------------------------------------------------ load / unload

    def on_reconcile(self, deleted_topics=()) -> None:
        """After a metadata change: drop the committed offsets of ``deleted_topics``
        (tombstones appended), load partitions this node now leads, unload the others.
        Never raises (called from ReplicaManager.reconcile)."""
        if deleted_topics:
            try:
                self._topics_deleted(deleted_topics)
            except Exception as e:  # a bug of ours: keep loading and unloading
                self.events.error("offsets_of_deleted_topics_failed", error=repr(e))
        info = self._topic()
        if info is not None and self.coordinator.config.offsets_partitions != len(info.partitions):
            # The topic's real partition count decides where groups live.
            for p in list(self._loaded):
                self._unload(p)
            self.coordinator.config = replace(self.coordinator.config,
                                              offsets_partitions=len(info.partitions))
        leading: dict[int, int] = {}
        if info is not None:
            for p in range(len(info.partitions)):
                part = self.replicas.partitions.get((OFFSETS_TOPIC, p))
                if part is not None and part.is_leader and self.replicas.registered:
                    leading[p] = part.leader_epoch
        for p in [p for p in self._loaded if leading.get(p) != self._loaded[p]]:
            self._unload(p)
        for p, epoch in leading.items():
            if p not in self._loaded:
                self._loaded[p] = epoch
                self.nursery.start_soon(self._load, p, epoch)

    def _topics_deleted(self, names) -> None:
        """Offsets of deleted topics go from the loaded groups now; a partition loading
        meanwhile applies them when its replay is done (see :meth:`_load`)."""
        for name in names:
            if len(self._recent_deletions) == MAX_RECENT_DELETIONS:
                seq, old = self._recent_deletions[0]  # about to be evicted
                if self._deleted_names.get(old) == seq:
                    del self._deleted_names[old]
            self._deletions += 1
            self._recent_deletions.append((self._deletions, name))
            self._deleted_names[name] = self._deletions
        assert len(self._deleted_names) <= len(self._recent_deletions)
        self._drop_offsets(names, None)

    def _deleted_topic(self, name: str) -> bool:
        """A topic this node saw deleted that does not exist now (commits are refused)."""
        return name in self._deleted_names and name not in self.store.topics

    def _partition_exists(self, topic: str, partition: int) -> bool:
        """Whether the metadata has this partition (commits for others are refused)."""
        info = self.store.topics.get(topic)
        return info is not None and 0 <= partition < len(info.partitions)

    def _drop_offsets(self, names, partition: int | None) -> None:
        effects = self.coordinator.delete_topic_offsets(names, self.service.now_ms(),
                                                        partition=partition)
        if effects:
            self.nursery.start_soon(self._run_deletions, effects, tuple(names))

    async def _run_deletions(self, effects, names) -> None:
        failure = await self.service.run_effects(effects)
        if failure is not None:  # (gone from memory: a reload of the partition brings them back)
            self.events.warning("offsets_of_deleted_topics_not_persisted", topics=list(names),
                                error=failure.message)
        else:
            self.events.info("offsets_of_deleted_topics_deleted", topics=list(names),
                             records=sum(len(e.records) for e in effects))

    def _deleted_since(self, mark: int) -> list | None:
        """Topics deleted after deletion number ``mark``; None when older ones than the
        remembered window are needed."""
        if self._deletions - mark > len(self._recent_deletions):
            return None
        return [name for seq, name in self._recent_deletions if seq > mark]

    def _unload(self, partition: int) -> None:
        self._loaded.pop(partition, None)
        self.pending_txn.pop(partition, None)
        self._markers_while_loading.pop(partition, None)
        effects = self.coordinator.unload(partition)
        if effects:
            self.nursery.start_soon(self.service.run_effects, effects)
        self.events.info("group_partition_unloaded", partition=partition)

    async def _load(self, partition: int, epoch: int) -> None:
        part = self.replicas.partitions.get((OFFSETS_TOPIC, partition))
        if part is None:
            return
        effects = self.coordinator.begin_loading(partition)
        if effects:
            self.nursery.start_soon(self.service.run_effects, effects)
        started = time.monotonic()
        mark = self._deletions
        # A transaction's marker appended from here on lies past the replay's end, and
        # the replay leaves its offsets open: note it (on_marker) and apply it after.
        # (Appending and on_marker run in one turn: a marker below ``end`` already ran.)
        markers = self._markers_while_loading[partition] = []
        self.pending_txn.pop(partition, None)
        end = part.log.log_end_offset
        try:
            recs, open_txns = await trio.to_thread.run_sync(read_with_transactions,
                                                            part.log, end)
        except (CorruptRecordError, OffsetOutOfRangeError, OSError) as e:
            self.events.error("group_load_failed", partition=partition, error=repr(e))
            recs = None
        # (not ours any more: unloaded, or a later load of the partition took over)
        ours = self._markers_while_loading.get(partition) is markers
        if ours:
            del self._markers_while_loading[partition]
        if recs is None:
            if self._loaded.get(partition) == epoch:
                self._loaded.pop(partition, None)
                self.coordinator.unload(partition)
            return
        if not ours or self._loaded.get(partition) != epoch or not part.is_leader:
            return  # leadership moved while reading: the next reconcile decides
        for pid, commit in markers:  # in the order they were appended, after the replay
            txn_recs = open_txns.pop(pid, None)
            if txn_recs and commit:
                recs.extend(txn_recs)
        bad = 0
        for key, value in recs:
            try:
                self.coordinator.replay(partition, key, value)
            except CorruptGroupRecordError as e:
                bad += 1
                self.events.error("group_record_corrupt", partition=partition, error=str(e))
        self.coordinator.finish_loading(partition, self.service.now_ms())
        self.pending_txn[partition] = open_txns
        deleted = self._deleted_since(mark)
        if deleted is None:
            self.events.warning("group_load_missed_topic_deletions", partition=partition,
                                window=MAX_RECENT_DELETIONS)
        elif deleted:
            self._drop_offsets(deleted, partition)
        self.service.poke()
        self.events.info("group_partition_loaded", partition=partition, records=len(recs),
                         corrupt=bad, ms=round((time.monotonic() - started) * 1000, 1))


def _read_all(log, end: int) -> list[tuple[bytes, bytes | None]]:
    """(key, value) of every record of ``log`` below ``end`` (worker thread), but
    control batches and transactional records not committed by a marker below ``end``
    (:func:`read_with_transactions` keeps those)."""
    return read_with_transactions(log, end)[0]


def read_with_transactions(log, end: int) -> tuple[list, dict]:
    """``(records, open)``: (key, value) of every record below ``end`` in log order --
    a transactional batch's records (TxnOffsetCommit) where its commit marker is, none
    of an aborted one -- and {producer id: [(key, value), ...]} of the transactions
    still open at ``end`` (worker thread)."""
    out: list = []
    pending: dict[int, list] = {}
    start = log.log_start_offset
    for h, batch in log.iter_batches(start, end, chunk_bytes=LOAD_READ_BYTES):
        if h.attributes & batch_format.ATTR_CONTROL:
            if h.base_offset < end:
                recs = pending.pop(h.producer_id, [])
                if batch_format.read_control_marker(batch, 0, h).committed:
                    out.extend(recs)
            continue
        into = (pending.setdefault(h.producer_id, [])
                if h.attributes & batch_format.ATTR_TRANSACTIONAL else out)
        for r in batch_format.decode_records(batch, 0, h):
            if start <= r.offset < end and r.key is not None:
                into.append((bytes(r.key), None if r.value is None else bytes(r.value)))
    return out, pending
