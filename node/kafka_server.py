"""The Kafka wire-protocol listener (``kafka.listener=HOST:PORT``; off by default).

A second codec in front of the same node: frames are split and decoded by
raftlog.kafka_wire (sans-IO), each request is answered by node/kafka_handlers.py,
which calls the broker and group coordinator the native server calls.

Per connection, requests are handled in order and answered in order. An acks=all
produce is appended at once and waits for the ISR in a task while the connection's
next requests are read (as the native server does: a producer with several requests
in flight pays one replication round for all of them); any other request that waits
(a long-poll fetch, a rebalance, a metadata write) holds the connection's reading, as
a Kafka broker does. A writer task sends the answers that are ready in one send.

What a client sends never takes the node down:

* an API or version outside what ApiVersions advertises gets an UNSUPPORTED_VERSION
  answer (a full ApiVersions v0 response for ApiVersions, else the correlation id and
  the error code) and the connection stays open;
* a frame that does not decode (lying lengths, garbage, over ``max.frame.bytes``)
  closes that connection only, with a warning in the node's log;
* a handler bug answers nothing, closes that connection and logs ``kafka_handler_failed``.
"""

from __future__ import annotations

import collections
import struct

import trio

from raftlog.kafka_errors import KAFKA
from raftlog.kafka_wire import (
    API_VERSIONS_KEY,
    SUPPORTED,
    FrameDecoder,
    KafkaDecodeError,
    UnsupportedRequest,
    decode_request,
    encode_response,
)

from .kafka_handlers import Context, KafkaApis

RECV_BYTES = 256 * 1024
#: Connections served at once; further ones are accepted and closed at once.
MAX_CONNECTIONS = 4096
#: Requests of one connection read but not yet answered (acks=all produces waiting for
#: replication among them); the reader stops reading that connection at this many.
MAX_IN_FLIGHT = 64
PRODUCE_KEY = 0
_UNSUPPORTED = KAFKA["UNSUPPORTED_VERSION"]


class _Slot:
    """One request's place in the connection's answer order."""

    __slots__ = ("frame", "done")

    def __init__(self) -> None:
        self.frame: bytes | None = None
        self.done = trio.Event()

    def fill(self, frame: bytes | None) -> None:
        self.frame = frame
        self.done.set()


class KafkaServer:
    """One node's Kafka listener over its broker."""

    def __init__(self, config, broker, events):
        self.config = config
        self.broker = broker
        self.events = events
        self.connections = 0
        self.address: tuple[str, int] | None = None
        self.apis = KafkaApis(broker, config, self.kafka_address)

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
        listeners = await trio.open_tcp_listeners(self.config.kafka_port,
                                                  host=self.config.kafka_host, backlog=1024)
        addr = listeners[0].socket.getsockname()
        self.address = (addr[0], addr[1])
        self.events.info("kafka_listening", host=addr[0], port=addr[1])
        async with trio.open_nursery() as nursery:
            task_status.started(self.address)
            await trio.serve_listeners(self._handle, listeners, handler_nursery=nursery)

    async def _handle(self, stream: trio.SocketStream) -> None:
        try:
            peer = stream.socket.getpeername()
            host = f"{peer[0]}"
        except OSError:
            host = ""
        if self.connections >= MAX_CONNECTIONS:
            self.events.warning("connection_refused", peer=host, reason="too many connections",
                                listener="kafka")
            await stream.aclose()
            return
        self.connections += 1
        try:
            await self._serve_connection(stream, host)
        finally:
            self.connections -= 1
            await stream.aclose()

    async def _serve_connection(self, stream: trio.SocketStream, host: str) -> None:
        """A reader that handles requests in order and a writer that sends their answers
        in order, joined by a bounded queue of answer slots. Every failure ends in this
        nursery's cancellation (never an exception out of it): the connection closes."""
        send_ch, recv_ch = trio.open_memory_channel(MAX_IN_FLIGHT)
        async with trio.open_nursery() as nursery:
            nursery.start_soon(self._writer, stream, recv_ch, nursery.cancel_scope)
            try:
                await self._reader(stream, host, send_ch, nursery)
            except KafkaDecodeError as e:
                self.events.warning("connection_closed", peer=host, reason=str(e),
                                    listener="kafka")
                nursery.cancel_scope.cancel()
            except (trio.BrokenResourceError, trio.ClosedResourceError, ConnectionError):
                nursery.cancel_scope.cancel()
            finally:
                send_ch.close()  # the writer sends what is pending, then ends

    async def _reader(self, stream, host: str, send_ch, nursery) -> None:
        decoder = FrameDecoder(self.config.max_frame_bytes)
        while True:
            data = await stream.receive_some(RECV_BYTES)
            if not data:
                return
            decoder.receive_data(data)
            while (payload := decoder.next_frame()) is not None:
                slot = _Slot()
                try:  # no checkpoint while there is room: answers of one read go in one send
                    send_ch.send_nowait(slot)
                except trio.WouldBlock:
                    await send_ch.send(slot)  # MAX_IN_FLIGHT answers pending: wait for room
                await self._answer(payload, host, slot, nursery)

    async def _writer(self, stream, recv_ch, cancel_scope) -> None:
        """Send answers in request order, every ready one in one send."""
        pending: collections.deque = collections.deque()
        try:
            async with recv_ch:
                while True:
                    if not pending:
                        try:
                            pending.append(await recv_ch.receive())
                        except trio.EndOfChannel:
                            return
                    await pending[0].done.wait()
                    out = []
                    while pending and pending[0].done.is_set():
                        frame = pending.popleft().frame
                        if frame is not None:
                            out.append(frame)
                        if not pending:
                            try:
                                pending.append(recv_ch.receive_nowait())
                            except (trio.WouldBlock, trio.EndOfChannel):
                                break
                    if out:
                        await stream.send_all(b"".join(out))
        except (trio.BrokenResourceError, trio.ClosedResourceError, ConnectionError):
            cancel_scope.cancel()

    async def _answer(self, payload: bytes, host: str, slot: _Slot, nursery) -> None:
        """Fill ``slot`` with the response frame of one request payload (None: none).
        An acks=all produce is appended now and answered by a task once replicated."""
        try:
            req = decode_request(payload)
        except UnsupportedRequest as e:
            slot.fill(self._unsupported(e))
            return
        h = req.header
        ctx = Context(h.client_id, host, h.correlation_id)
        try:
            if h.api_key == PRODUCE_KEY:
                body, finish = self.apis.produce_begin(h.api_version, req.body, ctx)
                if finish is not None:
                    nursery.start_soon(self._finish, h, finish, slot, nursery.cancel_scope)
                    return
            else:
                body = await self.apis.handlers[h.api_key](h.api_version, req.body, ctx)
            slot.fill(None if body is None else
                      encode_response(h.api_key, h.api_version, h.correlation_id, body))
        except Exception as e:  # our bug: log it, drop this connection, keep serving others
            self.events.error("kafka_handler_failed", api=h.api_key, version=h.api_version,
                              error=repr(e))
            raise KafkaDecodeError(f"internal error answering api {h.api_key}: {e!r}") from None

    async def _finish(self, h, finish, slot: _Slot, cancel_scope) -> None:
        try:
            body = await finish()
            slot.fill(encode_response(h.api_key, h.api_version, h.correlation_id, body))
        except Exception as e:  # our bug: log it and drop the connection
            self.events.error("kafka_handler_failed", api=h.api_key, version=h.api_version,
                              error=repr(e))
            cancel_scope.cancel()

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
