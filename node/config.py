"""Node configuration: a Kafka-style properties file, overridden by command-line flags.

The file holds ``key=value`` lines (``#`` comments). Keys use Kafka's names where
Kafka has the concept. Topic-level log defaults are given with a ``log.`` prefix
(``log.retention.ms`` is the default of the topic config ``retention.ms``), as in
Kafka's server.properties. Every problem is reported as one ConfigError line
naming the key.
"""

from __future__ import annotations

import functools
import ipaddress
import os
from dataclasses import dataclass, field, fields

from raftlog import filemodes
from raftlog import listeners as L
from raftlog.errors import ConfigError, did_you_mean


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
    #: The rack (or zone) this broker is in, told to clients in Metadata and
    #: DescribeCluster (Kafka's ``broker.rack``); None: not advertised.
    broker_rack: str | None = None
    max_frame_bytes: int = 100 * 1024 * 1024
    log_flush_interval_ms: int = 1000
    log_retention_check_interval_ms: int = 300_000
    log_cleaner_interval_ms: int = 15_000
    #: Background CRC re-check of closed segments, bytes/s (0: off); node/scrubber.py.
    log_scrub_bytes_per_sec: int = 1024 * 1024
    request_timeout_ms: int = 30_000
    #: Raft metadata quorum: {node_id: (host, port)}; empty = a single node, which is
    #: the only voter of its own quorum (see :attr:`metadata_voters`).
    controller_quorum_voters: dict = field(default_factory=dict)
    #: What this node does (Kafka's process.roles): "broker" serves partitions,
    #: "controller" votes in the metadata quorum. A node outside the voters is a broker
    #: only: it follows the metadata log as a non-voting learner.
    process_roles: tuple = ("broker", "controller")
    #: ``raft.listener``: where this voter's Raft port binds, when not its own entry in
    #: controller.quorum.voters (which the other nodes still dial), e.g. 0.0.0.0.
    raft_host: str | None = None
    raft_port: int | None = None
    raft_password: str | None = None
    broker_session_timeout_ms: int = 3000
    broker_heartbeat_interval_ms: int = 500
    #: a broker whose heartbeat connection closed, silent this long since and whose
    #: listener then refuses a connection is fenced at once (0: only session expiry)
    broker_disconnect_grace_ms: int = 200
    #: ``trace.events``: hop events (raftlog/trace.py) the node keeps for
    #: ``GET /trace`` on the metrics listener; 0: tracing off
    trace_events: int = 0
    broker_registration_timeout_ms: int = 60_000
    replica_lag_time_max_ms: int = 10_000
    min_insync_replicas: int = 1
    unclean_leader_election_enable: bool = False
    #: default of topics' ``write.caching`` (False: durable acknowledgement; the key
    #: ``write.caching.default`` becomes ``log_defaults["write.caching"]`` unless a
    #: ``log.write.caching`` is given too)
    write_caching_default: bool = False
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
    #: Transactions (issue #33; node/txn_host.py, Kafka's names).
    transaction_max_timeout_ms: int = 900_000
    transaction_state_log_num_partitions: int = 16
    transaction_state_log_replication_factor: int = 3
    transaction_abort_timed_out_check_ms: int = 10_000
    #: Security (issue 19; see raftlog/listeners.py, tls.py, scram.py, acl.py). The raw
    #: listener keys; the validated form is :attr:`listener_config`.
    listeners_spec: str = ""
    advertised_listeners_spec: str = ""
    listener_security_protocol_map: str = ""
    inter_broker_listener_name: str = ""
    allow_plaintext_listeners: bool = False
    #: PEM files: this node's certificate chain with its private key (the key may be in
    #: ssl_key_location instead), and the CAs it trusts (peers' and clients' certificates).
    ssl_keystore_location: str | None = None
    ssl_key_location: str | None = None
    ssl_key_password: str | None = None
    ssl_truststore_location: str | None = None
    ssl_client_auth: str = "none"
    #: "https": verify the host names of the peers' certificates (inter-broker); "": don't.
    ssl_endpoint_identification_algorithm: str = "https"
    sasl_enabled_mechanisms: tuple = ("SCRAM-SHA-256", "SCRAM-SHA-512")
    sasl_mechanism_inter_broker_protocol: str = "SCRAM-SHA-256"
    #: The principal nodes authenticate as to each other over SASL listeners. Each node
    #: writes this user's SCRAM credential to the quorum at start (it is also the first
    #: user an operator can log in with); make it a super user.
    inter_broker_sasl_username: str | None = None
    inter_broker_sasl_password: str | None = None
    authorizer_enable: bool = False
    super_users: frozenset = frozenset()
    allow_everyone_if_no_acl_found: bool = False
    connection_failed_authentication_delay_ms: int = 100
    #: Failed logins as one user from one address within a minute before that user's
    #: logins from that address are refused for connection.failed.authentication.block.ms
    #: (node/authn.py FailureLimiter); ...max.per.address: failed logins from one
    #: address, whatever the users, before the whole address is refused.
    connection_failed_authentication_max: int = 5
    connection_failed_authentication_max_per_address: int | None = None  # None: 4 x max
    connection_failed_authentication_block_ms: int = 30_000
    #: Connections open at once from one client address, on all listeners together
    #: (Kafka's key; Kafka's default is unlimited). 1000 leaves a single address under a
    #: quarter of a listener's 4,096 slots, so one host cannot lock others out, and is
    #: far above what one honest host opens (a Kafka client keeps one per broker).
    max_connections_per_ip: int = 1000
    #: ``max.incremental.fetch.session.cache.slots``: consumers' fetch sessions (KIP-227)
    #: the node keeps at most (node/consumer_fetch_session.py); 0: none
    max_incremental_fetch_session_cache_slots: int = 1000
    #: {ip: limit} instead of max.connections.per.ip (``host:count,host:count``).
    max_connections_per_ip_overrides: dict = field(default_factory=dict)
    #: A connection with no request in flight, no request parked and nothing received
    #: this long (an idle one, or one whose frame stopped half-sent) is closed.
    connections_max_idle_ms: int = 600_000
    #: Prometheus metrics over HTTP (``metrics.listener``); None: no metrics listener.
    #: Operator-only (names of every topic and group): loopback unless given a host.
    metrics_host: str | None = None
    metrics_port: int | None = None
    #: HTTPS for the metrics listener: on when metrics.ssl.keystore.location is set
    #: (the same PEM files and meanings as the ssl.* keys of the node's listeners).
    metrics_ssl_keystore_location: str | None = None
    metrics_ssl_key_location: str | None = None
    metrics_ssl_key_password: str | None = None
    metrics_ssl_truststore_location: str | None = None
    metrics_ssl_client_auth: str = "none"
    #: HTTP basic authentication of scrapes: a user and its password (given, or the
    #: first line of a file readable by the node's user only).
    metrics_basic_auth_username: str | None = None
    metrics_basic_auth_password: str | None = None
    metrics_basic_auth_password_file: str | None = None
    #: Kafka wire-protocol listener (node/kafka/server.py): None = off. Other brokers'
    #: Kafka addresses: ``kafka_brokers`` where given, else their client address with
    #: this node's Kafka port offset (what ``raftlog up --kafka-port`` sets up).
    kafka_host: str | None = None
    kafka_port: int | None = None
    #: ``kafka.listener=PROTOCOL://HOST:PORT`` (plain HOST:PORT: PLAINTEXT); TLS uses the
    #: ssl.* keys of the native listeners, SASL their mechanisms and credentials.
    kafka_protocol: L.SecurityProtocol = L.SecurityProtocol.PLAINTEXT
    kafka_advertised: tuple | None = None
    kafka_brokers: dict = field(default_factory=dict)
    #: Test-only fault flags (never set in production configs).
    test_flags: frozenset = frozenset()

    @functools.cached_property
    def listener_config(self) -> L.ListenerConfig:
        """The validated listeners (``host:port`` alone is one PLAINTEXT listener)."""
        spec = self.listeners_spec or f"PLAINTEXT://{_bracket(self.host)}:{self.port}"
        pmap = self.listener_security_protocol_map or None
        advertised = self.advertised_listeners_spec
        if not advertised and (self.advertised_host or self.advertised_port):
            first = L.parse_listeners("listeners", spec, L.parse_protocol_map(
                "listener.security.protocol.map", pmap))[0]
            host, port = self.advertised
            advertised = f"{first.name}://{_bracket(host)}:{port}"
        return L.resolve(spec, advertised or None, pmap, self.inter_broker_listener_name or None,
                         allow_plaintext=self.allow_plaintext_listeners)

    @property
    def security_enabled(self) -> bool:
        """Whether any listener uses TLS or SASL (or ACLs are on)."""
        return self.authorizer_enable or any(
            x.protocol is not L.SecurityProtocol.PLAINTEXT for x in self.listener_config.listeners
        ) or (self.kafka_port is not None
              and self.kafka_protocol is not L.SecurityProtocol.PLAINTEXT)

    @property
    def failed_logins_per_address_max(self) -> int:
        """connection.failed.authentication.max.per.address, by default 4 x the per-user
        bound: one client's wrong password must not block the other users of its host."""
        return (self.connection_failed_authentication_max_per_address
                or FAILED_LOGINS_ADDRESS_FACTOR * self.connection_failed_authentication_max)

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
            check_secret_file(path, [k for k in SECRET_KEYS if k in props])
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
                raise ConfigError(f"unknown config key {key!r}{_nearest_key(key)}")
            setter(kw, key, value)
        if "write_caching_default" in kw:
            log_defaults.setdefault("write.caching", str(kw["write_caching_default"]).lower())
        if log_defaults:
            from raftlog.config import KEYS as TOPIC_KEYS
            from raftlog.config import LogConfig

            for k in log_defaults:
                if k not in TOPIC_KEYS:
                    raise ConfigError(f"unknown config key 'log.{k}'{_nearest_key(k)}")

            LogConfig.from_dict(log_defaults)  # validates: raises ConfigError naming the key
        kw["log_defaults"] = log_defaults
        cfg = cls(**kw)
        cfg.validate()
        return cfg

    @property
    def metadata_voters(self) -> dict:
        """The voters of the metadata quorum this node runs: ``controller.quorum.voters``,
        or, without it, this node alone. No node ever joins such a quorum of one, so it
        binds no Raft port (node/quorum_store.py) and needs no ``raft.password``; its
        address (:data:`SINGLE_VOTER_ADDRESS`) only names the voter."""
        if self.controller_quorum_voters:
            return self.controller_quorum_voters
        return {self.node_id: SINGLE_VOTER_ADDRESS}

    @property
    def is_voter(self) -> bool:
        """A voter of the metadata quorum (role controller)."""
        return "controller" in self.process_roles

    def validate(self) -> None:
        voters = self.controller_quorum_voters
        roles = self.process_roles
        if self.broker_heartbeat_interval_ms * 2 > self.broker_session_timeout_ms:
            raise ConfigError(
                f"broker.heartbeat.interval.ms={self.broker_heartbeat_interval_ms} is more than "
                f"half of broker.session.timeout.ms={self.broker_session_timeout_ms}: one late "
                "heartbeat would fence the broker. Lower the interval or raise the timeout "
                "(defaults: 500 and 3000)")
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
            if (len(voters) > 1 or not self.is_voter) and self.raft_password and len(
                    self.raft_password.encode()) < RAFT_PASSWORD_MIN_BYTES:
                raise ConfigError(
                    f"raft.password is shorter than {RAFT_PASSWORD_MIN_BYTES} bytes: use a long "
                    "random secret (for example: openssl rand -hex 16)")
            addrs = list(voters.values())
            if len(set(addrs)) != len(addrs):
                raise ConfigError("controller.quorum.voters: two voters share one address")
        if self.raft_port is not None and (not voters or not self.is_voter):
            raise ConfigError(
                "raft.listener is set, but this node binds no Raft port: only a voter "
                "(process.roles with controller, listed in controller.quorum.voters) has "
                "one; remove raft.listener")
        if self.group_min_session_timeout_ms > self.group_max_session_timeout_ms:
            raise ConfigError("group.min.session.timeout.ms is above group.max.session.timeout.ms")
        if self.max_connections_per_ip == 0 and not self.max_connections_per_ip_overrides:
            raise ConfigError("max.connections.per.ip=0 refuses every client: set it above 0, "
                              "or list the allowed addresses in max.connections.per.ip.overrides")
        if self.min_insync_replicas < 1:
            raise ConfigError("min.insync.replicas must be at least 1")
        if (self.metrics_port and self.metrics_port == self.port
                and self.metrics_host == self.host):
            raise ConfigError(f"metrics.listener {self.metrics_host}:{self.metrics_port} is "
                              "the client listener's address; give it its own port")
        self._validate_metrics_security()
        self._validate_security()

    def _validate_metrics_security(self) -> None:
        user = self.metrics_basic_auth_username
        given = [k for k, v in (("metrics.basic.auth.password", self.metrics_basic_auth_password),
                                ("metrics.basic.auth.password.file",
                                 self.metrics_basic_auth_password_file)) if v]
        if user and len(given) != 1:
            raise ConfigError("metrics.basic.auth.username needs exactly one of "
                              "metrics.basic.auth.password, metrics.basic.auth.password.file")
        if given and not user:
            raise ConfigError(f"{given[0]} needs metrics.basic.auth.username")
        if user and ":" in user:
            raise ConfigError("metrics.basic.auth.username: must not contain ':' (HTTP basic "
                              "authentication separates user and password with it)")
        if self.metrics_ssl_client_auth not in ("none", "requested", "required"):
            raise ConfigError(f"metrics.ssl.client.auth: {self.metrics_ssl_client_auth!r} is not "
                              "one of none, requested, required")
        if self.metrics_ssl_client_auth != "none" and not self.metrics_ssl_truststore_location:
            raise ConfigError(f"metrics.ssl.client.auth={self.metrics_ssl_client_auth} needs "
                              "metrics.ssl.truststore.location")
        tls_keys = [k for k, v in (("metrics.ssl.key.location", self.metrics_ssl_key_location),
                                   ("metrics.ssl.truststore.location",
                                    self.metrics_ssl_truststore_location)) if v]
        if tls_keys and not self.metrics_ssl_keystore_location:
            raise ConfigError(f"{tls_keys[0]} needs metrics.ssl.keystore.location (the PEM "
                              "certificate the metrics listener presents)")
        if (user and not self.metrics_ssl_keystore_location and self.metrics_port is not None
                and not L.is_loopback(self.metrics_host or "")
                and not self.allow_plaintext_listeners):
            raise ConfigError(
                f"metrics.listener {self.metrics_host}:{self.metrics_port} would take the "
                "metrics.basic.auth password in the clear off loopback: set "
                "metrics.ssl.keystore.location, or allow.plaintext.listeners=true")

    def _validate_security(self) -> None:
        lc = self.listener_config  # raises ConfigError for bad listener keys
        kp = self.kafka_protocol if self.kafka_port is not None else None
        if (kp is not None and not kp.tls and not self.allow_plaintext_listeners
                and not L.is_loopback(self.kafka_host or "")):
            # the same rule as `listeners`: PLAINTEXT and SASL_PLAINTEXT are unencrypted
            raise ConfigError(
                f"kafka.listener {kp.value}://{_bracket(self.kafka_host or '')}:{self.kafka_port}"
                " is unencrypted on a non-loopback address: use SSL or SASL_SSL, or set "
                "allow.plaintext.listeners=true")
        protocols = {x.protocol for x in lc.listeners} | ({kp} if kp is not None else set())
        if any(p.tls for p in protocols) and not self.ssl_keystore_location:
            raise ConfigError("ssl.keystore.location (PEM certificate and key) is required by "
                              "an SSL or SASL_SSL listener")
        if self.ssl_client_auth not in ("none", "requested", "required"):
            raise ConfigError(f"ssl.client.auth: {self.ssl_client_auth!r} is not one of none, "
                              "requested, required")
        if self.ssl_client_auth != "none" and not self.ssl_truststore_location:
            raise ConfigError(f"ssl.client.auth={self.ssl_client_auth} needs "
                              "ssl.truststore.location")
        ib = lc.inter_broker_protocol
        if self.controller_quorum_voters and ib.sasl and not (
                self.inter_broker_sasl_username and self.inter_broker_sasl_password):
            raise ConfigError(f"inter.broker.listener.name {lc.inter_broker} is {ib.value}: "
                              "set inter.broker.sasl.username and inter.broker.sasl.password")
        if ib.sasl and self.sasl_mechanism_inter_broker_protocol not in self.sasl_enabled_mechanisms:
            raise ConfigError(f"sasl.mechanism.inter.broker.protocol "
                              f"{self.sasl_mechanism_inter_broker_protocol} is not in "
                              "sasl.enabled.mechanisms")
        if "PLAIN" in self.sasl_enabled_mechanisms and (any(
                x.protocol is L.SecurityProtocol.SASL_PLAINTEXT
                and not L.is_loopback(x.host) for x in lc.listeners) or (
                kp is L.SecurityProtocol.SASL_PLAINTEXT
                and not L.is_loopback(self.kafka_host or ""))):
            raise ConfigError("sasl.enabled.mechanisms: PLAIN would send passwords in the clear "
                              "on a SASL_PLAINTEXT listener: use SASL_SSL or SCRAM only")


#: The Raft address naming a node without controller.quorum.voters in its own quorum
#: of one (never bound: nobody connects to a lone voter).
SINGLE_VOTER_ADDRESS = ("127.0.0.1", 0)
#: connection.failed.authentication.max.per.address, by default, in units of
#: connection.failed.authentication.max.
FAILED_LOGINS_ADDRESS_FACTOR = 4
#: Shortest raft.password accepted when the quorum has more than one member.
RAFT_PASSWORD_MIN_BYTES = 16
#: Keys holding secrets: a config file with one of them must not be world-readable.
SECRET_KEYS = ("raft.password", "inter.broker.sasl.password", "ssl.key.password",
               "metrics.basic.auth.password", "metrics.ssl.key.password")
#: Where the metrics listener binds when metrics.listener gives a port only.
METRICS_DEFAULT_HOST = "127.0.0.1"


def _nearest_key(key: str) -> str:
    """The hint for an unknown node key: the nearest node key, or the nearest topic
    default (``log.`` + a topic config: ``retention.hours`` -> ``log.retention.ms``)."""
    from raftlog.config import KEYS as TOPIC_KEYS

    hint = did_you_mean(key.removeprefix("log."), TOPIC_KEYS)
    if hint:
        return did_you_mean("log." + key.removeprefix("log."),
                            [f"log.{k}" for k in TOPIC_KEYS])
    return did_you_mean(key, _NODE_KEYS)


def _bracket(host: str) -> str:
    return f"[{host}]" if ":" in host else host


def _set(name: str, conv):
    def setter(kw: dict, key: str, value: str) -> None:
        kw[name] = conv(key, value)

    return setter


def _set_listener(kw: dict, key: str, value: str) -> None:
    kw["host"], kw["port"] = parse_address(key, value.split(",")[0])
    kw["listeners_spec"] = value.strip() if "://" in value or "," in value else ""


def _set_advertised(kw: dict, key: str, value: str) -> None:
    kw["advertised_host"], kw["advertised_port"] = parse_address(key, value.split(",")[0])
    kw["advertised_listeners_spec"] = value.strip() if "://" in value or "," in value else ""


def _mechanisms(key: str, v: str) -> tuple:
    from raftlog.scram import MECHANISMS

    items = tuple(x.strip().upper() for x in str(v).split(",") if x.strip())
    for m in items:
        if m not in MECHANISMS:
            raise ConfigError(f"{key}: {m!r} is not one of {', '.join(MECHANISMS)}")
    return items


def _super_users(key: str, v: str) -> frozenset:
    from raftlog.acl import AclError, parse_super_users

    try:
        return parse_super_users(v)
    except AclError as e:
        raise ConfigError(f"{key}: {e}") from None


def _path(key: str, v: str) -> str:
    return os.path.abspath(os.path.expanduser(_nonempty(key, v)))


def _raw(key: str, v: str) -> str:
    return str(v).strip()


def _set_raft_listener(kw: dict, key: str, value: str) -> None:
    kw["raft_host"], kw["raft_port"] = parse_address(key, value)


def _set_metrics_listener(kw: dict, key: str, value: str) -> None:
    if not str(value).strip():  # an empty value leaves metrics off
        kw["metrics_host"] = kw["metrics_port"] = None
        return
    value = str(value).strip()
    if value.lstrip(":").isdigit():  # a port only: loopback (operator-only data)
        value = f"{METRICS_DEFAULT_HOST}:{value.lstrip(':')}"
    kw["metrics_host"], kw["metrics_port"] = parse_address(key, value)
def _set_kafka_listener(kw: dict, key: str, value: str) -> None:
    """``HOST:PORT`` (PLAINTEXT) or ``PROTOCOL://HOST:PORT``."""
    value = str(value).strip()
    protocol = L.SecurityProtocol.PLAINTEXT
    if "://" in value:
        name, _, value = value.partition("://")
        protocol = L.DEFAULT_PROTOCOL_MAP.get(name.strip().upper())
        if protocol is None:
            raise ConfigError(f"{key}: {name.strip()!r} is not one of "
                              f"{', '.join(L.DEFAULT_PROTOCOL_MAP)} (PROTOCOL://HOST:PORT)")
    kw["kafka_host"], kw["kafka_port"] = parse_address(key, value)
    kw["kafka_protocol"] = protocol


def _set_kafka_advertised(kw: dict, key: str, value: str) -> None:
    kw["kafka_advertised"] = parse_address(key, value)


def parse_ip_overrides(key: str, v: str) -> dict[str, int]:
    """``host:count,host:count`` (Kafka's format; hosts are IP addresses, IPv6 ones
    may be bracketed) -> {normalized ip: count}."""
    out: dict[str, int] = {}
    for item in (x.strip() for x in v.split(",")):
        if not item:
            continue
        host, sep, count = item.rpartition(":")
        host = host.strip().strip("[]")
        try:
            ip = ipaddress.ip_address(host).compressed if sep else None
        except ValueError:
            ip = None
        if ip is None:
            raise ConfigError(f"{key}: {item!r} is not IP:COUNT (for example "
                              "127.0.0.1:2000,10.0.0.7:50); hosts must be IP addresses")
        if ip in out:
            raise ConfigError(f"{key}: {host} is listed twice")
        out[ip] = _int(key, count.strip(), 0, 2**31 - 1)
    return out


def _nonempty(key: str, v: str) -> str:
    s = str(v).strip()
    if not s:
        raise ConfigError(f"{key}: must not be empty")
    return s


RACK_CHARS_MAX = 255


def _rack(key: str, v: str) -> str:
    s = _nonempty(key, v)
    if len(s) > RACK_CHARS_MAX or not s.isprintable():
        raise ConfigError(f"{key}: must be 1-{RACK_CHARS_MAX} printable characters, "
                          f"e.g. broker.rack=eu-west-1a")
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
    "broker.rack": _set("broker_rack", lambda k, v: _rack(k, v)),
    "max.frame.bytes": _set("max_frame_bytes", lambda k, v: _int(k, v, 1024, 2**31 - 1)),
    "log.flush.interval.ms": _set("log_flush_interval_ms", lambda k, v: _int(k, v, 1)),
    "log.retention.check.interval.ms": _set(
        "log_retention_check_interval_ms", lambda k, v: _int(k, v, 1)
    ),
    "log.cleaner.interval.ms": _set("log_cleaner_interval_ms", lambda k, v: _int(k, v, 1)),
    "log.scrub.bytes.per.sec": _set("log_scrub_bytes_per_sec", lambda k, v: _int(k, v, 0)),
    "request.timeout.ms": _set("request_timeout_ms", lambda k, v: _int(k, v, 1)),
    "controller.quorum.voters": _set("controller_quorum_voters", parse_voters),
    "process.roles": _set("process_roles", parse_roles),
    "raft.listener": _set_raft_listener,
    "raft.password": _set("raft_password", _nonempty),
    "broker.session.timeout.ms": _set("broker_session_timeout_ms", lambda k, v: _int(k, v, 100)),
    "broker.disconnect.grace.ms": _set("broker_disconnect_grace_ms",
                                       lambda k, v: _int(k, v, 0)),
    "max.incremental.fetch.session.cache.slots": _set(
        "max_incremental_fetch_session_cache_slots", lambda k, v: _int(k, v, 0, 1_000_000)),
    "trace.events": _set("trace_events", lambda k, v: _int(k, v, 0, 10_000_000)),
    "broker.heartbeat.interval.ms": _set(
        "broker_heartbeat_interval_ms", lambda k, v: _int(k, v, 10)
    ),
    "broker.registration.timeout.ms": _set(
        "broker_registration_timeout_ms", lambda k, v: _int(k, v, 100)
    ),
    "replica.lag.time.max.ms": _set("replica_lag_time_max_ms", lambda k, v: _int(k, v, 10)),
    "min.insync.replicas": _set("min_insync_replicas", lambda k, v: _int(k, v, 1)),
    "unclean.leader.election.enable": _set("unclean_leader_election_enable", _bool),
    "write.caching.default": _set("write_caching_default", _bool),
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
    "transaction.max.timeout.ms": _set("transaction_max_timeout_ms",
                                       lambda k, v: _int(k, v, 1)),
    "transaction.state.log.num.partitions": _set(
        "transaction_state_log_num_partitions", lambda k, v: _int(k, v, 1, 1000)),
    "transaction.state.log.replication.factor": _set(
        "transaction_state_log_replication_factor", lambda k, v: _int(k, v, 1, 100)),
    "transaction.abort.timed.out.transaction.cleanup.interval.ms": _set(
        "transaction_abort_timed_out_check_ms", lambda k, v: _int(k, v, 10)),
    "metrics.listener": _set_metrics_listener,
    "metrics.ssl.keystore.location": _set("metrics_ssl_keystore_location", _path),
    "metrics.ssl.key.location": _set("metrics_ssl_key_location", _path),
    "metrics.ssl.key.password": _set("metrics_ssl_key_password", _nonempty),
    "metrics.ssl.truststore.location": _set("metrics_ssl_truststore_location", _path),
    "metrics.ssl.client.auth": _set("metrics_ssl_client_auth",
                                    lambda k, v: str(v).strip().lower()),
    "metrics.basic.auth.username": _set("metrics_basic_auth_username", _nonempty),
    "metrics.basic.auth.password": _set("metrics_basic_auth_password", _nonempty),
    "metrics.basic.auth.password.file": _set("metrics_basic_auth_password_file", _path),
    "kafka.listener": _set_kafka_listener,
    "kafka.advertised.listener": _set_kafka_advertised,
    "kafka.brokers": _set("kafka_brokers", parse_voters),
    "test.flags": _set("test_flags", _flags),
    "listener.security.protocol.map": _set("listener_security_protocol_map", _raw),
    "inter.broker.listener.name": _set("inter_broker_listener_name", _raw),
    "allow.plaintext.listeners": _set("allow_plaintext_listeners", _bool),
    "ssl.keystore.location": _set("ssl_keystore_location", _path),
    "ssl.key.location": _set("ssl_key_location", _path),
    "ssl.key.password": _set("ssl_key_password", _nonempty),
    "ssl.truststore.location": _set("ssl_truststore_location", _path),
    "ssl.client.auth": _set("ssl_client_auth", lambda k, v: str(v).strip().lower()),
    "ssl.endpoint.identification.algorithm": _set(
        "ssl_endpoint_identification_algorithm", lambda k, v: str(v).strip().lower()),
    "sasl.enabled.mechanisms": _set("sasl_enabled_mechanisms", _mechanisms),
    "sasl.mechanism.inter.broker.protocol": _set(
        "sasl_mechanism_inter_broker_protocol", lambda k, v: _mechanisms(k, v)[0]),
    "inter.broker.sasl.username": _set("inter_broker_sasl_username", _nonempty),
    "inter.broker.sasl.password": _set("inter_broker_sasl_password", _nonempty),
    "authorizer.enable": _set("authorizer_enable", _bool),
    "super.users": _set("super_users", _super_users),
    "allow.everyone.if.no.acl.found": _set("allow_everyone_if_no_acl_found", _bool),
    "connection.failed.authentication.max": _set(
        "connection_failed_authentication_max", lambda k, v: _int(k, v, 1, 1_000_000)),
    "connection.failed.authentication.max.per.address": _set(
        "connection_failed_authentication_max_per_address",
        lambda k, v: _int(k, v, 1, 1_000_000)),
    "connection.failed.authentication.block.ms": _set(
        "connection_failed_authentication_block_ms", lambda k, v: _int(k, v, 0, 86_400_000)),
    "connection.failed.authentication.delay.ms": _set(
        "connection_failed_authentication_delay_ms", lambda k, v: _int(k, v, 0, 60_000)),
    "max.connections.per.ip": _set(
        "max_connections_per_ip", lambda k, v: _int(k, v, 0, 2**31 - 1)),
    "max.connections.per.ip.overrides": _set(
        "max_connections_per_ip_overrides", parse_ip_overrides),
    "connections.max.idle.ms": _set(
        "connections_max_idle_ms", lambda k, v: _int(k, v, 100, 2**62)),
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


def check_secret_file(path: str, secret_keys: list[str]) -> None:
    """A file holding secrets must not be readable by every user.

    Raises:
        ConfigError: naming the file, the keys and the fix.
    """
    if not secret_keys:
        return
    try:
        readable = filemodes.world_readable(path)
    except OSError as e:
        raise ConfigError(f"cannot stat config file {path}: {e.strerror}") from None
    if readable:
        raise ConfigError(f"{path} holds {', '.join(secret_keys)} but is world-readable: "
                          f"chmod o-r {path}")


def config_field_names() -> list[str]:
    return [f.name for f in fields(NodeConfig)]
