"""The trio server: listener, per-connection request loop, coalesced sends, sendfile.

Per connection, requests are handled in order (pipelining allowed, responses in
request order), as Kafka does. Every response ready after one ``recv`` is sent
with one ``send``: trio pays a checkpoint and a syscall per send, so coalescing is
what makes small requests fast. Fetch bodies are file ranges handed to
``os.sendfile`` on the raw socket (zero-copy from the page cache); only this task
sends on its socket, so no extra lock is needed.
"""

from __future__ import annotations

import errno
import os
import socket as _stdsocket

import trio

from raftlog.errors import ApiError, ErrorCode, RemoteProtocolError
from raftlog.protocol import (
    Api,
    BadRequest,
    FrameDecoder,
    encode_frame,
    encode_frame_head,
    error_response,
    parse_request,
)

from .broker import SERVED_APIS, Broker
from .config import NodeConfig
from .logfmt import EventLog

RECV_BYTES = 256 * 1024
#: Coalesced response bytes after which we send even if more requests are buffered.
MAX_PENDING_SEND_BYTES = 4 * 1024 * 1024
#: Connections served at once; further ones are accepted and closed at once.
MAX_CONNECTIONS = 4096
#: Requests handled from one connection before yielding to others (fairness).
MAX_REQUESTS_PER_TURN = 256


class Outbox:
    """Pieces of responses waiting to be sent: bytes (coalesced) and file slices."""

    __slots__ = ("pieces", "size")

    def __init__(self) -> None:
        self.pieces: list = []
        self.size = 0

    def add(self, data: bytes) -> None:
        self.pieces.append(data)
        self.size += len(data)

    def add_slice(self, sl) -> None:
        self.pieces.append(sl)
        self.size += sl.length

    async def flush(self, sock) -> None:
        pieces, self.pieces, self.size = self.pieces, [], 0
        run: list[bytes] = []
        for p in pieces:
            if isinstance(p, (bytes, bytearray, memoryview)):
                run.append(p)
                continue
            if run:
                await _send_all(sock, b"".join(run))
                run = []
            await _sendfile(sock, p)
        if run:
            await _send_all(sock, run[0] if len(run) == 1 else b"".join(run))


async def _send_all(sock, data: bytes) -> None:
    with memoryview(data) as view:
        total, sent = len(view), 0
        while sent < total:
            sent += await sock.send(view[sent:])


async def _sendfile(sock, sl) -> None:
    """Send a file slice with os.sendfile, waiting for writability (non-blocking socket)."""
    fd = sock.fileno()
    offset, remaining = sl.position, sl.length
    while remaining:
        try:
            n = os.sendfile(fd, sl.fileno, offset, remaining)
        except BlockingIOError:
            await trio.lowlevel.wait_writable(sock)
            continue
        except OSError as e:
            if e.errno in (errno.EINVAL, errno.ENOSYS):  # e.g. TLS or exotic fs: fall back
                await _send_all(sock, os.pread(sl.fileno, remaining, offset))
                return
            raise
        if n == 0:
            # The file shrank under us (truncation): the frame length is already sent, so the
            # stream is unusable. Close the connection; the client retries.
            raise BrokenPipeError("file slice shrank during sendfile")
        offset += n
        remaining -= n
    await trio.lowlevel.checkpoint()


class Server:
    """One node's client-facing server."""

    def __init__(self, config: NodeConfig, broker: Broker, events: EventLog):
        self.config = config
        self.broker = broker
        self.events = events
        self.connections = 0
        self.listeners: list = []

    async def serve(self, *, task_status=trio.TASK_STATUS_IGNORED) -> None:
        listeners = await trio.open_tcp_listeners(self.config.port, host=self.config.host, backlog=1024)
        self.listeners = listeners
        addr = listeners[0].socket.getsockname()
        self.events.info("listening", host=addr[0], port=addr[1])
        task_status.started(addr)
        await trio.serve_listeners(self._handle, listeners)

    async def _handle(self, stream: trio.SocketStream) -> None:
        peer = _peer(stream)
        if self.connections >= MAX_CONNECTIONS:
            self.events.warning("connection_refused", peer=peer, reason="too many connections")
            await trio.aclose_forcefully(stream)
            return
        self.connections += 1
        try:
            await self._serve_connection(stream.socket, peer)
        except RemoteProtocolError as e:
            self.events.warning("connection_closed", peer=peer, reason=str(e))
        except (trio.BrokenResourceError, trio.ClosedResourceError, ConnectionError, BrokenPipeError):
            pass
        except OSError as e:
            self.events.warning("connection_error", peer=peer, error=e)
        finally:
            self.connections -= 1
            await trio.aclose_forcefully(stream)

    async def _serve_connection(self, sock, peer: str) -> None:
        sock.setsockopt(_stdsocket.IPPROTO_TCP, _stdsocket.TCP_NODELAY, 1)
        decoder = FrameDecoder(self.config.max_frame_bytes)
        out = Outbox()
        while True:
            data = await sock.recv(RECV_BYTES)
            if not data:
                return
            decoder.receive_data(data)
            handled = 0
            while True:
                frame = decoder.next_frame()
                if frame is None:
                    break
                await self._dispatch(frame, out, sock)
                handled += 1
                if out.size >= MAX_PENDING_SEND_BYTES or handled >= MAX_REQUESTS_PER_TURN:
                    await out.flush(sock)
                    handled = 0
            if out.pieces:
                await out.flush(sock)

    async def _dispatch(self, frame, out: Outbox, sock) -> None:
        try:
            req = parse_request(frame, SERVED_APIS)
        except BadRequest as e:
            out.add(encode_frame(error_response(e.request_id, e.code, e.message)))
            return
        try:
            if req.api == Api.FETCH:
                header, pieces = await self._fetch(req, out, sock)
            else:
                header, pieces = self.broker.handle_sync(req)
                if req.api == Api.PRODUCE and req.fields["acks"] == 0:
                    return
        except ApiError as e:
            out.add(encode_frame(error_response(req.id, e.code, e.message)))
            return
        except Exception as e:  # a bug of ours: answer, log, keep serving
            self.events.error("handler_failed", api=req.api.name, error=repr(e))
            out.add(encode_frame(error_response(req.id, ErrorCode.UNKNOWN_SERVER_ERROR, repr(e))))
            return
        header["id"] = req.id
        header["error"] = 0
        if not pieces:
            out.add(encode_frame(header))
            return
        body_len = sum(len(p) if isinstance(p, bytes) else p.length for p in pieces)
        out.add(encode_frame_head(header, body_len))
        for p in pieces:
            if isinstance(p, bytes):
                out.add(p)
            else:
                out.add_slice(p)

    async def _fetch(self, req, out: Outbox, sock):
        headers, pieces, total, error = self.broker.fetch_once(req)
        if error or total >= req.fields["min_bytes"] or req.fields["max_wait_ms"] == 0:
            return {"parts": headers}, pieces
        # About to wait: first send what earlier pipelined requests produced.
        if out.pieces:
            await out.flush(sock)
        return await self.broker.fetch(req)


def _peer(stream) -> str:
    try:
        host, port = stream.socket.getpeername()[:2]
        return f"{host}:{port}"
    except OSError:
        return "?"
