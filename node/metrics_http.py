"""The metrics listener (``metrics.listener=HOST:PORT``): a tiny HTTP/1.1 server on the
node's trio thread answering ``GET /metrics`` with :func:`raftlog.node.metrics.render`.

One request per connection (``Connection: close``): Prometheus scrapes every few
seconds, so keep-alive buys nothing. Bounded: at most MAX_SCRAPE_CONNECTIONS at once
(more are closed at once), a request head of at most MAX_HEAD_BYTES, read within
READ_TIMEOUT_S. Anything else gets a 4xx and the connection closed.
"""

from __future__ import annotations

import trio

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


def http_response(status: str, body: bytes, content_type: str = "text/plain; charset=utf-8",
                  head_only: bool = False) -> bytes:
    head = (f"HTTP/1.1 {status}\r\nContent-Type: {content_type}\r\n"
            f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n").encode()
    return head if head_only else head + body


def answer(method: str, path: str, scrape) -> bytes:
    """The whole response to one request; ``scrape()`` renders the metrics text."""
    if method not in ("GET", "HEAD"):
        return http_response("405 Method Not Allowed", b"only GET\n")
    head_only = method == "HEAD"
    if path == "/metrics":
        return http_response("200 OK", scrape().encode(), CONTENT_TYPE, head_only)
    if path == "/":
        return http_response("200 OK", b"raftlog node: metrics at /metrics\n", head_only=head_only)
    return http_response("404 Not Found", b"not found; metrics at /metrics\n", head_only=head_only)


class MetricsServer:
    """Serves one node's metrics. Run :meth:`serve` with ``nursery.start``."""

    def __init__(self, node, host: str, port: int, events):
        self.node = node
        self.host, self.port = host, port
        self.events = events
        self.open = 0
        self.scrapes = 0

    async def serve(self, *, task_status=trio.TASK_STATUS_IGNORED) -> None:
        sock = listen(self.host, self.port, "metrics.listener")
        listeners = [trio.SocketListener(trio.socket.from_stdlib_socket(sock))]
        addr = listeners[0].socket.getsockname()
        self.events.info("metrics_listening", host=addr[0], port=addr[1])
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
                    data = answer(method, path, self._scrape)
                except ValueError:
                    data = http_response("400 Bad Request", b"bad request\n")
                except Exception as e:  # a bug of ours in render: answer 500, keep the node up
                    self.events.error("metrics_render_failed", error=repr(e))
                    data = http_response("500 Internal Server Error", b"metrics failed\n")
                with trio.move_on_after(SEND_TIMEOUT_S):
                    await stream.send_all(data)
            except (trio.BrokenResourceError, trio.ClosedResourceError, OSError):
                pass
            finally:
                self.open -= 1

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
