"""The Producer: per-partition accumulators drained by one background I/O thread.

``send()`` only appends to lists under a lock (encoding happens once per batch in
the I/O thread with one ``encode_batch`` call). A batch is sealed when it reaches
``batch_size`` bytes or has waited ``linger_ms``; the I/O thread groups sealed
batches by partition leader into one PRODUCE request per node, keeps at most
``max_in_flight_requests_per_connection`` requests in flight per node, and
completes every record future of a batch in one step.

Bounds: ``buffer_memory`` bytes buffered (send blocks up to ``max_block_ms``),
``retries`` per batch, ``delivery_timeout_ms`` per batch, in-flight window per node.
"""

from __future__ import annotations

import selectors
import socket
import threading
import time
from collections import deque

from raftlog import records
from raftlog.errors import ApiError, ErrorCode
from raftlog.protocol import Api

from .conn import BrokerConnection, Cluster
from .errors import (
    BrokerNotAvailableError,
    BufferFullError,
    DeliveryTimeoutError,
    ProducerClosedError,
    UnknownTopicOrPartitionError,
    api_error,
)
from .future import BatchFuture, BatchResult, RecordFuture
from .partitioner import StickyPartitioner, partition_for_key

#: Per-record bytes counted toward batch_size besides key and value (lengths).
RECORD_OVERHEAD = 8
#: Batches sent in one PRODUCE request at most.
MAX_BATCHES_PER_REQUEST = 1000


def _now() -> float:
    return time.monotonic()


class _Batch:
    """Records for one partition, accumulated or sealed; encoded lazily once."""

    __slots__ = ("topic", "partition", "values", "keys", "headers", "timestamps", "size",
                 "created", "result", "data", "attempts", "deadline", "retry_at")

    def __init__(self, topic: str, partition: int, deadline: float, ts_ms: int):
        self.topic = topic
        self.partition = partition
        self.values: list = []
        self.keys: list | None = None
        self.headers: list | None = None
        self.timestamps: list | None = None
        self.size = 0
        self.created = _now()
        self.result = BatchResult(topic, partition, ts_ms)
        self.data: bytes | None = None
        self.attempts = 0
        self.deadline = deadline
        self.retry_at = 0.0

    def encode(self, compression: int) -> bytes:
        if self.data is None:
            self.data = records.encode_batch(
                self.values,
                self.keys,
                timestamp=self.result.timestamp,
                timestamps=self.timestamps,
                headers=self.headers,
                compression=compression,
            )
            self.values = self.keys = self.headers = self.timestamps = None  # free memory
        return self.data


def _acks(acks) -> int:
    if acks in ("all", -1, "-1"):
        return -1
    if acks in (0, "0"):
        return 0
    if acks in (1, "1"):
        return 1
    raise ValueError(f"acks must be 'all', -1, 0 or 1, not {acks!r}")


class Producer:
    """Publishes records to topics. Thread-safe; one background I/O thread.

    Args:
        bootstrap_servers: "host:port[,host:port]".
        acks: "all"/-1 (wait for the in-sync replicas), 1 (leader), 0 (no answer).
        linger_ms: how long a batch may wait for more records.
        batch_size: bytes at which a batch is sealed.
        compression_type: None, "lz4", "zstd" or "gzip".
        retries, retry_backoff_ms: retries of retriable errors per batch.
        request_timeout_ms: how long a request may go unanswered.
        delivery_timeout_ms: bound on the whole life of a record, retries included.
        max_in_flight_requests_per_connection: pipelined requests per node.
        enable_idempotence: requests idempotent delivery (needs acks="all").
        buffer_memory: bytes of unsent records at most; max_block_ms: how long
            send() waits for room before raising BufferFullError.
    """

    def __init__(
        self,
        bootstrap_servers: str = "127.0.0.1:9092",
        *,
        acks="all",
        linger_ms: float = 5,
        batch_size: int = 262_144,
        compression_type: str | None = None,
        retries: int = 2_147_483_647,
        retry_backoff_ms: int = 100,
        request_timeout_ms: int = 30_000,
        delivery_timeout_ms: int = 120_000,
        max_in_flight_requests_per_connection: int = 5,
        enable_idempotence: bool = True,
        buffer_memory: int = 32 * 1024 * 1024,
        max_block_ms: int = 60_000,
        client_id: str = "raftlog-producer",
    ):
        self.acks = _acks(acks)
        if enable_idempotence and self.acks != -1 and acks != "all":
            raise ValueError("enable_idempotence=True requires acks='all' (or set enable_idempotence=False)")
        if batch_size <= 0 or buffer_memory < batch_size:
            raise ValueError("batch_size must be positive and not above buffer_memory")
        if max_in_flight_requests_per_connection < 1:
            raise ValueError("max_in_flight_requests_per_connection must be at least 1")
        self.linger_s = max(linger_ms, 0) / 1000
        self.batch_size = batch_size
        self.compression = records.compression_code(compression_type)
        self.retries = retries
        self.retry_backoff_s = retry_backoff_ms / 1000
        self.request_timeout_s = request_timeout_ms / 1000
        self.delivery_timeout_s = delivery_timeout_ms / 1000
        self.max_in_flight = max_in_flight_requests_per_connection
        self.enable_idempotence = enable_idempotence
        self.buffer_memory = buffer_memory
        self.max_block_s = max_block_ms / 1000
        self.client_id = client_id

        self._meta = Cluster(bootstrap_servers, self.request_timeout_s)  # caller threads (under _meta_lock)
        self._meta_lock = threading.Lock()
        self._partition_counts: dict[str, int] = {}
        self._io_cluster = Cluster(bootstrap_servers, self.request_timeout_s)  # I/O thread only
        self._sticky = StickyPartitioner()

        self._lock = threading.Lock()
        self._room = threading.Condition(self._lock)
        self._open: dict[tuple[str, int], _Batch] = {}
        self._ready: deque[_Batch] = deque()
        self._buffered = 0
        self._incomplete = 0
        self._closed = False
        self._io_sleeping = False
        self._wake_r, self._wake_w = socket.socketpair()
        self._wake_r.setblocking(False)
        self._wake_w.setblocking(False)
        self._thread = threading.Thread(target=self._run, name="raftlog-producer-io", daemon=True)
        self._thread.start()

    # ------------------------------------------------------------------ public API

    def send(self, topic: str, value: bytes | None = None, key: bytes | None = None,
             headers=None, partition: int | None = None, timestamp_ms: int | None = None) -> RecordFuture:
        """Queue one record; returns a future whose result is a RecordMetadata.

        Durable when the future completes (per ``acks``). Raises ProducerClosedError,
        BufferFullError, or the topic's metadata error (unknown topic) at once.
        """
        if partition is None:
            n = self._partition_counts.get(topic) or self._num_partitions(topic)
            partition = self._sticky.partition(topic, n) if key is None else partition_for_key(key, n)
        elif not 0 <= partition < (self._partition_counts.get(topic) or 0):
            self._check_partition(topic, partition)
        size = (len(value) if value is not None else 0) + (len(key) if key is not None else 0) + RECORD_OVERHEAD
        with self._lock:
            b = self._open.get((topic, partition))
            if b is None:
                b = self._new_batch(topic, partition, size)
            i = len(b.values)
            b.values.append(value)
            if key is not None or b.keys is not None:
                if b.keys is None:
                    b.keys = [None] * i
                b.keys.append(key)
            if headers or b.headers is not None:
                if b.headers is None:
                    b.headers = [None] * i
                b.headers.append(list(headers) if headers else None)
            if timestamp_ms is not None or b.timestamps is not None:
                if b.timestamps is None:
                    b.timestamps = [b.result.timestamp] * i
                b.timestamps.append(b.result.timestamp if timestamp_ms is None else int(timestamp_ms))
            b.size += size
            self._buffered += size
            if b.size >= self.batch_size:
                self._seal(b)
            return RecordFuture(b.result, i)

    def send_many(self, topic: str, values: list, keys: list | None = None, partition: int | None = None,
                  headers: list | None = None, timestamp_ms: int | None = None):
        """Bulk path: the records go out as one batch (encoded with one call).

        Returns one BatchFuture (result: BatchMetadata with ``.offsets``). When
        ``keys`` are given without ``partition`` the records are spread by key, and
        when they exceed ``batch_size`` they are split: then a list of BatchFutures.
        """
        values = list(values)
        if not values:
            return []
        if partition is None and keys is not None:
            return self._send_many_by_key(topic, values, list(keys), headers, timestamp_ms)
        if partition is None:
            n = self._partition_counts.get(topic) or self._num_partitions(topic)
            partition = self._sticky.partition(topic, n)
        elif not 0 <= partition < (self._partition_counts.get(topic) or 0):
            self._check_partition(topic, partition)
        total = sum(map(len, filter(None, values))) + RECORD_OVERHEAD * len(values)
        chunks = max(1, -(-total // self.batch_size))
        per = -(-len(values) // chunks)
        futures = []
        for start in range(0, len(values), per):
            end = start + per
            futures.append(self._enqueue_batch(
                topic, partition, values[start:end], keys[start:end] if keys else None,
                headers[start:end] if headers else None, timestamp_ms,
                total * (end - start) // len(values)))
        return futures[0] if len(futures) == 1 else futures

    def flush(self, timeout: float | None = None) -> None:
        """Send everything queued and wait until every record is acknowledged or failed."""
        deadline = None if timeout is None else _now() + timeout
        with self._lock:
            for b in list(self._open.values()):
                self._seal(b)
            self._wake_locked(force=True)
            while self._incomplete:
                remaining = None if deadline is None else deadline - _now()
                if remaining is not None and remaining <= 0:
                    raise TimeoutError(f"flush did not finish within {timeout}s")
                self._room.wait(remaining if remaining is not None else 1.0)
                if not self._thread.is_alive():
                    break

    def partitions_for(self, topic: str) -> list[int]:
        return list(range(self._num_partitions(topic)))

    def close(self, timeout: float | None = None) -> None:
        """Flush, then stop the I/O thread and close connections."""
        if self._closed:
            return
        try:
            self.flush(timeout)
        finally:
            with self._lock:
                self._closed = True
                self._wake_locked(force=True)
            self._thread.join(timeout if timeout is not None else 30)
            self._meta.close()
            self._wake_r.close()
            self._wake_w.close()

    def __enter__(self) -> Producer:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # ------------------------------------------------------------------ accumulator (under _lock)

    def _num_partitions(self, topic: str) -> int:
        with self._meta_lock:
            parts = self._meta.partitions_for(topic)
            self._partition_counts[topic] = len(parts)
            return len(parts)

    def _check_partition(self, topic: str, partition: int) -> None:
        """Fail at once (as Kafka's send does) for a partition the topic does not have."""
        n = self._num_partitions(topic)
        if not 0 <= partition < n:
            raise UnknownTopicOrPartitionError(f"topic {topic!r} has {n} partitions; {partition} does not exist")

    def _new_batch(self, topic: str, partition: int, size: int) -> _Batch:
        if self._closed:
            raise ProducerClosedError("send() after close()")
        self._wait_for_room(size)
        b = _Batch(topic, partition, _now() + self.delivery_timeout_s, int(time.time() * 1000))
        self._open[(topic, partition)] = b
        self._incomplete += 1
        self._wake_locked()
        return b

    def _wait_for_room(self, size: int) -> None:
        deadline = _now() + self.max_block_s
        while self._buffered + size > self.buffer_memory and self._buffered:
            remaining = deadline - _now()
            if remaining <= 0:
                raise BufferFullError(
                    f"{self._buffered} bytes buffered (buffer_memory={self.buffer_memory}) for "
                    f"{self.max_block_s}s: the nodes are not keeping up or are unreachable"
                )
            self._room.wait(remaining)

    def _seal(self, b: _Batch) -> None:
        if self._open.get((b.topic, b.partition)) is b:
            del self._open[(b.topic, b.partition)]
            self._ready.append(b)
            n = self._partition_counts.get(b.topic)
            if n:
                self._sticky.on_new_batch(b.topic, n, b.partition)
            self._wake_locked(force=True)

    def _wake_locked(self, force: bool = False) -> None:
        if self._io_sleeping or force:
            self._io_sleeping = False
            try:
                self._wake_w.send(b"x")
            except OSError:
                pass  # the pipe is full: the thread is awake anyway

    def _enqueue_batch(self, topic, partition, values, keys, headers, timestamp_ms, size) -> BatchFuture:
        with self._lock:
            if self._closed:
                raise ProducerClosedError("send_many() after close()")
            self._wait_for_room(size)
            prev = self._open.get((topic, partition))
            if prev is not None:
                self._seal(prev)  # keep per-partition order
            ts = int(time.time() * 1000) if timestamp_ms is None else int(timestamp_ms)
            b = _Batch(topic, partition, _now() + self.delivery_timeout_s, ts)
            b.values, b.keys = values, keys
            b.headers = [list(h) if h else None for h in headers] if headers else None
            b.size = size
            self._buffered += size
            self._incomplete += 1
            self._ready.append(b)
            self._wake_locked(force=True)
            return BatchFuture(b.result, len(values))

    def _send_many_by_key(self, topic, values, keys, headers, timestamp_ms) -> list:
        n = self._partition_counts.get(topic) or self._num_partitions(topic)
        groups: dict[int, list[int]] = {}
        for i, k in enumerate(keys):
            p = partition_for_key(k, n) if k is not None else self._sticky.partition(topic, n)
            groups.setdefault(p, []).append(i)
        out = []
        for p, idx in groups.items():
            f = self.send_many(topic, [values[i] for i in idx], [keys[i] for i in idx], p,
                               [headers[i] for i in idx] if headers else None, timestamp_ms)
            out.extend(f if isinstance(f, list) else [f])
        return out

    # ------------------------------------------------------------------ I/O thread

    def _run(self) -> None:
        io = _ProducerIO(self)
        try:
            io.loop()
        except BaseException as e:  # never leave futures hanging
            io.fail_everything(e)
            raise

    def _complete(self, b: _Batch, base_offset: int = -1, error: BaseException | None = None) -> None:
        b.result.complete(base_offset, error)
        with self._lock:
            self._buffered -= b.size
            self._incomplete -= 1
            self._room.notify_all()


class _ProducerIO:
    """The I/O thread's state: ready batches per node, in-flight requests."""

    def __init__(self, producer: Producer):
        self.p = producer
        self.cluster = producer._io_cluster
        self.sel = selectors.DefaultSelector()
        self.sel.register(producer._wake_r, selectors.EVENT_READ, None)
        self.pending: deque[_Batch] = deque()
        self.in_flight: dict[BrokerConnection, deque] = {}

    def loop(self) -> None:
        p = self.p
        while True:
            with p._lock:
                now = _now()
                for b in [b for b in p._open.values() if now - b.created >= p.linger_s]:
                    p._seal(b)
                while p._ready:
                    self.pending.append(p._ready.popleft())
                if p._closed and not self.pending and not p._open and not self._any_in_flight():
                    break
                timeout = self._timeout(now)
                p._io_sleeping = timeout is None or timeout > 0
            self._send_pending()
            self._wait(timeout if not self.pending else min(timeout or 0.005, 0.005))
        self.cluster.close()

    def _any_in_flight(self) -> bool:
        return any(self.in_flight.values())

    def _timeout(self, now: float) -> float | None:
        deadlines = [b.created + self.p.linger_s for b in self.p._open.values()]
        if self.pending:
            deadlines.append(min(b.retry_at for b in self.pending))
        if self._any_in_flight():
            deadlines.append(now + 0.1)  # check request timeouts
        if not deadlines:
            return None
        return max(0.0, min(deadlines) - now)

    def _wait(self, timeout: float | None) -> None:
        for key, _ in self.sel.select(timeout):
            if key.data is None:
                try:
                    self.p._wake_r.recv(4096)
                except OSError:
                    pass
                continue
            conn = key.data
            try:
                conn.read_some()
                while (frame := conn.poll_response()) is not None:
                    self._on_response(conn, frame)
            except BrokerNotAvailableError as e:
                self._on_connection_lost(conn, e)
        self._check_request_timeouts()

    # -------------------------------------------------------------- sending

    def _send_pending(self) -> None:
        now = _now()
        by_leader: dict[int, list[_Batch]] = {}
        keep: deque[_Batch] = deque()
        while self.pending:
            b = self.pending.popleft()
            if now >= b.deadline:
                self._fail(b, DeliveryTimeoutError(
                    f"{b.topic}-{b.partition}: not acknowledged within delivery_timeout_ms "
                    f"after {b.attempts} attempt(s)"))
                continue
            if b.retry_at > now:
                keep.append(b)
                continue
            try:
                leader = self.cluster.leader_for(b.topic, b.partition)
            except ApiError as e:
                self._retry_or_fail(b, e)
                continue
            except BrokerNotAvailableError as e:
                self._retry_or_fail(b, e)
                continue
            by_leader.setdefault(leader, []).append(b)
        self.pending = keep
        for leader, batches in by_leader.items():
            self._send_to(leader, batches)

    def _send_to(self, leader: int, batches: list[_Batch]) -> None:
        try:
            conn = self.cluster.connection(leader)
        except BrokerNotAvailableError as e:
            for b in batches:
                self._retry_or_fail(b, e)
            return
        q = self.in_flight.setdefault(conn, deque())
        while batches:
            if len(q) >= self.p.max_in_flight:
                self.pending.extendleft(reversed(batches))
                return
            chunk, batches = batches[:MAX_BATCHES_PER_REQUEST], batches[MAX_BATCHES_PER_REQUEST:]
            datas = [b.encode(self.p.compression) for b in chunk]
            parts = [[b.topic, b.partition, len(d)] for b, d in zip(chunk, datas)]
            fields = {"acks": self.p.acks, "timeout_ms": int(self.p.request_timeout_s * 1000), "parts": parts}
            try:
                if not q:
                    self._register(conn)
                conn.send(Api.PRODUCE, fields, b"".join(datas), expect_response=self.p.acks != 0)
            except BrokerNotAvailableError as e:
                self._on_connection_lost(conn, e, extra=chunk + batches)
                return
            for b in chunk:
                b.attempts += 1
            if self.p.acks == 0:
                for b in chunk:
                    self.p._complete(b, -1)
            else:
                q.append((_now(), chunk))

    def _register(self, conn: BrokerConnection) -> None:
        try:
            self.sel.register(conn.sock, selectors.EVENT_READ, conn)
        except KeyError:
            pass

    # -------------------------------------------------------------- responses

    def _on_response(self, conn: BrokerConnection, frame) -> None:
        q = self.in_flight.get(conn)
        _, chunk = q.popleft()
        if not q:
            self._unregister(conn)
        h = frame.header
        if h.get("error"):
            err = api_error(h["error"], h.get("message", ""))
            for b in chunk:
                self._retry_or_fail(b, err)
            return
        for b, part in zip(chunk, h.get("parts", [])):
            code = part[2]
            if code == 0:
                self.p._complete(b, part[3])
            else:
                self._retry_or_fail(b, api_error(code, part[5] if len(part) > 5 else ""))

    def _unregister(self, conn: BrokerConnection) -> None:
        try:
            self.sel.unregister(conn.sock)
        except (KeyError, ValueError):
            pass

    def _on_connection_lost(self, conn: BrokerConnection, err: Exception, extra=()) -> None:
        self._unregister(conn)
        conn.close()
        lost = [b for _, chunk in self.in_flight.pop(conn, ()) for b in chunk]
        for b in lost + list(extra):
            self._retry_or_fail(b, err)
        self.cluster.topics.clear()  # leaders may have moved

    def _check_request_timeouts(self) -> None:
        now = _now()
        for conn, q in list(self.in_flight.items()):
            if q and now - q[0][0] > self.p.request_timeout_s:
                self._on_connection_lost(conn, BrokerNotAvailableError(
                    f"{conn.host}:{conn.port} did not answer within request_timeout_ms"))

    def _retry_or_fail(self, b: _Batch, err: Exception) -> None:
        retriable = isinstance(err, BrokerNotAvailableError) or (isinstance(err, ApiError) and err.retriable)
        if retriable and b.attempts <= self.p.retries and _now() < b.deadline:
            if isinstance(err, ApiError) and err.code in (
                ErrorCode.NOT_LEADER_OR_FOLLOWER, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                ErrorCode.LEADER_NOT_AVAILABLE, ErrorCode.FENCED_LEADER_EPOCH,
            ):
                self.cluster.topics.pop(b.topic, None)
            b.retry_at = _now() + self.p.retry_backoff_s
            self.pending.append(b)
            return
        self._fail(b, err)

    def _fail(self, b: _Batch, err: BaseException) -> None:
        self.p._complete(b, -1, err)

    def fail_everything(self, err: BaseException) -> None:
        for q in self.in_flight.values():
            for _, chunk in q:
                for b in chunk:
                    self._fail(b, err)
        for b in list(self.pending):
            self._fail(b, err)
        with self.p._lock:
            batches = list(self.p._open.values()) + list(self.p._ready)
            self.p._open.clear()
            self.p._ready.clear()
        for b in batches:
            self._fail(b, err)
