"""The metrics listener (``metrics.listener=HOST:PORT``): a tiny HTTP/1.1 server on the
node's trio thread answering ``GET /metrics`` with :func:`raftlog.node.metrics.render`.

The metrics name every topic and consumer group with offsets and lag, whatever the
ACLs: the endpoint is for operators only. It binds 127.0.0.1 unless given a host,
and takes HTTPS (``metrics.ssl.*``, the node's PEM files and meanings) and HTTP basic
authentication (``metrics.basic.auth.*``): a request without the right credentials
gets 401 (after connection.failed.authentication.delay.ms) and nothing else.

One request per connection (``Connection: close``): Prometheus scrapes every few
seconds, so keep-alive buys nothing. Bounded: at most MAX_SCRAPE_CONNECTIONS at once
(more are closed at once), a request head of at most MAX_HEAD_BYTES, read (TLS
handshake included) within READ_TIMEOUT_S. Anything else gets a 4xx and the
connection closed.
"""

from __future__ import annotations

import base64
import binascii
import hmac
import json
import ssl

import trio

from raftlog.errors import ConfigError
from raftlog.listeners import is_loopback
from raftlog.tls import TlsConfigError, server_context

from .config import check_secret_file
from .metrics import render
from .sockio import listen

MAX_SCRAPE_CONNECTIONS = 16
MAX_HEAD_BYTES = 8192
READ_TIMEOUT_S = 5.0
SEND_TIMEOUT_S = 30.0
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


def parse_request_head(head: bytes) -> tuple[str, str]:
    """(method, path without query) of an HTTP request head.

    Raises:
        ValueError: not an HTTP/1.x request line.
    """
    line = head.split(b"\r\n", 1)[0].decode("latin-1")
    parts = line.split(" ")
    if len(parts) != 3 or not parts[2].startswith("HTTP/1."):
        raise ValueError(f"not an HTTP/1.x request line: {line[:80]!r}")
    return parts[0], parts[1].split("?", 1)[0]


def request_header(head: bytes, name: str) -> str | None:
    """The value of header ``name`` (case-insensitive) in a request head, or None."""
    want = name.lower().encode()
    for line in head.split(b"\r\n")[1:]:
        key, sep, value = line.partition(b":")
        if sep and key.strip().lower() == want:
            return value.strip().decode("latin-1")
    return None


def authorized(head: bytes, basic_auth: tuple[str, str] | None) -> bool:
    """Whether the request carries ``basic_auth`` (user, password) as HTTP basic
    credentials (always, without basic_auth). Compared in constant time."""
    if basic_auth is None:
        return True
    value = request_header(head, "Authorization") or ""
    scheme, _, token = value.partition(" ")
    if scheme.lower() != "basic":
        return False
    try:
        given = base64.b64decode(token.strip(), validate=True)
    except (binascii.Error, ValueError):
        return False
    user, sep, password = given.partition(b":")
    ok_user = hmac.compare_digest(user, basic_auth[0].encode())
    ok_password = hmac.compare_digest(password, basic_auth[1].encode())
    return bool(sep) and ok_user and ok_password


UNAUTHORIZED_HEADERS = ('WWW-Authenticate: Basic realm="raftlog metrics", charset="UTF-8"',)


def http_response(status: str, body: bytes, content_type: str = "text/plain; charset=utf-8",
                  head_only: bool = False, headers: tuple = ()) -> bytes:
    extra = "".join(f"{h}\r\n" for h in headers)
    head = (f"HTTP/1.1 {status}\r\nContent-Type: {content_type}\r\n{extra}"
            f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n").encode()
    return head if head_only else head + body


def metrics_security(config) -> tuple[ssl.SSLContext | None, tuple[str, str] | None]:
    """(TLS context or None, (user, password) or None) of the metrics listener, from the
    node's config (reads the password file once).

    Raises:
        ConfigError: a certificate, key or password file that cannot be used (named),
            or a password file every user can read.
    """
    c = config
    ctx = None
    if c.metrics_ssl_keystore_location:
        try:
            ctx = server_context(c.metrics_ssl_keystore_location, c.metrics_ssl_key_location,
                                 password=c.metrics_ssl_key_password,
                                 cafile=c.metrics_ssl_truststore_location,
                                 client_auth=c.metrics_ssl_client_auth)
        except TlsConfigError as e:
            raise ConfigError(f"metrics.ssl.*: {e}") from None
    if not c.metrics_basic_auth_username:
        return ctx, None
    password = c.metrics_basic_auth_password
    if password is None:
        path = c.metrics_basic_auth_password_file
        try:
            check_secret_file(path, ["a password"])  # (also: it exists)
        except ConfigError as e:
            raise ConfigError(f"metrics.basic.auth.password.file: {e}") from None
        try:
            with open(path, encoding="utf-8") as f:
                password = f.readline().rstrip("\r\n")
        except OSError as e:
            raise ConfigError(f"metrics.basic.auth.password.file: cannot read {path}: "
                              f"{e.strerror}") from None
        if not password:
            raise ConfigError(f"metrics.basic.auth.password.file: {path} has an empty first "
                              "line (it holds the password)")
    return ctx, (c.metrics_basic_auth_username, password)


def answer(method: str, path: str, scrape, trace=None) -> bytes:
    """The whole response to one request; ``scrape()`` renders the metrics text,
    ``trace()`` drains the node's hop events as JSON (None: tracing is off)."""
    if method not in ("GET", "HEAD"):
        return http_response("405 Method Not Allowed", b"only GET\n")
    head_only = method == "HEAD"
    if path == "/metrics":
        return http_response("200 OK", scrape().encode(), CONTENT_TYPE, head_only)
    if path == "/trace":
        if trace is None:
            return http_response("404 Not Found", b"tracing is off: start the node with "
                                 b"trace.events=N (events it keeps) to stamp hops\n",
                                 head_only=head_only)
        return http_response("200 OK", trace().encode(), "application/json", head_only)
    if path == "/":
        return http_response("200 OK", b"raftlog node: metrics at /metrics\n", head_only=head_only)
    return http_response("404 Not Found", b"not found; metrics at /metrics\n", head_only=head_only)


class MetricsServer:
    """Serves one node's metrics. Run :meth:`serve` with ``nursery.start``.

    ``tls``: a server SSLContext (HTTPS) or None; ``basic_auth``: (user, password) every
    request must carry, or None; ``failure_delay_s``: how long a request with wrong
    credentials waits for its 401 (holding one of the MAX_SCRAPE_CONNECTIONS slots,
    which bounds guesses)."""

    def __init__(self, node, host: str, port: int, events, *,
                 tls: ssl.SSLContext | None = None, basic_auth: tuple[str, str] | None = None,
                 failure_delay_s: float = 0.0):
        assert failure_delay_s >= 0
        self.node = node
        self.host, self.port = host, port
        self.events = events
        self.tls, self.basic_auth, self.failure_delay_s = tls, basic_auth, failure_delay_s
        self.open = 0
        self.scrapes = 0
        self.refused = 0

    async def serve(self, *, task_status=trio.TASK_STATUS_IGNORED) -> None:
        sock = listen(self.host, self.port, "metrics.listener")
        listeners = [trio.SocketListener(trio.socket.from_stdlib_socket(sock))]
        addr = listeners[0].socket.getsockname()
        if self.tls is not None:
            listeners = [trio.SSLListener(x, self.tls, https_compatible=True)
                         for x in listeners]
        self.events.info("metrics_listening", host=addr[0], port=addr[1],
                         scheme="https" if self.tls is not None else "http",
                         auth="basic" if self.basic_auth is not None else "none")
        mtls = self.tls is not None and self.tls.verify_mode == ssl.CERT_REQUIRED
        if self.basic_auth is None and not mtls and not is_loopback(self.host):
            self.events.warning("metrics_exposed", host=addr[0], port=addr[1],
                                reason="metrics name every topic and group and need no "
                                "credentials: bind 127.0.0.1, or set metrics.basic.auth.* or "
                                "metrics.ssl.client.auth=required")
        task_status.started(addr)
        await trio.serve_listeners(self._handle, listeners)

    async def _handle(self, stream) -> None:
        async with stream:
            if self.open >= MAX_SCRAPE_CONNECTIONS:
                return
            self.open += 1
            try:
                head = await self._read_head(stream)
                if head is None:
                    return
                try:
                    method, path = parse_request_head(head)
                    if authorized(head, self.basic_auth):
                        data = answer(method, path, self._scrape, self._trace())
                    else:
                        data = await self._refuse(stream)
                except ValueError:
                    data = http_response("400 Bad Request", b"bad request\n")
                except Exception as e:  # a bug of ours in render: answer 500, keep the node up
                    self.events.error("metrics_render_failed", error=repr(e))
                    data = http_response("500 Internal Server Error", b"metrics failed\n")
                with trio.move_on_after(SEND_TIMEOUT_S):
                    await stream.send_all(data)
            except (trio.BrokenResourceError, trio.ClosedResourceError, OSError):
                pass  # (a failed TLS handshake too)
            finally:
                self.open -= 1

    async def _refuse(self, stream) -> bytes:
        self.refused += 1
        peer = _peer(stream)
        self.events.warning("metrics_unauthorized", peer=peer)
        if self.failure_delay_s:
            await trio.sleep(self.failure_delay_s)
        return http_response("401 Unauthorized", b"credentials required (HTTP basic)\n",
                             headers=UNAUTHORIZED_HEADERS)

    def _trace(self):
        """A function draining the node's hop events as JSON, or None (tracing off).
        Draining keeps a node's ring from handing the same events out twice."""
        replicas = getattr(self.node, "replicas", None)
        log = getattr(replicas, "trace", None)
        if log is None:
            return None

        def drain() -> str:
            return json.dumps({"node_id": replicas.config.node_id, "dropped": log.dropped,
                               "events": log.drain()})
        return drain

    def _scrape(self) -> str:
        self.scrapes += 1
        return render(self.node)

    @staticmethod
    async def _read_head(stream) -> bytes | None:
        """The request head (up to the blank line), or None: closed, too big, too slow."""
        buf = b""
        with trio.move_on_after(READ_TIMEOUT_S):
            while b"\r\n\r\n" not in buf and len(buf) <= MAX_HEAD_BYTES:
                chunk = await stream.receive_some(4096)
                if not chunk:
                    return None
                buf += chunk
            if len(buf) > MAX_HEAD_BYTES and b"\r\n\r\n" not in buf:
                await stream.send_all(http_response("431 Request Header Fields Too Large",
                                                    b"request head too large\n"))
                return None
            return buf
        return None


def _peer(stream) -> str:
    inner = getattr(stream, "transport_stream", stream)
    try:
        return str(inner.socket.getpeername()[0])
    except (AttributeError, OSError):
        return "?"
