"""Request handlers of a node: thin request -> response functions (Kafka's KafkaApis
for the APIs that answer at once or write metadata).

Each handler takes a :class:`~raftlog.protocol.Request` and returns ``(header_fields,
body_pieces)`` (a piece is ``bytes`` or a file slice for ``os.sendfile``); the server
frames and sends them. Handlers read and write the metadata through the store
(node/quorum_store.py) and reach partitions only through the
:class:`~raftlog.node.replica_manager.ReplicaManager`, which owns them and the produce
and fetch paths (produce and fetch, which may park, are routed through node/server.py).
Metadata writes (mode "quorum" in node/routes.py) block and run in a worker thread;
the others run on the event loop. Anything a client sends yields an error response,
never an exception out of here.
"""

from __future__ import annotations

import os

import trio

from raftlog.acl import CLUSTER_NAME, Operation, ResourceType
from raftlog.errors import ApiError, ErrorCode
from raftlog.protocol import (
    ApiVersionRange,
    ConfigEntry,
    DeleteRecordsResult,
    EpochEndOffset,
    ListOffsetsPartResult,
    NamedResult,
    PartitionMetadata,
    PartitionResult,
    ProducersPart,
    Request,
    TopicMetadata,
)

from .config import NodeConfig
from .logfmt import EventLog
from .replica_manager import ReplicaManager
from .routes import SERVED_APIS
from .topics import (
    TopicInfo,
    check_assignments,
    config_changes,
    create_topic,
    legal_topic_name,
    validate_topic_config,
    validate_topic_name,
)

Response = tuple[dict, list]
CREATE, CLUSTER, TOPIC = Operation.CREATE, ResourceType.CLUSTER, ResourceType.TOPIC


def unknown_topic_error(name: str) -> ApiError:
    """What a request naming a topic that does not exist is told: INVALID_TOPIC for a
    name no topic may have (not retriable), else UNKNOWN_TOPIC_OR_PARTITION."""
    try:
        validate_topic_name(name)
    except ApiError as e:
        return e
    return ApiError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"unknown topic {name!r}")


class Broker:
    """The handlers of one node over its metadata store and its replica manager.

    Args:
        config: the node's configuration.
        events: the node's event log.
        store: the metadata (node/quorum_store.py): topics, brokers, the controller.
        replicas: the partitions hosted here (node/replica_manager.py).
        on_heartbeat: ``(broker_id, incarnation_id) -> bool`` for each BrokerHeartbeat
            (node/heartbeat.py; False: this node is not the controller); None on a
            node that takes none.
    """

    def __init__(self, config: NodeConfig, events: EventLog, store, replicas: ReplicaManager,
                 on_heartbeat=None):
        self.config = config
        self.events = events
        #: Topics and brokers: the metadata quorum (node/quorum_store.py), of which a
        #: single node is the only voter.
        self.store = store
        self.replicas = replicas
        self.on_heartbeat = on_heartbeat
        #: The group coordinator host (node/coordinator.py), set by the node once it
        #: runs (its tasks need the node's nursery); None while starting.
        self.groups = None
        #: the transaction coordinator (node/txn_host.py), once the node runs
        self.txn = None
        from .producer_ids import ProducerIdService

        #: InitProducerId (idempotent producers).
        self.producer_ids = ProducerIdService(self.store, events)
        from .security import Security

        #: SCRAM credentials and ACLs (node/security.py).
        self.security = Security(config, store)

    # ------------------------------------------------------------------ offsets

    def offsets_for_leader_epoch(self, req: Request) -> Response:
        """KIP-101/279: (largest epoch <= requested, its end offset) per partition."""
        out = []
        for topic, partition, epoch in req.fields["parts"]:
            try:
                found, end = self.replicas.end_offset_for_epoch(topic, partition, epoch)
                out.append(EpochEndOffset(topic, partition, 0, found, end))
            except ApiError as e:
                out.append(EpochEndOffset(topic, partition, int(e.code), -1, -1))
        return {"parts": out}, []

    def list_offsets(self, req: Request) -> Response:
        out = []
        committed = req.fields.get("isolation_level", 0) == 1
        for topic, partition, ts in req.fields["parts"]:
            try:
                off, t = self.replicas.offset_for_timestamp(topic, partition, ts, committed)
                out.append(ListOffsetsPartResult(topic, partition, 0, off, t))
            except ApiError as e:
                out.append(ListOffsetsPartResult(topic, partition, int(e.code), -1, -1))
        return {"parts": out}, []

    def describe_producers(self, req: Request) -> Response:
        """DescribeProducers, as each partition's leader: the producers it tracks."""
        out = []
        for topic, partition in req.fields["parts"]:
            try:
                rows = self.replicas.producers_of(topic, partition)
                out.append(ProducersPart(topic, partition, 0, rows))
            except ApiError as e:
                out.append(ProducersPart(topic, partition, int(e.code), [], e.message))
        return {"parts": out}, []

    def delete_records(self, req: Request) -> Response:
        """DeleteRecords: each partition's log start offset moved, as its leader."""
        out = []
        for topic, partition, offset in req.fields["parts"]:
            try:
                start = self.replicas.delete_records(topic, partition, offset)
                out.append(DeleteRecordsResult(topic, partition, 0, start))
            except ApiError as e:
                out.append(DeleteRecordsResult(topic, partition, int(e.code), -1, e.message))
        return {"parts": out}, []

    def produce(self, req: Request) -> Response:
        """Produce with acks 0 or 1 (acks=all parks: node/server.py)."""
        acks = req.fields["acks"]
        if acks not in (-1, 0, 1):
            raise ApiError(ErrorCode.INVALID_REQUIRED_ACKS, f"acks must be -1, 0 or 1, not {acks}")
        return {"parts": self.replicas.produce(req)}, []

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

    def metadata(self, req: Request, auto_created: dict | None = None) -> Response:
        """The brokers and the named topics (None: all), from the metadata as it is.
        Both listeners first await :meth:`auto_create_for_metadata` and pass what it
        gave as ``auto_created`` (why a topic it tried is still missing)."""
        if not self.replicas.registered:
            # A restarted node replays the metadata log before its registration
            # commits; until then its topics and brokers may be missing or stale:
            # clients ask another node (Kafka's brokers serve only once caught up).
            raise ApiError(ErrorCode.BROKER_NOT_AVAILABLE,
                           f"node {self.config.node_id} is starting: its metadata is not "
                           "caught up yet; ask another node")
        names = req.fields["topics"]
        if names is None:
            names = sorted(self.store.topics)
        auto_created = auto_created or {}
        topics = []
        for name in names:
            info = self.store.topics.get(name)
            if info is None:
                e = auto_created.get(name) or unknown_topic_error(name)
                topics.append(TopicMetadata(name, int(e.code), e.message).to_wire())
                continue
            topics.append(self._describe(info, req.fields["include_configs"]).to_wire())
        return {
            "cluster_id": self.config.cluster_id,
            "controller_id": self.controller_id,
            "node_id": self.config.node_id,
            "brokers": self.brokers(),
            "topics": topics,
        }, []

    async def auto_create_for_metadata(self, req: Request, acl=None) -> dict | None:
        """Kafka's auto-creation on Metadata, off the event loop: the unknown topics the
        request names (``allow_auto_topic_creation`` true, ``auto.create.topics.enable``
        on) created in a worker thread (quorum writes), with num.partitions and
        default.replication.factor. With ACLs on (``acl``: the connection's AclCheck),
        only where the principal may CREATE (the cluster or the topic); the others are
        answered TOPIC_AUTHORIZATION_FAILED, as Kafka's. Returns what
        :meth:`metadata` takes as ``auto_created`` (None: nothing was tried)."""
        names = req.fields["topics"]
        if (names is None or not req.fields.get("allow_auto_topic_creation", True)
                or not self.replicas.registered):
            return None
        wanted = self.topics_to_auto_create(names)
        denied = {}
        if acl is not None and wanted and not acl.allowed(CREATE, CLUSTER, CLUSTER_NAME):
            denied = {n: ApiError(ErrorCode.TOPIC_AUTHORIZATION_FAILED,
                                  f"{acl.principal} may not create topic {n!r}: create it "
                                  "with an allowed principal, or grant CREATE")
                      for n in wanted if not acl.allowed(CREATE, TOPIC, n)}
            wanted = [n for n in wanted if n not in denied]
        if not wanted:
            return denied
        out = await trio.to_thread.run_sync(self.auto_create_topics, wanted)
        self.replicas.reconcile()
        return {**out, **denied}

    def topics_to_auto_create(self, names) -> list:
        """The topics of a Metadata request that auto-creation would create now: unknown,
        legal names, with ``auto.create.topics.enable`` on (Kafka creates only on
        Metadata, never on Produce)."""
        if not self.config.auto_create_topics_enable:
            return []
        return [n for n in dict.fromkeys(names)
                if n not in self.store.topics and legal_topic_name(n)]

    def auto_create_topics(self, names) -> dict:
        """Create ``names`` with ``num.partitions`` and ``default.replication.factor``
        (blocking: quorum writes). Returns {name: ApiError} for the topics still not
        in this node's metadata: the reason it could not be created, or
        LEADER_NOT_AVAILABLE (retriable) for one another node created first whose
        record has not reached this node yet -- a lost race answers the topic as it
        now exists, never an error the client gives up on."""
        out = {}
        for name in names:
            try:
                self.create_topic(name, self.config.num_partitions,
                                  self.config.default_replication_factor, {})
            except ApiError as e:
                if e.code is not ErrorCode.TOPIC_ALREADY_EXISTS:
                    out[name] = e
                    self.events.debug("topic_auto_create_failed", topic=name, error=e.message)
                    continue
            if name not in self.store.topics:
                out[name] = ApiError(ErrorCode.LEADER_NOT_AVAILABLE,
                                     f"topic {name!r} is being created: retry")
        return out

    def _describe(self, info: TopicInfo, include_configs: bool) -> TopicMetadata:
        config = None
        if include_configs:
            cfg = (self.replicas.log_configs.get(info.name)
                   or validate_topic_config(info.config, self.config.log_defaults))
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

    def describe_quorum(self, req: Request) -> Response:
        """DescribeQuorum (kafka-metadata-quorum.sh describe): the metadata quorum as this
        voter sees it (metadata/quorum.py ``status``): only the leader -- the active
        controller -- knows every voter's log end; ``is_leader`` says which this is.
        Broker-only nodes (learners) are not listed."""
        return self.store.quorum.status(), []

    def describe_log_dirs(self, req: Request) -> Response:
        """DescribeLogDirs (kafka-log-dirs): this node's data directory, its disk, and
        every hosted replica's size, segments and offsets (as leader, its followers'
        log end offsets). Read-only; O(segments hosted)."""
        wanted = req.fields["topics"]
        keep = None if wanted is None else set(wanted)
        rows = self.replicas.describe_partitions(keep)
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

    def create_topic(self, name: str, partitions: int, replication_factor: int, config: dict,
                     assignments=None) -> TopicInfo:
        """Create a topic (blocking: a quorum write); see topics.create_topic."""
        return create_topic(self.store, self.config, self.events, name, partitions,
                            replication_factor, config, assignments)

    def create_topics(self, req: Request) -> Response:
        results = []
        for t in req.fields["topics"]:
            try:
                if req.fields["validate_only"]:
                    validate_topic_name(t["name"])
                    validate_topic_config(t["config"], self.config.log_defaults)
                    if t.get("assignments") is not None:
                        check_assignments(t["assignments"],
                                          [b.node_id for b in self.store.brokers()],
                                          len(t["assignments"]))
                else:
                    self.create_topic(t["name"], t["partitions"], t["replication_factor"],
                                      t["config"], t.get("assignments"))
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
        """Set and remove a topic's configs: ``config`` (None removes a key), with
        ``replace`` every key left out removed, then ``ops`` (set/delete/append/
        subtract); the result is checked whole (INVALID_CONFIG names the key) before
        anything changes; ``validate_only``: check only."""
        name, f = req.fields["topic"], req.fields
        info = self.store.topics.get(name)
        if info is None:
            raise ApiError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"unknown topic {name!r}")
        effective = validate_topic_config(info.config, self.config.log_defaults).to_dict()
        changes = config_changes(info.config, effective, f["config"], f.get("replace", False),
                                 f.get("ops", ()))
        validate_topic_config({**info.config, **changes}, self.config.log_defaults)
        changes = {k: v for k, v in changes.items() if info.config.get(k) != v}
        if not f.get("validate_only"):
            self.store.set_config(name, changes)
        return {}, []

    def describe_configs(self, req: Request) -> Response:
        """A topic's effective configs, each with its source ("topic": set on the topic,
        "static": this node's ``log.*`` default from server.properties, "default":
        built in); or, without a topic, this node's topic defaults as ``log.*`` keys
        (read-only: they come from server.properties). No secret is ever included."""
        name = req.fields["topic"]
        static = self.config.log_defaults
        if name is None:
            cfg = validate_topic_config({}, static)
            return {"configs": [ConfigEntry(f"log.{k}", v, "static" if k in static else "default")
                                for k, v in sorted(cfg.to_dict().items())]}, []
        info = self.store.topics.get(name)
        if info is None:
            raise ApiError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"unknown topic {name!r}")
        cfg = (self.replicas.log_configs.get(name)
               or validate_topic_config(info.config, static))
        return {"configs": [
            ConfigEntry(k, v, "topic" if k in info.config else
                        "static" if k in static else "default")
            for k, v in sorted(cfg.to_dict().items())]}, []

    def create_partitions(self, req: Request) -> Response:
        """Grow a topic to ``count`` partitions, placed by the controller or as
        ``assignments`` say (one replica list per new partition, as many replicas as
        the topic's first partition has); ``validate_only``: check, change nothing."""
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
        assignments = req.fields.get("assignments")
        if assignments is not None:
            rf = len(info.partitions[0].replicas) if info.partitions else None
            assignments = check_assignments(assignments, [b.node_id for b in self.store.brokers()],
                                            count - len(info.partitions), rf)
        if not req.fields.get("validate_only"):
            self.store.add_partitions(name, count, assignments)
        return {}, []


