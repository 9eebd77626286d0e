"""The producer's record accumulator: pure batching logic, no sockets.

Records of one partition collect in an *open* batch (plain Python lists; nothing
is encoded on the caller's thread). A batch is *sealed* -- moved to the ready
queue -- when it reaches ``batch_size`` bytes (a record that would take it past
``batch_size`` starts the next batch), on ``flush()``, or when the sender
drains it: an open batch that has waited ``linger_s`` is *ready*, and the sender
drains it only while its partition can take another request (Kafka's rule). So
while a partition waits for acknowledgements, its records keep joining one open
batch instead of queueing as many one-record batches: a producer sending faster
than round trips return sends bigger batches, never a growing backlog. A send_many
chunk that fits joins the open batch the same way (its records consecutive in it). The I/O
thread encodes each batch with one ``encode_batch`` call and completes all of a
batch's futures in one step.

Bounds: ``buffer_memory`` bytes accumulated and unacknowledged (``append`` waits
up to ``max_block_s`` for room, then raises BufferFullError).
"""

from __future__ import annotations

import bisect
import itertools
import operator
import threading
import time
from collections import deque
from collections.abc import Callable

from raftlog import records

from .errors import BufferFullError, ProducerClosedError
from .future import BatchFuture, BatchResult, RecordFuture

#: Per-record bytes counted toward batch_size besides key and value (lengths).
RECORD_OVERHEAD = 8


def _now() -> float:
    return time.monotonic()


class ProducerBatch:
    """Records for one partition, accumulated or sealed; encoded lazily once."""

    __slots__ = (
        "topic",
        "partition",
        "seq",
        "values",
        "keys",
        "headers",
        "timestamps",
        "size",
        "created",
        "result",
        "data",
        "attempts",
        "deadline",
        "retry_at",
        "producer_id",
        "flying",
        "last_error",
        "storage_errors",
        "storage_refusals",
        "leader_epoch",
    )

    def __init__(self, topic: str, partition: int, deadline: float, ts_ms: int, seq: int = 0):
        self.topic = topic
        self.partition = partition
        self.seq = seq  # creation order within the producer: in-order mode sends by it
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
        self.producer_id = records.NO_PRODUCER_ID
        self.flying = False  # sent and not yet answered (counts toward the in-flight limit)
        self.last_error: BaseException | None = None  # the latest retriable error it met
        self.storage_errors = 0  # KAFKA_STORAGE_ERROR answers so far (see producer.py)
        self.storage_refusals = 0  # of those, answers that appended nothing
        self.leader_epoch = -1  # the partition's leader epoch its latest attempt went under

    def __len__(self) -> int:
        return len(self.values) if self.values is not None else -1

    def encode(self, compression: int, producer_id: int = records.NO_PRODUCER_ID,
               producer_epoch: int = records.NO_PRODUCER_EPOCH,
               base_sequence: int = records.NO_SEQUENCE, transactional: bool = False) -> bytes:
        """The batch's bytes, built once: the producer id and sequence of the first
        encoding stay with the batch through every retry (idempotence needs that)."""
        if self.data is None:
            self.data = records.encode_batch(
                self.values,
                self.keys,
                timestamp=self.result.timestamp,
                timestamps=self.timestamps,
                headers=self.headers,
                compression=compression,
                producer_id=producer_id,
                producer_epoch=producer_epoch,
                base_sequence=base_sequence,
                transactional=transactional,
            )
            self.producer_id = producer_id
            self.values = self.keys = self.headers = self.timestamps = None  # free memory
        return self.data


def split_chunks(values: list, keys, batch_size: int) -> list[tuple[int, int, int]]:
    """Cut a send_many call's records into chunks of at most ``batch_size`` bytes:
    ``(start, end, size)`` each, in order. Records are split evenly by count, and a
    chunk whose records are larger than the average (sizes vary) is cut again, each
    piece as full as ``batch_size`` allows -- a record larger than it goes alone.
    Raises TypeError for an item with no length (the caller names it)."""
    n = len(values)
    cum = _cumulative_lengths(values)
    if keys is not None:
        cum = list(map(operator.add, cum, _cumulative_lengths(keys)))

    def size(start: int, end: int) -> int:
        return cum[end] - cum[start] + RECORD_OVERHEAD * (end - start)

    total = size(0, n)
    chunks = max(1, -(-total // batch_size))
    per = -(-n // chunks) if n else 1
    out: list[tuple[int, int, int]] = []
    ends = None  # bytes up to each record, overheads included (only when sizes vary)
    for start in range(0, n, per):
        end = min(start + per, n)
        got = size(start, end)
        if got <= batch_size or end - start == 1:
            out.append((start, end, got))
            continue
        if ends is None:
            ends = [c + RECORD_OVERHEAD * i for i, c in enumerate(cum)]
        pos = start
        while pos < end:  # greedy: as many records as fit, a larger one alone
            nxt = max(pos + 1, bisect.bisect_right(ends, ends[pos] + batch_size, pos, end + 1) - 1)
            out.append((pos, nxt, size(pos, nxt)))
            pos = nxt
    return out


def _cumulative_lengths(items: list) -> list[int]:
    """[0, len(items[0]), len(items[0]) + len(items[1]), ...]; None counts 0."""
    try:
        return list(itertools.accumulate(map(len, items), initial=0))
    except TypeError:  # (a None among them: the slower way; anything else raises again)
        return list(itertools.accumulate((0 if x is None else len(x) for x in items),
                                         initial=0))


def record_size(value, key) -> int:
    """Bytes a record counts toward batch_size and buffer_memory."""
    return (
        (len(value) if value is not None else 0)
        + (len(key) if key is not None else 0)
        + RECORD_OVERHEAD
    )


class RecordAccumulator:
    """Open and ready batches under one lock, shared by callers and the I/O thread.

    ``on_seal(topic, partition)`` runs (under the lock) when a batch is sealed --
    the sticky partitioner moves on. ``wake()`` (under the lock) nudges the I/O
    thread; it is only called when that thread may be asleep or must act now.
    """

    def __init__(
        self,
        *,
        batch_size: int,
        linger_s: float,
        buffer_memory: int,
        max_block_s: float,
        delivery_timeout_s: float,
        on_seal: Callable[[str, int], None] | None = None,
        wake: Callable[[], None] | None = None,
    ):
        if batch_size <= 0 or buffer_memory < batch_size:
            raise ValueError(
                f"batch_size must be positive and not above buffer_memory (batch_size "
                f"{batch_size}, buffer_memory {buffer_memory}): lower batch_size or raise "
                "buffer_memory")
        self.batch_size = batch_size
        self.linger_s = linger_s
        self.buffer_memory = buffer_memory
        self.max_block_s = max_block_s
        self.delivery_timeout_s = delivery_timeout_s
        self._on_seal = on_seal or (lambda topic, partition: None)
        self._wake = wake or (lambda: None)
        self.lock = threading.Lock()
        self._room = threading.Condition(self.lock)
        self.open: dict[tuple[str, int], ProducerBatch] = {}
        self.ready: deque[ProducerBatch] = deque()
        self.buffered = 0  # bytes appended and not yet completed
        self.incomplete = 0  # batches created and not yet completed
        self.closed = False
        self.io_sleeping = False  # set by the I/O thread before it blocks
        self._seq = itertools.count()

    # ------------------------------------------------------------------ caller side

    def append(
        self, topic: str, partition: int, value, key, headers, timestamp_ms, wake: bool = True
    ) -> RecordFuture:
        """Add one record to its partition's open batch (creating it); seal when full.

        ``wake=False``: the caller drives the I/O itself next (or calls ``wake_io``)."""
        size = record_size(value, key)
        with self.lock:
            b = self.open.get((topic, partition))
            if b is not None and b.size + size > self.batch_size:
                # (Kafka's rule: a record that would take the batch past batch_size
                # starts the next one, so a batch stays within batch_size -- and under
                # a topic's max.message.bytes -- unless one record alone exceeds it)
                self._seal(b, wake)
                b = None
            if b is None:
                b = self._new_batch(topic, partition, size, wake)
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
                b.timestamps.append(
                    b.result.timestamp if timestamp_ms is None else int(timestamp_ms)
                )
            b.size += size
            self.buffered += size
            if b.size >= self.batch_size:
                self._seal(b)
            return RecordFuture(b.result, i)

    def append_batch(
        self, topic: str, partition: int, values: list, keys, headers, timestamp_ms, size: int
    ) -> BatchFuture:
        """Queue the records of one send_many chunk as consecutive records of one batch
        (the bulk path). When they fit in the partition's open batch (``batch_size``)
        and carry no timestamp of their own they join it, as send()'s records do: while
        the partition's window is full, small send_many calls grow one batch instead of
        queueing one small batch each (the window counts batches: five of ten records
        each went out per round trip). Otherwise the open batch is sealed first (order
        kept) and the records start a batch of their own, sealed at once when it is
        full."""
        with self.lock:
            if self.closed:
                raise ProducerClosedError("send_many() after close()")
            self._wait_for_room(size)
            key = (topic, partition)
            prev = self.open.get(key)
            if prev is not None and timestamp_ms is None and prev.size + size <= self.batch_size:
                return self._join(prev, values, keys, headers, size)
            if prev is not None:
                self._seal(prev)  # keep per-partition order
            ts = int(time.time() * 1000) if timestamp_ms is None else int(timestamp_ms)
            b = ProducerBatch(topic, partition, _now() + self.delivery_timeout_s, ts,
                              next(self._seq))
            self.open[key] = b
            self.incomplete += 1
            fut = self._join(b, values, keys, headers, size)
            if self.open.get(key) is b:  # (sealed when full: _seal woke the sender)
                self._wake()
            return fut

    def _join(self, b: ProducerBatch, values: list, keys, headers, size: int) -> BatchFuture:
        """Add a send_many chunk's records to ``b`` (under the lock); seal it when full."""
        i = len(b.values)
        n = len(values)
        b.values.extend(values)
        if keys is not None or b.keys is not None:
            if b.keys is None:
                b.keys = [None] * i
            b.keys.extend(keys if keys is not None else [None] * n)
        if headers or b.headers is not None:
            if b.headers is None:
                b.headers = [None] * i
            b.headers.extend([list(h) if h else None for h in headers] if headers
                             else [None] * n)
        if b.timestamps is not None:
            b.timestamps.extend([b.result.timestamp] * n)
        b.size += size
        self.buffered += size
        if b.size >= self.batch_size:
            self._seal(b)
        return BatchFuture(b.result, n, i)

    def wake_io(self) -> None:
        """Wake the I/O thread if it may be asleep."""
        with self.lock:
            if self.io_sleeping:
                self.io_sleeping = False
                self._wake()

    def seal_all(self) -> None:
        with self.lock:
            for b in list(self.open.values()):
                self._seal(b)
            self._wake()

    def wait_empty(self, timeout: float | None, alive: Callable[[], bool]) -> None:
        """Block until every batch is completed; TimeoutError after ``timeout`` s."""
        deadline = None if timeout is None else _now() + timeout
        with self.lock:
            while self.incomplete:
                remaining = None if deadline is None else deadline - _now()
                if remaining is not None and remaining <= 0:
                    raise TimeoutError(
                        f"flush did not finish within {timeout}s ({self.incomplete} batches left)"
                    )
                self._room.wait(min(remaining, 1.0) if remaining is not None else 1.0)
                if not alive():
                    break

    def close(self) -> None:
        with self.lock:
            self.closed = True
            self._wake()

    # ------------------------------------------------------------------ I/O thread side

    def drain(
        self, now: float, can_send: Callable[[tuple[str, int]], bool] | None = None
    ) -> tuple[list[ProducerBatch], float | None]:
        """Take every sealed batch, and seal and take every open batch that has lingered
        and whose partition ``can_send`` another batch now; the others stay open and
        keep accepting records (the sender drains them when a request completes).

        Returns (batches, seconds until the next drainable open batch's linger ends,
        or None) and marks the I/O thread as about to sleep.
        """
        with self.lock:
            nxt = None
            for key, b in list(self.open.items()):
                if can_send is not None and not can_send(key):
                    continue  # blocked: an answer wakes the sender, not the clock
                due = b.created + self.linger_s
                if due <= now:
                    self._seal(b, wake=False)
                elif nxt is None or due < nxt:
                    nxt = due
            out = list(self.ready)
            self.ready.clear()
            self.io_sleeping = True
            return out, (None if nxt is None else max(0.0, nxt - now))

    def finished(self) -> bool:
        """Closed and nothing left to send (the I/O thread may stop)."""
        with self.lock:
            return self.closed and not self.open and not self.ready

    def complete(
        self, b: ProducerBatch, base_offset: int = -1, error: BaseException | None = None
    ) -> None:
        """Resolve every future of ``b`` at once and give its bytes back."""
        b.result.complete(base_offset, error)
        with self.lock:
            self.buffered -= b.size
            self.incomplete -= 1
            self._room.notify_all()

    def abort(self) -> list[ProducerBatch]:
        """Take every batch not yet drained (the I/O thread is dying)."""
        with self.lock:
            batches = list(self.open.values()) + list(self.ready)
            self.open.clear()
            self.ready.clear()
            return batches

    # ------------------------------------------------------------------ under the lock

    def _new_batch(self, topic: str, partition: int, size: int, wake: bool = True) -> ProducerBatch:
        if self.closed:
            raise ProducerClosedError("send() after close()")
        self._wait_for_room(size)
        b = ProducerBatch(
            topic,
            partition,
            _now() + self.delivery_timeout_s,
            int(time.time() * 1000),
            next(self._seq),
        )
        self.open[(topic, partition)] = b
        self.incomplete += 1
        if wake and self.io_sleeping:
            self.io_sleeping = False
            self._wake()
        return b

    def _wait_for_room(self, size: int) -> None:
        deadline = _now() + self.max_block_s
        while self.buffered + size > self.buffer_memory and self.buffered:
            remaining = deadline - _now()
            if remaining <= 0:
                raise BufferFullError(
                    f"{self.buffered} bytes buffered (buffer_memory={self.buffer_memory}) for "
                    f"{self.max_block_s}s: the nodes are not keeping up or are unreachable"
                )
            self._room.wait(remaining)

    def _seal(self, b: ProducerBatch, wake: bool = True) -> None:
        if self.open.get((b.topic, b.partition)) is b:
            del self.open[(b.topic, b.partition)]
            self.ready.append(b)
            self._on_seal(b.topic, b.partition)
            if wake:
                self.io_sleeping = False
                self._wake()


def _one(key) -> int:
    return 1


def select_sendable(
    pending, now: float, in_order: bool, in_flight: dict,
    window: Callable[[tuple[str, int]], int] = _one,
) -> tuple[list, deque, list]:
    """Split queued batches into (send now, keep queued, expired).

    Pure: no I/O, no locks. In-order mode (idempotence) sends batches by creation
    order, and per partition only while fewer than ``window(partition)`` of its
    batches are in flight (``in_flight``: partition -> count); a batch waiting for its retry
    backoff holds back the later batches of its partition, so a partition's batches
    always go out in sequence order. Otherwise a retry backoff holds back only the
    batch itself and the in-flight window is the connection's (see the sender).
    """
    sendable: list = []
    keep: deque = deque()
    expired: list = []
    blocked: set = set()
    taken: dict = {}
    for b in sorted(pending, key=_SEQ) if in_order else pending:
        if now >= b.deadline:
            expired.append(b)
            continue
        key = (b.topic, b.partition)
        if key in blocked:
            keep.append(b)
            continue
        if b.retry_at > now:
            keep.append(b)
            if in_order:
                blocked.add(key)
            continue
        if in_order:
            n = in_flight.get(key, 0) + taken.get(key, 0)
            if n >= window(key):
                keep.append(b)
                blocked.add(key)
                continue
            taken[key] = taken.get(key, 0) + 1
        sendable.append(b)
    return sendable, keep, expired


_SEQ = operator.attrgetter("seq")
