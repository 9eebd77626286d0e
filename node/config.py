"""Node configuration: a Kafka-style properties file, overridden by command-line flags.

The file holds ``key=value`` lines (``#`` comments). Keys use Kafka's names where
Kafka has the concept. Topic-level log defaults are given with a ``log.`` prefix
(``log.retention.ms`` is the default of the topic config ``retention.ms``), as in
Kafka's server.properties. Every problem is reported as one ConfigError line
naming the key.
"""

from __future__ import annotations

import ipaddress
import os
from dataclasses import dataclass, field, fields

from raftlog.errors import ConfigError


def _int(key: str, v: str, lo: int | None = None, hi: int | None = None) -> int:
    try:
        n = int(str(v).strip())
    except ValueError:
        raise ConfigError(f"{key}: {v!r} is not an integer") from None
    if lo is not None and n < lo:
        raise ConfigError(f"{key}: {n} is below the minimum {lo}")
    if hi is not None and n > hi:
        raise ConfigError(f"{key}: {n} is above the maximum {hi}")
    return n


def _bool(key: str, v: str) -> bool:
    s = str(v).strip().lower()
    if s in ("true", "1", "yes", "on"):
        return True
    if s in ("false", "0", "no", "off"):
        return False
    raise ConfigError(f"{key}: {v!r} is not a boolean (true/false)")


def parse_address(key: str, v: str) -> tuple[str, int]:
    """'host:port', 'PLAINTEXT://host:port' or '[::1]:port' -> (host, port)."""
    s = str(v).strip()
    if "://" in s:
        s = s.split("://", 1)[1]
    host, sep, port = s.rpartition(":")
    if not sep or not host:
        raise ConfigError(f"{key}: {v!r} is not host:port")
    host = host.strip("[]")
    if not host or any(c in host for c in " /\\"):
        raise ConfigError(f"{key}: bad host in {v!r}")
    if host[0].isdigit() or ":" in host:
        try:
            ipaddress.ip_address(host)
        except ValueError:
            raise ConfigError(f"{key}: {host!r} is not a valid IP address") from None
    return host, _int(key, port, 0, 65535)


def parse_voters(key: str, v: str) -> dict[int, tuple[str, int]]:
    """'1@127.0.0.1:9192,2@127.0.0.2:9192' -> {1: (host, port), ...}; ids unique."""
    out: dict[int, tuple[str, int]] = {}
    for item in filter(None, (x.strip() for x in str(v).split(","))):
        nid, sep, addr = item.partition("@")
        if not sep:
            raise ConfigError(f"{key}: {item!r} is not id@host:port")
        n = _int(key, nid, 0)
        if n in out:
            raise ConfigError(f"{key}: node id {n} appears twice")
        out[n] = parse_address(key, addr)
    return out


ROLES = ("broker", "controller")


def parse_roles(key: str, v: str) -> tuple:
    """'controller,broker' -> ('broker', 'controller'): sorted, each known, none twice."""
    items = [x.strip() for x in str(v).split(",") if x.strip()]
    if not items:
        raise ConfigError(f"{key}: must name at least one of {', '.join(ROLES)}")
    for r in items:
        if r not in ROLES:
            raise ConfigError(f"{key}: unknown role {r!r} (known: {', '.join(ROLES)})")
    if len(set(items)) != len(items):
        raise ConfigError(f"{key}: a role appears twice in {v!r}")
    return tuple(sorted(items))


@dataclass(frozen=True)
class NodeConfig:
    """Everything a node needs to start. Build with :meth:`load`."""

    node_id: int = 1
    host: str = "127.0.0.1"
    port: int = 9092
    advertised_host: str | None = None
    advertised_port: int | None = None
    data_dir: str = "./raftlog-data"
    cluster_id: str = "raftlog"
    num_partitions: int = 1
    default_replication_factor: int = 1
    auto_create_topics_enable: bool = False
    max_frame_bytes: int = 100 * 1024 * 1024
    log_flush_interval_ms: int = 1000
    log_retention_check_interval_ms: int = 300_000
    log_cleaner_interval_ms: int = 15_000
    request_timeout_ms: int = 30_000
    #: Raft metadata quorum: {node_id: (host, port)}; empty = single node, no quorum.
    controller_quorum_voters: dict = field(default_factory=dict)
    #: What this node does (Kafka's process.roles): "broker" serves partitions,
    #: "controller" votes in the metadata quorum. A node outside the voters is a broker
    #: only: it follows the metadata log as a non-voting learner.
    process_roles: tuple = ("broker", "controller")
    raft_host: str | None = None
    raft_port: int | None = None
    raft_password: str | None = None
    broker_session_timeout_ms: int = 6000
    broker_heartbeat_interval_ms: int = 1000
    broker_registration_timeout_ms: int = 60_000
    replica_lag_time_max_ms: int = 10_000
    min_insync_replicas: int = 1
    unclean_leader_election_enable: bool = False
    auto_leader_rebalance_enable: bool = True
    leader_imbalance_check_interval_ms: int = 10_000
    #: Topic config defaults (``retention.ms`` ...), from ``log.*`` keys.
    log_defaults: dict = field(default_factory=dict)
    #: Consumer groups (Kafka's names; see node/coordinator.py).
    group_min_session_timeout_ms: int = 6_000
    group_max_session_timeout_ms: int = 1_800_000
    group_initial_rebalance_delay_ms: int = 3_000
    group_max_size: int = 10_000
    offsets_topic_num_partitions: int = 16
    offsets_topic_replication_factor: int = 3
    offsets_retention_minutes: int = 10_080
    #: Kafka wire-protocol listener (node/kafka_server.py): None = off. Other brokers'
    #: Kafka addresses: ``kafka_brokers`` where given, else their client address with
    #: this node's Kafka port offset (what ``raftlog up --kafka-port`` sets up).
    kafka_host: str | None = None
    kafka_port: int | None = None
    kafka_advertised: tuple | None = None
    kafka_brokers: dict = field(default_factory=dict)
    #: Test-only fault flags (never set in production configs).
    test_flags: frozenset = frozenset()

    @property
    def advertised(self) -> tuple[str, int]:
        return (self.advertised_host or self.host, self.advertised_port or self.port)

    @classmethod
    def load(cls, path: str | None = None, overrides: dict[str, str] | None = None) -> NodeConfig:
        """Read a properties file (optional) and apply overrides (same keys).

        Raises:
            ConfigError: one line naming the offending key.
        """
        props: dict[str, str] = {}
        if path is not None:
            props.update(read_properties(path))
        props.update({k: str(v) for k, v in (overrides or {}).items() if v is not None})
        return cls.from_properties(props)

    @classmethod
    def from_properties(cls, props: dict[str, str]) -> NodeConfig:
        kw: dict = {}
        log_defaults: dict[str, str] = {}
        for key, value in props.items():
            if key.startswith("log.") and key not in _NODE_KEYS:
                log_defaults[key[4:]] = value
                continue
            setter = _NODE_KEYS.get(key)
            if setter is None:
                raise ConfigError(f"unknown config key {key!r}")
            setter(kw, key, value)
        if log_defaults:
            from raftlog.config import LogConfig

            LogConfig.from_dict(log_defaults)  # validates: raises ConfigError naming the key
        kw["log_defaults"] = log_defaults
        cfg = cls(**kw)
        cfg.validate()
        return cfg

    @property
    def is_voter(self) -> bool:
        """A voter of the metadata quorum (role controller)."""
        return "controller" in self.process_roles

    def validate(self) -> None:
        voters = self.controller_quorum_voters
        roles = self.process_roles
        if not voters and roles != ("broker", "controller"):
            raise ConfigError(
                f"process.roles={','.join(roles)} needs controller.quorum.voters naming the "
                "controllers (a node without voters is its own one-node cluster)")
        if "controller" not in roles and "broker" in roles and self.node_id in voters:
            raise ConfigError(
                f"node.id {self.node_id} is in controller.quorum.voters, so process.roles "
                "must include controller")
        if voters:
            if self.is_voter and self.node_id not in voters:
                raise ConfigError(
                    f"node.id {self.node_id} is not among controller.quorum.voters {sorted(voters)}"
                    " (a node that is not a voter sets process.roles=broker)"
                )
            if len(voters) > 1 and not self.raft_password:
                raise ConfigError(
                    "raft.password is required when controller.quorum.voters has more than one node"
                )
            addrs = list(voters.values())
            if len(set(addrs)) != len(addrs):
                raise ConfigError("controller.quorum.voters: two voters share one address")
        if self.group_min_session_timeout_ms > self.group_max_session_timeout_ms:
            raise ConfigError("group.min.session.timeout.ms is above group.max.session.timeout.ms")
        if self.min_insync_replicas < 1:
            raise ConfigError("min.insync.replicas must be at least 1")


def _set(name: str, conv):
    def setter(kw: dict, key: str, value: str) -> None:
        kw[name] = conv(key, value)

    return setter


def _set_listener(kw: dict, key: str, value: str) -> None:
    kw["host"], kw["port"] = parse_address(key, value.split(",")[0])


def _set_advertised(kw: dict, key: str, value: str) -> None:
    kw["advertised_host"], kw["advertised_port"] = parse_address(key, value.split(",")[0])


def _set_raft_listener(kw: dict, key: str, value: str) -> None:
    kw["raft_host"], kw["raft_port"] = parse_address(key, value)


def _set_kafka_listener(kw: dict, key: str, value: str) -> None:
    kw["kafka_host"], kw["kafka_port"] = parse_address(key, value)


def _set_kafka_advertised(kw: dict, key: str, value: str) -> None:
    kw["kafka_advertised"] = parse_address(key, value)


def _nonempty(key: str, v: str) -> str:
    s = str(v).strip()
    if not s:
        raise ConfigError(f"{key}: must not be empty")
    return s


def _data_dir(key: str, v: str) -> str:
    s = _nonempty(key, v).split(",")[0]
    return os.path.abspath(os.path.expanduser(s))


def _flags(key: str, v: str) -> frozenset:
    return frozenset(filter(None, (x.strip() for x in str(v).split(","))))


_NODE_KEYS = {
    "node.id": _set("node_id", lambda k, v: _int(k, v, 0, 2**31 - 1)),
    "broker.id": _set("node_id", lambda k, v: _int(k, v, 0, 2**31 - 1)),
    "listeners": _set_listener,
    "advertised.listeners": _set_advertised,
    "log.dirs": _set("data_dir", _data_dir),
    "log.dir": _set("data_dir", _data_dir),
    "data.dir": _set("data_dir", _data_dir),
    "cluster.id": _set("cluster_id", _nonempty),
    "num.partitions": _set("num_partitions", lambda k, v: _int(k, v, 1, 100_000)),
    "default.replication.factor": _set(
        "default_replication_factor", lambda k, v: _int(k, v, 1, 100)
    ),
    "auto.create.topics.enable": _set("auto_create_topics_enable", _bool),
    "max.frame.bytes": _set("max_frame_bytes", lambda k, v: _int(k, v, 1024, 2**31 - 1)),
    "log.flush.interval.ms": _set("log_flush_interval_ms", lambda k, v: _int(k, v, 1)),
    "log.retention.check.interval.ms": _set(
        "log_retention_check_interval_ms", lambda k, v: _int(k, v, 1)
    ),
    "log.cleaner.interval.ms": _set("log_cleaner_interval_ms", lambda k, v: _int(k, v, 1)),
    "request.timeout.ms": _set("request_timeout_ms", lambda k, v: _int(k, v, 1)),
    "controller.quorum.voters": _set("controller_quorum_voters", parse_voters),
    "process.roles": _set("process_roles", parse_roles),
    "raft.listener": _set_raft_listener,
    "raft.password": _set("raft_password", _nonempty),
    "broker.session.timeout.ms": _set("broker_session_timeout_ms", lambda k, v: _int(k, v, 100)),
    "broker.heartbeat.interval.ms": _set(
        "broker_heartbeat_interval_ms", lambda k, v: _int(k, v, 10)
    ),
    "broker.registration.timeout.ms": _set(
        "broker_registration_timeout_ms", lambda k, v: _int(k, v, 100)
    ),
    "replica.lag.time.max.ms": _set("replica_lag_time_max_ms", lambda k, v: _int(k, v, 10)),
    "min.insync.replicas": _set("min_insync_replicas", lambda k, v: _int(k, v, 1)),
    "unclean.leader.election.enable": _set("unclean_leader_election_enable", _bool),
    "auto.leader.rebalance.enable": _set("auto_leader_rebalance_enable", _bool),
    "leader.imbalance.check.interval.ms": _set(
        "leader_imbalance_check_interval_ms", lambda k, v: _int(k, v, 100)
    ),
    "group.min.session.timeout.ms": _set(
        "group_min_session_timeout_ms", lambda k, v: _int(k, v, 1)
    ),
    "group.max.session.timeout.ms": _set(
        "group_max_session_timeout_ms", lambda k, v: _int(k, v, 1)
    ),
    "group.initial.rebalance.delay.ms": _set(
        "group_initial_rebalance_delay_ms", lambda k, v: _int(k, v, 0)
    ),
    "group.max.size": _set("group_max_size", lambda k, v: _int(k, v, 1)),
    "offsets.topic.num.partitions": _set(
        "offsets_topic_num_partitions", lambda k, v: _int(k, v, 1, 1000)
    ),
    "offsets.topic.replication.factor": _set(
        "offsets_topic_replication_factor", lambda k, v: _int(k, v, 1, 100)
    ),
    "offsets.retention.minutes": _set("offsets_retention_minutes", lambda k, v: _int(k, v, 1)),
    "kafka.listener": _set_kafka_listener,
    "kafka.advertised.listener": _set_kafka_advertised,
    "kafka.brokers": _set("kafka_brokers", parse_voters),
    "test.flags": _set("test_flags", _flags),
}

#: Every key a node config may hold (besides ``log.<topic config>`` defaults).
NODE_CONFIG_KEYS = tuple(sorted(_NODE_KEYS))


def read_properties(path: str) -> dict[str, str]:
    """Parse a ``key=value`` file. Raises ConfigError for unreadable files and bad lines."""
    try:
        with open(path, encoding="utf-8") as f:
            lines = f.read().splitlines()
    except OSError as e:
        raise ConfigError(f"cannot read config file {path}: {e.strerror}") from None
    props: dict[str, str] = {}
    for no, raw in enumerate(lines, 1):
        line = raw.strip()
        if not line or line.startswith(("#", "!")):
            continue
        key, sep, value = line.partition("=")
        if not sep:
            key, sep, value = line.partition(":")
        key = key.strip()
        if not sep or not key:
            raise ConfigError(f"{path}:{no}: expected key=value, got {raw!r}")
        if key in props:
            raise ConfigError(f"{path}:{no}: key {key!r} is set twice")
        props[key] = value.strip()
    return props


def config_field_names() -> list[str]:
    return [f.name for f in fields(NodeConfig)]
