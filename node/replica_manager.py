"""The replicas a node hosts (Kafka's ReplicaManager): which partitions it has and in
what role, and the produce and fetch paths over them.

* **Reconcile**: :meth:`ReplicaManager.reconcile` makes the hosted partitions follow
  the topic metadata -- opens logs of new replicas, sets leadership, epochs and the
  ISR, applies topic configs, deletes logs of deleted topics -- and tells the
  fetchers, the ISR duty and the group coordinator what changed.
* **Produce**: appends as leader (acks 0/1 answered at once; acks=all appends now and
  waits until the high watermark passes every batch, :meth:`check_high_watermarks`).
* **Fetch**: reads partitions up to the high watermark (consumers) or the log end
  (followers, whose progress :meth:`on_replica_fetch` records first), in full or
  through a follower's fetch session, within a reassignment's byte budget.

Everything here runs on the trio thread, synchronously, except :meth:`await_replicated`.
The logs' storage duties (flush, compaction, retention) are node/log_manager.py's.
Request handlers (node/broker.py, node/server.py, node/kafka/handlers.py) call in.
"""

from __future__ import annotations

import contextlib
import time

import trio

from raftlog import records
from raftlog.config import LogConfig
from raftlog.errors import (
    ApiError,
    ConfigError,
    CorruptRecordError,
    ErrorCode,
    OffsetOutOfRangeError,
    StorageError,
)
from raftlog.protocol import (
    EARLIEST_TIMESTAMP,
    LATEST_TIMESTAMP,
    MAX_TIMESTAMP,
    FetchPartHeader,
    LogDirPartition,
    ProducePartResult,
    ProducerRow,
    Request,
    split_body,
)
from raftlog.trace import TraceLog, at

from .config import NodeConfig
from .consumer_fetch_session import ConsumerSession, SessionCache
from .log_manager import LogManager
from .logfmt import EventLog
from .metrics import NodeMetrics
from .partition import Partition
from .throttle import ByteRate
from .topics import validate_topic_config

#: test.flags values (the safety harness's planted bugs; see jepsen/). All are checked
#: here; the replication ones act here and in node/fetcher.py, bug-ack-before-commit
#: in node/quorum_store.py.
PLANTED_BUGS = frozenset({
    "bug-ack-before-replication",  # acks=all answers before the ISR has the batch
    "bug-serve-beyond-hw",  # consumers may read records the ISR does not have yet
    "bug-skip-truncation",  # followers keep a divergent tail after a leader change
    "bug-ack-before-commit",  # metadata writes answered before the quorum commits them
    "bug-ack-before-fsync",  # durable topics acknowledged (and served) before the fsync
    # transactions (#33):
    "bug-skip-txn-verification",  # a transactional batch appended without KIP-890's check
    "bug-lso-ignores-open-txn",  # read_committed reads up to the HW, open transactions too
    "bug-marker-before-prepare-durable",  # markers sent before PrepareCommit/Abort is durable
})


class ReplicationPending(ApiError):
    """An append of this node's own (:meth:`ReplicaManager.append_acks_all`) is in the
    leader's log but was not replicated in time: its fate is unknown, not failed. While
    this node stays leader at that epoch it commits once the ISR takes it (or shrinks);
    ``waits`` is what :meth:`ReplicaManager.await_replicated` waits on for that."""

    def __init__(self, message: str, waits: list):
        super().__init__(ErrorCode.REQUEST_TIMED_OUT, message)
        self.waits = waits


class ReplicaManager:
    """The partitions this node hosts, their roles, and appends and reads over them.

    Args:
        config: the node's configuration.
        events: the node's event log.
        store: the metadata (node/quorum_store.py): topics and brokers.
        metrics: the node's counters (node/metrics.py), bumped per request or change.

    Raises:
        ConfigError: ``test.flags`` names an unknown planted bug.
    """

    def __init__(self, config: NodeConfig, events: EventLog, store, metrics: NodeMetrics):
        self.config = config
        self.events = events
        self.store = store
        self.metrics = metrics
        self.partitions: dict[tuple[str, int], Partition] = {}
        #: moves whenever a Partition is added to or removed from ``partitions`` (only
        #: reconcile does): consumer fetch sessions re-check their partitions' objects
        #: only when it moved (ConsumerSession.apply)
        self.partitions_version = 0
        #: opt-in hop stamps (``trace.events``, raftlog/trace.py; GET /trace): None off
        self.trace = TraceLog(config.trace_events) if config.trace_events else None
        #: (tracing) when the server read the bytes of the request being handled
        self.trace_read_ns: int | None = None
        #: the data dir, its health, flush/compaction/retention over self.partitions
        self.logs = LogManager(config, events, self.partitions)
        self.log_configs: dict[str, LogConfig] = {}
        self._applied_configs: dict[str, dict] = {}
        #: {topic: TopicInfo} as the last reconcile saw them, and the registration
        #: state it ran under (None: never ran) -- see reconcile
        self._reconciled: dict = {}
        self._reconciled_as: bool | None = None
        #: the partitions this node leads that have other replicas (the ISR duty's)
        self.led: dict[tuple[str, int], Partition] = {}
        #: False until this incarnation's registration has committed (node.py): until
        #: then reconcile takes no role from a metadata copy that may be stale.
        self.registered = False
        #: bytes/s budgets of reassignments: what this node sends as leader to the
        #: replicas being added, and what it fetches as such a replica (Kafka's leader
        #: and follower replication throttles)
        self.reassign_rate = ByteRate()
        self.reassign_in_rate = ByteRate()
        #: consumers' fetch sessions of both listeners (node/consumer_fetch_session.py)
        self.consumer_sessions = SessionCache(config.max_incremental_fetch_session_cache_slots)
        self._init_planted_bugs(config.test_flags)
        # Set by the node once they exist (each of them is built over this object):
        #: The follower fetchers (node/fetcher.py), told what to follow.
        self.fetchers = None
        #: Pokes the ISR duty (node/isr.py) with the partition keys whose follower
        #: progress or metadata changed (None: all of them).
        self.isr_changed = None
        #: Called after a reconcile that changed something, with the names of the
        #: topics deleted (or re-created under a new id) since the last one (the group
        #: coordinator loads and unloads its ``__consumer_offsets`` partitions, and
        #: drops the committed offsets of deleted topics).
        self.on_reconciled = None
        #: Called with (partition, offset, error) when a read finds corrupt data on disk.
        self.on_corrupt_log = None
        #: (producer id, epoch, topic, partition) -> whether the partition was verified
        #: to be in the producer's ongoing transaction (node/txn_host.py); none here
        #: until the transaction coordinator is hosted
        self.txn_verified = lambda pid, epoch, topic, partition: False

    def _init_planted_bugs(self, flags: frozenset) -> None:
        # Planted bugs for the safety harness's proof that its checkers fire (test.flags;
        # never set in production): each breaks one replication guarantee.
        unknown = flags - PLANTED_BUGS
        if unknown:
            raise ConfigError(f"test.flags: unknown flag(s) {sorted(unknown)}; "
                              f"known: {sorted(PLANTED_BUGS)}")
        self._bug_early_ack = "bug-ack-before-replication" in flags
        self._bug_beyond_hw = "bug-serve-beyond-hw" in flags
        self.bug_skip_truncation = "bug-skip-truncation" in flags
        #: write.caching=false topics run as write.caching=true (page-cache acks, the
        #: periodic flush): node/partition.py's ``durable``
        self.bug_ack_before_fsync = "bug-ack-before-fsync" in flags
        self._bug_skip_txn_verification = "bug-skip-txn-verification" in flags
        self._bug_lso_ignores_open_txn = "bug-lso-ignores-open-txn" in flags
        #: node/txn_host.py's
        self.bug_marker_before_prepare_durable = "bug-marker-before-prepare-durable" in flags
        if flags:
            self.events.warning("planted_bugs_enabled", flags=",".join(sorted(flags)))

    # ------------------------------------------------------------------ lifecycle

    def open(self) -> None:
        """Open (and recover) the log of every partition this node hosts."""
        self.reconcile()
        self.events.info("logs_opened", partitions=len(self.partitions))

    def close(self) -> None:
        """Flush and checkpoint every log: durable when it returns."""
        for part in self.partitions.values():
            try:
                part.close()
            except Exception as e:  # keep closing the others
                self.events.error("log_close_failed", partition=part, error=e)
        self.partitions.clear()
        self.led.clear()

    # ------------------------------------------------------------------ reconcile

    def reconcile(self) -> None:
        """Make hosted partitions follow the topic metadata: open logs of new replicas,
        set leadership and epochs, apply configs, delete logs of deleted topics.
        Runs on the trio thread only.

        Work is proportional to what changed: a topic whose ``TopicInfo`` is the
        object seen by the last reconcile is skipped (both stores keep the object
        while the topic is unchanged). The first call, and the one after this node's
        registration commits, go over every topic."""
        topics = self.store.topics
        full = self._reconciled_as != self.registered
        seen = {} if full else self._reconciled
        if full:
            # seen is filled topic by topic: a topic whose turn raised is redone next time
            self._reconciled, self._reconciled_as = seen, self.registered
            for key in [k for k in self.partitions if k[0] not in topics]:
                self._remove_partition(key)
            for name in [n for n in self.log_configs if n not in topics]:
                del self.log_configs[name]
            changed = list(topics)
        else:
            changed = [n for n, info in topics.items() if seen.get(n) is not info]
        gone = [n for n in seen if n not in topics]
        if not changed and not gone:
            return
        touched: set = set()  # followed-or-hosted keys of the topics looked at
        follow: dict = {}
        deleted = list(gone)
        for name in gone:
            touched.update(self._drop_topic(name, seen.pop(name)))
        for name in changed:
            info = topics[name]
            old = seen.get(name)
            if old is not None and old.topic_id != info.topic_id:  # deleted and re-created
                deleted.append(name)
                touched.update(self._drop_topic(name, old))
            touched.update(self._reconcile_topic(info, follow))
            seen[name] = info
        if self.fetchers is not None:
            self.fetchers.update(follow, only=None if full else touched)
        if self.isr_changed is not None:
            self.isr_changed(None if full else touched)
        if self.on_reconciled is not None:
            self.on_reconciled(deleted)

    def _remove_partition(self, key) -> None:
        self.led.pop(key, None)
        self.partitions.pop(key).delete()
        self.partitions_version += 1

    def _drop_topic(self, name: str, info) -> list:
        """Delete this node's logs of a topic gone (or re-created under a new id)."""
        keys = [(name, p.partition) for p in info.partitions if (name, p.partition) in self.partitions]
        for key in keys:
            self._remove_partition(key)
        self.log_configs.pop(name, None)
        self._applied_configs.pop(name, None)
        return keys

    def _reconcile_topic(self, info, follow: dict) -> list:
        """Open, update (and drop) this node's replicas of one topic; adds the ones it
        follows to ``follow``. Returns every key looked at."""
        name, me = info.name, self.config.node_id
        cfg = self.log_configs.get(name)
        if cfg is None or info.config != self._applied_configs.get(name):
            cfg = validate_topic_config(info.config, self.config.log_defaults)
            self.log_configs[name] = cfg
            self._applied_configs[name] = dict(info.config)
        keys = []
        for p in info.partitions:
            key = (name, p.partition)
            part = self.partitions.get(key)
            if me not in p.replicas:
                if part is not None:  # reassigned away from this node
                    self._remove_partition(key)
                    keys.append(key)
                continue
            keys.append(key)
            if part is None:
                part = Partition(name, p.partition, self.logs.open_log(name, p.partition, cfg),
                                 p.leader_epoch, node_id=me, unflushed=self.logs.unflushed,
                                 syncs=self.logs.syncs)
                part.disk = self.logs.disk
                part.bug_ack_before_fsync = self.bug_ack_before_fsync
                part.trace = self.trace
                self.partitions[key] = part
                self.partitions_version += 1
            part.log.config = cfg
            self._update_role(part, p)
            if part.is_leader and len(part.replicas) > 1:
                self.led[key] = part
            else:
                self.led.pop(key, None)
                if not part.is_leader and part.leader_id >= 0:
                    follow[key] = (part.leader_id, part.leader_epoch)
        return keys

    def _update_role(self, part: Partition, p) -> None:
        """Apply one partition's metadata ``p`` (a PartitionInfo) to its replica here."""
        # Until this node's registration commits, its copy of the metadata may be
        # stale (a restart replays its own journal first): take no role from it.
        leader = p.leader if self.registered else -1
        was_leader, old_isr = part.is_leader, part.isr
        role = part.update_metadata(leader, p.leader_epoch, tuple(p.replicas),
                                    tuple(p.isr), p.partition_epoch)
        if role is None and was_leader and part.is_leader and len(part.isr) != len(old_isr):
            # an ISR change of a partition led here (by its ISR duty or the controller)
            if len(part.isr) < len(old_isr):
                self.metrics.isr_shrinks += 1
            else:
                self.metrics.isr_expands += 1
        if role is not None:
            if role == "leader":
                self.metrics.leader_elections += 1
            self.events.info("partition_role", partition=part, role=role,
                             leader=p.leader, leader_epoch=p.leader_epoch,
                             leo=part.log.log_end_offset, hw=part.high_watermark)
        part.throttled = (frozenset(p.adding), p.throttle) if p.adding and p.throttle else None

    # ------------------------------------------------------------------ lookup

    def partition(self, topic: str, partition: int) -> Partition:
        """The replica of ``topic``-``partition`` hosted here.

        Raises:
            ApiError: UNKNOWN_TOPIC_OR_PARTITION, or NOT_LEADER_OR_FOLLOWER when the
                partition exists but has no replica on this node.
        """
        part = self.partitions.get((topic, partition))
        if part is None:
            info = self.store.topics.get(topic)
            if info is None:
                raise ApiError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"unknown topic {topic!r}")
            if 0 <= partition < len(info.partitions):
                leader = info.partitions[partition].leader
                raise ApiError(ErrorCode.NOT_LEADER_OR_FOLLOWER,
                               f"node {self.config.node_id} does not host {topic}-{partition}; leader is {leader}")
            raise ApiError(
                ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                f"topic {topic!r} has no partition {partition}",
            )
        return part

    def leader_partition(self, topic: str, partition: int) -> Partition:
        """The replica of ``topic``-``partition`` if this node leads it, else ApiError."""
        part = self.partition(topic, partition)
        if not part.is_leader:
            raise ApiError(ErrorCode.NOT_LEADER_OR_FOLLOWER,
                           f"node {self.config.node_id} is not the leader of {topic}-{partition}")
        return part

    def end_offset_for_epoch(self, topic: str, partition: int, epoch: int) -> tuple[int, int]:
        """KIP-101/279, as leader: (largest epoch <= ``epoch``, its end offset)."""
        return self.leader_partition(topic, partition).log.end_offset_for_epoch(epoch)

    def delete_records(self, topic: str, partition: int, offset: int) -> int:
        """DeleteRecords, as leader: the log start offset moved to ``offset`` (-1: the
        high watermark), durably (the log's checkpoint); followers move theirs when
        their fetch answers carry it (fetcher.py). Returns the new log start offset.
        OFFSET_OUT_OF_RANGE past the high watermark (Kafka's rule)."""
        part = self.leader_partition(topic, partition)
        hw = part.high_watermark
        if offset == -1:
            offset = hw
        if not 0 <= offset <= hw:
            raise ApiError(ErrorCode.OFFSET_OUT_OF_RANGE,
                           f"cannot delete records of {topic}-{partition} before offset "
                           f"{offset}: it is not in [0, {hw}] (the high watermark)")
        try:
            start = part.log.delete_records_before(offset)
        except StorageError as e:
            raise ApiError(ErrorCode.KAFKA_STORAGE_ERROR, str(e)) from None
        self.events.info("records_deleted", partition=part, log_start=start)
        part.wake_waiters()  # (parked follower fetches carry the new log start)
        return start

    def offset_for_timestamp(self, topic: str, partition: int, ts: int,
                             committed: bool = False) -> tuple[int, int]:
        """ListOffsets, as leader: (offset, timestamp) for ``ts`` (or EARLIEST /
        LATEST / MAX_TIMESTAMP); (-1, -1) when no record below the HW is that recent
        (MAX_TIMESTAMP: when the record of the largest timestamp is not below it).
        ``committed`` (read_committed): LATEST is the last stable offset."""
        part = self.leader_partition(topic, partition)
        log = part.log
        if ts == EARLIEST_TIMESTAMP:
            return log.log_start_offset, -1
        if ts == LATEST_TIMESTAMP:
            return (log.last_stable_offset() if committed else part.high_watermark), -1
        if ts == MAX_TIMESTAMP:  # the first record of the largest timestamp, if readable
            ts = log.max_timestamp()
            if ts < 0:
                return -1, -1
        elif ts < 0:
            raise ApiError(ErrorCode.INVALID_REQUEST, f"timestamp {ts} is not valid")
        found = log.lookup_timestamp(ts)
        if found is not None and found[0] < part.high_watermark:
            return found
        return -1, -1

    def producers_of(self, topic: str, partition: int) -> list:
        """DescribeProducers, as leader: a ProducerRow per producer the partition
        tracks (idempotent and transactional), by producer id."""
        state = self.leader_partition(topic, partition).log.producers
        return [ProducerRow(pid, e.epoch, e.last_seq, e.last_timestamp_ms,
                            e.coordinator_epoch, e.txn_first_offset)
                for pid, e in sorted(state.producers.items())]

    def describe_partitions(self, topics=None) -> list:
        """A LogDirPartition row per hosted replica (of ``topics`` when not None): its
        size, segments and offsets, and as leader its followers' log end offsets."""
        rows = []
        for (topic, p), part in sorted(self.partitions.items()):
            if topics is not None and topic not in topics:
                continue
            log = part.log
            st = part.leader_state if part.is_leader else None
            followers = [] if st is None else sorted([r, f.leo] for r, f in st.followers.items())
            rows.append(LogDirPartition(topic, p, log.size_bytes, log.segment_count,
                                        log.log_start_offset, log.log_end_offset,
                                        part.high_watermark, part.leader_id, part.leader_epoch,
                                        followers))
        return rows

    def min_insync_replicas(self, topic: str) -> int:
        info = self.store.topics.get(topic)
        if info is not None and "min.insync.replicas" in info.config:
            return self.log_configs[topic].min_insync_replicas
        return self.config.min_insync_replicas

    # ------------------------------------------------------------------ produce

    def produce(self, req: Request) -> list:
        """acks 0 or 1: append every batch as leader now; the per-partition results
        (acks=1 of a durable topic waits for the leader's sync: :meth:`produce_append`)."""
        check = not req.fields.get("records_checked")
        return [self.produce_one(t, p, data, check_records=check)
                for (t, p, _), data in _produce_parts(req)]

    def produce_one(self, topic: str, partition: int, data, acks: int = 1,
                    waits=None, check_records: bool = True) -> ProducePartResult:
        """Append one partition's batches as leader (produce and the group coordinator's
        ``__consumer_offsets`` writes). With ``waits``, what the answer waits for is added
        for :meth:`await_replicated` / :meth:`check_high_watermarks`: with acks=-1 the
        HW passing the batch (the ISR has it; on disk, of a durable topic), with acks=1
        of a durable topic (``write.caching=false``) the leader's own sync.
        ``check_records`` False: the caller checked every record of ``data`` (the Kafka
        listener's conversion, ``records_checked`` in its request's fields)."""
        try:
            if topic not in self.store.topics:
                self._unknown_topic(topic)
            part = self.partition(topic, partition)
            cfg = self.log_configs[topic]
            if acks == -1:
                min_isr = self.min_insync_replicas(topic)
                if len(part.isr) < min_isr and part.is_leader:
                    raise ApiError(
                        ErrorCode.NOT_ENOUGH_REPLICAS,
                        f"{part} has {len(part.isr)} in-sync replica(s) {list(part.isr)}; "
                        f"min.insync.replicas is {min_isr}",
                    )
            txn_ok = False
            if len(data) >= records.HEADER_SIZE:
                h = records.read_header(data, 0)
                if h.attributes & records.ATTR_TRANSACTIONAL:
                    # KIP-890: only a partition of the producer's ongoing transaction
                    # (verified with its coordinator before this call) takes the batch
                    if not (self._bug_skip_txn_verification or self.txn_verified(
                            h.producer_id, h.producer_epoch, topic, partition)):
                        raise ApiError(
                            ErrorCode.INVALID_TXN_STATE,
                            f"{topic}-{partition} is not in the ongoing transaction of "
                            f"producer {h.producer_id} epoch {h.producer_epoch}: "
                            "AddPartitionsToTxn first (nothing was written)")
                    txn_ok = True
            base, last = part.append_as_leader(data, cfg.max_message_bytes,  # copied once
                                               txn_ok, check_records)
            if self.trace is not None:
                self.trace.stamp("leader_read", topic, partition, base, last,
                                 self.trace_read_ns)
            ts = self.metrics.topic(topic)
            ts.bytes_in += len(data)
            ts.records_in += last - base + 1
            if waits is not None and not self._bug_early_ack:
                if acks == -1:
                    if part.high_watermark <= last:
                        waits.append((part, part.leader_epoch, last, topic, partition, False))
                elif part.durable and part.log.flushed_offset <= last:
                    waits.append((part, part.leader_epoch, last, topic, partition, True))
            return ProducePartResult(topic, partition, 0, base, -1, "")
        except ApiError as e:
            return ProducePartResult(topic, partition, int(e.code), -1, -1, e.message)

    @staticmethod
    def _unknown_topic(topic: str) -> None:
        """A produce to a topic that does not exist: refused (retriable), never created
        here -- as Kafka, only a Metadata request auto-creates topics (the producer asks
        for its topics' metadata before it sends)."""
        raise ApiError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                       f"unknown topic {topic!r}: create it first (or enable "
                       "auto.create.topics.enable: a Metadata request then creates it)")

    def produce_acks_all_append(self, req: Request) -> tuple[list, list, float]:
        """acks=all, and acks=1 when a partition is durable (its answer waits for the
        leader's sync), first half (synchronous): append every batch now, in request order.

        Returns (per-partition results, waits, deadline in trio time): the request is
        answered once the HW passes every wait or it fails (:meth:`check_high_watermarks`,
        :meth:`mark_failed`; the server parks the request meanwhile).
        The server appends pipelined requests of one connection while earlier ones
        wait, so a producer with several requests in flight pays one replication
        round for all of them, not one each."""
        waits: list = []
        acks = req.fields["acks"]
        check = not req.fields.get("records_checked")
        results = [self.produce_one(t, p, data, acks, waits, check)
                   for (t, p, _), data in _produce_parts(req)]
        timeout_ms = min(req.fields["timeout_ms"], self.config.request_timeout_ms)
        return results, waits, trio.current_time() + timeout_ms / 1000

    def any_durable(self, parts) -> bool:
        """Whether a produce's partitions ([topic, partition, ...]) include one of a
        durable topic led here (its acks=1 answer waits for the leader's sync)."""
        for row in parts:
            part = self.partitions.get((row[0], row[1]))
            if part is not None and part.durable:
                return True
        return False

    @staticmethod
    def mark_failed(results: list, failed: dict) -> None:
        """acks=all: turn the results of the partitions in ``failed`` ({(topic,
        partition): ApiError}, from :meth:`check_high_watermarks`) into their errors."""
        for i, r in enumerate(results):
            err = failed.get((r.topic, r.partition))
            if err is not None and r.error == 0:
                results[i] = ProducePartResult(r.topic, r.partition, int(err.code), -1, -1,
                                               err.message)

    @staticmethod
    def check_high_watermarks(waits: list, expired: bool) -> tuple[list, dict]:
        """(waits still pending, failed) for produce waits: an acks=all wait is done once
        the HW passes its last offset (every ISR follower holds it), an acks=1 one once
        the leader's flushed offset does; it fails when leadership moved, or --
        ``expired`` -- when the request timeout passed first."""
        failed: dict = {}
        pending = []
        for w in waits:
            part, epoch, last, topic, partition, own = w
            if not part.is_leader or part.leader_epoch != epoch:
                failed[(topic, partition)] = ApiError(
                    ErrorCode.NOT_LEADER_OR_FOLLOWER,
                    f"leadership of {part} changed before the write was replicated; "
                    "it may or may not be committed")
            elif (part.log.flushed_offset if own else part.high_watermark) <= last:
                pending.append(w)
        if expired:
            for part, _e, last, topic, partition, own in pending:
                failed[(topic, partition)] = ApiError(
                    ErrorCode.REQUEST_TIMED_OUT,
                    f"{part}: offset {last} not on the leader's disk in time (flushed "
                    f"offset {part.log.flushed_offset})" if own else
                    f"{part}: offset {last} not replicated to the ISR {list(part.isr)} "
                    f"in time (high watermark {part.high_watermark})")
            pending = []
        return pending, failed

    async def append_acks_all(self, topic: str, partition: int, batches) -> None:
        """Append ``batches`` as this node's own producer (the group and transaction
        coordinators' state) and wait until the ISR has them (acks=all); raises the
        ApiError of a refused append or of a replication that failed, and
        :class:`ReplicationPending` when the batches are in this leader's log but the
        ISR did not take them within ``request.timeout.ms``: they may still commit."""
        waits: list = []
        for data in batches:
            r = self.produce_one(topic, partition, data, -1, waits)
            if r.error:
                raise ApiError(ErrorCode(r.error), r.message)
        if waits:
            deadline = trio.current_time() + self.config.request_timeout_ms / 1000
            failed = await self.await_replicated(waits, deadline)
            for err in failed.values():
                if err.code is ErrorCode.REQUEST_TIMED_OUT:
                    raise ReplicationPending(err.message, waits)
                raise err

    async def await_replicated(self, waits, deadline) -> dict:
        """Wait (in a task) until every acks=all wait is done or failed; the failures."""
        failed: dict = {}
        pending = list(waits)
        while True:
            pending, more = self.check_high_watermarks(pending,
                                                       trio.current_time() >= deadline)
            failed.update(more)
            if not pending:
                return failed
            ev = trio.Event()
            registered = [w[0] for w in pending if w[0].add_waiter(ev)]
            try:
                with trio.move_on_at(deadline):
                    await ev.wait()
            finally:
                for part in registered:
                    part.remove_waiter(ev)

    # ------------------------------------------------------------------ fetch

    def fetch_once(self, req: Request) -> tuple[list, list, int, bool]:
        """Read every requested partition once: (part headers, pieces, bytes, any_error).

        The answer's bounds are Kafka's: each partition gets at most its
        ``partition_max_bytes`` and the whole at most ``max_bytes``, except that the
        first partition with data may return one batch larger than both (so a batch
        bigger than the limits is still delivered, alone); a later partition whose
        next batch does not fit in what is left returns nothing this time.
        ``min_one`` false (a later slice of a large Kafka fetch whose earlier slices
        returned data): no oversized batch at all. A follower's fetch (its fetcher does
        not rotate its partitions, as Kafka's does) still gets one batch of every
        partition it has room for, so no partition of a busy leader starves."""
        replica = req.fields["replica_id"]
        consumer = replica < 0 and not self._bug_beyond_hw
        committed = replica < 0 and req.fields.get("isolation_level", 0) == 1
        budget = req.fields["max_bytes"]
        min_one = req.fields.get("min_one", True)
        each_one = replica >= 0
        headers, pieces, total, error = [], [], 0, False
        seen: set = set()
        for topic, partition, offset, part_max, epoch in req.fields["parts"]:
            if (topic, partition) in seen:  # named twice: read and answered once (as Kafka)
                continue
            seen.add((topic, partition))
            limit = min(part_max, budget - total)
            header, piece = self._read_part(topic, partition, offset, limit, epoch, replica,
                                            consumer, min_one and (not total or each_one),
                                            committed)
            headers.append(header)
            if piece is not None:
                pieces.append(piece)
                total += header.length
            error = error or header.error != 0
        return headers, pieces, total, error

    def fetch_session_once(self, session, max_bytes: int) -> tuple[list, list, int, bool]:
        """Read the marked partitions of a follower's fetch session: (part headers,
        pieces, bytes, any_error), only rows with news. Errored partitions leave the
        session; partitions the byte budget left out stay marked."""
        replica = session.replica
        headers, pieces, total, error = [], [], 0, False
        for key in session.take_dirty():
            sp = session.parts.get(key)
            if sp is None:
                continue
            limit = min(sp.max_bytes, max_bytes - total) if total else sp.max_bytes
            if limit <= 0:
                session.dirty.add(key)  # the next answer reads it
                continue
            header, piece = self._read_part(key[0], key[1], sp.offset, limit, sp.epoch,
                                            replica, False)
            if header.error:  # answered, and dropped: the follower names it again
                error = True
                session.drop(key)
                headers.append(header)
                continue
            part = self.partitions.get(key)
            st = part.leader_state if part is not None else None
            f = st.followers.get(replica) if st is not None else None
            if f is not None and f.session is not session:
                # a leadership (or replica entry) newer than the follower's last word:
                # its session's offset is its progress here
                with contextlib.suppress(ApiError):
                    part.on_follower_fetch(replica, sp.offset, session,
                                           sp.flushed if sp.flushed >= 0 else None)
            if piece is not None:
                pieces.append(piece)
                total += header.length
            else:
                if part is not None and part.log.log_end_offset > sp.offset:
                    session.dirty.add(key)  # data held back (a throttle): ask again
                if not session.is_news(key, header.high_watermark, header.log_start_offset):
                    continue
            headers.append(header)
        return headers, pieces, total, error

    def fetch_consumer_session_once(self, session: ConsumerSession, max_bytes: int,
                                    committed: bool) -> tuple[list, list, list, int, bool]:
        """Read the marked partitions of a consumer's fetch session on the native
        listener: (part headers, pieces, fetch offsets, bytes, any_error), only the rows
        with news (records, an error, or offsets other than last sent: the session's
        rule, ConsumerSession.news_of). Bounds as :meth:`fetch_once`'s (the first
        partition with data may return one batch larger than the limits); a partition
        with data the budget left out stays marked."""
        consumer = not self._bug_beyond_hw
        headers, pieces, offsets, total, error = [], [], [], 0, False
        for key in session.take_dirty():
            sp = session.parts.get(key)
            if sp is None:
                continue
            limit = min(sp.max_bytes, max_bytes - total)
            header, piece = self._read_part(key[0], key[1], sp.offset, limit, sp.epoch, -1,
                                            consumer, not total, committed)
            if piece is not None:
                pieces.append(piece)
                total += header.length
            elif not header.error and session.unread(
                    key, header.last_stable_offset if committed else header.high_watermark):
                session.dirty.add(key)  # (left out: the next answer reads it)
            if not session.news_of(key, piece is not None, header.error,
                                   header.high_watermark, header.last_stable_offset,
                                   header.log_start_offset):
                continue
            headers.append(header)
            offsets.append(sp.offset)
            error = error or header.error != 0
        return headers, pieces, offsets, total, error

    def _read_part(self, topic: str, partition: int, offset: int, limit: int, epoch: int,
                   replica: int, consumer: bool, min_one: bool = True,
                   committed: bool = False):
        """One partition of a fetch: (FetchPartHeader, a file slice or None). Whole
        batches within ``limit`` bytes; with ``min_one``, at least the first batch
        even if it is larger, else nothing when it is."""
        piece = None
        try:
            part = self.leader_partition(topic, partition)
            if epoch >= 0 and epoch != part.leader_epoch:
                _epoch_mismatch(part, epoch)
            if replica >= 0 and replica not in part.replicas:
                # (a new replica whose metadata is ahead of this leader's: nothing
                # until the leader knows it, and the throttle that comes with it)
                raise ApiError(ErrorCode.NOT_LEADER_OR_FOLLOWER,
                               f"broker {replica} is not a replica of {part} here (yet)")
            log = part.log
            max_offset = part.high_watermark if consumer else None
            lso = -1
            if committed:  # read_committed: up to the last stable offset
                lso = (part.high_watermark if self._bug_lso_ignores_open_txn
                       else log.last_stable_offset())
                # (planted bug-serve-beyond-hw serves a read_committed fetch beyond the
                # HW too: read_committed is the SDK consumer's default)
                max_offset = None if self._bug_beyond_hw else lso
            throttled = part.throttled is not None and replica in part.throttled[0]
            if throttled:  # a replica a reassignment adds: the node's byte budget
                limit = min(limit, self.reassign_rate.allowance(part.throttled[1],
                                                                time.monotonic()))
            if limit <= 0 or (max_offset is not None and offset >= max_offset):
                if offset > log.log_end_offset or offset < log.log_start_offset:
                    raise OffsetOutOfRangeError(offset, log.log_start_offset, log.log_end_offset)
                n = 0
            else:
                sl = log.read(offset, limit, max_offset=max_offset)
                n = sl.length
                if n > limit and not min_one:  # (one batch larger than what is left)
                    n = 0
                if n:
                    piece = sl
                    if self.trace is not None:
                        self.trace.stamp("follower_fetch" if replica >= 0 else "consumer_answer",
                                         topic, partition, offset, sl.next_offset - 1)
                        if replica >= 0:
                            self.trace.stamp(at("follower_fetch", replica), topic, partition,
                                             offset, sl.next_offset - 1)
                if throttled:
                    self.reassign_rate.spend(n)
            if not committed:
                return FetchPartHeader(topic, partition, 0, part.high_watermark,
                                       log.log_start_offset, n, ""), piece
            aborted = log.aborted_transactions(offset, piece.next_offset) if n else []
            return FetchPartHeader(topic, partition, 0, part.high_watermark,
                                   log.log_start_offset, n, "", lso,
                                   [list(a) for a in aborted]), piece
        except ApiError as e:
            return FetchPartHeader(topic, partition, int(e.code), -1, -1, 0, e.message), None
        except OffsetOutOfRangeError as e:
            return FetchPartHeader(topic, partition, int(ErrorCode.OFFSET_OUT_OF_RANGE),
                                   -1, e.log_start_offset, 0, str(e)), None
        except CorruptRecordError as e:
            # Never served. Tell this client, keep its other partitions, and let the
            # node hand leadership to an intact replica (see on_corrupt_log).
            if self.on_corrupt_log is not None:
                self.on_corrupt_log(self.partitions.get((topic, partition)), offset, e)
            return FetchPartHeader(
                topic, partition, int(ErrorCode.KAFKA_STORAGE_ERROR), -1, -1, 0,
                f"{topic}-{partition}: data on disk failed its check: {e}"), None

    def fetch_answered(self, req: Request, headers: list, pieces: list, total: int) -> None:
        """Count a fetch answer of ``total`` bytes (and offsets, for consumers) per topic:
        once per answered request, per partition with data, never per record."""
        m = self.metrics
        if req.fields["replica_id"] >= 0:
            m.replication_bytes_out += total
            return
        if total:
            self.count_consumer_answer(headers, pieces, [p[2] for p in req.fields["parts"]],
                                       total)

    def count_consumer_answer(self, headers: list, pieces: list, offsets: list,
                              total: int) -> None:
        """Bytes and offsets out per topic of a consumer's answer (``offsets``: each
        header's fetch offset)."""
        m = self.metrics
        if not total:
            return
        slices = iter(pieces)
        for h, offset in zip(headers, offsets):
            if h.length:
                sl = next(slices, None)
                ts = m.topic(h.topic)
                ts.bytes_out += h.length
                if sl is not None:
                    ts.records_out += max(0, sl.next_offset - offset)

    def on_replica_fetch(self, req: Request, session=None) -> None:
        """A follower's Fetch: record its progress (once per request, before reading);
        with a fetch ``session``, of the partitions the request names. Its flushed
        offsets (``flushed``, #34) go with it: of the partitions named, and of others
        whose flushed offset moved."""
        replica = req.fields["replica_id"]
        reported = req.fields.get("flushed")
        flushed = {(t, p): o for t, p, o in reported} if reported else {}
        for topic, partition, offset, _max, epoch in req.fields["parts"]:
            key = (topic, partition)
            part = self.partitions.get(key)
            told = flushed.pop(key, None)
            if session is not None and told is not None:
                session.flushed(key, told)
            if part is None or not part.is_leader or (epoch >= 0 and epoch != part.leader_epoch):
                continue  # fetch_once answers with the error
            try:
                was_in_isr = replica in part.isr
                part.on_follower_fetch(replica, offset, session, told)
                if not was_in_isr and self.isr_changed is not None:
                    self.isr_changed((part.key,))
            except ApiError:
                continue
        for key, told in flushed.items():  # moved without a new fetch offset
            if session is not None:
                session.flushed(key, told)
            part = self.partitions.get(key)
            if part is not None:
                part.on_follower_flushed(replica, told)
                if replica not in part.isr and self.isr_changed is not None:
                    self.isr_changed((key,))


def _produce_parts(req: Request):
    """((topic, partition, size), batches bytes) per partition of a Produce request."""
    parts = req.fields["parts"]
    try:
        bodies = split_body(req.body, [p[2] for p in parts])
    except ValueError as e:
        raise ApiError(ErrorCode.INVALID_REQUEST, str(e)) from None
    return zip(parts, bodies)


def _epoch_mismatch(part: Partition, epoch: int):
    if epoch < part.leader_epoch:
        raise ApiError(ErrorCode.FENCED_LEADER_EPOCH,
                       f"{part}: leader epoch {epoch} is older than the current {part.leader_epoch}")
    raise ApiError(ErrorCode.UNKNOWN_LEADER_EPOCH,
                   f"{part}: leader epoch {epoch} is newer than this leader's {part.leader_epoch}")
