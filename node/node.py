"""A raftlog node: lifecycle, background duties and clean shutdown.

``run_node(config)`` opens (and recovers) every log, serves clients until SIGTERM
or SIGINT, then flushes and checkpoints every log before returning, so a restart
serves everything that was acknowledged.
"""

from __future__ import annotations

import os
import signal

import trio

from raftlog.dirlock import DirLock

from .broker import Broker
from .config import NodeConfig
from .logfmt import EventLog
from .metrics import NodeMetrics
from .replica_manager import ReplicaManager
from .server import Server

#: A leader that found bad data and had no other in-sync replica to hand the partition
#: to tries again (on its next bad read) after this long.
RESIGN_RETRY_S = 5.0


class Node:
    """Owns the node's parts -- metadata store, replica manager, handlers, server --
    and their background duties. Use :meth:`run` inside trio."""

    def __init__(self, config: NodeConfig, events: EventLog | None = None):
        self.config = config
        self.events = events or EventLog(config.node_id)
        #: counters bumped while serving; gauges are read at scrape time (metrics.py)
        self.metrics: NodeMetrics | None = None
        self.store = None
        #: the hosted partitions (node/replica_manager.py) and the handlers (broker.py)
        self.replicas: ReplicaManager | None = None
        self.broker: Broker | None = None
        #: how fetchers and heartbeats reach peers (node/peer.py; None: plain)
        self.peer_security = None
        self.server: Server | None = None
        self.address: tuple[str, int] | None = None
        #: where the metrics listener (metrics.listener) listens, when configured
        self.metrics_address: tuple[str, int] | None = None
        self.kafka = None  # the Kafka listener (kafka.listener), when configured
        self._token = None
        self._reconcile_scheduled = False
        #: the segment scrubber (node/scrubber.py); None when log.scrub.bytes.per.sec=0
        self.scrubber = None

    def stats(self) -> dict:
        """Storage counters for metrics: the data dir's health (node/disk.py) and the
        scrubber's (node/scrubber.py). One flat dict of numbers."""
        out = dict(self.replicas.logs.disk.stats()) if self.replicas is not None else {}
        if self.scrubber is not None:
            out.update(self.scrubber.stats)
        return out

    def _on_commit(self, state, record, result) -> None:
        """pysyncobj's thread: hand the change to trio. Cheap, never raises."""
        if self._reconcile_scheduled or self._token is None:
            return
        self._reconcile_scheduled = True
        try:
            self._token.run_sync_soon(self._reconcile)
        except Exception:  # trio already finished (shutdown)
            self._reconcile_scheduled = False

    def _reconcile(self) -> None:
        self._reconcile_scheduled = False
        try:
            self.replicas.reconcile()
        except Exception as e:  # keep serving; the next change retries
            self.events.error("reconcile_failed", error=repr(e))

    async def run(self, *, task_status=trio.TASK_STATUS_IGNORED) -> None:
        self._token = trio.lowlevel.current_trio_token()
        # before anything in the data dir is opened: a second node on it would lose
        # acknowledged records (raftlog/dirlock.py); the kernel drops it when we die
        self._lock = DirLock.acquire(self.config.data_dir, f"node {self.config.node_id}")
        try:
            await self._run(task_status)
        finally:
            self._lock.release()

    async def _run(self, task_status) -> None:
        from .heartbeat import Heartbeats
        from .peer import peer_security
        from .quorum_store import QuorumTopicStore

        self._make_data_dir_private()
        metrics_tls = basic_auth = None
        if self.config.metrics_port is not None:  # bad files: stop before serving anything
            from .metrics_http import metrics_security

            metrics_tls, basic_auth = metrics_security(self.config)
        # every node runs the metadata quorum; without controller.quorum.voters it is
        # the only voter of its own (NodeConfig.metadata_voters)
        self.store = QuorumTopicStore(self.config, self._on_commit)
        try:
            self.metrics = NodeMetrics()  # (its clock: raftlog_up_seconds)
            trio.lowlevel.add_instrument(self.metrics.loop)  # the longest event-loop step
            self.replicas = ReplicaManager(self.config, self.events, self.store, self.metrics)
            self.peer_security = peer_security(self.config)
            beats = Heartbeats(self.config, self.store, self.events, self.peer_security)
            self.broker = Broker(self.config, self.events, self.store, self.replicas,
                                 on_heartbeat=beats.record)
            self.server = Server(self.config, self.broker, self.replicas, self.metrics,
                                 self.events)
            self.server.on_heartbeat_lost = beats.disconnected  # (crash detection)
            if self.store.single_voter:
                # a quorum of one elects itself at once: registered (and a pre-quorum
                # data dir's __meta/ migrated) before the first request is served, so
                # that request sees every topic, as a single node always did
                await self._register(migrate_local=True)
            self.replicas.open()
        except BaseException:
            self.store.close()
            raise
        try:
            async with trio.open_nursery() as nursery:
                self.address = await nursery.start(self.server.serve)
                if self.config.metrics_port is not None:
                    from .metrics_http import MetricsServer

                    metrics = MetricsServer(
                        self, self.config.metrics_host, self.config.metrics_port, self.events,
                        tls=metrics_tls, basic_auth=basic_auth, failure_delay_s=self.config
                        .connection_failed_authentication_delay_ms / 1000)
                    self.metrics_address = await nursery.start(metrics.serve)
                if self.config.kafka_port is not None:  # kafka.listener
                    from .kafka.server import KafkaServer

                    self.kafka = KafkaServer(self.config, self.broker, self.replicas,
                                             self.events, self.server.purgatory,
                                             native=self.server)
                    await nursery.start(self.kafka.serve)
                self._start_replication(nursery, beats)
                self._start_groups(nursery)
                self._start_scrubber(nursery)
                nursery.start_soon(self._every_in_thread, self.config.log_flush_interval_ms, self._flush)
                nursery.start_soon(
                    self._every, self.config.log_retention_check_interval_ms, self._retention
                )
                nursery.start_soon(self._every_in_thread, self.config.log_cleaner_interval_ms, self._compact)
                task_status.started(self.address)
        finally:
            self.replicas.close()
            self.store.close()
            self.events.info("stopped")

    def _make_data_dir_private(self) -> None:
        """The data dir 0700, and what an older version left readable (0755 dirs,
        0644 files: records, the metadata snapshot's SCRAM keys) tightened."""
        from raftlog.filemodes import make_private

        changed = make_private(self.config.data_dir)
        if changed:
            self.events.warning("data_dir_tightened", path=self.config.data_dir,
                                entries=changed, reason="group/other permission bits removed")

    def _start_replication(self, nursery, beats) -> None:
        """Follower fetchers, the ISR duty, heartbeats, the controller's duty and (in a
        cluster) this node's registration.

        The fetchers, the ISR duty and the corrupt-log handler are built over the
        replica manager, which tells them what changed: they are hooked into it here,
        once the nursery they run in exists."""
        from .fetcher import FetcherManager
        from .isr import IsrManager

        replicas = self.replicas
        replicas.logs.syncs.start(nursery)  # group commits (before any fetch or produce)
        replicas.fetchers = FetcherManager(replicas, self.events, nursery, self.peer_security)
        replicas.on_corrupt_log = (
            lambda part, offset, err: self._on_corrupt_log(nursery, part, offset, err))
        isr = IsrManager(replicas, self.store, self.events)
        replicas.isr_changed = isr.poke
        nursery.start_soon(isr.run)
        if not replicas.registered:
            nursery.start_soon(self._register)
        nursery.start_soon(beats.send_loop)
        if self.config.is_voter:  # (a broker-only node is never the controller)
            nursery.start_soon(beats.controller_duty)

    def _start_groups(self, nursery) -> None:
        from .coordinator import GroupHost
        from .groups import GroupConfig

        c = self.config
        host = GroupHost(
            self.replicas, self.store, self.events, nursery,
            GroupConfig(min_session_timeout_ms=c.group_min_session_timeout_ms,
                        max_session_timeout_ms=c.group_max_session_timeout_ms,
                        initial_rebalance_delay_ms=c.group_initial_rebalance_delay_ms,
                        max_size=c.group_max_size,
                        offsets_retention_ms=c.offsets_retention_minutes * 60_000,
                        offsets_partitions=c.offsets_topic_num_partitions),
            topic_partitions=c.offsets_topic_num_partitions,
            topic_replication_factor=c.offsets_topic_replication_factor,
        )
        self.broker.groups = host  # (the group APIs' handlers)
        txn = self._start_transactions(nursery)
        txn.groups, host.txn = host, txn

        def on_reconciled(deleted=()):
            host.on_reconcile(deleted)
            txn.on_reconcile(deleted)

        self.replicas.on_reconciled = on_reconciled
        nursery.start_soon(host.run)
        host.on_reconcile()
        txn.on_reconcile()

    def _start_transactions(self, nursery):
        """The transaction coordinator (node/txn_host.py) and its peer calls."""
        from .peer import PeerSecurity
        from .peer_calls import PeerCalls
        from .txn_host import TxnHost

        security = self.peer_security or PeerSecurity(self.config)
        peers = PeerCalls(security, self.store, self.config.node_id)
        txn = TxnHost(self.replicas, self.store, self.events, nursery, peers,
                      self.broker.producer_ids, self.config,
                      offsets_partitions=self.config.offsets_topic_num_partitions)
        self.broker.txn = txn
        nursery.start_soon(txn.run)
        return txn

    def _start_scrubber(self, nursery) -> None:
        rate = self.config.log_scrub_bytes_per_sec
        if rate <= 0:
            return
        from .scrubber import Scrubber

        self.scrubber = Scrubber(self.replicas, self.events, rate,
                                 lambda part, offset, why: self._on_scrub_corrupt(
                                     nursery, part, offset, why))
        nursery.start_soon(self.scrubber.run)

    def _on_scrub_corrupt(self, nursery, part, offset: int, why: str) -> str:
        """The scrubber found bad data in ``part`` from ``offset``: repair it from
        another replica. Returns what was done (the scrubber logs it, one line)."""
        if part.is_leader:
            if part.corrupt_from is not None:
                return "resign_in_progress"
            self._on_corrupt_log(nursery, part, offset, why, log=False)
            if not any(r != part.node_id for r in part.isr):
                return "refused_to_serve (no other in-sync replica to lead)"
            return "resign_then_refetch"
        part.corrupt_from = offset if part.corrupt_from is None else min(part.corrupt_from, offset)
        if not self.replicas.fetchers.refetch((part.topic, part.partition)):
            return "refetch_when_following"  # (no leader now: done when one is known)
        return "truncate_and_refetch"

    def _on_corrupt_log(self, nursery, part, offset: int, err, log: bool = True) -> None:
        """A leader found corrupt data in its log: hand leadership to an intact in-sync
        replica (a compare-and-set through the quorum), then, as follower, truncate to
        the bad data and fetch it again. With no other in-sync replica the partition
        keeps answering KAFKA_STORAGE_ERROR: corrupt bytes are never served."""
        if part is None or part.corrupt_from is not None:
            return
        part.corrupt_from = offset
        if log:
            self.events.error("log_corrupt", partition=part, offset=offset, error=str(err))
        if part.is_leader:
            nursery.start_soon(self._resign, part)

    async def _resign(self, part) -> None:
        from raftlog.metadata.controller import resign_leadership

        record = resign_leadership(self.store.quorum.state, part.topic, part.partition,
                                   self.config.node_id, self.store.quorum.term)
        if record is None:
            self.events.error("log_corrupt_no_replica", partition=part,
                              message="no other in-sync replica: the bad offsets are not "
                                      f"served; tried again in {RESIGN_RETRY_S:g} s")
            # (a replica may join the ISR meanwhile: the next bad read tries again)
            await trio.sleep(RESIGN_RETRY_S)
            part.corrupt_from = None
            return
        ok = False
        try:
            result = await trio.to_thread.run_sync(
                lambda: self.store.quorum.propose(record, 5.0), abandon_on_cancel=True)
            ok = result.ok
            self.events.warning("leadership_resigned", partition=part, to=record.leader,
                                ok=result.ok, error=result.error or "")
        except Exception as e:
            self.events.error("leadership_resign_failed", partition=part, error=repr(e))
        if not ok:  # still leader: try again on the next corrupt read
            part.corrupt_from = None

    async def _register(self, migrate_local: bool = False) -> None:
        """Register with the controller; ``migrate_local`` (a quorum of one, before the
        node serves): then bring in what a data dir from before the one-voter quorum
        kept in ``__meta/`` (node/local_metadata.py), and leave reconciling to
        ReplicaManager.open()."""
        await trio.to_thread.run_sync(self.store.register, abandon_on_cancel=True)
        self.events.info("registered", incarnation=self.store.incarnation_id)
        if migrate_local:
            from .local_metadata import migrate

            await trio.to_thread.run_sync(migrate, self.store, self.config.data_dir,
                                          self.events, abandon_on_cancel=True)
        await self._ensure_inter_broker_user()
        self.replicas.registered = True
        if not migrate_local:
            self._reconcile()

    async def _ensure_inter_broker_user(self) -> None:
        """Write the inter-broker user's SCRAM credential (peers authenticate with it)
        and, on a node with a SASL listener, the cluster secret (fake SCRAM salts,
        node/security.py); retried while the quorum is unavailable."""
        c = self.config
        sasl = c.kafka_protocol.sasl if c.kafka_port is not None else False
        sasl = sasl or any(x.protocol.sasl for x in c.listener_config.listeners)
        if not c.inter_broker_sasl_username and not sasl:
            return
        from raftlog.errors import ApiError

        security = self.broker.security

        def ensure() -> None:
            if sasl:
                security.ensure_cluster_secret()
            security.ensure_inter_broker_user()

        for attempt in range(60):
            try:
                await trio.to_thread.run_sync(ensure, abandon_on_cancel=True)
                return
            except ApiError as e:
                self.events.warning("inter_broker_user_failed", error=e, attempt=attempt)
                await trio.sleep(0.5)

    async def _every(self, interval_ms: int, fn) -> None:
        while True:
            await trio.sleep(interval_ms / 1000)
            try:
                fn()
            except Exception as e:  # a duty failing once must not stop the node
                self.events.error("duty_failed", duty=fn.__name__, error=repr(e))

    async def _every_in_thread(self, interval_ms: int, fn) -> None:
        """Like _every, but fn (fsync, compaction) runs in a worker thread so the event
        loop keeps serving; PartitionLog holds its lock only for bookkeeping."""
        while True:
            await trio.sleep(interval_ms / 1000)
            try:
                done = await trio.to_thread.run_sync(fn)
                if fn == self._flush:  # (trio thread) durable logs it flushed: HW news
                    self.replicas.logs.syncs.after_flush(done)
            except Exception as e:
                self.events.error("duty_failed", duty=fn.__name__, error=repr(e))

    def _compact(self) -> None:
        n = self.replicas.logs.compact_all()
        if n:
            self.events.info("compaction", records_removed=n)

    def _flush(self) -> list:
        return self.replicas.logs.flush_all()

    def _retention(self) -> None:
        n = self.replicas.logs.retention_all()
        if n:
            self.events.info("retention", segments_deleted=n)


#: The file, in the data dir, that holds the pid of the node that has it: written once
#: the node serves, so under the data dir's lock (never by a process refused the dir).
PID_FILE = "node.pid"


def _write_pid_file(data_dir: str) -> None:
    try:
        fd = os.open(os.path.join(data_dir, PID_FILE), os.O_WRONLY | os.O_CREAT | os.O_TRUNC,
                     0o600)
        with os.fdopen(fd, "w") as f:
            f.write(f"{os.getpid()}\n")
    except OSError:
        pass  # (informational: a full disk must not stop the node)


async def serve_until_signalled(config: NodeConfig, events: EventLog | None = None) -> None:
    node = Node(config, events)
    with trio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
        async with trio.open_nursery() as nursery:
            await nursery.start(node.run)  # (it holds the data dir's lock from here)
            _write_pid_file(config.data_dir)  # once it serves: deploy/ waits for it
            async for signum in signals:
                node.events.info("shutdown", signal=signal.Signals(signum).name)
                nursery.cancel_scope.cancel()
                break
