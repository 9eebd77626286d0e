"""The Kafka wire-protocol listener (``kafka.listener=[PROTOCOL://]HOST:PORT``; off by default).

Security is the native listeners' (docs/security.md): TLS (SSL, SASL_SSL) through the
native server's ``_secure``, SASL (SaslHandshake, SaslAuthenticate) through the same
SaslSession, failure limiter and auth watchdog, and with ACLs on, each request carries
the connection's principal (Context.acl) to the handlers' authorization choke point.

A second codec in front of the same node: frames are split and decoded by
raftlog.kafka.wire (sans-IO), each request is answered by node/kafka/handlers.py,
which calls the broker and group coordinator the native server calls.

Per connection, requests are handled in order and answered in order, on a plain
non-blocking socket (node/sockio.py) with the native server's Outbox: a trio
SocketStream costs two scheduler checkpoints per call, which the latency of a small
produce or a tailing fetch feels. A Produce (acks=all) waiting for the ISR and a Fetch
waiting for data park in the node's purgatory (node/purgatory.py), as the native
server's do: completed in the turn that moves their partition (a follower's fetch that
advances the high watermark), not by a task of their own; their answers keep their
place (a Deferred) while the connection's next requests are read and handled. Any other
request that waits (a rebalance, a metadata write) holds the connection's reading, as
a Kafka broker does, after the answers already ready are sent.

What a client sends never takes the node down:

* an API or version outside what ApiVersions advertises gets an UNSUPPORTED_VERSION
  answer (a full ApiVersions v0 response for ApiVersions, else the correlation id and
  the error code) and the connection stays open;
* a frame that does not decode (lying lengths, garbage, over ``max.frame.bytes``)
  closes that connection only, with a warning in the node's log; before SASL login
  frames are at most 64 KiB, and a bad one is a failed authentication (counted);
* a raftlog (native) client on this port is closed with one hint per address and
  minute naming the native listener (raftlog/wire_sniff.py);
* connections are counted per client address at accept, with the native listeners
  (``max.connections.per.ip``), and closed after ``connections.max.idle.ms`` idle;
* a handler bug answers nothing, closes that connection and logs ``kafka_handler_failed``.
"""

from __future__ import annotations

import struct

import trio

from raftlog.errors import ApiError, ErrorCode
from raftlog.kafka.errors import KAFKA, to_kafka
from raftlog.kafka.wire import (
    API_VERSIONS_KEY,
    SUPPORTED,
    FrameDecoder,
    KafkaDecodeError,
    UnsupportedRequest,
    decode_request,
    encode_response,
    encode_response_pieces,
)
from raftlog.listeners import Listener, SecurityProtocol
from raftlog.wire_sniff import NATIVE, SNIFF_BYTES, looks_client_hello, sniff

from ..admission import (
    ConnectionQuota,
    LogLimiter,
    WrongProtocol,
    bracket,
    lift_frame_limit,
    limit_frames_before_auth,
    native_on_kafka_hint,
    tls_on_plaintext_hint,
)
from ..authn import FailureLimiter
from ..authz import AclCheck
from ..connection import run_connection
from ..outbox import Deferred, Outbox
from ..purgatory import Delayed
from ..server import AUTH_TIMEOUT_S, AuthenticationFailed, Guard, next_request_frame
from ..sockio import accept_loop, listen, recv_into, tls_recv_into
from .handlers import Context, KafkaApis, Wait

RECV_BYTES = 256 * 1024
#: Connections served at once; further ones are accepted and closed at once (and so
#: are those over max.connections.per.ip: node/admission.py, shared with the native
#: listeners).
MAX_CONNECTIONS = 4096
#: Requests of one connection read but not yet answered (acks=all produces waiting for
#: replication among them); the reader stops reading that connection at this many.
MAX_IN_FLIGHT = 64
PRODUCE_KEY, FETCH_KEY = 0, 1
#: Worker threads decoding large requests and encoding large fetch answers at once.
WORKER_THREADS_MAX = 2
#: A request payload larger than this is decoded in a worker thread (up to 10,000
#: entries or a 100 MiB records copy: tens of milliseconds of Python).
DECODE_INLINE_BYTES_MAX = 64 * 1024
#: A fetch session's answer with more partition rows than this is encoded in a worker
#: thread (a full fetch that opens a session for many partitions); smaller ones inline.
FETCH_ROWS_INLINE = 500
SASL_HANDSHAKE_KEY, SASL_AUTHENTICATE_KEY = 17, 36
_SASL_KEYS = (SASL_HANDSHAKE_KEY, SASL_AUTHENTICATE_KEY)
_UNSUPPORTED = KAFKA["UNSUPPORTED_VERSION"]


class _Conn:
    """One Kafka client connection: its socket, answers, task nursery, the requests
    it has parked in the purgatory (dropped when it closes) and its security state
    (``guard``: None on a PLAINTEXT listener of a node without ACLs)."""

    __slots__ = ("sock", "out", "nursery", "parked", "guard", "raw_sasl", "last_active",
                 "in_request")

    def __init__(self, sock, out: Outbox, nursery, guard: Guard | None = None):
        self.sock, self.out, self.nursery = sock, out, nursery
        self.parked: set = set()
        self.guard = guard
        #: (idle timeout, node/connection.py) trio time of the last bytes received or
        #: answer made, and whether a request is being handled
        self.last_active = 0.0
        self.in_request = False
        #: after a SaslHandshake v0 the client sends bare SASL tokens (no Kafka header)
        self.raw_sasl = False


class _KafkaParked(Delayed):
    """A Kafka Produce (acks=all) or Fetch waiting in the node's purgatory; its answer
    keeps its place among the connection's answers."""

    __slots__ = ("server", "conn", "header", "wait", "req", "place")

    def __init__(self, server, conn: _Conn, header, wait: Wait):
        super().__init__(server.purgatory, wait.deadline)
        self.server, self.conn, self.header, self.wait = server, conn, header, wait
        self.req = wait.req  # (the purgatory's error report names its API)
        self.place: Deferred | None = None

    def try_complete(self, expired: bool) -> bool:
        apis = self.server.apis
        check = apis.produce_check if self.wait.kind == "produce" else apis.fetch_check
        body = check(self.wait, expired)
        if body is None:
            self.unwatch()
            if self.watch(self.wait.parts):
                return False
            body = check(self.wait, True)  # no room to wait on a partition: answer now
        h = self.header
        body = apis.finish(h.api_key, h.api_version, body, self.wait.note)
        self._send(encode_response_pieces(h.api_key, h.api_version, h.correlation_id, body))
        return True

    def fail(self, e: Exception) -> None:
        """A bug of ours while completing: logged; the connection closes."""
        h = self.header
        self.server.events.error("kafka_handler_failed", api=h.api_key, version=h.api_version,
                                 error=repr(e))
        self.conn.parked.discard(self)
        self.conn.nursery.cancel_scope.cancel()

    def cancel(self) -> None:
        self.conn.parked.discard(self)
        super().cancel()

    def _send(self, pieces: list) -> None:
        conn = self.conn
        conn.parked.discard(self)
        conn.out.fill(self.place, pieces)
        conn.last_active = trio.current_time()  # (idle timeout: the wait is over)
        try:
            if conn.out.try_send_now(conn.sock):
                return
        except OSError:
            conn.nursery.cancel_scope.cancel()
            return
        conn.nursery.start_soon(_flush, conn)


async def _flush(conn: _Conn) -> None:
    try:
        await conn.out.flush(conn.sock)
    except OSError:
        conn.nursery.cancel_scope.cancel()


class KafkaServer:
    """One node's Kafka listener over its broker."""

    def __init__(self, config, broker, replicas, events, purgatory=None, native=None):
        self.config = config
        self.broker = broker
        self.replicas = replicas
        self.events = events
        #: the node's purgatory (the native server's): where waiting Produce (acks=all)
        #: and Fetch requests park
        self.purgatory = purgatory
        #: the native server (node/server.py): its TLS context, SASL sessions, auth
        #: watchdog and per-address failed-authentication limiter serve this listener too
        self.native = native
        self.failures = native.failures if native is not None else FailureLimiter()
        self.listener = Listener("KAFKA", config.kafka_protocol, config.kafka_host or "",
                                 config.kafka_port or 0)
        self.connections = 0
        self.address: tuple[str, int] | None = None
        #: without a native server (unit tests): this listener's own quota and log limiter
        self._own_quota = ConnectionQuota(config.max_connections_per_ip,
                                          config.max_connections_per_ip_overrides)
        self._own_log = LogLimiter()
        self.apis = KafkaApis(broker, replicas, config, self.kafka_address)
        #: large requests decoded and large fetch answers encoded in worker threads
        self._worker_limiter = trio.CapacityLimiter(WORKER_THREADS_MAX)

    def kafka_address(self, node_id: int, host: str, port: int) -> tuple[str, int]:
        """Where node ``node_id`` (client address host:port) serves Kafka clients:
        ``kafka.brokers`` if it names it, this node's own advertised Kafka address, or
        else its client address shifted by this node's Kafka port offset."""
        c = self.config
        if node_id in c.kafka_brokers:
            return c.kafka_brokers[node_id]
        mine = c.kafka_advertised or (c.kafka_host, self.address[1] if self.address else c.kafka_port)
        if node_id == c.node_id:
            return mine
        return host, port + (mine[1] - c.advertised[1])

    async def serve(self, *, task_status=trio.TASK_STATUS_IGNORED) -> None:
        sock = listen(self.config.kafka_host, self.config.kafka_port, "kafka.listener")
        try:
            addr = sock.getsockname()
            self.address = (addr[0], addr[1])
            if self.native is not None:  # (the native listener's wrong-port hint)
                host, port = self.config.kafka_advertised or self.address
                self.native.kafka_address = f"{bracket(host)}:{port}"
            self.events.info("kafka_listening", host=addr[0], port=addr[1])
            async with trio.open_nursery() as nursery:
                task_status.started(self.address)
                await accept_loop(sock, self._handle, self.events, nursery)
        finally:
            trio.lowlevel.notify_closing(sock)
            sock.close()

    def _admit(self, host: str) -> bool:
        """Counted in the node's per-address quota (True) or refused (False, logged at
        most once per address and minute): the native server's rules."""
        if self.native is not None:
            return self.native.admit(host, self.connections, "kafka")
        return self.connections < MAX_CONNECTIONS and self._quota.try_acquire(host)

    @property
    def _quota(self) -> ConnectionQuota:
        return self.native.quota if self.native is not None else self._own_quota

    def _log_limited(self, key, event: str, **fields) -> None:
        if self.native is not None:
            self.native.log_limited(key, event, **fields)
        elif self._own_log.allow(key, trio.current_time()):
            self.events.warning(event, **fields)

    async def _handle(self, sock, peer) -> None:
        sock.setblocking(False)
        host = f"{peer[0]}"
        try:
            if not self._admit(host):
                return
            self.connections += 1
            try:
                guard = None
                if (self.listener.protocol is not SecurityProtocol.PLAINTEXT
                        or self.config.authorizer_enable):
                    # TLS handshake (with its timeout) and the SASL session, as the
                    # native listeners do it
                    secured, guard = await self.native._secure(
                        sock, f"{peer[0]}:{peer[1]}", self.listener)
                    if secured is None:
                        return
                    sock = secured  # (wrapping detached the plain socket)
                await self._serve_connection(sock, host, guard)
            except AuthenticationFailed as e:
                log = self.events.warning if e.counted else self.events.info
                log("authentication_failed", peer=host, reason=str(e), listener="kafka")
                if e.counted and self.native is not None:
                    self.native.record_failed_login(host, guard, "kafka")
                elif e.counted and self.failures.record_failure(host, trio.current_time()):
                    self.events.warning("address_blocked", peer=host, listener="kafka",
                                        reason="too many failed authentications")
            except WrongProtocol as e:
                self._log_limited(("wrong_protocol", "kafka", host), "wrong_protocol", peer=host,
                                  listener="kafka", hint=e.hint)
            except KafkaDecodeError as e:
                self.events.warning("connection_closed", peer=host, reason=str(e),
                                    listener="kafka")
            except (ConnectionError, BrokenPipeError, trio.ClosedResourceError):
                pass
            except OSError as e:
                self.events.warning("connection_error", peer=host, error=e, listener="kafka")
            finally:
                self.connections -= 1
                self._quota.release(host)
        finally:
            if sock.fileno() != -1:
                trio.lowlevel.notify_closing(sock)
                sock.close()

    async def _serve_connection(self, sock, host: str, guard: Guard | None = None) -> None:
        """The connection's reader, plus a task per answer that found the socket full
        (node/connection.py); its parked requests are dropped when it closes."""
        sasl = guard is not None and guard.sasl is not None
        await run_connection(
            sock, lambda nursery: _Conn(sock, Outbox(), nursery, guard),
            lambda conn: self._reader(host, conn),
            watchdog=(lambda conn: self.native._auth_watchdog(conn, host)) if sasl else None,
            on_close=self.apis.sessions.close_owned_by,
            idle_s=self.config.connections_max_idle_ms / 1000,
            on_idle=lambda conn: self.events.debug("connection_idle_closed", peer=host,
                                                   listener="kafka"))

    async def _reader(self, host: str, conn: _Conn) -> None:
        sock, out = conn.sock, conn.out
        sasl = conn.guard.sasl if conn.guard is not None else None
        pre_auth = sasl is not None and not sasl.authenticated
        decoder = FrameDecoder(self.config.max_frame_bytes)
        if pre_auth:  # SASL handshake frames only until authenticated
            limit_frames_before_auth(decoder)
        buf = bytearray(RECV_BYTES)
        run_ready = self.purgatory.run_ready
        tls = conn.guard is not None and conn.guard.listener.protocol.tls
        recv = tls_recv_into if tls else recv_into
        sniffing = True
        while True:
            data, waited = await recv(sock, buf)
            if not data:
                return
            conn.last_active = trio.current_time()
            decoder.receive_data(data)
            if sniffing and decoder.buffered >= SNIFF_BYTES:
                sniffing = False
                head = decoder.head(SNIFF_BYTES)
                if sniff(head) == NATIVE:
                    raise WrongProtocol(self._native_hint())
                if looks_client_hello(head):  # (a TLS listener's arrive decrypted here)
                    raise WrongProtocol(tls_on_plaintext_hint(self._kafka_host_port()))
            while (payload := next_request_frame(decoder, pre_auth)) is not None:
                while out.deferred >= MAX_IN_FLIGHT:
                    await out.room.wait()  # bounded: a client pipelining past it waits
                conn.in_request = True
                await self._answer(payload, host, conn)
                conn.in_request = False
                conn.last_active = trio.current_time()
                if pre_auth and sasl.authenticated:
                    pre_auth = False
                    lift_frame_limit(decoder, self.config.max_frame_bytes)
            # Requests this turn woke (a follower's fetch after an append) are answered
            # before this turn's own, as the native server does.
            run_ready()
            if out.pieces:
                await out.flush(sock)
            if not waited:
                await trio.lowlevel.checkpoint()  # never blocked this turn: let others run

    async def _answer(self, payload: bytes, host: str, conn: _Conn) -> None:
        """Answer one request payload into the connection's Outbox (nothing for
        acks=0). A Produce (acks=all) or Fetch that must wait parks in the purgatory
        with its place among the answers; the reader goes on."""
        out = conn.out
        if conn.raw_sasl:
            await self._sasl_token(payload, conn)
            return
        guard = conn.guard
        pre_auth = guard is not None and guard.sasl is not None and not guard.sasl.authenticated
        try:
            if len(payload) > DECODE_INLINE_BYTES_MAX:  # decoded off the event loop
                if out.pieces:
                    await out.flush(conn.sock)
                req = await trio.to_thread.run_sync(decode_request, payload,
                                                    limiter=self._worker_limiter)
            else:
                req = decode_request(payload)
        except UnsupportedRequest as e:
            if pre_auth and e.api_key != API_VERSIONS_KEY:  # (KIP-511 needs ApiVersions')
                raise AuthenticationFailed(
                    f"unsupported request before SASL authentication: {e}") from None
            out.add(self._unsupported(e))
            return
        except KafkaDecodeError as e:
            if pre_auth:  # nothing but a well-formed SASL step before login
                raise AuthenticationFailed(
                    f"malformed request before SASL authentication: {e}") from None
            raise
        h = req.header
        if guard is not None and guard.sasl is not None and (
                not guard.sasl.authenticated and await self._sasl_step(req, conn)):
            return
        # (Produce and Fetch v13+ name topics by id: the handlers read names)
        body_in, note = self.apis.start(h.api_key, h.api_version, req.body)
        req = req._replace(body=body_in)
        finish = self.apis.finish
        acl = None
        if guard is not None and self.config.authorizer_enable and guard.principal is not None:
            acl = AclCheck(guard.principal, self.broker.security.authorizer())
        ctx = Context(h.client_id, host, h.correlation_id, acl, conn)
        try:
            wait = None
            if h.api_key == PRODUCE_KEY:
                converted = None
                txn = req.body["transactional_id"] is not None
                if txn or self.apis.produce_is_heavy(req.body):
                    if out.pieces:  # (heavy: converted off the event loop; transactional:
                        await out.flush(conn.sock)  # the coordinator verifies it first)
                    converted = await self.apis.produce_convert(h.api_version, req.body, ctx)
                    if txn:
                        await self.apis.produce_verify(req.body, converted)
                body, wait = self.apis.produce_begin(h.api_version, req.body, ctx, converted)
            elif h.api_key == FETCH_KEY and self.apis.fetch_in_session(h.api_version, req.body):
                if out.pieces:  # (its long poll waits here, as Kafka's one request at a time)
                    await out.flush(conn.sock)
                body = await self.apis.fetch_session(h.api_version, req.body, ctx)
                if sum(len(t["partitions"]) for t in body["responses"]) > FETCH_ROWS_INLINE:
                    out.add_pieces(await trio.to_thread.run_sync(
                        encode_response_pieces, h.api_key, h.api_version, h.correlation_id,
                        finish(h.api_key, h.api_version, body, note),
                        limiter=self._worker_limiter))
                    return
            elif h.api_key == FETCH_KEY and self.apis.fetch_is_large(req.body):
                if out.pieces:  # read in slices, encoded in a worker thread
                    await out.flush(conn.sock)
                body = finish(h.api_key, h.api_version,
                              await self.apis.fetch_large(h.api_version, req.body, ctx), note)
                out.add_pieces(await trio.to_thread.run_sync(
                    encode_response_pieces, h.api_key, h.api_version, h.correlation_id, body,
                    limiter=self._worker_limiter))
                return
            elif h.api_key == FETCH_KEY:
                body, wait = self.apis.fetch_begin(h.api_version, req.body, ctx)
            else:
                if out.pieces:  # the answers ready so far go before this one may wait
                    await out.flush(conn.sock)
                body = await self.apis.handlers[h.api_key](h.api_version, req.body, ctx)
            if wait is not None:
                wait.note = note
                self._park(conn, h, wait)
            elif body is not None:
                out.add_pieces(encode_response_pieces(h.api_key, h.api_version, h.correlation_id,
                                                      finish(h.api_key, h.api_version, body, note)))
        except (OSError, trio.Cancelled):
            raise
        except Exception as e:  # our bug: log it, drop this connection, keep serving others
            self.events.error("kafka_handler_failed", api=h.api_key, version=h.api_version,
                              error=repr(e))
            raise KafkaDecodeError(f"internal error answering api {h.api_key}: {e!r}") from None

    # ------------------------------------------------------------------ SASL

    async def _sasl_step(self, req, conn: _Conn) -> bool:
        """Before authentication: SaslHandshake and SaslAuthenticate through the
        connection's SaslSession (node/authn.py, the native listeners' own). True: the
        request was answered here; False: ApiVersions, served as usual. Anything else
        closes the connection (as Kafka does); a failed step answers its error first."""
        h, guard = req.header, conn.guard
        sasl = guard.sasl
        if h.api_key == API_VERSIONS_KEY:
            return False
        if h.api_key not in _SASL_KEYS:
            raise AuthenticationFailed(f"Kafka api {h.api_key} before SASL authentication")
        try:
            if trio.current_time() > guard.auth_deadline:
                raise ApiError(ErrorCode.SASL_AUTHENTICATION_FAILED,
                               f"SASL authentication took longer than {AUTH_TIMEOUT_S:g}s")
            if h.api_key == SASL_HANDSHAKE_KEY:
                if not self.replicas.registered:
                    # replaying the metadata log: it cannot judge credentials yet
                    raise ApiError(ErrorCode.BROKER_NOT_AVAILABLE,
                                   f"node {self.config.node_id} is starting: retry")
                got = sasl.handshake(req.body["mechanism"])
                body = {"error_code": 0, "mechanisms": got["mechanisms"]}
                conn.raw_sasl = h.api_version == 0
            else:
                # PLAIN derives a salted password (milliseconds of CPU): off the loop
                got = await trio.to_thread.run_sync(sasl.authenticate, req.body["auth_bytes"])
                body = {"error_code": 0, "error_message": None, "auth_bytes": got["auth"],
                        "session_lifetime_ms": 0}
                if sasl.authenticated:
                    guard.principal = sasl.principal
        except ApiError as e:
            await self._fail_auth(conn, h, e)
        conn.out.add(encode_response(h.api_key, h.api_version, h.correlation_id, body))
        return True

    async def _sasl_token(self, payload, conn: _Conn) -> None:
        """A bare SASL token after a SaslHandshake v0: answered with a bare token; a
        failure closes the connection without an answer (Kafka's v0 rule)."""
        guard = conn.guard
        try:
            if trio.current_time() > guard.auth_deadline:
                raise ApiError(ErrorCode.SASL_AUTHENTICATION_FAILED,
                               f"SASL authentication took longer than {AUTH_TIMEOUT_S:g}s")
            got = await trio.to_thread.run_sync(guard.sasl.authenticate, bytes(payload))
        except ApiError as e:
            await self._fail_auth(conn, None, e)
        if guard.sasl.authenticated:
            guard.principal = guard.sasl.principal
            conn.raw_sasl = False
        conn.out.add(struct.pack(">i", len(got["auth"])) + got["auth"])

    async def _fail_auth(self, conn: _Conn, h, e: ApiError) -> None:
        """Answer ``e`` (after connection.failed.authentication.delay.ms for a failed
        authentication), flush, and close the connection."""
        delay = self.config.connection_failed_authentication_delay_ms / 1000
        if e.code is ErrorCode.SASL_AUTHENTICATION_FAILED and delay:
            await trio.sleep(delay)
        if h is not None:
            code = to_kafka(e.code)
            body = ({"error_code": code, "mechanisms": list(conn.guard.sasl.mechanisms)}
                    if h.api_key == SASL_HANDSHAKE_KEY else
                    {"error_code": code, "error_message": e.message, "auth_bytes": b"",
                     "session_lifetime_ms": 0})
            conn.out.add(encode_response(h.api_key, h.api_version, h.correlation_id, body))
        try:
            with trio.move_on_after(1.0):
                await conn.out.flush(conn.sock)
        except (OSError, trio.ClosedResourceError):
            pass
        raise AuthenticationFailed(e.message, counted=e.code is not ErrorCode.BROKER_NOT_AVAILABLE)

    def _kafka_host_port(self) -> str:
        host, port = self.config.kafka_advertised or self.address or ("", 0)
        return f"{bracket(host)}:{port}"

    def _native_hint(self) -> str:
        native = (self.native.native_address(None) if self.native is not None
                  else "{}:{}".format(*self.config.advertised))
        return native_on_kafka_hint(self._kafka_host_port(), native)

    def _park(self, conn: _Conn, header, wait: Wait) -> None:
        op = _KafkaParked(self, conn, header, wait)
        op.place = conn.out.add_deferred()
        conn.parked.add(op)
        if not op.watch(wait.parts):  # a partition has no room for another waiter
            self.purgatory.complete_now(op)
            return
        self.purgatory.park(op)

    def _unsupported(self, e: UnsupportedRequest) -> bytes:
        if e.api_key == API_VERSIONS_KEY:
            # KIP-511: answer with v0 so the client learns the versions and retries
            body = {"error_code": _UNSUPPORTED, "api_keys": [
                {"api_key": k, "min_version": lo, "max_version": hi}
                for k, (lo, hi) in sorted(SUPPORTED.items())]}
            return encode_response(API_VERSIONS_KEY, 0, e.correlation_id, body)
        self.events.warning("kafka_unsupported", api=e.api_key, version=e.api_version)
        data = struct.pack(">ih", e.correlation_id, _UNSUPPORTED)
        return struct.pack(">i", len(data)) + data
