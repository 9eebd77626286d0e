"""Light futures with concurrent.futures.Future's interface.

A stdlib Future costs microseconds to create (a Condition, a lock). A producer
batch holds one :class:`BatchResult` (one Event, created lazily) and each record's
future is two slots pointing into it, so completing a 10,000-record batch is one
operation and ``send()`` stays cheap.
"""

from __future__ import annotations

import threading
from concurrent.futures import CancelledError, TimeoutError
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class RecordMetadata:
    """Where a record landed."""

    topic: str
    partition: int
    offset: int
    timestamp: int


@dataclass(frozen=True, slots=True)
class BatchMetadata:
    """Where a ``send_many`` batch landed: offsets ``base_offset .. base_offset + count - 1``."""

    topic: str
    partition: int
    base_offset: int
    count: int
    timestamp: int

    @property
    def offsets(self) -> range:
        return range(self.base_offset, self.base_offset + self.count)

    @property
    def last_offset(self) -> int:
        return self.base_offset + self.count - 1


class BatchResult:
    """The shared outcome of one batch: base offset or an exception."""

    __slots__ = (
        "topic",
        "partition",
        "timestamp",
        "base_offset",
        "error",
        "_done",
        "_event",
        "_callbacks",
        "_lock",
    )

    def __init__(self, topic: str, partition: int, timestamp: int):
        self.topic = topic
        self.partition = partition
        self.timestamp = timestamp
        self.base_offset = -1
        self.error: BaseException | None = None
        self._done = False
        self._event: threading.Event | None = None
        self._callbacks: list | None = None
        self._lock = threading.Lock()

    def complete(self, base_offset: int = -1, error: BaseException | None = None) -> None:
        with self._lock:
            if self._done:
                return
            self.base_offset = base_offset
            self.error = error
            self._done = True
            callbacks, self._callbacks = self._callbacks, None
            if self._event is not None:
                self._event.set()
        for fut, fn in callbacks or ():
            try:
                fn(fut)
            except Exception:  # a user callback must not break the I/O thread
                pass

    def wait(self, timeout: float | None) -> bool:
        if self._done:
            return True
        with self._lock:
            if self._done:
                return True
            if self._event is None:
                self._event = threading.Event()
            ev = self._event
        return ev.wait(timeout)

    def add_callback(self, fut, fn) -> bool:
        """Register; False if already done (the caller runs fn itself)."""
        with self._lock:
            if self._done:
                return False
            if self._callbacks is None:
                self._callbacks = []
            self._callbacks.append((fut, fn))
            return True


class _FutureBase:
    __slots__ = ("_batch",)

    def done(self) -> bool:
        return self._batch._done

    def running(self) -> bool:
        return not self._batch._done

    def cancel(self) -> bool:
        return False

    def cancelled(self) -> bool:
        return False

    def exception(self, timeout: float | None = None) -> BaseException | None:
        if not self._batch.wait(timeout):
            raise TimeoutError(f"not acknowledged within {timeout}s")
        return self._batch.error

    def result(self, timeout: float | None = None):
        if not self._batch.wait(timeout):
            raise TimeoutError(f"not acknowledged within {timeout}s")
        if self._batch.error is not None:
            raise self._batch.error
        return self._value()

    def add_done_callback(self, fn) -> None:
        if not self._batch.add_callback(self, fn):
            fn(self)

    def _value(self):
        raise NotImplementedError


class RecordFuture(_FutureBase):
    """Future of one ``send()``; ``result()`` is a :class:`RecordMetadata`."""

    __slots__ = ("_index",)

    def __init__(self, batch: BatchResult, index: int):
        self._batch = batch
        self._index = index

    def _value(self) -> RecordMetadata:
        b = self._batch
        offset = b.base_offset + self._index if b.base_offset >= 0 else -1
        return RecordMetadata(b.topic, b.partition, offset, b.timestamp)


class BatchFuture(_FutureBase):
    """Future of one ``send_many`` batch; ``result()`` is a :class:`BatchMetadata`.

    Its records are ``count`` consecutive records of one batch from index ``start``
    (a small send_many joins its partition's open batch)."""

    __slots__ = ("_count", "_start")

    def __init__(self, batch: BatchResult, count: int, start: int = 0):
        self._batch = batch
        self._count = count
        self._start = start

    def _value(self) -> BatchMetadata:
        b = self._batch
        base = b.base_offset + self._start if b.base_offset >= 0 else -1
        return BatchMetadata(b.topic, b.partition, base, self._count, b.timestamp)


__all__ = [
    "BatchFuture",
    "BatchMetadata",
    "BatchResult",
    "CancelledError",
    "RecordFuture",
    "RecordMetadata",
    "TimeoutError",
]
