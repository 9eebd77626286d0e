"""The Kafka wire-protocol listener (``kafka.listener=HOST:PORT``; off by default).

A second codec in front of the same node: frames are split and decoded by
raftlog.kafka_wire (sans-IO), each request is answered by node/kafka_handlers.py,
which calls the broker and group coordinator the native server calls.

Per connection, requests are handled one at a time, in order, as a Kafka broker
does (it stops reading a connection while a request is in flight); every response
ready after one read goes out in one send, and pending responses are sent before a
request that may wait (acks=all, a long-poll fetch, a rebalance, a metadata write).

What a client sends never takes the node down:

* an API or version outside what ApiVersions advertises gets an UNSUPPORTED_VERSION
  answer (a full ApiVersions v0 response for ApiVersions, else the correlation id and
  the error code) and the connection stays open;
* a frame that does not decode (lying lengths, garbage, over ``max.frame.bytes``)
  closes that connection only, with a warning in the node's log;
* a handler bug answers nothing, closes that connection and logs ``kafka_handler_failed``.
"""

from __future__ import annotations

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
    peek_header,
)

from .kafka_handlers import Context, KafkaApis

RECV_BYTES = 256 * 1024
#: Connections served at once; further ones are accepted and closed at once.
MAX_CONNECTIONS = 4096
#: Responses coalesced before a send even if more requests are buffered.
MAX_PENDING_SEND_BYTES = 4 * 1024 * 1024
#: APIs whose handler may wait: earlier answers are sent first.
_MAY_WAIT = frozenset({0, 1, 11, 14, 19, 20, 22, 8})
_UNSUPPORTED = KAFKA["UNSUPPORTED_VERSION"]


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
        except KafkaDecodeError as e:
            self.events.warning("connection_closed", peer=host, reason=str(e), listener="kafka")
        except (trio.BrokenResourceError, trio.ClosedResourceError, ConnectionError):
            pass
        finally:
            self.connections -= 1
            await stream.aclose()

    async def _serve_connection(self, stream: trio.SocketStream, host: str) -> None:
        decoder = FrameDecoder(self.config.max_frame_bytes)
        out: list[bytes] = []
        size = 0
        while True:
            data = await stream.receive_some(RECV_BYTES)
            if not data:
                return
            decoder.receive_data(data)
            while True:
                payload = decoder.next_frame()
                if payload is None:
                    break
                head = peek_header(payload)
                if head is not None and head[0] in _MAY_WAIT and out:
                    await stream.send_all(b"".join(out))
                    out, size = [], 0
                frame = await self._answer(payload, host)
                if frame is not None:
                    out.append(frame)
                    size += len(frame)
                if size >= MAX_PENDING_SEND_BYTES:
                    await stream.send_all(b"".join(out))
                    out, size = [], 0
            if out:
                await stream.send_all(b"".join(out))
                out, size = [], 0

    async def _answer(self, payload: bytes, host: str) -> bytes | None:
        """The response frame of one request payload (None: no response)."""
        try:
            req = decode_request(payload)
        except UnsupportedRequest as e:
            return self._unsupported(e)
        h = req.header
        ctx = Context(h.client_id, host, h.correlation_id)
        try:
            body = await self.apis.handlers[h.api_key](h.api_version, req.body, ctx)
            if body is None:
                return None
            return encode_response(h.api_key, h.api_version, h.correlation_id, body)
        except Exception as e:  # our bug: log it, drop this connection, keep serving others
            self.events.error("kafka_handler_failed", api=h.api_key, version=h.api_version,
                              error=repr(e))
            raise KafkaDecodeError(f"internal error answering api {h.api_key}: {e!r}") from None

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
