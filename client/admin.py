"""Admin: topics, configs, the cluster and consumer groups.

Group requests go to the group's coordinator: FIND_COORDINATOR on any node names
it, and the request is sent there (looked up again when it answers
NOT_COORDINATOR). LIST_GROUPS goes to every broker, as each lists only the groups
it coordinates. Offsets written from here use generation -1 and member id "":
the coordinator accepts them only while the group has no members (Empty).
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta

from raftlog.errors import ApiError, ErrorCode
from raftlog.protocol import EARLIEST_TIMESTAMP, LATEST_TIMESTAMP, Api

from .admin_txn import TransactionsAdmin
from .assignors import assignment_from_wire
from .conn import BrokerConnection, Cluster
from .errors import (
    BrokerNotAvailableError,
    GroupNotEmptyError,
    UnknownTopicOrPartitionError,
    api_error,
)
from .offsets import list_offsets, list_offsets_strict, requests_by_leader
from .options import check_option_types, check_options
from .security import ClientSecurity
from .types import TopicPartition

#: Tries of a read-only admin request when the node it went to is gone.
READ_ATTEMPTS = 3
READ_BACKOFF_S = 0.1
READ_ONLY_APIS = frozenset(
    {Api.METADATA, Api.DESCRIBE_CLUSTER, Api.API_VERSIONS, Api.FIND_COORDINATOR,
     Api.LIST_PARTITION_REASSIGNMENTS, Api.DESCRIBE_CONFIGS}
)
#: How long a group request keeps looking for the group's coordinator (it may be
#: loading, moving, or ``__consumer_offsets`` may be being created).
COORDINATOR_WAIT_S = 10.0
#: describe_quorum asks the controller this many times when it moves meanwhile
QUORUM_ATTEMPTS = 5
COORDINATOR_BACKOFF_S = 0.05
COORDINATOR_BACKOFF_MAX_S = 1.0
#: Errors meaning "ask FIND_COORDINATOR again, a little later".
COORDINATOR_RETRY_CODES = frozenset({
    ErrorCode.NOT_COORDINATOR,
    ErrorCode.COORDINATOR_NOT_AVAILABLE,
    ErrorCode.COORDINATOR_LOAD_IN_PROGRESS,
})
#: Tries of a ListOffsets whose partition leader moved.
LIST_OFFSETS_ATTEMPTS = 5
#: Group states in which the group has no members, so admin offset writes are allowed.
INACTIVE_GROUP_STATES = frozenset({"Empty", "Dead"})


@dataclass(frozen=True, slots=True)
class PartitionDescription:
    partition: int
    leader: int
    replicas: tuple
    isr: tuple
    leader_epoch: int
    offline_replicas: tuple = ()

    @property
    def under_replicated(self) -> bool:
        return len(self.isr) < len(self.replicas)

    @property
    def offline(self) -> bool:
        return self.leader < 0


@dataclass(frozen=True, slots=True)
class TopicDescription:
    name: str
    config: dict
    partitions: tuple
    topic_id: str = ""


@dataclass(frozen=True, slots=True)
class BrokerDescription:
    id: int
    host: str
    port: int
    rack: str | None = None
    fenced: bool = False


@dataclass(frozen=True, slots=True)
class ClusterDescription:
    cluster_id: str
    controller_id: int
    brokers: tuple
    #: the metadata quorum's Raft term (KRaft's controller epoch): it grows with every
    #: controller election (a single node's too: it is its own quorum's only voter; nodes
    #: of older versions reported 0 for a single node), -1 if not reported
    controller_epoch: int = -1


@dataclass(frozen=True, slots=True)
class VoterState:
    """One voter of the metadata quorum as the controller sees it (-1: unknown)."""

    id: int
    log_end_offset: int
    #: how far its log trails the controller's (entries; -1 unknown)
    lag: int
    #: milliseconds since the controller last heard from it (-1 unknown; 0: itself)
    last_heard_ms_ago: int
    #: milliseconds since it last held everything the controller had (-1 unknown)
    last_caught_up_ms_ago: int


@dataclass(frozen=True, slots=True)
class QuorumDescription:
    """The metadata quorum (Kafka's DescribeQuorum, kafka-metadata-quorum.sh describe)."""

    leader_id: int
    #: the Raft term (KRaft's leader epoch)
    leader_epoch: int
    #: the commit index: metadata entries a majority holds
    high_watermark: int
    voters: tuple
    #: False when the controller could not be asked: a voter's own view, whose other
    #: voters' log ends are unknown
    from_leader: bool = True


@dataclass(frozen=True, slots=True)
class LogDirDescription:
    """One node's answer to DescribeLogDirs (``raftlog log-dirs describe``).

    ``partitions``: LogDirPartition rows (topic, partition, size_bytes, segments,
    log_start_offset, log_end_offset, high_watermark, leader, leader_epoch,
    followers). ``error``: why the node could not be asked ("" when it answered).
    """

    node_id: int
    host: str
    port: int
    roles: tuple = ()
    log_dir: str = ""
    total_bytes: int = -1  # the data directory's file system; -1 unknown
    usable_bytes: int = -1
    partitions: tuple = ()
    error: str = ""

    @property
    def size_bytes(self) -> int:
        return sum(p.size_bytes for p in self.partitions)


@dataclass(frozen=True, slots=True)
class GroupListing:
    group_id: str
    protocol_type: str  # "consumer" for Consumer groups; "" for a group that only has offsets
    state: str  # Empty, PreparingRebalance, CompletingRebalance, Stable, Dead


@dataclass(frozen=True, slots=True)
class MemberDescription:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    #: TopicPartitions assigned to the member (decoded for protocol type "consumer").
    assignment: set = field(default_factory=set)


@dataclass(frozen=True, slots=True)
class GroupOffset:
    """A partition's committed offset (None: assigned but nothing committed yet), its
    log end offset (the last stable offset, or the high watermark when described with
    isolation_level "read_uncommitted"; None when it could not be read, e.g. the
    topic is gone) and lag = log_end_offset - committed (None when either is None)."""

    committed: int | None
    log_end_offset: int | None
    lag: int | None


@dataclass(frozen=True, slots=True)
class GroupDescription:
    group_id: str
    state: str  # "Dead": the coordinator does not know the group
    protocol_type: str
    protocol: str  # the assignor, e.g. "cooperative-sticky"
    generation: int
    leader: str | None
    members: list = field(default_factory=list)  # [MemberDescription]
    #: TopicPartition -> GroupOffset: partitions with a committed offset or an owner.
    offsets: dict = field(default_factory=dict)
    #: what the offsets' log end is: "read_committed" (the last stable offset) or
    #: "read_uncommitted" (the high watermark)
    isolation_level: str = "read_committed"

    @property
    def exists(self) -> bool:
        return self.state != "Dead" or bool(self.members) or bool(self.offsets)

    def owners(self) -> dict:
        """TopicPartition -> member id of the member it is assigned to."""
        return {tp: m.member_id for m in self.members for tp in m.assignment}


# --------------------------------------------------------------------------- pure helpers

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def to_timestamp_ms(when) -> int:
    """A datetime (naive: local time), an ISO 8601 string or ms since the epoch -> ms."""
    if isinstance(when, bool):
        raise TypeError("a timestamp must be a datetime, an ISO 8601 string or ms, not a bool")
    if isinstance(when, datetime):
        aware = when if when.tzinfo is not None else when.astimezone()
        return (aware - _EPOCH) // timedelta(milliseconds=1)
    if isinstance(when, int):
        if when < 0:
            raise ValueError(f"timestamp {when} must be >= 0 (ms since the epoch)")
        return when
    if isinstance(when, str):
        try:
            parsed = datetime.fromisoformat(when.strip())
        except ValueError:
            raise ValueError(
                f"{when!r} is not an ISO 8601 date-time such as 2024-05-01T12:00:00Z"
            ) from None
        return to_timestamp_ms(parsed)
    raise TypeError(f"cannot use {type(when).__name__} {when!r} as a timestamp")


def plan_offset_reset(
    partitions: Iterable,
    *,
    earliest: Mapping,
    latest: Mapping,
    committed: Mapping | None = None,
    to=None,
    shift_by: int | None = None,
    by_time: Mapping | None = None,
) -> dict:
    """The new offset of each partition for an offset reset. Pure: every offset it
    needs is passed in (``{TopicPartition: int}``).

    Exactly one of:

    * ``to="earliest"`` / ``to="latest"``: the log start offset / the high watermark;
    * ``to=<timestamp>`` (anything else: datetime, ms, ISO string): ``by_time[tp]``,
      the first offset with a timestamp >= it (from ListOffsets), or the latest
      offset when there is none (-1 or None: no record is that new);
    * ``shift_by=N``: the committed offset plus N (negative: back); a partition
      without a committed offset is an error, as in Kafka.

    Every result is clamped into ``[earliest, latest]``. Raises ValueError.
    """
    if (to is None) == (shift_by is None):
        raise ValueError("give exactly one of to (earliest, latest or a timestamp) and shift_by")
    if shift_by is not None and (isinstance(shift_by, bool) or not isinstance(shift_by, int)):
        raise ValueError(f"shift_by must be an integer, not {shift_by!r}")
    by_timestamp = to is not None and to not in ("earliest", "latest")
    if by_timestamp and by_time is None:
        raise ValueError("a reset to a timestamp needs by_time (ListOffsets of that timestamp)")
    committed = committed or {}
    out = {}
    for tp in sorted(partitions):
        if tp not in earliest or tp not in latest:
            raise ValueError(f"no earliest/latest offset known for {_tp_name(tp)}")
        lo, hi = earliest[tp], latest[tp]
        if to == "earliest":
            new = lo
        elif to == "latest":
            new = hi
        elif shift_by is not None:
            current = committed.get(tp)
            if current is None:
                raise ValueError(
                    f"cannot shift the offset of {_tp_name(tp)}: the group has no committed "
                    "offset for it (reset it --to-earliest/--to-latest first)"
                )
            new = current + shift_by
        else:
            found = by_time.get(tp)
            new = hi if found is None or found < 0 else found
        out[tp] = min(max(new, lo), hi)
    return out


def merge_group_listings(answers: Iterable) -> list[GroupListing]:
    """LIST_GROUPS answers of every broker (``[[group, protocol_type, state], ...]``
    each) -> one listing per group, sorted. While a coordinator moves, two nodes may
    list the same group: the first answer wins."""
    seen: dict[str, GroupListing] = {}
    for groups in answers:
        for gid, ptype, state in groups:
            seen.setdefault(gid, GroupListing(gid, ptype or "", state))
    return [seen[g] for g in sorted(seen)]


def group_description_from_wire(entry: dict) -> GroupDescription:
    """One DESCRIBE_GROUPS entry (without offsets). Consumer assignments are decoded
    into sets of TopicPartition; an undecodable one counts as empty."""
    ptype = entry.get("protocol_type") or ""
    members = []
    for m in entry["members"]:
        member_id, instance_id, client_id, client_host, assignment = (
            m.member_id, m.group_instance_id, m.client_id, m.client_host, m.assignment)
        tps: set = set()
        if ptype == "consumer" and assignment is not None:
            try:
                tps = {TopicPartition(t, p) for t, p in assignment_from_wire(assignment)}
            except ValueError:
                tps = set()
        members.append(MemberDescription(member_id, instance_id, client_id or "",
                                         client_host or "", tps))
    return GroupDescription(
        entry["group"], entry["state"], ptype, entry.get("protocol") or "",
        entry.get("generation", -1), entry.get("leader"), members,
    )


def _tp(x) -> TopicPartition:
    if isinstance(x, TopicPartition):
        return x
    topic, partition = x
    return TopicPartition(topic, partition)


def _tp_name(tp) -> str:
    return f"{tp.topic}-{tp.partition}" if isinstance(tp, TopicPartition) else str(tp)


class Admin(TransactionsAdmin):
    """Administrative operations; each call is synchronous and raises ApiError subclasses.
    Transactions: see client/admin_txn.py."""

    def __init__(
        self, bootstrap_servers: str = "127.0.0.1:9092", *, request_timeout_ms: int = 30_000,
        **security_options,
    ):
        """``security_options``: kafka-python's names (see client/security.py)."""
        self.timeout_s = request_timeout_ms / 1000
        check_option_types(Admin, locals())
        check_options(Admin, security_options)  # a misspelt option: named, with the nearest
        self.security = ClientSecurity.from_options(**security_options)
        self._cluster = Cluster(bootstrap_servers, self.timeout_s, security=self.security)
        #: (key type, group or transactional id) -> (node_id, host, port) of its
        #: coordinator, as last found (key type 0: a group, 1: a transactional id)
        self._coordinators: dict[tuple[int, str], tuple[int, str, int]] = {}
        #: (host, port) -> connection, for coordinators and LIST_GROUPS to every broker
        self._node_conns: dict[tuple[str, int], BrokerConnection] = {}

    def _call(self, api: Api, fields: dict):
        """One request to any node. Read-only requests are retried on a fresh
        connection (up to READ_ATTEMPTS) when a node went away; writes are not,
        so a lost answer never turns into a confusing second attempt."""
        attempts = READ_ATTEMPTS if api in READ_ONLY_APIS else 1
        for attempt in range(attempts):
            try:
                conn = self._cluster.any_connection()
                return conn.request(api, fields, timeout_s=self.timeout_s).header
            except BrokerNotAvailableError:
                if attempt + 1 >= attempts:
                    raise
                time.sleep(READ_BACKOFF_S)
        raise AssertionError("unreachable")

    def _write(self, api: Api, fields: dict, *, result_error=None):
        """A metadata write (topics, configs, partitions, ACLs, users, leaders,
        reassignments): asked again on NOT_CONTROLLER until the request timeout, as
        Kafka's admin client does -- the quorum had no leader (an election) and did not
        take the write (metadata/quorum.py), so another attempt is the right answer.
        ``result_error(header)``: the error code of a per-item answer (CreateTopics and
        DeleteTopics answer per topic) when the header carries none."""
        deadline = time.monotonic() + self.timeout_s
        while True:
            try:
                h = self._call(api, fields)
                code = result_error(h) if result_error is not None else 0
            except ApiError as e:
                if e.code != ErrorCode.NOT_CONTROLLER or time.monotonic() >= deadline:
                    raise
            else:
                if code != ErrorCode.NOT_CONTROLLER or time.monotonic() >= deadline:
                    return h
            time.sleep(READ_BACKOFF_S)

    def create_topic(
        self,
        name: str,
        partitions: int = 1,
        replication_factor: int = 1,
        config: dict | None = None,
        assignments=None,
    ) -> None:
        """Create a topic. Raises TopicAlreadyExistsError, or ApiError (INVALID_*).
        ``assignments``: each partition's replica broker ids (manual placement; the
        partition count and replication factor are then theirs)."""
        topic = {
            "name": name,
            "partitions": partitions,
            "replication_factor": replication_factor,
            "config": {k: str(v) for k, v in (config or {}).items()},
        }
        if assignments is not None:
            topic["assignments"] = [list(r) for r in assignments]
        h = self._write(Api.CREATE_TOPICS,
                        {"topics": [topic], "timeout_ms": int(self.timeout_s * 1000)},
                        result_error=lambda h: h["results"][0].error)
        r = h["results"][0]
        if r.error:
            raise api_error(r.error, r.message)

    @contextlib.contextmanager
    def _nearest_on_unknown(self, topic: str):
        """An UnknownTopicOrPartitionError of a call about ``topic`` names the cluster's
        nearest topic, as the producer's and consumer's do (client/conn.py's
        ``nearest_topic``: one Metadata, on this error path only)."""
        try:
            yield
        except UnknownTopicOrPartitionError as e:
            if e.suggestion is not None or not topic:
                raise
            near = self._cluster.nearest_topic(topic)
            if near is None or near == topic:
                raise
            hinted = api_error(e.code, f"{e.message or f'unknown topic {topic!r}'}; "
                                       f"did you mean {near!r}?")
            hinted.suggestion = near
            raise hinted from None

    def delete_topic(self, name: str) -> None:
        with self._nearest_on_unknown(name):
            h = self._write(
                Api.DELETE_TOPICS, {"names": [name], "timeout_ms": int(self.timeout_s * 1000)},
                result_error=lambda h: h["results"][0].error)
            r = h["results"][0]
            if r.error:
                raise api_error(r.error, r.message)

    def list_topics(self, include_internal: bool = False) -> list[str]:
        """Topic names; internal ones (``__consumer_offsets``) only when asked."""
        h = self._call(Api.METADATA, {"topics": None})
        return sorted(t.name for t in h["topics"] if not t.error
                      and (include_internal or not t.name.startswith("__")))

    def describe_topic(self, name: str) -> TopicDescription:
        h = self._call(Api.METADATA, {"topics": [name], "include_configs": True,
                                       "allow_auto_topic_creation": False})
        t = h["topics"][0]
        if t.error:
            with self._nearest_on_unknown(name):
                raise api_error(t.error, t.message)
        parts = tuple(
            PartitionDescription(p.partition, p.leader, tuple(p.replicas), tuple(p.isr),
                                 p.leader_epoch, tuple(p.offline_replicas))
            for p in sorted(t.partitions)
        )
        return TopicDescription(t.name, dict(t.config or {}), parts, t.topic_id)

    def describe_topics(self, names=None, include_internal: bool = True) -> list[TopicDescription]:
        """Several topics (None: every topic) in one METADATA request, sorted by name;
        unknown names are left out."""
        h = self._call(Api.METADATA, {"topics": None if names is None else list(names),
                                       "allow_auto_topic_creation": False})
        out = []
        for t in sorted(h["topics"], key=lambda t: t.name):
            if t.error or (not include_internal and t.name.startswith("__")):
                continue
            parts = tuple(
                PartitionDescription(p.partition, p.leader, tuple(p.replicas), tuple(p.isr),
                                     p.leader_epoch, tuple(p.offline_replicas))
                for p in sorted(t.partitions))
            out.append(TopicDescription(t.name, dict(t.config or {}), parts, t.topic_id))
        return out

    def describe_cluster(self) -> ClusterDescription:
        h = self._call(Api.DESCRIBE_CLUSTER, {})
        brokers = tuple(BrokerDescription(b.node_id, b.host, b.port, b.rack, bool(b.fenced))
                        for b in h["brokers"])
        return ClusterDescription(h["cluster_id"], h["controller_id"], brokers,
                                  h.get("controller_epoch", -1))

    def describe_quorum(self) -> QuorumDescription:
        """The metadata quorum as the active controller sees it: leader, term, commit
        index and every voter's log end and last contact. Asks the controller (found
        with describe_cluster, again if it moved meanwhile), else answers the first
        voter's own view (``from_leader`` False)."""
        own = None
        for _ in range(QUORUM_ATTEMPTS):
            cluster = self.describe_cluster()
            target = next((b for b in cluster.brokers if b.id == cluster.controller_id), None)
            if target is None:
                time.sleep(READ_BACKOFF_S * 2)
                continue
            h = self._node_connection(target.host, target.port, target.id).request(
                Api.DESCRIBE_QUORUM, {}, timeout_s=self.timeout_s).header
            own = h
            if h.get("is_leader"):
                break
            time.sleep(READ_BACKOFF_S * 2)
        if own is None:
            raise BrokerNotAvailableError("no controller is known: the metadata quorum has no "
                                          "leader (raftlog cluster status shows the brokers)")
        top = max((end for _, end, *_ in own["voters"]), default=-1)
        voters = tuple(VoterState(nid, end, top - end if end >= 0 and top >= 0 else -1, ago, up)
                       for nid, end, ago, up in own["voters"])
        return QuorumDescription(own["leader_id"], own["leader_epoch"], own["high_watermark"],
                                 voters, bool(own.get("is_leader")))

    def describe_log_dirs(self, topics=None, broker_ids=None,
                          timeout_s: float | None = None) -> list[LogDirDescription]:
        """DescribeLogDirs of every broker (or of ``broker_ids``), sorted by id: each
        node's data directory, disk space, and per hosted replica its size, segments
        and offsets; ``topics`` limits the rows to those topics. A node that cannot be
        reached (or does not answer within ``timeout_s``, default the request timeout)
        gets a description with ``error`` set instead of failing the call."""
        wanted = None if topics is None else sorted(set(topics))
        out = []
        for b in self.describe_cluster().brokers:
            if broker_ids is not None and b.id not in broker_ids:
                continue
            try:
                conn = self._node_connection(b.host, b.port, b.id)
                h = conn.request(Api.DESCRIBE_LOG_DIRS, {"topics": wanted},
                                 timeout_s=timeout_s or self.timeout_s).header
            except (BrokerNotAvailableError, ApiError, OSError) as e:
                out.append(LogDirDescription(b.id, b.host, b.port, error=str(e)))
                continue
            out.append(LogDirDescription(
                b.id, b.host, b.port, tuple(h.get("roles") or ()), h.get("log_dir", ""),
                h.get("total_bytes", -1), h.get("usable_bytes", -1),
                tuple(h.get("partitions") or ())))
        return out

    def alter_config(self, topic: str, config: dict) -> None:
        """Set (value) or remove (None) topic config keys."""
        self._write(
            Api.ALTER_CONFIGS,
            {
                "topic": topic,
                "config": {k: (None if v is None else str(v)) for k, v in config.items()},
            },
        )

    def alter_configs(self, topic: str, config: Mapping, *, validate_only: bool = False) -> None:
        """Make ``topic``'s own configs exactly ``config`` (Kafka's AlterConfigs: keys
        left out return to their defaults). ``validate_only``: check, change nothing.
        InvalidConfig (INVALID_CONFIG) names a bad key or value."""
        with self._nearest_on_unknown(topic):
            self._write(Api.ALTER_CONFIGS, {
                "topic": topic, "config": {k: str(v) for k, v in config.items()},
                "replace": True, "validate_only": validate_only})

    def incremental_alter_configs(self, topic: str, ops, *, validate_only: bool = False) -> None:
        """Change ``topic``'s configs key by key (Kafka's IncrementalAlterConfigs):
        ``ops`` is a list of ``(key, op, value)``, op one of "set", "delete" (value
        ignored), "append" and "subtract" (list configs such as cleanup.policy). All
        are checked together and applied only if the result is valid."""
        with self._nearest_on_unknown(topic):
            self._write(Api.ALTER_CONFIGS, {
                "topic": topic, "config": {}, "validate_only": validate_only,
                "ops": [[k, op, None if v is None else str(v)] for k, op, v in ops]})

    def describe_configs(self, topic: str | None = None,
                         broker_id: int | None = None) -> list:
        """Effective configs as ConfigEntry(name, value, source), sorted by name: of
        ``topic`` (source "topic" where set on the topic, "static" where it comes from
        the node's ``log.*`` setting, else "default"), or of broker ``broker_id`` (its
        topic defaults as ``log.*`` keys, read-only: they come from its
        server.properties). Give exactly one.

        Raises:
            UnknownTopicOrPartitionError: no such topic.
            ValueError: no broker ``broker_id`` in the cluster, or not exactly one given.
        """
        if (topic is None) == (broker_id is None):
            raise ValueError("describe_configs takes a topic or a broker_id")
        if topic is not None:
            with self._nearest_on_unknown(topic):
                h = self._call(Api.DESCRIBE_CONFIGS, {"topic": topic})
            return list(h["configs"])
        broker = next((b for b in self.describe_cluster().brokers if b.id == broker_id), None)
        if broker is None:
            raise ValueError(f"no broker {broker_id} in the cluster")
        conn = self._node_connection(broker.host, broker.port, broker.id)
        h = conn.request(Api.DESCRIBE_CONFIGS, {"topic": None}, timeout_s=self.timeout_s).header
        return list(h["configs"])

    def elect_leaders(self, partitions=None) -> list[tuple]:
        """Preferred-leader election: give each partition back to its first replica
        where that replica is alive and in the ISR. ``partitions``: iterable of
        (topic, partition) or TopicPartition; None means all. Returns
        [(topic, partition, error_code, message)]; code 0 includes "nothing to do"."""
        parts = None if partitions is None else [[tp[0], tp[1]] for tp in partitions]
        h = self._write(Api.ELECT_LEADERS, {"parts": parts})
        return [tuple(r) for r in h["results"]]

    def alter_partition_reassignments(self, reassignments: Mapping,
                                      throttle_bytes_per_sec: int = 0) -> list:
        """Start moving partitions: ``{(topic, partition): [broker ids] or None}`` (None
        cancels a reassignment in progress). The new replicas catch up as followers
        (sent at most ``throttle_bytes_per_sec`` by the leader, 0 = unthrottled), join
        the ISR, then the old ones leave. Returns a PartitionResult per partition
        (error 0 = started; the move itself finishes later: see
        :meth:`list_partition_reassignments`)."""
        parts = [[tp[0], tp[1], [] if replicas is None else [int(b) for b in replicas]]
                 for tp, replicas in reassignments.items()]
        h = self._write(Api.ALTER_PARTITION_REASSIGNMENTS,
                       {"parts": parts, "throttle": int(throttle_bytes_per_sec)})
        return list(h["results"])

    def unregister_broker(self, broker_id: int) -> None:
        """Remove a broker that holds no replica from the cluster's metadata (after a
        decommission moved its replicas away)."""
        self._write(Api.UNREGISTER_BROKER, {"broker_id": int(broker_id)})

    def list_partition_reassignments(self, partitions=None) -> list:
        """ReassignmentRow (topic, partition, replicas, adding, removing, isr, leader,
        throttle) of every partition being moved, or of ``partitions`` only."""
        parts = None if partitions is None else [[tp[0], tp[1]] for tp in partitions]
        h = self._call(Api.LIST_PARTITION_REASSIGNMENTS, {"parts": parts})
        return list(h["reassignments"])

    def create_partitions(self, topic: str, count: int, assignments=None, *,
                          validate_only: bool = False) -> None:
        """Grow ``topic`` to ``count`` partitions. ``assignments``: the replica broker
        ids of each new partition (``count`` minus the current count lists, each as
        long as the topic's replication factor); None lets the controller place them.
        ``validate_only``: check, change nothing."""
        fields = {"topic": topic, "count": count, "validate_only": validate_only}
        if assignments is not None:
            fields["assignments"] = [list(r) for r in assignments]
        with self._nearest_on_unknown(topic):
            self._write(Api.CREATE_PARTITIONS, fields)

    def delete_records(self, offsets: Mapping, *, rounds: int = 3) -> dict:
        """Delete the records of each partition before an offset (Kafka's
        DeleteRecords): ``offsets`` maps TopicPartition or (topic, partition) to the
        offset (-1: the high watermark). Each leader moves its log start offset
        durably; followers follow through their fetches. Returns ``{TopicPartition:
        the new log start offset, or the ApiError of that partition}`` (e.g.
        OffsetOutOfRangeError past the high watermark). A leader that moved is asked
        again (up to ``rounds`` rounds): moving a log start twice is harmless."""
        wanted = {_tp(k): int(v) for k, v in offsets.items()}
        results: dict = {}
        pending = dict(wanted)
        for attempt in range(rounds):
            retry: dict = {}
            by_leader, failed = requests_by_leader(self._cluster, pending)
            for tp, e in failed.items():
                (retry if e.retriable and e.code is not ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
                 else results)[tp] = e
            for leader, tps in by_leader.items():
                try:
                    h = self._cluster.connection(leader).request(
                        Api.DELETE_RECORDS,
                        {"parts": [[tp.topic, tp.partition, pending[tp]] for tp in tps]},
                        timeout_s=self.timeout_s).header
                except (BrokerNotAvailableError, ApiError) as e:
                    (retry if getattr(e, "retriable", True) else results).update(
                        dict.fromkeys(tps, e))
                    continue
                for tp, r in zip(tps, h["parts"]):
                    if r.error:
                        e = api_error(r.error, r.message or f"delete records of {_tp_name(tp)}")
                        (retry if e.retriable else results)[tp] = e
                    else:
                        results[tp] = r.low_watermark
            if not retry:
                break
            if attempt + 1 == rounds:
                results.update(retry)
                break
            pending = {tp: wanted[tp] for tp in retry}
            self._cluster.topics.clear()
            time.sleep(READ_BACKOFF_S * (attempt + 1))
        return results

    # ------------------------------------------------------------------ consumer groups

    def list_groups(self) -> list[GroupListing]:
        """Every group of the cluster: LIST_GROUPS to each broker, merged. A broker that
        cannot be reached fails the call (its groups would be missing), unless it is
        fenced (a fenced broker leads nothing, so coordinates no group)."""
        answers = []
        for b in self.describe_cluster().brokers:
            try:
                answers.append(self._list_groups_of(b))
            except BrokerNotAvailableError as e:
                if b.fenced:
                    continue
                raise BrokerNotAvailableError(
                    f"cannot list the groups of broker {b.id} ({b.host}:{b.port}), "
                    f"so the list would be incomplete: {e}"
                ) from None
        return merge_group_listings(answers)

    def _list_groups_of(self, broker: BrokerDescription) -> list:
        deadline = time.monotonic() + COORDINATOR_WAIT_S
        backoff = COORDINATOR_BACKOFF_S
        while True:
            try:
                conn = self._node_connection(broker.host, broker.port, broker.id)
                return conn.request(Api.LIST_GROUPS, {}, timeout_s=self.timeout_s).header["groups"]
            except BrokerNotAvailableError:
                if broker.fenced or time.monotonic() + backoff > deadline:
                    raise
            except ApiError as e:
                if e.code not in COORDINATOR_RETRY_CODES or time.monotonic() + backoff > deadline:
                    raise
            time.sleep(backoff)
            backoff = min(backoff * 2, COORDINATOR_BACKOFF_MAX_S)

    def describe_group(self, group_id: str,
                       isolation_level: str = "read_committed") -> GroupDescription:
        """State, members and their assignments, and per partition the committed
        offset, the log end offset and the lag. The log end is what a consumer of
        ``isolation_level`` reads up to: the last stable offset for "read_committed"
        (the SDK consumer's default: an open transaction holds it back), the high
        watermark for "read_uncommitted". An unknown group has state "Dead" and
        nothing else (``exists`` is False)."""
        level = _isolation(isolation_level)
        desc = self._describe_group_entry(group_id)
        committed = self.list_group_offsets(group_id)
        tps = set(committed) | {tp for m in desc.members for tp in m.assignment}
        ends = self._list_offsets({tp: LATEST_TIMESTAMP for tp in tps}, level)
        offsets = {}
        for tp in sorted(tps):
            c = committed.get(tp)
            end = ends.get(tp)
            end = end[0] if isinstance(end, tuple) else None
            lag = end - c if c is not None and end is not None else None
            offsets[tp] = GroupOffset(c, end, lag)
        return replace(desc, offsets=offsets, isolation_level=isolation_level)

    def _describe_group_entry(self, group_id: str) -> GroupDescription:
        h = self._group_request(
            group_id,
            Api.DESCRIBE_GROUPS,
            {"groups": [group_id]},
            entry_error=lambda h: (h["groups"][0]["error"], h["groups"][0].get("message", "")),
        )
        entry = h["groups"][0]
        if entry["error"]:
            raise api_error(entry["error"], entry.get("message") or f"group {group_id!r}")
        return group_description_from_wire(entry)

    def list_group_offsets(self, group_id: str) -> dict:
        """``{TopicPartition: committed offset}`` of every partition the group has
        committed (empty for an unknown group)."""
        h = self._group_request(group_id, Api.OFFSET_FETCH, {"group": group_id, "parts": None})
        return {
            TopicPartition(r.topic, r.partition): r.offset for r in h["parts"]
            if r.offset is not None and r.offset >= 0
        }

    def alter_group_offsets(self, group_id: str, offsets: Mapping) -> None:
        """Commit ``{TopicPartition or (topic, partition): offset}`` for the group.
        Allowed only while the group has no members: raises GroupNotEmptyError otherwise."""
        items = []
        for tp, off in offsets.items():
            tp = _tp(tp)
            if isinstance(off, bool) or not isinstance(off, int) or off < 0:
                raise ValueError(f"offset of {_tp_name(tp)} must be an integer >= 0, not {off!r}")
            items.append([tp.topic, tp.partition, off, None])
        if not items:
            return

        def part_error(h):
            bad = [r for r in h["parts"] if r.error]
            return (bad[0].error, bad[0].message) if bad else None

        try:
            h = self._group_request(
                group_id,
                Api.OFFSET_COMMIT,
                {"group": group_id, "generation": -1, "member_id": "", "offsets": items},
                entry_error=part_error,
            )
        except ApiError as e:
            # The coordinator refuses a commit without member id and generation while
            # the group has members with UNKNOWN_MEMBER_ID; say what it means.
            if e.code in (ErrorCode.UNKNOWN_MEMBER_ID, ErrorCode.ILLEGAL_GENERATION,
                          ErrorCode.REBALANCE_IN_PROGRESS):
                raise GroupNotEmptyError(
                    f"group {group_id!r} has active members: its offsets can be changed only "
                    f"while it is Empty (stop its consumers first) [{e}]"
                ) from None
            raise
        for r in h["parts"]:
            if r.error:
                raise api_error(r.error, f"offset of {r.topic}-{r.partition} not committed: "
                                         f"{r.message}")

    def reset_group_offsets(
        self,
        group_id: str,
        topic: str | None = None,
        to=None,
        shift_by: int | None = None,
        *,
        partitions: Iterable[int] | None = None,
        dry_run: bool = False,
    ) -> dict:
        """Compute new committed offsets with :func:`plan_offset_reset` and commit them
        (unless ``dry_run``); returns ``{TopicPartition: new offset}``.

        ``topic``: every partition of it (or only ``partitions``); None: every topic the
        group has committed offsets for (an error when it has none). ``to``: "earliest",
        "latest", or a datetime / ISO 8601 string / ms timestamp (the first offset at or
        after it; the latest offset when no record is that new). ``shift_by``: move the
        committed offsets by N, clamped into [earliest, latest].

        Raises GroupNotEmptyError when the group has members (also with ``dry_run``:
        the offsets could not be applied), ValueError on bad arguments.
        """
        if (to is None) == (shift_by is None):
            raise ValueError("give exactly one of to (earliest, latest or a timestamp) and shift_by")
        ts = None if to in (None, "earliest", "latest") else to_timestamp_ms(to)
        desc = self._describe_group_entry(group_id)
        _require_inactive(desc, "reset its offsets")
        committed = self.list_group_offsets(group_id)
        if topic is None:
            if partitions is not None:
                raise ValueError("partitions need a topic")
            tps = sorted(committed)
            if not tps:
                raise ValueError(
                    f"group {group_id!r} has no committed offsets: name the topic to reset"
                )
        else:
            self._cluster.topics.pop(topic, None)  # fresh metadata: partitions may be new
            known = sorted(self._cluster.partitions_for(topic))
            wanted = known if partitions is None else sorted(set(partitions))
            missing = [p for p in wanted if p not in known]
            if missing:
                raise api_error(
                    ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                    f"topic {topic!r} has no partition {missing[0]} (it has {len(known)})",
                )
            tps = [TopicPartition(topic, p) for p in wanted]
        earliest = self._list_offsets_strict({tp: EARLIEST_TIMESTAMP for tp in tps})
        latest = self._list_offsets_strict({tp: LATEST_TIMESTAMP for tp in tps})
        by_time = None if ts is None else self._list_offsets_strict({tp: ts for tp in tps})
        plan = plan_offset_reset(
            tps,
            earliest=earliest,
            latest=latest,
            committed=committed,
            to=None if to is None else (to if ts is None else ts),
            shift_by=shift_by,
            by_time=by_time,
        )
        if not dry_run:
            self.alter_group_offsets(group_id, plan)
        return plan

    def delete_group(self, group_id: str) -> None:
        """Delete the group and its committed offsets. Raises GroupNotEmptyError while
        it has members, GroupIdNotFoundError for an unknown group."""
        h = self._group_request(
            group_id,
            Api.DELETE_GROUPS,
            {"groups": [group_id]},
            entry_error=lambda h: (h["results"][0].error, h["results"][0].message),
            retry_lost=False,
        )
        r = h["results"][0]
        if r.error:
            raise api_error(r.error, r.message or f"group {group_id!r}")

    def delete_groups(self, group_ids: Iterable[str]) -> dict:
        """Delete several groups (each by its coordinator): ``{group id: None, or the
        ApiError that refused it}`` (GroupNotEmptyError, GroupIdNotFoundError, ...)."""
        out: dict = {}
        for gid in group_ids:
            try:
                self.delete_group(gid)
                out[gid] = None
            except ApiError as e:
                out[gid] = e
        return out

    def delete_consumer_group_offsets(self, group_id: str, partitions: Iterable) -> dict:
        """Delete the group's committed offsets of ``partitions`` (TopicPartition or
        (topic, partition)): ``{TopicPartition: None, or the ApiError of that
        partition}``; a partition of a topic the group's members are subscribed to is
        refused (GROUP_SUBSCRIBED_TO_TOPIC). Raises GroupIdNotFoundError for an
        unknown group."""
        tps = [_tp(p) for p in partitions]
        h = self._group_request(group_id, Api.OFFSET_DELETE, {
            "group": group_id, "parts": [[tp.topic, tp.partition] for tp in tps]},
            retry_lost=False)
        return {TopicPartition(r.topic, r.partition):
                (api_error(r.error, r.message) if r.error else None) for r in h["parts"]}

    # ------------------------------------------------------------------ group plumbing

    def _node_connection(self, host: str, port: int, node_id: int | None = None) -> BrokerConnection:
        conn = self._node_conns.get((host, port))
        if conn is None or conn.closed_by_node():
            conn = BrokerConnection(host, port, self.timeout_s, node_id, security=self.security)
            self._node_conns[(host, port)] = conn
        return conn

    def find_coordinator(self, group_id: str) -> tuple[int, str, int]:
        """``(node_id, host, port)`` of the group's coordinator. Retries while it is
        not available or loading, for up to COORDINATOR_WAIT_S."""
        return self._find_coordinator(group_id, time.monotonic() + COORDINATOR_WAIT_S)

    def _find_coordinator(self, group_id: str, deadline: float,
                          key_type: int = 0) -> tuple[int, str, int]:
        backoff = COORDINATOR_BACKOFF_S
        while True:
            try:
                h = self._call(Api.FIND_COORDINATOR, {"key": group_id, "key_type": key_type})
                found = (h["node_id"], h["host"], h["port"])
                self._coordinators[(key_type, group_id)] = found
                return found
            except ApiError as e:
                if e.code not in COORDINATOR_RETRY_CODES:
                    raise
                last: Exception = e
            except BrokerNotAvailableError as e:
                last = e
            if time.monotonic() + backoff > deadline:
                raise _no_coordinator(group_id, last, key_type)
            time.sleep(backoff)
            backoff = min(backoff * 2, COORDINATOR_BACKOFF_MAX_S)

    def _group_request(self, group_id: str, api: Api, fields: dict, *, entry_error=None,
                       retry_lost: bool = True, key_type: int = 0) -> dict:
        """One request to the group's coordinator, found (again) as needed.

        Looks the coordinator up again and retries, for up to COORDINATOR_WAIT_S, when
        the answer is NOT_COORDINATOR / COORDINATOR_NOT_AVAILABLE / LOAD_IN_PROGRESS,
        as a whole or in the entry ``entry_error(header)`` returns ((code, message) or
        None); also when the coordinator cannot be reached, and, with ``retry_lost``,
        when the connection broke with the request in flight (idempotent requests).
        ``key_type`` 1: ``group_id`` is a transactional id, the request goes to its
        transaction coordinator.
        """
        deadline = time.monotonic() + COORDINATOR_WAIT_S
        backoff = COORDINATOR_BACKOFF_S
        key = (key_type, group_id)
        while True:
            coordinator = self._coordinators.get(key)
            if coordinator is None:
                coordinator = self._find_coordinator(group_id, deadline, key_type)
            node_id, host, port = coordinator
            try:
                conn = self._node_connection(host, port, node_id)
            except BrokerNotAvailableError as e:
                last: Exception = e
            else:
                try:
                    h = conn.request(api, fields, timeout_s=self.timeout_s).header
                except BrokerNotAvailableError as e:
                    if not retry_lost:
                        self._coordinators.pop(key, None)
                        raise
                    last = e
                except ApiError as e:
                    if e.code not in COORDINATOR_RETRY_CODES:
                        raise
                    last = e
                else:
                    err = entry_error(h) if entry_error is not None else None
                    if not err or not err[0] or err[0] not in COORDINATOR_RETRY_CODES:
                        return h
                    last = api_error(err[0], err[1])
            self._coordinators.pop(key, None)
            if time.monotonic() + backoff > deadline:
                raise _no_coordinator(group_id, last, key_type)
            time.sleep(backoff)
            backoff = min(backoff * 2, COORDINATOR_BACKOFF_MAX_S)

    def _list_offsets(self, wanted: Mapping, isolation_level: int = 0) -> dict:
        """``{tp: (offset, timestamp)}`` or ``{tp: ApiError}`` (see client/offsets.py)."""
        return list_offsets(self._cluster, wanted, self.timeout_s, rounds=LIST_OFFSETS_ATTEMPTS,
                            backoff_s=READ_BACKOFF_S, isolation_level=isolation_level)

    def end_offsets(self, partitions: Iterable,
                    isolation_level: str = "read_uncommitted") -> dict:
        """``{TopicPartition: offset}`` from each leader: the high watermark
        ("read_uncommitted") or the last stable offset ("read_committed": the first
        offset of the earliest open transaction, never above the high watermark).
        None for a partition whose leader could not answer (offline)."""
        level = _isolation(isolation_level)
        got = self._list_offsets({_tp(tp): LATEST_TIMESTAMP for tp in partitions}, level)
        return {tp: r[0] if isinstance(r, tuple) else None for tp, r in got.items()}

    def _list_offsets_strict(self, wanted: Mapping) -> dict:
        """``{tp: offset}``; raises the error of the first partition that failed."""
        return {tp: r[0] for tp, r in list_offsets_strict(
            self._cluster, wanted, self.timeout_s, rounds=LIST_OFFSETS_ATTEMPTS,
            backoff_s=READ_BACKOFF_S).items()}

    # ------------------------------------------------------------------ security

    def create_user(self, user: str, password: str, mechanism: str = "SCRAM-SHA-256", *,
                    iterations: int = 8192) -> None:
        """Set ``user``'s SCRAM credential for ``mechanism`` (replacing any). The salted
        keys are derived here: the password never leaves this process."""
        from raftlog import scram

        c = scram.derive_credential(mechanism, password, iterations=iterations)
        self._alter_users([[user, mechanism, c.salt, c.iterations, c.stored_key,
                            c.server_key]], [])

    def delete_user(self, user: str, mechanism: str = "SCRAM-SHA-256") -> None:
        """Remove ``user``'s credential for ``mechanism``; ApiError RESOURCE_NOT_FOUND if none."""
        self._alter_users([], [[user, mechanism]])

    def _alter_users(self, upsertions: list, deletions: list) -> None:
        h = self._write(Api.ALTER_USER_SCRAM_CREDENTIALS, {
            "upsertions": upsertions, "deletions": deletions,
            "timeout_ms": int(self.timeout_s * 1000)},
            result_error=lambda h: next((r.error for r in h["results"] if r.error), 0))
        for r in h["results"]:
            if r.error:
                raise api_error(r.error, r.message)

    def describe_users(self, users: list[str] | None = None) -> dict[str, list[tuple]]:
        """{user: [(mechanism, iterations), ...]} (never a key or salt)."""
        h = self._call(Api.DESCRIBE_USER_SCRAM_CREDENTIALS, {"users": users})
        return {u: [tuple(m) for m in mechs] for u, mechs in h["users"]}

    def create_acls(self, bindings) -> int:
        """Add ACL bindings: raftlog.acl.AclBinding objects or six-field tuples
        (principal, resource type, name, pattern type, operation, permission).
        Returns how many were new."""
        rows = [list(b.as_tuple()) if hasattr(b, "as_tuple") else list(b) for b in bindings]
        h = self._write(Api.CREATE_ACLS, {"acls": rows, "timeout_ms": int(self.timeout_s * 1000)})
        return h.get("created") or 0

    def describe_acls(self, **acl_filter) -> list[tuple]:
        """Bindings matching the filter (principal=, resource_type=, resource_name=,
        pattern_type=, operation=, permission=; left out = any), as six-field tuples."""
        h = self._call(Api.DESCRIBE_ACLS, acl_filter)
        return [tuple(b) for b in h["acls"]]

    def delete_acls(self, **acl_filter) -> list[tuple]:
        """Delete the bindings matching the filter (as describe_acls); returns them."""
        h = self._write(Api.DELETE_ACLS, {**acl_filter, "timeout_ms": int(self.timeout_s * 1000)})
        return [tuple(b) for b in h["deleted"]]

    def close(self) -> None:
        self._cluster.close()
        for conn in self._node_conns.values():
            conn.close()
        self._node_conns.clear()

    def __enter__(self) -> Admin:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def _isolation(level: str) -> int:
    if level not in ("read_committed", "read_uncommitted"):
        raise ValueError(f"isolation_level must be 'read_committed' or 'read_uncommitted', "
                         f"not {level!r}")
    return 1 if level == "read_committed" else 0


def _require_inactive(desc: GroupDescription, what: str) -> None:
    if desc.members or desc.state not in INACTIVE_GROUP_STATES:
        raise GroupNotEmptyError(
            f"group {desc.group_id!r} is {desc.state} with {len(desc.members)} member(s): "
            f"cannot {what} while it has members (stop its consumers first)"
        )


def _no_coordinator(group_id: str, last: Exception, key_type: int = 0) -> Exception:
    """The error after COORDINATOR_WAIT_S without a usable coordinator."""
    what = "group" if key_type == 0 else "transactional id"
    msg = f"no coordinator of {what} {group_id!r} answered within {COORDINATOR_WAIT_S:g}s: {last}"
    if isinstance(last, ApiError):
        return api_error(last.code, msg)
    return BrokerNotAvailableError(msg)
