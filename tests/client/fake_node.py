"""A scripted fake node for client tests: the real codec over a loopback socket.

It answers METADATA from a fixed description and PRODUCE through a callback that
can return error codes, so retry, ordering and routing logic are tested exactly,
without a node process. Each FakeNode serves one connection at a time on its own
thread; it is not a broker (no storage beyond a list of appended batches).
"""

from __future__ import annotations

import socket
import threading

from raftlog import records
from raftlog.errors import ErrorCode
from raftlog.producer_state import ProducerStateManager, Verdict
from raftlog.protocol import Api, FrameDecoder, encode_frame, parse_request, split_body


class LoopbackNode:
    """The serving loop: one thread per connection, frames decoded with the real codec,
    each request answered with ``self._handle(req)`` (a header dict, or None for no
    answer)."""

    def __init__(self) -> None:
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port = self._listener.getsockname()[1]
        self._closed = False
        self._thread = threading.Thread(target=self._accept_loop, daemon=True)
        self._thread.start()

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    def close(self) -> None:
        self._closed = True
        self._listener.close()

    def _accept_loop(self) -> None:
        while not self._closed:
            try:
                sock, _ = self._listener.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(sock,), daemon=True).start()

    def _serve(self, sock: socket.socket) -> None:
        decoder = FrameDecoder()
        with sock:
            while True:
                try:
                    data = sock.recv(1 << 20)
                except OSError:
                    return
                if not data:
                    return
                decoder.receive_data(data)
                while (frame := decoder.next_frame()) is not None:
                    req = parse_request(frame)
                    header = self._handle(req)
                    if header is not None:
                        header = {"error": 0, **header, "id": req.id}
                        sock.sendall(encode_frame(header))

    def _handle(self, req) -> dict | None:
        raise NotImplementedError


class ScriptedNode(LoopbackNode):
    """Answers each request with ``handler(api, fields)``: a header dict, which may
    carry "error" and "message" (a whole-request error). Records every request."""

    def __init__(self, handler):
        self.handler = handler
        self.requests: list = []
        super().__init__()

    def _handle(self, req) -> dict:
        self.requests.append((req.api, req.fields))
        return self.handler(req.api, req.fields)


class FakeNode(LoopbackNode):
    """``produce_error(topic, partition, attempt) -> ErrorCode`` (or ``(ErrorCode,
    message)``) decides each PRODUCE part."""

    def __init__(self, node_id: int = 1, topics: dict | None = None, produce_error=None):
        self.node_id = node_id
        self.topics = topics or {"t": 1}  # name -> partition count
        self.leaders: dict[tuple[str, int], int] = {}  # default: this node leads everything
        self.brokers: dict[int, tuple[str, int]] = {}
        self.produce_error = produce_error or (lambda topic, partition, attempt: ErrorCode.NONE)
        self.appended: list[tuple[str, int, list[bytes]]] = []  # (topic, partition, values)
        self.attempts: dict[tuple[str, int], int] = {}
        self.metadata_requests = 0
        self._next_offset: dict[tuple[str, int], int] = {}
        self._producers: dict[tuple[str, int], ProducerStateManager] = {}
        super().__init__()
        self.brokers[node_id] = ("127.0.0.1", self.port)

    # ------------------------------------------------------------------ serving

    def _handle(self, req) -> dict | None:
        if req.api == Api.METADATA:
            self.metadata_requests += 1
            return self._metadata(req.fields["topics"])
        if req.api == Api.PRODUCE:
            parts = self._produce(req)
            return None if req.fields["acks"] == 0 else {"parts": parts}
        if req.api == Api.INIT_PRODUCER_ID:
            self.producer_ids_issued = getattr(self, "producer_ids_issued", 0) + 1
            return {"producer_id": 1000 + self.producer_ids_issued, "producer_epoch": 0}
        raise AssertionError(f"fake node does not serve {req.api.name}")

    def _metadata(self, wanted) -> dict:
        names = self.topics if wanted is None else wanted
        topics = []
        for name in names:
            n = self.topics.get(name)
            if n is None:
                topics.append(
                    {
                        "name": name,
                        "error": int(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION),
                        "partitions": [],
                    }
                )
                continue
            parts = [
                [p, 0, self.leaders.get((name, p), self.node_id), 0, [1], [1], []] for p in range(n)
            ]
            topics.append({"name": name, "error": 0, "partitions": parts})
        brokers = [[i, h, p, None, False] for i, (h, p) in self.brokers.items()]
        return {
            "cluster_id": "fake",
            "controller_id": self.node_id,
            "node_id": self.node_id,
            "brokers": brokers,
            "topics": topics,
        }

    def _produce(self, req) -> list:
        out = []
        bodies = split_body(req.body, [n for _, _, n in req.fields["parts"]])
        for (topic, partition, _), body in zip(req.fields["parts"], bodies):
            key = (topic, partition)
            attempt = self.attempts[key] = self.attempts.get(key, 0) + 1
            code, message = self.produce_error(topic, partition, attempt), "scripted"
            if isinstance(code, tuple):  # (code, message)
                code, message = code
            if code:
                out.append([topic, partition, int(code), -1, -1, message])
                continue
            h = records.read_header(bytes(body), 0)
            state = self._producers.setdefault(key, ProducerStateManager())
            if h.producer_id >= 0:  # sequence rules of a real node (the pure core it uses)
                check = state.check(h.producer_id, h.producer_epoch, h.base_sequence,
                                    h.last_offset_delta + 1)
                if check.verdict is Verdict.DUPLICATE:
                    out.append([topic, partition, 0, check.duplicate.base_offset, -1, ""])
                    continue
                if check.verdict is not Verdict.APPEND:
                    out.append([topic, partition, int(check.error_code), -1, -1, check.message])
                    continue
            values = [r.value for r in records.decode_batches(bytes(body), topic, partition)]
            base = self._next_offset.get(key, 0)
            self._next_offset[key] = base + len(values)
            if h.producer_id >= 0:
                state.update(h.producer_id, h.producer_epoch, h.base_sequence, len(values),
                             base, h.max_timestamp)
            self.appended.append((topic, partition, values))
            out.append([topic, partition, 0, base, -1, ""])
        return out
