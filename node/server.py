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
long-poll answers. Only the connection's own task sends on its socket, so no
extra lock is needed.
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
from .group_handlers import GROUP_APIS
from .logfmt import EventLog
from .sockio import recv_into as _recv
from .sockio import send_all as _send_all

RECV_BYTES = 256 * 1024
#: Coalesced response bytes after which we send even if more requests are buffered.
MAX_PENDING_SEND_BYTES = 4 * 1024 * 1024
#: Connections served at once; further ones are accepted and closed at once.
MAX_CONNECTIONS = 4096
#: Requests handled from one connection before yielding to others (fairness).
MAX_REQUESTS_PER_TURN = 256
#: Admin APIs that write through the metadata quorum in cluster mode.
QUORUM_WRITE_APIS = frozenset({Api.CREATE_TOPICS, Api.DELETE_TOPICS, Api.ALTER_CONFIGS,
                               Api.CREATE_PARTITIONS, Api.ELECT_LEADERS})
#: acks=all produce requests of one connection waiting for replication at once; the
#: reader stops reading that connection while this many wait (Kafka's clients keep <= 5).
MAX_DEFERRED_PER_CONNECTION = 64
#: File slices smaller than this are read and coalesced instead of sendfile'd.
SENDFILE_MIN_BYTES = 64 * 1024


class Deferred:
    """The place of a response that is not ready yet (an acks=all produce waiting for
    replication): responses after it wait behind it, so the order stays the request
    order while later requests are already handled."""

    __slots__ = ("frame",)

    def __init__(self) -> None:
        self.frame: bytes | None = None


class Outbox:
    """Pieces of responses waiting to be sent, in request order: bytes (coalesced),
    file slices (sendfile) and Deferred places (sent once filled).

    Only the holder of ``lock`` flushes: the connection's reader, or the task that
    fills a Deferred while the reader is blocked in recv."""

    __slots__ = ("pieces", "size", "lock", "deferred", "places", "room")

    def __init__(self) -> None:
        self.pieces: list = []
        self.size = 0
        self.lock = trio.Lock()
        self.deferred = 0  # Deferred places not yet filled
        self.places = 0  # Deferred places in pieces, filled or not
        self.room = trio.Event()  # set when a Deferred is filled (reader waits for room)

    def add(self, data: bytes) -> None:
        self.pieces.append(data)
        self.size += len(data)

    def add_slice(self, sl) -> None:
        self.pieces.append(sl)
        self.size += sl.length

    def add_deferred(self) -> Deferred:
        d = Deferred()
        self.pieces.append(d)
        self.deferred += 1
        self.places += 1
        return d

    def fill(self, d: Deferred, frame: bytes) -> None:
        d.frame = frame
        self.size += len(frame)
        self.deferred -= 1
        self.room.set()
        self.room = trio.Event()

    async def flush(self, sock) -> None:
        """Send every piece up to the first Deferred still unfilled."""
        async with self.lock:
            await self._flush_locked(sock)

    async def _flush_locked(self, sock) -> None:
        pieces = self.pieces
        cut = len(pieces)
        if self.places:
            for i, p in enumerate(pieces):
                if type(p) is Deferred:
                    if p.frame is None:
                        cut = i
                        break
                    pieces[i] = p.frame
                    self.places -= 1
        self.pieces = pieces[cut:]
        run: list[bytes] = []
        sent = 0
        for p in pieces[:cut]:
            if isinstance(p, (bytes, bytearray, memoryview)):
                run.append(p)
                sent += len(p)
                continue
            if run:
                await _send_all(sock, b"".join(run))
                run = []
            await _sendfile(sock, p)
            sent += p.length
        self.size -= sent
        if run:
            await _send_all(sock, run[0] if len(run) == 1 else b"".join(run))


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


class Server:
    """One node's client-facing server."""

    def __init__(self, config: NodeConfig, broker: Broker, events: EventLog):
        self.config = config
        self.broker = broker
        self.events = events
        self.connections = 0
        self.listeners: list = []

    async def serve(self, *, task_status=trio.TASK_STATUS_IGNORED) -> None:
        listener = _stdsocket.create_server(
            (self.config.host, self.config.port), backlog=1024, reuse_port=False
        )
        listener.setblocking(False)
        addr = listener.getsockname()
        self.events.info("listening", host=addr[0], port=addr[1])
        try:
            async with trio.open_nursery() as nursery:
                task_status.started(addr)
                while True:
                    await trio.lowlevel.wait_readable(listener)
                    try:
                        conn, peer = listener.accept()
                    except (BlockingIOError, ConnectionAbortedError):
                        continue
                    except OSError as e:  # EMFILE and friends: back off, keep serving
                        self.events.warning("accept_failed", error=e)
                        await trio.sleep(0.1)
                        continue
                    nursery.start_soon(self._handle, conn, f"{peer[0]}:{peer[1]}")
        finally:
            trio.lowlevel.notify_closing(listener)
            listener.close()

    async def _handle(self, sock, peer: str) -> None:
        sock.setblocking(False)
        if self.connections >= MAX_CONNECTIONS:
            self.events.warning("connection_refused", peer=peer, reason="too many connections")
            sock.close()
            return
        self.connections += 1
        try:
            await self._serve_connection(sock, peer)
        except RemoteProtocolError as e:
            self.events.warning("connection_closed", peer=peer, reason=str(e))
        except (ConnectionError, BrokenPipeError, trio.ClosedResourceError):
            pass
        except OSError as e:
            self.events.warning("connection_error", peer=peer, error=e)
        finally:
            self.connections -= 1
            trio.lowlevel.notify_closing(sock)
            sock.close()

    async def _serve_connection(self, sock, peer: str) -> None:
        """The connection's reader, plus one task per acks=all produce waiting for
        replication (MAX_DEFERRED_PER_CONNECTION at most), owned by one nursery."""
        sock.setsockopt(_stdsocket.IPPROTO_TCP, _stdsocket.TCP_NODELAY, 1)
        failure: BaseException | None = None
        async with trio.open_nursery() as nursery:
            try:
                await self._read_loop(sock, nursery)
            except Exception as e:  # raised below, outside the nursery (no group wrapping)
                failure = e
            nursery.cancel_scope.cancel()
        if failure is not None:
            raise failure

    async def _read_loop(self, sock, nursery) -> None:
        decoder = FrameDecoder(self.config.max_frame_bytes)
        out = Outbox()
        buf = bytearray(RECV_BYTES)
        while True:
            data, waited = await _recv(sock, buf)
            if not data:
                return
            decoder.receive_data(data)
            handled = 0
            while True:
                frame = decoder.next_frame()
                if frame is None:
                    break
                while out.deferred and (out.deferred >= MAX_DEFERRED_PER_CONNECTION
                                        or out.size >= MAX_PENDING_SEND_BYTES):
                    await out.room.wait()  # bounded: a client pipelining past the limit waits
                await self._dispatch(frame, out, sock, nursery)
                handled += 1
                if out.size >= MAX_PENDING_SEND_BYTES or handled >= MAX_REQUESTS_PER_TURN:
                    await out.flush(sock)
                    handled = 0
            if out.pieces:
                await out.flush(sock)
            if not waited:
                await trio.lowlevel.checkpoint()  # never blocked this turn: let others run

    async def _answer_later(self, out: Outbox, d: Deferred, sock, req, results, waits,
                            deadline) -> None:
        """Fill ``d`` once the acks=all produce is replicated (or timed out) and send
        whatever is ready. A send failure closes the connection: the reader sees it."""
        try:
            header, _ = await self.broker.produce_acks_all_answer(results, waits, deadline)
            header["id"] = req.id
            header["error"] = 0
            frame = encode_frame(header)
        except ApiError as e:
            frame = encode_frame(error_response(req.id, e.code, e.message))
        except Exception as e:  # a bug of ours: answer, log, keep serving
            self.events.error("handler_failed", api=req.api.name, error=repr(e))
            frame = encode_frame(error_response(req.id, ErrorCode.UNKNOWN_SERVER_ERROR, repr(e)))
        out.fill(d, frame)
        try:
            await out.flush(sock)
        except Exception as e:  # the reader's next wait raises; it closes the connection
            if not isinstance(e, OSError):
                self.events.error("send_failed", error=repr(e))
            trio.lowlevel.notify_closing(sock)

    async def _dispatch(self, frame, out: Outbox, sock, nursery) -> None:
        try:
            req = parse_request(frame, SERVED_APIS)
        except BadRequest as e:
            out.add(encode_frame(error_response(e.request_id, e.code, e.message)))
            return
        try:
            if req.api == Api.FETCH:
                header, pieces = await self._fetch(req, out, sock)
            elif req.api == Api.PRODUCE and req.fields["acks"] == -1:
                results, waits, deadline = self.broker.produce_acks_all_append(req)
                if waits:  # answered by a task once replicated; later requests go on
                    d = out.add_deferred()
                    nursery.start_soon(self._answer_later, out, d, sock, req, results, waits,
                                       deadline)
                    return
                header, pieces = {"parts": results}, []
            elif req.api == Api.INIT_PRODUCER_ID:
                if out.pieces:
                    await out.flush(sock)
                header, pieces = await self.broker.producer_ids.init_producer_id(req.fields), []
            elif req.api in GROUP_APIS:
                if self.broker.groups is None:
                    raise ApiError(ErrorCode.COORDINATOR_NOT_AVAILABLE, "the node is starting")
                if out.pieces:  # a join or a commit may wait: send earlier answers first
                    await out.flush(sock)
                header, pieces = await self.broker.groups.service.handle(req.api, req.fields), []
            elif self.broker.cluster_mode and req.api in QUORUM_WRITE_APIS:
                # a Raft commit takes milliseconds (seconds without a quorum): not on the loop
                header, pieces = await trio.to_thread.run_sync(self.broker.handle_sync, req)
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
            elif p.length < SENDFILE_MIN_BYTES:
                out.add(p.read_bytes())
            else:
                out.add_slice(p)

    async def _fetch(self, req, out: Outbox, sock):
        if req.fields["replica_id"] >= 0:
            self.broker.on_replica_fetch(req)
        headers, pieces, total, error = self.broker.fetch_once(req)
        if error or total >= req.fields["min_bytes"] or req.fields["max_wait_ms"] == 0:
            return {"parts": headers}, pieces
        # About to wait: first send what earlier pipelined requests produced.
        if out.pieces:
            await out.flush(sock)
        return await self.broker.fetch(req)

