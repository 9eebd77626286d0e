"""The trio server: listener, per-connection request loop, coalesced sends, sendfile.

Per connection, requests are handled in order (pipelining allowed, responses in
request order), as Kafka does. Every response ready after one ``recv`` is sent
with one ``send``: coalescing is what makes small requests fast.

Sockets are plain non-blocking stdlib sockets driven with
``trio.lowlevel.wait_readable``/``wait_writable``: a syscall that succeeds costs no
trio checkpoint (trio's socket wrapper pays two per call, ~100 us per request
round trip measured here), and a connection that never blocks still yields once
per turn, so no connection starves the others.

Fetch bodies are file ranges handed to ``os.sendfile`` (zero-copy from the page
cache); slices under SENDFILE_MIN_BYTES are read with ``pread`` and coalesced with
the response header instead, because one send beats two syscalls for small
long-poll answers. The connection's reader and its acks=all answer tasks send
through one Outbox, one flush at a time (see Outbox).

Before trust (node/admission.py): a connection is counted against its address's
``max.connections.per.ip`` when accepted, before any TLS handshake; until a SASL
listener's connection has logged in its frames are at most 64 KiB and anything but a
well-formed SASL step closes it as a failed login; an idle or half-sent connection is
closed after ``connections.max.idle.ms`` (node/connection.py); a Kafka client on this
port is closed with one hint per address and minute (raftlog/wire_sniff.py).
"""

from __future__ import annotations

import dataclasses
import functools
import time
from time import perf_counter

import trio

from raftlog.errors import ApiError, ErrorCode, RemoteProtocolError
from raftlog.listeners import Listener
from raftlog.protocol import (
    FETCH_SESSION_FULL,
    REQUEST_HEADER_ENTRIES_MAX,
    Api,
    BadRequest,
    FrameDecoder,
    encode_frame,
    encode_frame_head,
    error_response,
    parse_request,
)
from raftlog.tls import describe_handshake_error, principal_from_cert, server_context
from raftlog.wire_sniff import KAFKA, SNIFF_BYTES, looks_client_hello, looks_tls, sniff

from .admission import (
    ConnectionQuota,
    LogLimiter,
    WrongProtocol,
    bracket,
    kafka_on_native_hint,
    lift_frame_limit,
    limit_frames_before_auth,
    tls_on_plaintext_hint,
)
from .authn import ANONYMOUS, FailureLimiter, SaslSession
from .authz import FILTERED_APIS, AclCheck
from .broker import Broker
from .clock import node_ms
from .config import NodeConfig
from .connection import run_connection
from .consumer_fetch_session import FINAL_EPOCH
from .fetch_session import FetchSession
from .logfmt import EventLog
from .metrics import NodeMetrics
from .outbox import Deferred, Outbox
from .plaintext_refusal import peek_head, refuse_plaintext
from .purgatory import Delayed, Purgatory
from .replica_manager import ReplicaManager
from .routes import ROUTES, SERVED_APIS, Mode
from .sockio import accept_loop, listen, tls_handshake
from .sockio import recv_into as _recv
from .sockio import tls_recv_into as _tls_recv

RECV_BYTES = 256 * 1024
#: Coalesced response bytes after which we send even if more requests are buffered.
MAX_PENDING_SEND_BYTES = 4 * 1024 * 1024
#: Connections served at once per listener; further ones are accepted and closed at
#: once (and so are those over max.connections.per.ip: node/admission.py).
MAX_CONNECTIONS = 4096
#: Requests handled from one connection before yielding to others (fairness).
MAX_REQUESTS_PER_TURN = 256
#: Parked requests of one connection (acks=all produces waiting for replication,
#: long-poll fetches) at once; the reader stops reading that connection while this
#: many wait (Kafka's clients keep <= 5 requests in flight).
MAX_DEFERRED_PER_CONNECTION = 64
#: File slices smaller than this are read and coalesced instead of sendfile'd.
SENDFILE_MIN_BYTES = 64 * 1024
#: A TLS handshake or a SASL exchange must finish within this long.
HANDSHAKE_TIMEOUT_S = 10.0
AUTH_TIMEOUT_S = 30.0


def next_request_frame(decoder, pre_auth: bool):
    """The decoder's next frame; before authentication a bad or oversized frame is a
    failed authentication (closed and counted), after it a protocol error."""
    try:
        return decoder.next_frame()
    except RemoteProtocolError as e:
        if pre_auth:
            raise AuthenticationFailed(f"before SASL authentication: {e}") from None
        raise


def _version_probe(e: Exception) -> bool:
    """An API_VERSIONS of a version this node does not serve: answered (the client
    learns the versions and retries), also before authentication."""
    return (isinstance(e, BadRequest) and e.api == Api.API_VERSIONS
            and e.code is ErrorCode.UNSUPPORTED_VERSION)


class AuthenticationFailed(Exception):
    """The connection failed authentication: it is closed after the error answer.
    ``counted``: False when the node could not judge (not caught up yet)."""

    def __init__(self, message: str, counted: bool = True):
        super().__init__(message)
        self.counted = counted


class Guard:
    """A connection's security state: its listener, SASL session (SASL listeners) and
    principal; None on a PLAINTEXT connection of a node without ACLs."""

    __slots__ = ("listener", "sasl", "principal", "peer_ip", "auth_deadline")

    def __init__(self, listener: Listener, sasl: SaslSession | None, principal: str,
                 peer_ip: str):
        self.listener, self.sasl, self.principal, self.peer_ip = listener, sasl, principal, peer_ip
        self.auth_deadline = trio.current_time() + AUTH_TIMEOUT_S


class Conn:
    """One client connection as the purgatory sees it: where a parked request's answer
    goes, and the requests parked for it (dropped when it closes)."""

    __slots__ = ("sock", "out", "nursery", "parked", "guard", "session", "listener",
                 "last_active", "in_request", "heartbeat_of", "consumer_sessions")

    def __init__(self, sock, out: Outbox, nursery, guard: Guard | None = None,
                 listener: Listener | None = None) -> None:
        self.sock = sock
        self.out = out
        self.nursery = nursery
        self.parked: set[Delayed] = set()
        self.guard = guard
        self.listener = listener
        #: (idle timeout, node/connection.py) trio time of the last bytes received or
        #: answer made, and whether a request is being handled
        self.last_active = 0.0
        self.in_request = False
        #: a follower's fetch session on this connection (node/fetch_session.py)
        self.session: FetchSession | None = None
        #: whether a consumer's fetch session was opened on this connection (they are
        #: closed with it, node/consumer_fetch_session.py)
        self.consumer_sessions = False
        #: the broker whose heartbeats this connection carries (the controller is told
        #: when it closes: a crash is seen at once, node/heartbeat.py)
        self.heartbeat_of: int | None = None


class _Parked(Delayed):
    """A request parked for a connection: its answer fills a Deferred place."""

    __slots__ = ("server", "conn", "req", "place", "started")

    def __init__(self, server: Server, conn: Conn, req, deadline: float):
        super().__init__(server.purgatory, deadline)
        self.server, self.conn, self.req = server, conn, req
        self.place: Deferred | None = None
        self.started = perf_counter()  # (request latency metric)

    def park(self) -> None:
        """Take this request's place among the connection's answers and start its timer."""
        self.place = self.conn.out.add_deferred()
        self.conn.parked.add(self)
        self.purgatory.park(self)

    def answer(self, header: dict, pieces: list) -> None:
        self.conn.parked.discard(self)
        self.server.metrics.request_done(self.req.api, perf_counter() - self.started)
        header["id"] = self.req.id
        header["error"] = 0
        self.server.send_soon(self.conn, self.place, _response_pieces(header, pieces))

    def fail(self, e: Exception) -> None:
        self.conn.parked.discard(self)
        self.server.metrics.request_done(self.req.api, perf_counter() - self.started, True)
        if isinstance(e, ApiError):
            frame = encode_frame(error_response(self.req.id, e.code, e.message))
        else:
            frame = encode_frame(error_response(self.req.id, ErrorCode.UNKNOWN_SERVER_ERROR,
                                                repr(e)))
        self.server.send_soon(self.conn, self.place, [frame])

    def cancel(self) -> None:
        self.conn.parked.discard(self)
        super().cancel()


class ParkedFetch(_Parked):
    """A long-poll fetch: answered once min_bytes are there, an error shows, or max_wait
    passes. Consumers wake on the high watermark, followers on the log end offset."""

    __slots__ = ()

    def try_complete(self, expired: bool) -> bool:
        replicas, req = self.server.replicas, self.req
        headers, pieces, total, error = replicas.fetch_once(req)
        if error or total >= req.fields["min_bytes"] or expired or not self.rewatch():
            replicas.fetch_answered(req, headers, pieces, total)
            self.answer({"parts": headers}, pieces)
            return True
        return False

    def rewatch(self) -> bool:
        """Watch the partitions again (a wake empties their waiter sets)."""
        self.unwatch()
        hosted = self.server.replicas.partitions
        parts = [hosted.get((t, p)) for t, p, *_ in self.req.fields["parts"]]
        if any(p is None for p in parts):
            return False
        return self.watch(parts, leo=self.req.fields["replica_id"] >= 0)


class ParkedSessionFetch(_Parked):
    """A follower's session fetch with nothing to send yet: woken when a partition of
    the session gets data (or changes role), answered with every row of news
    gathered meanwhile, or when max_wait passes."""

    __slots__ = ("session", "held")

    def __init__(self, server, conn, req, deadline, session: FetchSession, held: list):
        super().__init__(server, conn, req, deadline)
        self.session, self.held = session, held

    def try_complete(self, expired: bool) -> bool:
        headers, pieces, total, error = self.server.replicas.fetch_session_once(
            self.session, self.req.fields["max_bytes"])
        if headers:
            fresh = {(h.topic, h.partition) for h in headers}
            self.held = [h for h in self.held if (h.topic, h.partition) not in fresh] + headers
        if error or total >= self.req.fields["min_bytes"] or expired:
            _session_sent(self.session, self.held)
            self.server.metrics.replication_bytes_out += total
            self.answer({"parts": self.held}, pieces)
            return True
        return False

    def finish(self) -> None:
        if self.session.waiter is self:
            self.session.waiter = None
        super().finish()


class ParkedConsumerSessionFetch(_Parked):
    """A consumer's session fetch (node/consumer_fetch_session.py) with too little to
    send yet: woken by a mark of its session (a high watermark or role move of one of
    its partitions), answered with the rows of news gathered meanwhile once
    ``min_bytes`` are there or an error shows, or with what it has when max_wait
    passes. A later read of a partition replaces its earlier row.

    Another request on its connection (the consumer's next fetch, after a seek or a
    pause: client/consumer.py) answers it at once, *superseded*: without rows (the
    client drops that answer), its partitions read again by the next fetch."""

    __slots__ = ("session", "held", "superseded")

    def __init__(self, server, conn, req, deadline, session, held: dict):
        super().__init__(server, conn, req, deadline)
        #: {key: (header, piece or None, fetch offset)}
        self.session, self.held = session, held
        self.superseded = False

    def try_complete(self, expired: bool) -> bool:
        f, replicas = self.req.fields, self.server.replicas
        if self.superseded:
            session = self.session
            for key in self.held:  # (news again for the next fetch)
                sp = session.parts.get(key)
                if sp is not None:
                    sp.sent_hw = -1
                    session.dirty.add(key)
            self.answer({"parts": [], "session_id": session.session_id}, [])
            return True
        if not self.session.closed:
            room = max(f["max_bytes"] - _held_bytes(self.held), 1)
            _hold(self.held, *replicas.fetch_consumer_session_once(
                self.session, room, f["isolation_level"] == 1))
        total = _held_bytes(self.held)
        error = any(h.error for h, _p, _o in self.held.values())
        if not (expired or self.session.closed or error
                or (self.held and total >= f["min_bytes"])):
            return False
        headers, pieces, offsets = _unhold(self.held)
        replicas.count_consumer_answer(headers, pieces, offsets, total)
        self.answer({"parts": headers, "session_id": self.session.session_id}, pieces)
        return True

    def finish(self) -> None:
        if self.session.waiter is self:
            self.session.waiter = None
        super().finish()


def _hold(held: dict, headers: list, pieces: list, offsets: list, _total: int,
          _error: bool) -> None:
    it = iter(pieces)
    for h, off in zip(headers, offsets):
        held[(h.topic, h.partition)] = (h, next(it) if h.length else None, off)


def _held_bytes(held: dict) -> int:
    return sum(h.length for h, _p, _o in held.values())


def _unhold(held: dict) -> tuple[list, list, list]:
    headers, pieces, offsets = [], [], []
    for h, piece, off in held.values():
        headers.append(h)
        offsets.append(off)
        if piece is not None:
            pieces.append(piece)
    return headers, pieces, offsets


def _peer_host(conn: Conn) -> str:
    """The client's address of a connection ("" when the socket no longer knows it)."""
    if conn.guard is not None:
        return conn.guard.peer_ip
    try:
        return str(conn.sock.getpeername()[0])
    except OSError:
        return ""


def _close_session(conn: Conn) -> None:
    if conn.session is not None:
        conn.session.close()


def _session_sent(session: FetchSession, headers: list) -> None:
    for h in headers:
        if not h.error:
            session.sent((h.topic, h.partition), h.high_watermark, h.log_start_offset)


class ParkedProduce(_Parked):
    """An acks=all produce: answered once the HW passes every appended batch, leadership
    moves, or the request timeout passes."""

    __slots__ = ("results", "waits")

    def __init__(self, server, conn, req, deadline, results, waits):
        super().__init__(server, conn, req, deadline)
        self.results, self.waits = results, waits

    def try_complete(self, expired: bool) -> bool:
        replicas = self.server.replicas
        self.waits, failed = replicas.check_high_watermarks(self.waits, expired)
        if failed:
            replicas.mark_failed(self.results, failed)
        if self.waits:
            self.unwatch()
            self.watch([w[0] for w in self.waits])  # a full partition: the deadline answers
            return False
        self.answer({"parts": self.results}, [])
        return True


def _response_pieces(header: dict, pieces: list) -> list:
    """A response as Outbox pieces: one bytes object when small, or the frame head
    followed by file slices handed to sendfile."""
    if not pieces:
        return [encode_frame(header)]
    body_len = sum(len(p) if isinstance(p, bytes) else p.length for p in pieces)
    out = [encode_frame_head(header, body_len)]
    for p in pieces:
        if isinstance(p, bytes):
            out.append(p)
        elif p.length < SENDFILE_MIN_BYTES:
            out.append(p.read_bytes())
        else:
            out.append(p)
    return out


class Server:
    """One node's client-facing server."""

    def __init__(self, config: NodeConfig, broker: Broker, replicas: ReplicaManager,
                 metrics: NodeMetrics, events: EventLog):
        self.config = config
        #: the handlers answered at once or by a quorum write (node/broker.py)
        self.broker = broker
        #: the partitions: produce and fetch, which may park (node/replica_manager.py)
        self.replicas = replicas
        #: the node's counters (node/metrics.py)
        self.metrics = metrics
        self.events = events
        self.connections = 0
        self.listeners: list = []
        self.purgatory = Purgatory()
        self.purgatory.on_error = self._parked_failed
        #: {api: (mode, bound handler)} from the one table in routes.py
        self._routes = {api: (r.mode, self._bind(r)) for api, r in ROUTES.items()}
        #: security (issue 19): credentials and ACLs, TLS, failed-auth limits
        self.security = getattr(broker, "security", None)
        self._ssl_context = None
        self.failures = FailureLimiter(
            config.connection_failed_authentication_max,
            block_s=config.connection_failed_authentication_block_ms / 1000,
            max_failures_per_address=config.failed_logins_per_address_max)
        #: open connections per client address, all listeners (Kafka's too) together
        self.quota = ConnectionQuota(config.max_connections_per_ip,
                                     config.max_connections_per_ip_overrides)
        #: one line per address and minute about refused connections and wrong ports
        self.log_limiter = LogLimiter()
        #: where Kafka clients go (set by the Kafka listener once bound; hints only)
        self.kafka_address: str | None = None
        #: ``(broker_id) -> None``, told when a connection that carried that broker's
        #: heartbeats closes (node/heartbeat.py: crash detection); set by the node
        self.on_heartbeat_lost = None
        #: {listener name: bound (host, port)}
        self.bound: dict[str, tuple] = {}

    def _bind(self, route):
        if route.handler == "sasl":
            return None  # handled by _security_gate
        if route.handler.startswith("security."):
            return lambda req: getattr(self.broker.security, route.handler[9:])(req)
        return getattr(self if route.mode in (Mode.PARKS, Mode.AWAITS) else self.broker,
                       route.handler)

    def _parked_failed(self, op, e: Exception) -> None:
        self.events.error("handler_failed", api=op.req.api.name, error=repr(e))
        op.fail(e)

    async def serve(self, *, task_status=trio.TASK_STATUS_IGNORED) -> None:
        """Listen on every configured listener; started() with the first one's address."""
        c = self.config
        listeners = c.listener_config.listeners
        kafka_tls = c.kafka_port is not None and c.kafka_protocol.tls  # (kafka/server.py)
        if kafka_tls or any(x.protocol.tls for x in listeners):
            self._ssl_context = server_context(
                c.ssl_keystore_location, c.ssl_key_location, password=c.ssl_key_password,
                cafile=c.ssl_truststore_location, client_auth=c.ssl_client_auth)
        socks = []
        try:
            for x in listeners:
                sock = listen(x.host, x.port, f"listeners: {x.name}")
                socks.append(sock)
                addr = sock.getsockname()
                self.bound[x.name] = addr[:2]
                self.events.info("listening", host=addr[0], port=addr[1], listener=x.name,
                                 protocol=x.protocol.value)
            async with trio.open_nursery() as nursery:
                nursery.start_soon(self.purgatory.run)
                for x, sock in zip(listeners, socks):
                    nursery.start_soon(accept_loop, sock, functools.partial(self._accepted, x),
                                       self.events, nursery)
                task_status.started(socks[0].getsockname())
        finally:
            for sock in socks:
                trio.lowlevel.notify_closing(sock)
                sock.close()

    async def _accepted(self, listener: Listener, sock, peer) -> None:
        await self._handle(sock, f"{peer[0]}:{peer[1]}", listener)

    def admit(self, ip: str, open_on_listener: int, listener: str) -> bool:
        """May a connection just accepted from ``ip`` be served (its TLS handshake not
        begun)? True: counted in the per-address quota (``quota.release(ip)`` when it
        closes). False: refused (logged at most once per address and minute)."""
        if open_on_listener >= MAX_CONNECTIONS:
            key, reason = ("all", listener), (
                f"{MAX_CONNECTIONS} connections are open on this listener")
        elif not self.quota.try_acquire(ip):
            key, reason = ("ip", ip), (
                f"{self.quota.limit(ip)} connections from this address are open "
                "(max.connections.per.ip, max.connections.per.ip.overrides)")
        else:
            return True
        self.log_limited(key, "connection_refused", peer=ip, listener=listener, reason=reason)
        return False

    def log_limited(self, key, event: str, **fields) -> None:
        """A warning logged at most once per ``key`` and minute; the next one tells how
        many were left out."""
        limiter = self.log_limiter
        if limiter.allow(key, trio.current_time()):
            left_out = limiter.take_suppressed(key)
            if left_out:
                fields["not_logged_since_last"] = left_out
            self.events.warning(event, **fields)

    def native_address(self, listener: Listener | None) -> str:
        name = listener.name if listener is not None else next(iter(self.bound), None)
        host, port = self.bound.get(name, self.config.advertised)
        return f"{bracket(host)}:{port}"

    def _kafka_hint(self, listener: Listener | None) -> str:
        c = self.config
        kafka = self.kafka_address
        if kafka is None and c.kafka_port is not None:
            host, port = c.kafka_advertised or (c.kafka_host or "", c.kafka_port)
            kafka = f"{bracket(host)}:{port}"
        return kafka_on_native_hint(self.native_address(listener), kafka)

    async def _handle(self, sock, peer: str, listener: Listener | None = None) -> None:
        sock.setblocking(False)
        peer_ip = peer.rpartition(":")[0]
        # (an address or user blocked after failed logins is refused at its SASL step,
        # told for how long: authn.FailureLimiter.check_login)
        if not self.admit(peer_ip, self.connections, listener.name if listener else ""):
            sock.close()
            return
        self.connections += 1
        try:
            guard = None
            if listener is not None and (listener.protocol.tls or listener.protocol.sasl
                                         or self.config.authorizer_enable):
                secured, guard = await self._secure(sock, peer, listener)
                if secured is None:
                    return
                sock = secured  # (wrapping detached the plain socket)
            await self._serve_connection(sock, peer, guard, listener)
        except WrongProtocol as e:
            self.log_limited(("wrong_protocol", "native", peer_ip), "wrong_protocol", peer=peer,
                             hint=e.hint)
        except AuthenticationFailed as e:
            log = self.events.warning if e.counted else self.events.info
            log("authentication_failed", peer=peer, reason=str(e))
            if e.counted:
                self.record_failed_login(peer_ip, guard)
        except RemoteProtocolError as e:
            self.events.warning("connection_closed", peer=peer, reason=str(e))
        except (ConnectionError, BrokenPipeError, trio.ClosedResourceError):
            pass
        except OSError as e:
            self.events.warning("connection_error", peer=peer, error=e)
        finally:
            self.connections -= 1
            self.quota.release(peer_ip)
            if sock.fileno() != -1:
                trio.lowlevel.notify_closing(sock)
                sock.close()

    def record_failed_login(self, peer_ip: str, guard: Guard | None,
                            listener: str | None = None) -> None:
        """Count a failed login from ``peer_ip`` as the user the client named, if any
        (authn.FailureLimiter); log when it blocks."""
        user = guard.sasl.user if guard is not None and guard.sasl is not None else None
        if self.failures.record_failure(peer_ip, trio.current_time(), user):
            extra = {"user": user} if user is not None else {}
            if listener is not None:
                extra["listener"] = listener
            self.events.warning("address_blocked", peer=peer_ip, **extra,
                                reason="too many failed logins")

    async def _secure(self, sock, peer: str, listener: Listener):
        """(socket, Guard): TLS-wrapped and handshaken on SSL listeners. (None, None)
        when the handshake fails (logged; the socket is closed)."""
        principal = ANONYMOUS
        if listener.protocol.tls:
            deadline = trio.current_time() + HANDSHAKE_TIMEOUT_S
            head = b""
            with trio.move_on_at(deadline):
                head = await peek_head(sock)
            if head and not looks_tls(head):  # plaintext: answered with what to do
                kind, hint = await refuse_plaintext(sock, head, listener.name,
                                                    listener.protocol.value)
                self.log_limited(("plaintext_on_tls", peer.rpartition(":")[0]),
                                 "plaintext_on_tls_listener", peer=peer,
                                 listener=listener.name, client=kind, hint=hint)
                sock.close()
                return None, None
            tls_sock = self._ssl_context.wrap_socket(sock, server_side=True,
                                                     do_handshake_on_connect=False)
            try:
                with trio.fail_at(deadline):
                    await tls_handshake(tls_sock)
            except (OSError, trio.TooSlowError) as e:
                reason = ("timed out" if isinstance(e, trio.TooSlowError)
                          else describe_handshake_error(e, "the client"))
                self.events.warning("tls_handshake_failed", peer=peer, listener=listener.name,
                                    reason=reason)
                trio.lowlevel.notify_closing(tls_sock)
                tls_sock.close()
                return None, None
            sock = tls_sock
            principal = principal_from_cert(tls_sock.getpeercert()) or ANONYMOUS
        sasl = None
        if listener.protocol.sasl:
            security = self.broker.security
            clock, peer_ip = trio.lowlevel.current_clock(), peer.rpartition(":")[0]
            sasl = SaslSession(self.config.sasl_enabled_mechanisms, security.credential,
                               fake_secret=security.fake_scram_secret,
                               admit=lambda user: self.failures.check_login(
                                   peer_ip, user, clock.current_time()))
            principal = None
        return sock, Guard(listener, sasl, principal, peer.rpartition(":")[0])

    async def _serve_connection(self, sock, peer: str, guard: Guard | None = None,
                                listener: Listener | None = None) -> None:
        """The connection's reader, plus a task per answer that could not be sent at
        once (a full socket), owned by one nursery (node/connection.py). Requests
        parked in the purgatory are dropped when the connection ends; an idle one is
        closed after connections.max.idle.ms."""
        sasl = guard is not None and guard.sasl is not None
        await run_connection(
            sock, lambda nursery: Conn(sock, Outbox(), nursery, guard, listener),
            self._read_loop,
            watchdog=(lambda conn: self._auth_watchdog(conn, peer)) if sasl else None,
            on_close=self._closed, idle_s=self.config.connections_max_idle_ms / 1000,
            on_idle=lambda conn: self.events.debug("connection_idle_closed", peer=peer))

    def _closed(self, conn: Conn) -> None:
        _close_session(conn)
        if conn.consumer_sessions:  # (a consumer's fetch sessions die with its connection)
            self.replicas.consumer_sessions.close_owned_by(conn)
        if conn.heartbeat_of is not None and self.on_heartbeat_lost is not None:
            self.on_heartbeat_lost(conn.heartbeat_of)

    async def _read_loop(self, conn: Conn) -> None:
        sock, out = conn.sock, conn.out
        sasl = conn.guard.sasl if conn.guard is not None else None
        pre_auth = sasl is not None and not sasl.authenticated
        decoder = FrameDecoder(self.config.max_frame_bytes, REQUEST_HEADER_ENTRIES_MAX)
        if pre_auth:  # SASL handshake frames only until authenticated
            limit_frames_before_auth(decoder)
        recv = _tls_recv if conn.guard is not None and conn.guard.listener.protocol.tls else _recv
        buf = bytearray(RECV_BYTES)
        run_ready = self.purgatory.run_ready
        trace = self.replicas.trace
        sniffing = True
        while True:
            data, waited = await recv(sock, buf)
            if not data:
                return
            conn.last_active = trio.current_time()
            if trace is not None:
                self.replicas.trace_read_ns = time.monotonic_ns()
            decoder.receive_data(data)
            if sniffing and decoder.buffered >= SNIFF_BYTES:
                sniffing = False
                head = decoder.head(SNIFF_BYTES)
                if sniff(head) == KAFKA:
                    raise WrongProtocol(self._kafka_hint(conn.listener))
                if looks_client_hello(head):  # (a TLS listener's arrive decrypted here)
                    raise WrongProtocol(tls_on_plaintext_hint(self.native_address(conn.listener)))
            handled = 0
            while True:
                frame = next_request_frame(decoder, pre_auth)
                if frame is None:
                    break
                while out.deferred and (out.deferred >= MAX_DEFERRED_PER_CONNECTION
                                        or out.size >= MAX_PENDING_SEND_BYTES):
                    await out.room.wait()  # bounded: a client pipelining past the limit waits
                if conn.parked:
                    self._answer_parked_follower_fetches(conn)
                conn.in_request = True
                await self._dispatch(frame, conn)
                conn.in_request = False
                conn.last_active = trio.current_time()
                if pre_auth and sasl.authenticated:
                    pre_auth = False
                    lift_frame_limit(decoder, self.config.max_frame_bytes)
                handled += 1
                if out.size >= MAX_PENDING_SEND_BYTES or handled >= MAX_REQUESTS_PER_TURN:
                    run_ready()
                    await out.flush(sock)
                    handled = 0
            # Requests this turn woke (a consumer's fetch after an append, an acks=all
            # produce after a follower's fetch) are answered before this turn's own.
            run_ready()
            if out.pieces:
                await out.flush(sock)
            if not waited:
                await trio.lowlevel.checkpoint()  # never blocked this turn: let others run

    def _answer_parked_follower_fetches(self, conn: Conn) -> None:
        """A follower's fetch parked on this connection is answered at once when the
        follower sends another request: its way to have partitions it starts to follow
        looked at without waiting out the long poll, nor dropping its connection and
        fetch session (node/fetcher.py, LeaderFetcher._call)."""
        for op in [op for op in conn.parked if isinstance(op, (ParkedFetch, ParkedSessionFetch))
                   and op.req.fields["replica_id"] >= 0]:
            self.purgatory.complete_now(op)
        # (so is a consumer's session fetch: ParkedConsumerSessionFetch)
        for op in [op for op in conn.parked if isinstance(op, ParkedConsumerSessionFetch)]:
            op.superseded = True
            self.purgatory.complete_now(op)

    def send_soon(self, conn: Conn, place: Deferred, pieces: list) -> None:
        """Fill a parked request's place and send what is ready now if the socket takes
        it; else a task of the connection sends it. Never blocks."""
        out = conn.out
        out.fill(place, pieces)
        conn.last_active = trio.current_time()  # (idle timeout: the wait is over)
        try:
            if out.try_send_now(conn.sock):
                return
        except OSError:
            trio.lowlevel.notify_closing(conn.sock)  # the reader's next wait raises
            return
        conn.nursery.start_soon(self._flush_task, conn)

    async def _flush_task(self, conn: Conn) -> None:
        try:
            await conn.out.flush(conn.sock)
        except Exception as e:  # the reader's next wait raises; it closes the connection
            if not isinstance(e, (OSError, trio.ClosedResourceError)):
                self.events.error("send_failed", error=repr(e))
            trio.lowlevel.notify_closing(conn.sock)

    async def _dispatch(self, frame, conn: Conn) -> None:
        out = conn.out
        guard = conn.guard
        pre_auth = guard is not None and guard.sasl is not None and not guard.sasl.authenticated
        try:
            req = parse_request(frame, SERVED_APIS)
        except (BadRequest, RemoteProtocolError) as e:
            if pre_auth and not _version_probe(e):
                # nothing but a well-formed SASL step before login: closed and counted
                raise AuthenticationFailed(f"malformed request before SASL authentication: "
                                           f"{getattr(e, 'message', e)}") from None
            if not isinstance(e, BadRequest):
                raise
            out.add(encode_frame(error_response(e.request_id, e.code, e.message)))
            return
        hidden = ()
        if guard is not None:
            try:
                if await self._security_gate(req, conn):
                    return
                narrowed = self._authorize(req, guard)
            except ApiError as e:
                out.add(encode_frame(error_response(req.id, e.code, e.message)))
                return
            if narrowed is not None:
                req = dataclasses.replace(req, fields=narrowed[0])
                hidden = narrowed[1]
        mode, handler = self._routes[req.api]
        if req.api is Api.BROKER_HEARTBEAT:  # (authorized: CLUSTER_ACTION)
            conn.heartbeat_of = req.fields.get("broker_id")
        if handler is None:  # SASL on a connection without security
            out.add(encode_frame(error_response(req.id, ErrorCode.ILLEGAL_SASL_STATE,
                                                "this listener does not use SASL")))
            return
        started = perf_counter()
        metrics = self.metrics
        try:
            if mode is Mode.PARKS:
                if req.api is Api.PRODUCE and req.fields["transactional_id"] is not None:
                    # KIP-890: the coordinator confirms the transactional batches'
                    # partitions first (it may take a call to another node)
                    if out.pieces:
                        await out.flush(conn.sock)
                    await self._verify_txn_produce(req)
                parked = len(conn.parked)
                answer = handler(req, conn)
                if answer is None:  # parked (answered later) or acks=0 (never answered)
                    if len(conn.parked) == parked:
                        metrics.request_done(req.api, perf_counter() - started)
                    return
                header, pieces = answer
            elif mode is Mode.INLINE:
                header, pieces = handler(req)
            elif mode is Mode.AWAITS:
                if out.pieces:  # it may wait: send earlier answers first
                    await out.flush(conn.sock)
                header, pieces = await handler(req, conn)
            else:  # QUORUM: a Raft commit, off the event loop
                header, pieces = await trio.to_thread.run_sync(handler, req)
                # what committed is served from the next request on (the commit
                # callback would reconcile soon; this makes it before the answer)
                self.replicas.reconcile()
        except ApiError as e:
            metrics.request_done(req.api, perf_counter() - started, True)
            out.add(encode_frame(error_response(req.id, e.code, e.message)))
            return
        except Exception as e:  # a bug of ours: answer, log, keep serving
            metrics.request_done(req.api, perf_counter() - started, True)
            self.events.error("handler_failed", api=req.api.name, error=repr(e))
            out.add(encode_frame(error_response(req.id, ErrorCode.UNKNOWN_SERVER_ERROR, repr(e))))
            return
        if guard is not None:
            header = self._filter(req, guard, header, hidden)
        metrics.request_done(req.api, perf_counter() - started)
        header["id"] = req.id
        header["error"] = 0
        for p in _response_pieces(header, pieces):
            if isinstance(p, bytes):
                out.add(p)
            else:
                out.add_slice(p)

    # ------------------------------------------------------------------ security

    async def _security_gate(self, req, conn: Conn) -> bool:
        """SASL steps and the before-authentication rule. True: the request was
        answered here. Raises AuthenticationFailed (after answering) to close."""
        guard = conn.guard
        sasl = guard.sasl
        if sasl is None:
            if req.api in (Api.SASL_HANDSHAKE, Api.SASL_AUTHENTICATE):
                raise ApiError(ErrorCode.ILLEGAL_SASL_STATE,
                               f"listener {guard.listener.name} is not a SASL listener")
            return False
        if sasl.authenticated and req.api not in (Api.SASL_HANDSHAKE, Api.SASL_AUTHENTICATE):
            return False
        try:
            if trio.current_time() > guard.auth_deadline:
                raise ApiError(ErrorCode.SASL_AUTHENTICATION_FAILED,
                               f"SASL authentication took longer than {AUTH_TIMEOUT_S:g}s")
            sasl.check_api(req.api)
            if req.api is Api.SASL_HANDSHAKE and not self.replicas.registered:
                # a restarted node replays the metadata log first: it cannot judge
                # credentials yet (retriable; not counted as a failed authentication)
                raise ApiError(ErrorCode.BROKER_NOT_AVAILABLE,
                               f"node {self.config.node_id} is starting: authenticate with "
                               "another node or retry")
            if req.api is Api.SASL_HANDSHAKE:
                header = sasl.handshake(req.fields["mechanism"])
            elif req.api is Api.SASL_AUTHENTICATE:
                # PLAIN derives a salted password (milliseconds of CPU): off the loop
                header = await trio.to_thread.run_sync(sasl.authenticate, req.fields["auth"])
                if sasl.authenticated:
                    guard.principal = sasl.principal
            else:
                return False  # API_VERSIONS before authentication
        except ApiError as e:
            await self._fail_auth(conn, req, e)
        header["id"] = req.id
        header["error"] = 0
        conn.out.add(encode_frame(header))
        return True

    async def _auth_watchdog(self, conn: Conn, peer: str) -> None:
        """Close a connection that has not authenticated within AUTH_TIMEOUT_S (it
        would hold a connection slot doing nothing)."""
        await trio.sleep_until(conn.guard.auth_deadline)
        if not conn.guard.sasl.authenticated:
            self.events.warning("authentication_failed", peer=peer,
                                reason=f"no SASL authentication within {AUTH_TIMEOUT_S:g}s")
            trio.lowlevel.notify_closing(conn.sock)  # the reader's next wait raises

    async def _fail_auth(self, conn: Conn, req, e: ApiError) -> None:
        """Answer ``e`` after the configured delay, flush, and close the connection."""
        delay = self.config.connection_failed_authentication_delay_ms / 1000
        if e.code in (ErrorCode.SASL_AUTHENTICATION_FAILED,) and delay:
            await trio.sleep(delay)
        conn.out.add(encode_frame(error_response(req.id, e.code, e.message)))
        try:
            with trio.move_on_after(1.0):
                await conn.out.flush(conn.sock)
        except (OSError, trio.ClosedResourceError):
            pass
        raise AuthenticationFailed(e.message, counted=e.code is not ErrorCode.BROKER_NOT_AVAILABLE)

    def _authorize(self, req, guard: Guard):
        """Check the request against the ACLs (ApiError when denied). Returns
        (fields, hidden topics) for a METADATA request naming hidden topics, else None."""
        if not self.config.authorizer_enable or guard.principal is None:
            return None
        route = ROUTES[req.api]
        check = AclCheck(guard.principal, self.broker.security.authorizer())
        check.check_route(req.api, route.acl, req.fields)
        if req.api is Api.METADATA:
            fields, hidden = check.metadata_request(req.fields)
            return (fields, hidden) if hidden else None
        return None

    def _filter(self, req, guard: Guard, header: dict, hidden) -> dict:
        if req.api in (Api.METADATA, Api.DESCRIBE_CLUSTER) and len(self.bound) > 1:
            header["brokers"] = self.broker.brokers_for_listener(
                header.get("brokers", ()), guard.listener.name, self.bound)
        if (self.config.authorizer_enable and guard.principal is not None
                and req.api in FILTERED_APIS):
            check = AclCheck(guard.principal, self.broker.security.authorizer())
            header = check.filter_response(req.api, header, hidden or ())
        return header

    # ------------------------------------------------------------------ PARKS / AWAITS handlers

    def produce(self, req, conn: Conn):
        """acks=all parks until replicated (later requests of the connection go on);
        acks=1 parks until the leader's sync when a partition is durable
        (``write.caching=false``); acks 0 and other acks=1 are answered at once (acks=0:
        not at all)."""
        if req.fields["acks"] == -1 or (req.fields["acks"] == 1 and self._durable(req)):
            results, waits, deadline = self.replicas.produce_acks_all_append(req)
            if waits:
                op = ParkedProduce(self, conn, req, deadline, results, waits)
                op.watch([w[0] for w in waits])  # a full partition: the deadline answers
                op.park()
                return None
            return {"parts": results}, []
        answer = self.broker.produce(req)
        return None if req.fields["acks"] == 0 else answer

    async def metadata(self, req, conn: Conn):
        """Metadata: the unknown topics it may auto-create are created first, in a worker
        thread (Broker.auto_create_for_metadata: quorum writes, the principal's CREATE);
        then the answer from the metadata as it now is."""
        guard = conn.guard
        acl = None
        if (guard is not None and self.config.authorizer_enable
                and guard.principal is not None):
            acl = AclCheck(guard.principal, self.broker.security.authorizer())
        created = await self.broker.auto_create_for_metadata(req, acl)
        return self.broker.metadata(req, created)

    async def init_producer_id(self, req, conn: Conn):
        if req.fields["transactional_id"] is not None:
            return await self._txn().init_producer_id(req.fields), []
        return await self.broker.producer_ids.init_producer_id(req.fields), []

    def _txn(self):
        if self.broker.txn is None:
            raise ApiError(ErrorCode.COORDINATOR_NOT_AVAILABLE, "the node is starting")
        return self.broker.txn

    async def txn_offset_commit(self, req, conn: Conn):
        """TXN_OFFSET_COMMIT, at the group's coordinator (node/coordinator.py)."""
        if self.broker.groups is None:
            raise ApiError(ErrorCode.COORDINATOR_NOT_AVAILABLE, "the node is starting")
        return await self.broker.groups.txn_offset_commit(req.fields), []

    async def txn_api(self, req, conn: Conn):
        """ADD_PARTITIONS_TO_TXN, END_TXN, WRITE_TXN_MARKERS (node/txn_host.py)."""
        return await self._txn().handle(req.api, req.fields), []

    async def _verify_txn_produce(self, req) -> None:
        from raftlog.protocol import split_body

        if self.broker.txn is None:
            return  # (refused by the produce: nothing verified)
        parts = req.fields["parts"]
        try:
            datas = split_body(req.body, [n for _t, _p, n in parts])
        except ValueError:
            return  # (the produce answers the bad body)
        await self.broker.txn.verify_produce(req.fields["transactional_id"], parts, datas)

    def _durable(self, req) -> bool:
        return self.replicas.any_durable(req.fields["parts"])

    async def group_api(self, req, conn: Conn):
        if self.broker.groups is None:
            raise ApiError(ErrorCode.COORDINATOR_NOT_AVAILABLE, "the node is starting")
        fields = req.fields
        if req.api is Api.FIND_COORDINATOR and fields.get("key_type") == 1:
            return self._txn().locate(fields["key"]), []
        if req.api is Api.JOIN_GROUP:  # DescribeGroups shows the member's host, as Kafka
            fields = {**fields, "client_host": _peer_host(conn)}
        return await self.broker.groups.service.handle(req.api, fields), []

    def fetch(self, req, conn: Conn):
        """(header, pieces) answered now, or None: parked in the purgatory."""
        f = req.fields
        if f["session"]:
            return self._session_fetch(req, conn)
        if (f["replica_id"] < 0 and (f["session_id"] or f["session_epoch"] != FINAL_EPOCH)
                and self.replicas.consumer_sessions.slots > 0):
            return self._consumer_session_fetch(req, conn)
        if req.fields["replica_id"] >= 0:
            self.replicas.on_replica_fetch(req)
        headers, pieces, total, error = self.replicas.fetch_once(req)
        if error or total >= req.fields["min_bytes"] or req.fields["max_wait_ms"] == 0:
            self.replicas.fetch_answered(req, headers, pieces, total)
            return {"parts": headers}, pieces
        op = ParkedFetch(self, conn, req, trio.current_time() + req.fields["max_wait_ms"] / 1000)
        if not op.rewatch():  # a partition is gone or has no room for waiters: answer now
            op.cancel()
            self.replicas.fetch_answered(req, headers, pieces, total)
            return {"parts": headers}, pieces
        op.park()
        return None

    def _consumer_session_fetch(self, req, conn: Conn):
        """A consumer's fetch in a fetch session (KIP-227's, on the Kafka listener's
        code, node/consumer_fetch_session.py): opens one (epoch 0), closes one (epoch
        -1: a fetch without one) or uses one -- its partitions updated by what the fetch
        names and forgets, the marked ones read, and only rows with news answered. The
        answer header carries ``session_id`` (0: none; the client fetches in full)."""
        f = req.fields
        cache = self.replicas.consumer_sessions
        session, code = cache.begin(f["session_id"], f["session_epoch"], node_ms(), conn)
        if code:
            raise ApiError(ErrorCode(code), "no such fetch session here (evicted, or its "
                           "connection closed): send a full fetch"
                           if code == ErrorCode.FETCH_SESSION_ID_NOT_FOUND else
                           "not the epoch the fetch session expects: send a full fetch")
        if session is None:  # (epoch -1, or every slot busy: a full fetch without one)
            fields = {**f, "session_id": 0, "session_epoch": FINAL_EPOCH}
            return self.fetch(dataclasses.replace(req, fields=fields), conn)
        if session.waiter is not None:  # one fetch of a session at a time
            raise ApiError(ErrorCode.INVALID_REQUEST, "a fetch of this session is parked")
        conn.consumer_sessions = True
        session.apply(f["parts"], f["forgotten"], self.replicas.partitions.get,
                      self.replicas.partitions_version)
        if conn.guard is not None and self.config.authorizer_enable:
            # (the partitions kept from earlier fetches too: an ACL removed since applies)
            topics = {t for t, _p in session.parts}
            try:
                self._authorize(dataclasses.replace(req, fields={**f, "parts": [
                    [t, 0, 0, 0, -1] for t in sorted(topics)]}), conn.guard)
            except ApiError:
                cache.close(session.session_id)
                raise
        held: dict = {}
        headers, pieces, offsets, total, error = self.replicas.fetch_consumer_session_once(
            session, f["max_bytes"], f["isolation_level"] == 1)
        if (headers and (error or total >= f["min_bytes"])) or f["max_wait_ms"] == 0:
            self.replicas.count_consumer_answer(headers, pieces, offsets, total)
            return {"parts": headers, "session_id": session.session_id}, pieces
        _hold(held, headers, pieces, offsets, total, error)
        op = ParkedConsumerSessionFetch(self, conn, req,
                                        trio.current_time() + f["max_wait_ms"] / 1000,
                                        session, held)
        session.waiter = op
        op.park()
        return None

    def _session_fetch(self, req, conn: Conn):
        """A follower's fetch through its session on this connection (full: a new one)."""
        f = req.fields
        replica = f["replica_id"]
        if replica < 0:
            raise ApiError(ErrorCode.INVALID_REQUEST, "fetch sessions are for replicas")
        session = conn.session
        if f["session"] == FETCH_SESSION_FULL:
            if session is not None:
                session.close()
            session = conn.session = FetchSession(replica)
            self.metrics.fetch_sessions_created += 1
        elif session is None or session.replica != replica:
            raise ApiError(ErrorCode.INVALID_REQUEST,
                           "no fetch session on this connection: send a full fetch")
        if session.waiter is not None:  # one fetch of a session at a time
            raise ApiError(ErrorCode.INVALID_REQUEST, "a fetch of this session is parked")
        session.update(f["parts"], f["forgotten"], self.replicas.partitions.get)
        session.last_fetch_ms = node_ms()
        self.replicas.on_replica_fetch(req, session)
        headers, pieces, total, error = self.replicas.fetch_session_once(session, f["max_bytes"])
        if error or total >= f["min_bytes"] or f["max_wait_ms"] == 0:
            _session_sent(session, headers)
            self.metrics.replication_bytes_out += total
            return {"parts": headers}, pieces
        op = ParkedSessionFetch(self, conn, req, trio.current_time() + f["max_wait_ms"] / 1000,
                                session, headers)
        session.waiter = op
        op.park()
        return None
