"""Blocking connections to nodes and the client's view of cluster metadata.

A :class:`BrokerConnection` is one TCP connection driving the sans-IO
:class:`raftlog.protocol.ClientConnection`: requests may be pipelined and
responses come back in order. :class:`Cluster` bootstraps from any of
``bootstrap_servers``, keeps brokers and partition leaders, refreshes them on
NOT_LEADER_OR_FOLLOWER / UNKNOWN_TOPIC_OR_PARTITION, and pools one connection per
broker. Neither is thread-safe: each producer/consumer thread owns its own.
"""

from __future__ import annotations

import select
import socket
import time
from dataclasses import dataclass

from raftlog.errors import ApiError, ErrorCode, RemoteProtocolError
from raftlog.protocol import Api, ClientConnection, Frame

from .errors import BrokerNotAvailableError, api_error

RECV_BYTES = 1024 * 1024
#: Metadata refresh attempts before giving up on one call.
MAX_METADATA_ATTEMPTS = 10
METADATA_BACKOFF_S = 0.1
#: How long a lookup of an unknown topic keeps refreshing metadata before failing.
UNKNOWN_TOPIC_WAIT_S = 2.0
#: How long a node stays a suspect (metadata is asked elsewhere first) after a request
#: to it went unanswered for too long (client/stale.py), unless it answers meanwhile.
SUSPECT_S = 10.0
#: A node whose metadata shows a partition the client asked for without a leader is asked
#: after the others for this long (it may be the one whose view is stale).
LEADERLESS_SUSPECT_S = 2.0


def parse_servers(servers: str | list[str]) -> list[tuple[str, int]]:
    """'h1:9092,h2:9093' (or a list of such) -> [(host, port)]. Empty entries (a
    trailing comma, spaces) are skipped, as Kafka's clients skip them."""
    items = servers.split(",") if isinstance(servers, str) else list(servers)
    out = []
    for item in items:
        if isinstance(item, tuple):
            out.append((item[0], int(item[1])))
            continue
        item = item.strip()
        if not item:
            continue
        host, sep, port = item.rpartition(":")
        if not sep or not host or not port.isdigit():
            raise ValueError(f"bootstrap server {item!r} is not host:port")
        out.append((host.strip("[]"), int(port)))
    if not out:
        raise ValueError("bootstrap_servers is empty")
    return out


class BrokerConnection:
    """One blocking connection; pipelined requests, in-order responses."""

    def __init__(self, host: str, port: int, timeout_s: float = 30.0, node_id: int | None = None,
                 security=None):
        """``security``: a client.security.ClientSecurity (TLS and SASL), or None.

        Raises:
            BrokerNotAvailableError: the node cannot be reached.
            AuthenticationError: TLS or SASL failed (client/security.py).
        """
        self.host, self.port, self.node_id = host, port, node_id
        try:
            self.sock = socket.create_connection((host, port), timeout=timeout_s)
        except OSError as e:
            raise BrokerNotAvailableError(f"cannot connect to {host}:{port}: {e}") from None
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self._timeout_s = timeout_s
        self.proto = ClientConnection()
        self.closed = False
        # recv(1 MiB) would malloc (mmap) a fresh 1 MiB object per call, ~50 us each:
        # receive into one reusable buffer and copy out only what arrived.
        self._rbuf = bytearray(RECV_BYTES)
        self._rview = memoryview(self._rbuf)
        self._tls = False
        if security is not None:
            self._secure(security, timeout_s)

    def _secure(self, security, timeout_s: float) -> None:
        try:
            self.sock = security.wrap(self.sock, self.host)
            self._tls = security.tls
            if security.sasl:
                security.authenticate(
                    lambda api, fields: self.request(api, fields, timeout_s=timeout_s).header)
        except BaseException:
            self.close()
            raise

    def __repr__(self) -> str:
        return f"BrokerConnection({self.host}:{self.port}, node={self.node_id})"

    def fileno(self) -> int:
        return self.sock.fileno()

    @property
    def in_flight(self) -> int:
        return self.proto.in_flight

    def send(self, api: Api, fields: dict, body: bytes = b"", expect_response: bool = True) -> int:
        rid, data = self.proto.send_request(api, fields, body, expect_response)
        try:
            self.sock.sendall(data)
        except OSError as e:
            self.close()
            raise BrokerNotAvailableError(f"send to {self.host}:{self.port} failed: {e}") from None
        return rid

    def receive(self, timeout_s: float | None = None) -> Frame:
        """Block for the next response (in request order)."""
        if timeout_s is not None and timeout_s != self._timeout_s:
            self.sock.settimeout(timeout_s)
            self._timeout_s = timeout_s
        while True:
            try:
                frame = self.proto.next_response()
            except RemoteProtocolError as e:
                self.close()
                raise BrokerNotAvailableError(f"{self.host}:{self.port}: {e}") from None
            if frame is not None:
                return frame
            self.read_some()

    def read_some(self) -> None:
        try:
            n = self.sock.recv_into(self._rbuf)
        except OSError as e:
            self.close()
            err = BrokerNotAvailableError(f"receive from {self.host}:{self.port} failed: {e}")
            err.timed_out = isinstance(e, TimeoutError)  # (socket.timeout is TimeoutError)
            raise err from None
        if not n:
            self.close()
            raise BrokerNotAvailableError(
                f"connection to {self.host}:{self.port} closed by the node"
            )
        self.proto.receive_data(self._rview[:n])
        # TLS: plaintext OpenSSL already decrypted is invisible to select(): take it now
        while self._tls and self.sock.pending():
            n = self.sock.recv_into(self._rbuf)
            if not n:
                break
            self.proto.receive_data(self._rview[:n])

    def closed_by_node(self) -> bool:
        """With nothing in flight, the node has closed this connection (or sent what
        nobody asked for): it is closed here too. Never blocks. A node closes idle
        connections (connections.max.idle.ms); a connection reused after that would
        lose the request sent on it."""
        if self.closed:
            return True
        if self.proto.in_flight:
            return False
        try:
            readable = select.select([self.sock], [], [], 0)[0]
        except (OSError, ValueError):
            readable = True
        if readable or (self._tls and self.sock.pending()):
            self.close()
            return True
        return False

    def poll_response(self) -> Frame | None:
        """A response already received, or None (never blocks)."""
        return self.proto.next_response()

    def request(self, api: Api, fields: dict, body: bytes = b"", timeout_s: float = 30.0) -> Frame:
        """Send and wait; raise the ApiError of a whole-request error. Only on a
        connection with nothing else in flight (the answer would be another's)."""
        if self.proto.in_flight:
            raise RuntimeError(f"{self!r}: {api.name} sent while {self.proto.in_flight} "
                               "other request(s) are in flight")
        self.send(api, fields, body)
        frame = self.receive(timeout_s)
        err = frame.header.get("error", 0)
        if err:
            raise api_error(err, frame.header.get("message", ""))
        return frame

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            try:
                self.sock.close()
            except OSError:
                pass


@dataclass(frozen=True, slots=True)
class PartitionMeta:
    partition: int
    leader: int
    leader_epoch: int
    replicas: tuple
    isr: tuple
    error: int = 0


class Cluster:
    """Brokers, topics and leaders as last seen, plus a connection per broker."""

    def __init__(
        self,
        bootstrap_servers,
        timeout_s: float = 30.0,
        *,
        metadata_attempts: int = MAX_METADATA_ATTEMPTS,
        unknown_topic_wait_s: float = UNKNOWN_TOPIC_WAIT_S,
        security=None,
        metadata_timeout_s: float | None = None,
    ):
        """``metadata_attempts``, ``unknown_topic_wait_s`` and ``metadata_timeout_s``
        (default ``timeout_s``) bound how long one lookup blocks; a background I/O
        thread with its own retry loop sets them to 1, 0 and a few seconds."""
        self.bootstrap = parse_servers(bootstrap_servers)
        self.timeout_s = timeout_s
        self.metadata_timeout_s = timeout_s if metadata_timeout_s is None else metadata_timeout_s
        #: bumped by every metadata answer (the I/O threads compare in-flight requests
        #: with a newer view: client/stale.py)
        self.version = 0
        #: (host, port) -> monotonic time until which metadata is asked elsewhere first:
        #: nodes that left a request unanswered too long (a hung node still accepts
        #: connections, and a metadata request to it would block for the timeout)
        self.suspects: dict[tuple[str, int], float] = {}
        self.security = security  # client/security.py ClientSecurity or None
        self.metadata_attempts = metadata_attempts
        self.unknown_topic_wait_s = unknown_topic_wait_s
        self.brokers: dict[int, tuple[str, int]] = {}
        self.topics: dict[str, dict[int, PartitionMeta]] = {}
        self.controller_id = -1
        self.cluster_id = ""
        self._conns: dict[int, BrokerConnection] = {}
        self._bootstrap_conn: BrokerConnection | None = None

    # ------------------------------------------------------------------ connections

    def any_connection(self, avoid=()) -> BrokerConnection:
        """A live connection to some node: a known broker first, else a bootstrap server.
        Nodes at the (host, port) addresses in ``avoid`` (just found not ready) are
        taken only when no other node is reachable, and so are suspects (``suspect``)."""
        now = time.monotonic()
        avoid = set(avoid) | {a for a, until in self.suspects.items() if until > now}
        for conn in self._conns.values():  # (not one with pipelined requests in flight)
            if (not conn.in_flight and (conn.host, conn.port) not in avoid
                    and not conn.closed_by_node()):
                return conn
        boot = self._bootstrap_conn
        if boot is not None and not boot.closed_by_node():
            if (boot.host, boot.port) not in avoid:
                return boot
            boot.close()
        errors = []
        addresses = list(self.brokers.values()) + self.bootstrap
        for host, port in ([a for a in addresses if a not in avoid]
                           + [a for a in addresses if a in avoid]):
            try:
                self._bootstrap_conn = BrokerConnection(host, port, self.timeout_s,
                                                        security=self.security)
                return self._bootstrap_conn
            except BrokerNotAvailableError as e:
                errors.append(str(e))
        raise BrokerNotAvailableError("no node reachable: " + "; ".join(errors))

    def suspect(self, addr: tuple[str, int], for_s: float = SUSPECT_S) -> None:
        """``addr`` left a request unanswered too long: ask others for metadata first."""
        self.suspects[addr] = time.monotonic() + for_s

    def clear_suspect(self, addr: tuple[str, int]) -> None:
        """``addr`` answered: it is not hung."""
        if self.suspects:
            self.suspects.pop(addr, None)

    def open_connection(self, broker_id: int) -> BrokerConnection | None:
        """The connection to ``broker_id`` if one is open (never connects)."""
        conn = self._conns.get(broker_id)
        return conn if conn is not None and not conn.closed else None

    def connection(self, broker_id: int) -> BrokerConnection:
        conn = self._conns.get(broker_id)
        if conn is not None and not conn.closed_by_node():
            return conn
        addr = self.brokers.get(broker_id)
        if addr is None:
            raise BrokerNotAvailableError(f"broker {broker_id} is not in the cluster metadata")
        conn = BrokerConnection(addr[0], addr[1], self.timeout_s, broker_id,
                                security=self.security)
        self._conns[broker_id] = conn
        return conn

    def close(self) -> None:
        for conn in self._conns.values():
            conn.close()
        self._conns.clear()
        if self._bootstrap_conn is not None:
            self._bootstrap_conn.close()

    # ------------------------------------------------------------------ metadata

    def refresh(self, topics: list[str] | None = None) -> dict:
        """Fetch metadata (all topics when ``topics`` is None); returns the raw header."""
        last: Exception | None = None
        avoid: set = set()
        for attempt in range(self.metadata_attempts):
            conn = None
            try:
                conn = self.any_connection(avoid)
                frame = conn.request(Api.METADATA, {"topics": topics},
                                     timeout_s=self.metadata_timeout_s)
                self._update(frame.header)
                if topics and leaderless(frame.header):
                    # a partition without a leader here: the next refresh asks another
                    # node first (this one's metadata may be stale: a node that lost the
                    # quorum knows nothing newer)
                    self.suspect((conn.host, conn.port), LEADERLESS_SUSPECT_S)
                return frame.header
            except BrokerNotAvailableError as e:
                last = e
                if conn is not None and getattr(e, "timed_out", False):
                    self.suspect((conn.host, conn.port))  # hung: ask another next time
            except ApiError as e:
                if e.code is not ErrorCode.BROKER_NOT_AVAILABLE:
                    raise
                last = e  # a node still catching up with the metadata: ask another
                avoid.add((conn.host, conn.port))
                if any(a not in avoid for a in list(self.brokers.values()) + self.bootstrap):
                    continue
                avoid.clear()  # every node is starting: wait, then ask them again
            if attempt + 1 < self.metadata_attempts:
                time.sleep(METADATA_BACKOFF_S * (attempt + 1))
        raise BrokerNotAvailableError(f"metadata refresh failed: {last}")

    def _update(self, h: dict) -> None:
        self.version += 1
        self.brokers = {b.node_id: (b.host, b.port) for b in h["brokers"]}
        self.controller_id = h.get("controller_id", -1)
        self.cluster_id = h.get("cluster_id", "")
        for t in h["topics"]:
            if t.error:
                self.topics.pop(t.name, None)
                continue
            self.topics[t.name] = {
                p.partition: PartitionMeta(p.partition, p.leader, p.leader_epoch,
                                           tuple(p.replicas), tuple(p.isr), p.error)
                for p in t.partitions
            }

    def partitions_for(
        self, topic: str, refresh_if_missing: bool = True, wait_s: float | None = None
    ) -> dict[int, PartitionMeta]:
        """Partitions of ``topic``; raises UnknownTopicOrPartitionError.

        An unknown topic is looked up again for up to ``wait_s``: in a cluster, a
        topic just created through one node reaches the others a moment later. A
        single-node cluster's answer is final, so there it fails at once.
        """
        parts = self.topics.get(topic)
        deadline = time.monotonic() + (self.unknown_topic_wait_s if wait_s is None else wait_s)
        while parts is None and refresh_if_missing:
            h = self.refresh([topic])
            parts = self.topics.get(topic)
            if parts is not None:
                break
            t = next((t for t in h["topics"] if t.name == topic), None)
            code = t.error if t else ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
            final = len(self.brokers) <= 1 or time.monotonic() >= deadline
            # (LEADER_NOT_AVAILABLE: a topic another node auto-created a moment ago)
            retry = code in (ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, ErrorCode.LEADER_NOT_AVAILABLE)
            if not retry or final:
                msg = (t.message if t else "") or f"unknown topic {topic!r}"
                near = (self.nearest_topic(topic)
                        if code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION else None)
                e = api_error(code, f"{msg}; did you mean {near!r}?" if near else msg)
                e.suggestion = near
                raise e
            time.sleep(METADATA_BACKOFF_S)
        return parts

    def nearest_topic(self, topic: str) -> str | None:
        """The topic of the cluster closest to ``topic`` (a typo), or None -- among
        those this client may describe (a Metadata of every topic; only asked when a
        topic is unknown, and only a hint: any error is None)."""
        import difflib

        try:
            h = self.any_connection().request(Api.METADATA, {"topics": None},
                                              timeout_s=self.metadata_timeout_s).header
        except Exception:
            return None
        names = [t.name for t in h["topics"] if not t.error and not t.name.startswith("__")]
        close = difflib.get_close_matches(topic, names, n=1, cutoff=0.75)
        return close[0] if close else None

    def leader_for(self, topic: str, partition: int) -> int:
        parts = self.partitions_for(topic)
        meta = parts.get(partition)
        if meta is None:
            raise api_error(
                ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                f"topic {topic!r} has no partition {partition}",
            )
        if meta.leader < 0:
            raise api_error(
                ErrorCode.LEADER_NOT_AVAILABLE, f"{topic}-{partition} has no leader now"
            )
        return meta.leader


def leaderless(header: dict) -> bool:
    """Does a Metadata answer show a partition of a known topic without a leader?"""
    return any(p.leader < 0 for t in header["topics"] if not t.error for p in t.partitions)
