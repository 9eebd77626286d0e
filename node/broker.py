"""Request handlers of a node: pure request -> response logic over the node's partitions.

Handlers are synchronous except where the protocol says to wait (Fetch long-poll).
A handler returns ``(header_fields, body_pieces)`` where a piece is ``bytes`` or a
file slice for ``os.sendfile``; the server frames and sends them. Anything a
client sends yields an error response, never an exception out of here.
"""

from __future__ import annotations

import contextlib
import os
import time

import trio

from raftlog.checkpoint import makedirs_durable
from raftlog.config import LogConfig
from raftlog.errors import (
    ApiError,
    ConfigError,
    CorruptRecordError,
    ErrorCode,
    OffsetOutOfRangeError,
    StorageError,
)
from raftlog.log import PartitionLog
from raftlog.protocol import (
    EARLIEST_TIMESTAMP,
    LATEST_TIMESTAMP,
    ApiVersionRange,
    EpochEndOffset,
    FetchPartHeader,
    ListOffsetsPartResult,
    LogDirPartition,
    NamedResult,
    PartitionMetadata,
    PartitionResult,
    ProducePartResult,
    Request,
    TopicMetadata,
    split_body,
)

from .clock import wall_ms
from .config import NodeConfig
from .disk import DiskHealth
from .logfmt import EventLog
from .metrics import NodeMetrics
from .partition import Partition, partition_dir
from .routes import SERVED_APIS
from .throttle import ByteRate
from .topics import TopicInfo, validate_topic_config, validate_topic_name

Response = tuple[dict, list]

#: test.flags values (the safety harness's planted bugs; see jepsen/).
PLANTED_BUGS = frozenset({
    "bug-ack-before-replication",  # acks=all answers before the ISR has the batch
    "bug-serve-beyond-hw",  # consumers may read records the ISR does not have yet
    "bug-skip-truncation",  # followers keep a divergent tail after a leader change
    "bug-ack-before-commit",  # metadata writes answered before the quorum commits them
})





#: flush_all looks at every partition (not only the written ones) every this many calls.
FULL_FLUSH_EVERY = 60


class Broker:
    """The state a node serves requests from: topics, partitions, their logs."""

    def __init__(self, config: NodeConfig, events: EventLog, store):
        self.config = config
        self.events = events
        #: counters bumped while serving; gauges are read at scrape time (metrics.py)
        self.metrics = NodeMetrics()
        makedirs_durable(config.data_dir)
        #: Topics and brokers: the metadata quorum (node/quorum_store.py), of which a
        #: single node is the only voter.
        self.store = store
        self.partitions: dict[tuple[str, int], Partition] = {}
        #: partitions written (appended, truncated, created) since the last flush_all
        self._unflushed: set = set()
        self._flushes = 0
        self.log_configs: dict[str, LogConfig] = {}
        self._applied_configs: dict[str, dict] = {}
        #: {topic: TopicInfo} as the last reconcile saw them, and the registration
        #: state it ran under (None: never ran) -- see reconcile
        self._reconciled: dict = {}
        self._reconciled_as: bool | None = None
        #: the partitions this node leads that have other replicas (the ISR duty's)
        self.led: dict[tuple[str, int], Partition] = {}
        #: bytes/s budgets of reassignments: what this node sends as leader to the
        #: replicas being added, and what it fetches as such a replica (Kafka's leader
        #: and follower replication throttles)
        self.reassign_rate = ByteRate()
        self.reassign_in_rate = ByteRate()
        #: Called with (broker_id, incarnation_id) for each BrokerHeartbeat.
        self.on_heartbeat = None
        #: False until this incarnation's registration has committed.
        self.registered = False
        #: Whether the data dir takes writes (one log line per incident), node/disk.py.
        self.disk = DiskHealth(config.node_id, config.data_dir, events)
        #: The follower fetchers (node/fetcher.py), told what to follow.
        self.fetchers = None
        # Planted bugs for the safety harness's proof that its checkers fire (test.flags;
        # never set in production): each breaks one replication guarantee.
        flags = config.test_flags
        unknown = flags - PLANTED_BUGS
        if unknown:
            raise ConfigError(f"test.flags: unknown flag(s) {sorted(unknown)}; "
                              f"known: {sorted(PLANTED_BUGS)}")
        self._bug_early_ack = "bug-ack-before-replication" in flags
        self._bug_beyond_hw = "bug-serve-beyond-hw" in flags
        self.bug_skip_truncation = "bug-skip-truncation" in flags
        if flags:
            events.warning("planted_bugs_enabled", flags=",".join(sorted(flags)))
        #: Called with (partition, offset, error) when a read finds corrupt data on disk.
        self.on_corrupt_log = None
        #: Pokes the ISR manager with the partition keys whose follower
        #: progress or metadata changed (None: all of them).
        self.isr_changed = None
        #: The group coordinator host (node/coordinator.py), set by the node.
        self.groups = None
        from .producer_ids import ProducerIdService

        #: InitProducerId (idempotent producers).
        self.producer_ids = ProducerIdService(self.store, events)
        from .security import Security

        #: SCRAM credentials and ACLs (node/security.py).
        self.security = Security(config, store)
        #: How fetchers and heartbeats reach peers (inter-broker listener's protocol).
        self.peer_security = None
        if (config.controller_quorum_voters  # (a node alone connects to no peer)
                and config.listener_config.inter_broker_protocol.value != "PLAINTEXT"):
            from .peer import PeerSecurity

            self.peer_security = PeerSecurity(config)

    # ------------------------------------------------------------------ lifecycle

    def open(self) -> None:
        """Open (and recover) the log of every partition this node hosts."""
        self.reconcile()
        self.events.info("logs_opened", partitions=len(self.partitions))

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
        for name in gone:
            touched.update(self._drop_topic(name, seen.pop(name)))
        for name in changed:
            info = topics[name]
            old = seen.get(name)
            if old is not None and old.topic_id != info.topic_id:  # deleted and re-created
                touched.update(self._drop_topic(name, old))
            touched.update(self._reconcile_topic(info, follow))
            seen[name] = info
        if self.fetchers is not None:
            self.fetchers.update(follow, only=None if full else touched)
        if self.isr_changed is not None:
            self.isr_changed(None if full else touched)
        if self.groups is not None:
            self.groups.on_reconcile()

    def _remove_partition(self, key) -> None:
        self.led.pop(key, None)
        self.partitions.pop(key).delete()

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
                path = partition_dir(self.config.data_dir, name, p.partition)
                part = Partition(name, p.partition, PartitionLog.open(path, cfg), p.leader_epoch,
                                 node_id=me, unflushed=self._unflushed)
                part.disk = self.disk
                self.partitions[key] = part
            part.log.config = cfg
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
            if part.is_leader and len(part.replicas) > 1:
                self.led[key] = part
            else:
                self.led.pop(key, None)
                if not part.is_leader and part.leader_id >= 0:
                    follow[key] = (part.leader_id, part.leader_epoch)
        return keys

    def close(self) -> None:
        """Flush and checkpoint every log: durable when it returns."""
        for part in self.partitions.values():
            try:
                part.close()
            except Exception as e:  # keep closing the others
                self.events.error("log_close_failed", partition=part, error=e)
        self.partitions.clear()
        self.led.clear()

    def flush_all(self) -> None:
        """fsync every log with unflushed data. Runs in a worker thread (see node.py).

        Looks at the partitions written since the last call only (work proportional to
        what changed, not to what exists), and at all of them every FULL_FLUSH_EVERY
        calls (a safety net: a log that got dirty some other way)."""
        self._flushes += 1
        if self._flushes % FULL_FLUSH_EVERY == 0:
            todo = list(self.partitions.values())
        else:
            todo = list(self._unflushed)
        # (an append after this line re-adds its partition: flushed now or next time)
        self._unflushed.difference_update(todo)
        for part in todo:
            if self.partitions.get(part.key) is not part or not part.log.needs_flush:
                continue
            try:
                part.log.flush()
            except StorageError as e:  # one line per incident (recovery: the next append)
                self._unflushed.add(part)  # (tried again next time)
                self.disk.write_failed(e, part, op="flush")

    def compact_all(self) -> int:
        """Compact every log whose topic has cleanup.policy=compact. Worker thread."""
        removed = 0
        for part in list(self.partitions.values()):
            if part.log.config.compact:
                try:
                    removed += part.log.compact()["records_removed"]
                except (StorageError, CorruptRecordError, OSError) as e:
                    self.events.error("compaction_failed", partition=part, error=e)
        return removed

    def retention_all(self) -> int:
        deleted = 0
        for part in list(self.partitions.values()):
            try:
                deleted += part.log.apply_retention(wall_ms())
            except StorageError as e:
                self.events.error("retention_failed", partition=part, error=e)
        return deleted

    # ------------------------------------------------------------------ dispatch

    def partition(self, topic: str, partition: int) -> Partition:
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
        part = self.partition(topic, partition)
        if not part.is_leader:
            raise ApiError(ErrorCode.NOT_LEADER_OR_FOLLOWER,
                           f"node {self.config.node_id} is not the leader of {topic}-{partition}")
        return part

    # ------------------------------------------------------------------ produce

    def produce(self, req: Request) -> Response:
        acks = req.fields["acks"]
        if acks not in (-1, 0, 1):
            raise ApiError(ErrorCode.INVALID_REQUIRED_ACKS, f"acks must be -1, 0 or 1, not {acks}")
        parts = req.fields["parts"]
        try:
            bodies = split_body(req.body, [p[2] for p in parts])
        except ValueError as e:
            raise ApiError(ErrorCode.INVALID_REQUEST, str(e)) from None
        results = []
        for (topic, partition, _), data in zip(parts, bodies):
            results.append(self.produce_one(topic, partition, data))
        return {"parts": results}, []

    def produce_one(self, topic: str, partition: int, data, acks: int = 1,
                    waits=None) -> ProducePartResult:
        """Append one partition's batches as leader (produce and the group coordinator's
        ``__consumer_offsets`` writes). With acks=-1 and ``waits``, a wait for the ISR is
        added for :meth:`await_replicated` / :meth:`check_high_watermarks`."""
        try:
            if topic not in self.store.topics:
                self._maybe_auto_create(topic)
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
            base, last = part.append_as_leader(data, cfg.max_message_bytes)  # copied once, by the log
            ts = self.metrics.topic(topic)
            ts.bytes_in += len(data)
            ts.records_in += last - base + 1
            if waits is not None and part.high_watermark <= last and not self._bug_early_ack:
                waits.append((part, part.leader_epoch, last, topic, partition))
            return ProducePartResult(topic, partition, 0, base, -1, "")
        except ApiError as e:
            return ProducePartResult(topic, partition, int(e.code), -1, -1, e.message)

    def min_insync_replicas(self, topic: str) -> int:
        info = self.store.topics.get(topic)
        if info is not None and "min.insync.replicas" in info.config:
            return self.log_configs[topic].min_insync_replicas
        return self.config.min_insync_replicas

    def produce_acks_all_append(self, req: Request) -> tuple[list, list, float]:
        """acks=all, first half (synchronous): append every batch now, in request order.

        Returns (per-partition results, waits, deadline in trio time): the request is
        answered once the HW passes every wait or it fails (:meth:`check_high_watermarks`,
        :meth:`mark_failed`; the server parks the request meanwhile).
        The server appends pipelined requests of one connection while earlier ones
        wait, so a producer with several requests in flight pays one replication
        round for all of them, not one each."""
        parts = req.fields["parts"]
        try:
            bodies = split_body(req.body, [p[2] for p in parts])
        except ValueError as e:
            raise ApiError(ErrorCode.INVALID_REQUEST, str(e)) from None
        waits: list = []
        results = [self.produce_one(t, p, data, -1, waits) for (t, p, _), data in zip(parts, bodies)]
        timeout_ms = min(req.fields["timeout_ms"], self.config.request_timeout_ms)
        return results, waits, trio.current_time() + timeout_ms / 1000

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
        """(waits still pending, failed) for acks=all waits: a wait is done once the HW
        passes its last offset (every ISR follower holds it); it fails when leadership
        moved, or -- ``expired`` -- when the request timeout passed first."""
        failed: dict = {}
        pending = []
        for w in waits:
            part, epoch, last, topic, partition = w
            if not part.is_leader or part.leader_epoch != epoch:
                failed[(topic, partition)] = ApiError(
                    ErrorCode.NOT_LEADER_OR_FOLLOWER,
                    f"leadership of {part} changed before the write was replicated; "
                    "it may or may not be committed")
            elif part.high_watermark <= last:
                pending.append(w)
        if expired:
            for part, _e, last, topic, partition in pending:
                failed[(topic, partition)] = ApiError(
                    ErrorCode.REQUEST_TIMED_OUT,
                    f"{part}: offset {last} not replicated to the ISR {list(part.isr)} "
                    f"in time (high watermark {part.high_watermark})")
            pending = []
        return pending, failed

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

    def _maybe_auto_create(self, topic: str) -> None:
        if not self.config.auto_create_topics_enable:
            raise ApiError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"unknown topic {topic!r}")
        self.create_topic(topic, self.config.num_partitions, 1, {})
        self.reconcile()  # its partitions now: the caller appends to one at once

    # ------------------------------------------------------------------ fetch

    def fetch_once(self, req: Request) -> tuple[list, list, int, bool]:
        """Read every requested partition once: (part headers, pieces, bytes, any_error)."""
        replica = req.fields["replica_id"]
        consumer = replica < 0 and not self._bug_beyond_hw
        budget = req.fields["max_bytes"]
        headers, pieces, total, error = [], [], 0, False
        for topic, partition, offset, part_max, epoch in req.fields["parts"]:
            limit = min(part_max, budget - total) if total else part_max
            header, piece = self._read_part(topic, partition, offset, limit, epoch, replica,
                                            consumer)
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
                    part.on_follower_fetch(replica, sp.offset, session)
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

    def _read_part(self, topic: str, partition: int, offset: int, limit: int, epoch: int,
                   replica: int, consumer: bool):
        """One partition of a fetch: (FetchPartHeader, a file slice or None)."""
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
                if n:
                    piece = sl
                if throttled:
                    self.reassign_rate.spend(n)
            return FetchPartHeader(topic, partition, 0, part.high_watermark,
                                   log.log_start_offset, n, ""), piece
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
        if not total:
            return
        slices = iter(pieces)
        for h, (_t, _p, offset, _max, _e) in zip(headers, req.fields["parts"]):
            if h.length:
                sl = next(slices, None)
                ts = m.topic(h.topic)
                ts.bytes_out += h.length
                if sl is not None:
                    ts.records_out += max(0, sl.next_offset - offset)

    def on_replica_fetch(self, req: Request, session=None) -> None:
        """A follower's Fetch: record its progress (once per request, before reading);
        with a fetch ``session``, of the partitions the request names."""
        replica = req.fields["replica_id"]
        for topic, partition, offset, _max, epoch in req.fields["parts"]:
            part = self.partitions.get((topic, partition))
            if part is None or not part.is_leader or (epoch >= 0 and epoch != part.leader_epoch):
                continue  # fetch_once answers with the error
            try:
                was_in_isr = replica in part.isr
                part.on_follower_fetch(replica, offset, session)
                if not was_in_isr and self.isr_changed is not None:
                    self.isr_changed((part.key,))
            except ApiError:
                continue

    def offsets_for_leader_epoch(self, req: Request) -> Response:
        """KIP-101/279: (largest epoch <= requested, its end offset) per partition."""
        out = []
        for topic, partition, epoch in req.fields["parts"]:
            try:
                part = self.leader_partition(topic, partition)
                found, end = part.log.end_offset_for_epoch(epoch)
                out.append(EpochEndOffset(topic, partition, 0, found, end))
            except ApiError as e:
                out.append(EpochEndOffset(topic, partition, int(e.code), -1, -1))
        return {"parts": out}, []

    # ------------------------------------------------------------------ offsets

    def list_offsets(self, req: Request) -> Response:
        out = []
        for topic, partition, ts in req.fields["parts"]:
            try:
                part = self.leader_partition(topic, partition)
                log = part.log
                if ts == EARLIEST_TIMESTAMP:
                    off, t = log.log_start_offset, -1
                elif ts == LATEST_TIMESTAMP:
                    off, t = part.high_watermark, -1
                elif ts < 0:
                    raise ApiError(ErrorCode.INVALID_REQUEST, f"timestamp {ts} is not valid")
                else:
                    found = log.lookup_timestamp(ts)
                    if found is not None and found[0] < part.high_watermark:
                        off, t = found
                    else:
                        off, t = -1, -1
                out.append(ListOffsetsPartResult(topic, partition, 0, off, t))
            except ApiError as e:
                out.append(ListOffsetsPartResult(topic, partition, int(e.code), -1, -1))
        return {"parts": out}, []

    # ------------------------------------------------------------------ metadata

    def brokers(self) -> list:
        return self.store.brokers()

    def brokers_for_listener(self, rows, name: str, bound: dict) -> list:
        """Broker rows with each broker's advertised address on listener ``name`` (a
        client is told the addresses of the listener it came through, as Kafka does)."""
        brokers = self.store.quorum.state.brokers
        out = []
        for r in rows:
            b = brokers.get(r.node_id)
            addr = next((x[:2] for x in (b.listeners if b else ()) if len(x) > 2 and x[2] == name),
                        None)
            if addr is not None and not addr[1] and r.node_id == self.config.node_id:
                addr = (addr[0], bound.get(name, (None, 0))[1])  # on port 0: the one bound
            out.append(r if addr is None else r._replace(host=addr[0], port=addr[1]))
        return out

    @property
    def controller_id(self) -> int:
        return self.store.controller_id

    def metadata(self, req: Request) -> Response:
        if not self.registered:
            # A restarted node replays the metadata log before its registration
            # commits; until then its topics and brokers may be missing or stale:
            # clients ask another node (Kafka's brokers serve only once caught up).
            raise ApiError(ErrorCode.BROKER_NOT_AVAILABLE,
                           f"node {self.config.node_id} is starting: its metadata is not "
                           "caught up yet; ask another node")
        names = req.fields["topics"]
        if names is None:
            names = sorted(self.store.topics)
        topics = []
        for name in names:
            info = self.store.topics.get(name)
            if info is None and self.config.auto_create_topics_enable and _legal(name):
                info = self.create_topic(name, self.config.num_partitions, 1, {})
                self.reconcile()  # (on the event loop: Metadata is answered inline)
            if info is None:
                topics.append(TopicMetadata(name, int(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION),
                                            f"unknown topic {name!r}").to_wire())
                continue
            topics.append(self._describe(info, req.fields["include_configs"]).to_wire())
        return {
            "cluster_id": self.config.cluster_id,
            "controller_id": self.controller_id,
            "node_id": self.config.node_id,
            "brokers": self.brokers(),
            "topics": topics,
        }, []

    def _describe(self, info: TopicInfo, include_configs: bool) -> TopicMetadata:
        config = None
        if include_configs:
            cfg = self.log_configs.get(info.name) or validate_topic_config(info.config, self.config.log_defaults)
            config = cfg.to_dict()
        return TopicMetadata(
            info.name, 0, "", info.topic_id,
            [PartitionMetadata(p.partition, 0, p.leader, p.leader_epoch, list(p.replicas),
                               list(p.isr), list(p.offline_replicas))
             for p in info.partitions],
            config)

    def describe_cluster(self, req: Request) -> Response:
        return {
            "cluster_id": self.config.cluster_id,
            "controller_id": self.controller_id,
            "controller_epoch": self.store.quorum.term,
            "brokers": self.brokers(),
        }, []

    def broker_heartbeat(self, req: Request) -> Response:
        if self.on_heartbeat is None or not self.config.controller_quorum_voters:
            raise ApiError(ErrorCode.NOT_CONTROLLER,
                           "this node is a cluster of one (no controller.quorum.voters): no "
                           "other broker heartbeats to it")
        if not self.on_heartbeat(req.fields["broker_id"], req.fields["incarnation_id"]):
            raise ApiError(ErrorCode.NOT_CONTROLLER, f"the controller is {self.controller_id}")
        return {}, []

    def elect_leaders(self, req: Request) -> Response:
        """Preferred-leader election: move leadership back to each partition's first
        replica where it is alive and in the ISR. Blocking (a quorum write)."""
        wanted = req.fields["parts"]
        return {"results": self.store.elect_preferred(wanted)}, []

    def alter_partition_reassignments(self, req: Request) -> Response:
        """Start (or, with an empty target, cancel) partition reassignments. Blocking
        (quorum writes). A single node has nothing to move a replica to."""
        parts, throttle = req.fields["parts"], req.fields["throttle"]
        if not self.config.controller_quorum_voters:  # (a quorum of one: no other broker)
            return {"results": [
                PartitionResult(t, p, int(ErrorCode.INVALID_REQUEST),
                                "reassignment needs a cluster (controller.quorum.voters)")
                for t, p, _ in parts]}, []
        return {"results": self.store.reassign(parts, throttle)}, []

    def unregister_broker(self, req: Request) -> Response:
        """Remove a broker that holds no replica from the metadata (the last step of a
        decommission): it is fenced at once, never given replicas, and its heartbeats
        are ignored until it restarts and registers again. Blocking (a quorum write)."""
        if not self.config.controller_quorum_voters:  # (its only broker is itself)
            raise ApiError(ErrorCode.INVALID_REQUEST,
                           "unregistering a broker needs a cluster (controller.quorum.voters)")
        self.store.unregister(req.fields["broker_id"])
        return {}, []

    def list_partition_reassignments(self, req: Request) -> Response:
        wanted = req.fields["parts"]
        rows = self.store.reassignments()
        if wanted is not None:
            keep = {(t, p) for t, p in wanted}
            rows = [r for r in rows if (r.topic, r.partition) in keep]
        return {"reassignments": rows}, []

    def describe_log_dirs(self, req: Request) -> Response:
        """DescribeLogDirs (kafka-log-dirs): this node's data directory, its disk, and
        every hosted replica's size, segments and offsets (as leader, its followers'
        log end offsets). Read-only; O(segments hosted)."""
        wanted = req.fields["topics"]
        keep = None if wanted is None else set(wanted)
        rows = []
        for (topic, p), part in sorted(self.partitions.items()):
            if keep is not None and topic not in keep:
                continue
            log = part.log
            st = part.leader_state if part.is_leader else None
            followers = [] if st is None else sorted([r, f.leo] for r, f in st.followers.items())
            rows.append(LogDirPartition(topic, p, log.size_bytes, log.segment_count,
                                        log.log_start_offset, log.log_end_offset,
                                        part.high_watermark, part.leader_id, part.leader_epoch,
                                        followers))
        try:
            vfs = os.statvfs(self.config.data_dir)
            total, usable = vfs.f_blocks * vfs.f_frsize, vfs.f_bavail * vfs.f_frsize
        except OSError:
            total = usable = -1
        return {
            "node_id": self.config.node_id,
            "roles": list(self.config.process_roles),
            "log_dir": self.config.data_dir,
            "total_bytes": total,
            "usable_bytes": usable,
            "partitions": rows,
        }, []

    def api_versions(self, req: Request) -> Response:
        return {
            "apis": [ApiVersionRange(int(a), lo, hi) for a, (lo, hi) in sorted(SERVED_APIS.items())],
            "node_id": self.config.node_id,
        }, []

    # ------------------------------------------------------------------ topics admin

    def create_topic(self, name: str, partitions: int, replication_factor: int, config: dict) -> TopicInfo:
        validate_topic_name(name)
        if not 1 <= partitions <= 10_000:
            raise ApiError(ErrorCode.INVALID_PARTITIONS, f"partitions must be 1..10000, not {partitions}")
        brokers = len(self.brokers())
        # configured nodes still registering count: the quorum store waits for them
        expected = max(brokers, len(self.config.controller_quorum_voters or ()))
        if not 1 <= replication_factor <= max(expected, 1):
            raise ApiError(
                ErrorCode.INVALID_REPLICATION_FACTOR,
                f"replication factor {replication_factor} must be between 1 and the "
                f"{brokers} available broker(s)",
            )
        validate_topic_config(config, self.config.log_defaults)
        info = self.store.create(name, partitions, config, replication_factor)
        self.events.info("topic_created", topic=name, partitions=partitions)
        return info

    def create_topics(self, req: Request) -> Response:
        results = []
        for t in req.fields["topics"]:
            try:
                if req.fields["validate_only"]:
                    validate_topic_name(t["name"])
                    validate_topic_config(t["config"], self.config.log_defaults)
                else:
                    self.create_topic(t["name"], t["partitions"], t["replication_factor"], t["config"])
                results.append(NamedResult(t["name"], 0, ""))
            except ApiError as e:
                results.append(NamedResult(t["name"], int(e.code), e.message))
        return {"results": results}, []

    def delete_topics(self, req: Request) -> Response:
        results = []
        for name in req.fields["names"]:
            try:
                self.store.delete(name)
                self.events.info("topic_deleted", topic=name)
                results.append(NamedResult(name, 0, ""))
            except ApiError as e:
                results.append(NamedResult(name, int(e.code), e.message))
        return {"results": results}, []

    def alter_configs(self, req: Request) -> Response:
        name = req.fields["topic"]
        info = self.store.topics.get(name)
        if info is None:
            raise ApiError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"unknown topic {name!r}")
        validate_topic_config({**info.config, **req.fields["config"]}, self.config.log_defaults)
        self.store.set_config(name, req.fields["config"])
        return {}, []

    def create_partitions(self, req: Request) -> Response:
        name, count = req.fields["topic"], req.fields["count"]
        info = self.store.topics.get(name)
        if info is None:
            raise ApiError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"unknown topic {name!r}")
        if not len(info.partitions) < count <= 10_000:
            raise ApiError(
                ErrorCode.INVALID_PARTITIONS,
                f"topic {name!r} has {len(info.partitions)} partitions; the new count {count} "
                "must be larger (partitions cannot be removed)",
            )
        self.store.add_partitions(name, count)
        return {}, []


def _epoch_mismatch(part: Partition, epoch: int):
    if epoch < part.leader_epoch:
        raise ApiError(ErrorCode.FENCED_LEADER_EPOCH,
                       f"{part}: leader epoch {epoch} is older than the current {part.leader_epoch}")
    raise ApiError(ErrorCode.UNKNOWN_LEADER_EPOCH,
                   f"{part}: leader epoch {epoch} is newer than this leader's {part.leader_epoch}")


def _legal(name: str) -> bool:
    try:
        validate_topic_name(name)
        return True
    except ApiError:
        return False


