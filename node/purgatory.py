"""Delayed requests (Kafka's purgatory): a long-poll fetch or an acks=all produce parked
until a partition it watches moves, or until its deadline.

A parked request is not a task. Partitions wake their waiters by calling ``set()``
(the same call a ``trio.Event`` answers), which queues the request here; whoever moved
the partition -- the connection reader that appended a batch, the reader of a
follower's fetch that advanced the high watermark -- calls :meth:`Purgatory.run_ready`
before it sends its own answers, so the woken request is completed in the same turn,
with no trip through the scheduler. Wakes from anywhere else (a metadata change, a
deleted partition) are completed by the purgatory's own task, which also expires
requests at their deadlines (one timer for all of them, not one per request).

Bounds: every parked request belongs to a connection and counts toward that
connection's deferred answers (see server.MAX_DEFERRED_PER_CONNECTION); partitions cap
their waiters (partition.MAX_WAITERS_PER_PARTITION); expired entries leave the timer
heap at their deadline, and the heap is rebuilt when finished ones outnumber live ones.
"""

from __future__ import annotations

import heapq
import itertools
import math

import trio


class Delayed:
    """A parked request. Subclasses implement :meth:`try_complete`."""

    __slots__ = ("purgatory", "deadline", "done", "queued", "parked", "watched")

    def __init__(self, purgatory: Purgatory, deadline: float):
        self.purgatory = purgatory
        self.deadline = deadline
        self.done = False
        self.queued = False
        self.parked = False
        self.watched: list = []

    # -- called by partitions
    def set(self) -> None:
        """A watched partition moved: complete this request soon (never re-entrantly)."""
        if not self.done and not self.queued:
            self.queued = True
            self.purgatory.ready.append(self)
            self.purgatory.kick()

    # -- subclass API
    def try_complete(self, expired: bool) -> bool:
        """Answer if possible (always when ``expired``); True once answered."""
        raise NotImplementedError

    def watch(self, parts, leo: bool = False) -> bool:
        """Wake on any of ``parts``; False if a partition has no room for another waiter."""
        ok = True
        for p in parts:
            if p.add_waiter(self, leo=leo):
                self.watched.append(p)
            else:
                ok = False
        return ok

    def unwatch(self) -> None:
        for p in self.watched:
            p.remove_waiter(self)
        self.watched = []

    def finish(self) -> None:
        """Mark answered: no more wakes, and the timer forgets it at its deadline."""
        if not self.done:
            self.done = True
            self.unwatch()
            if self.parked:
                self.purgatory.live -= 1

    def cancel(self) -> None:
        """Drop unanswered (its connection closed)."""
        self.finish()


class Purgatory:
    """Parked requests of one node: the ready queue and the one timer."""

    def __init__(self) -> None:
        self.ready: list[Delayed] = []
        self.live = 0
        self._heap: list = []
        self._seq = itertools.count()
        self._scope: trio.CancelScope | None = None
        self._kicked: trio.Event | None = None
        self.on_error = None  # callable(op, exc): a bug of ours while completing

    def park(self, op: Delayed) -> None:
        """Start the deadline of ``op`` (it is already watching its partitions)."""
        assert not op.parked and not op.done
        op.parked = True
        self.live += 1
        heapq.heappush(self._heap, (op.deadline, next(self._seq), op))
        if len(self._heap) > 1024 and len(self._heap) > 2 * self.live:
            self._heap = [e for e in self._heap if not e[2].done]
            heapq.heapify(self._heap)
        if self._scope is not None and op.deadline < self._scope.deadline:
            self._scope.deadline = op.deadline

    def live_ops(self) -> list[Delayed]:
        """The requests parked now (for metrics; O(parked))."""
        return [e[2] for e in self._heap if not e[2].done]

    def kick(self) -> None:
        if self._kicked is not None:
            self._kicked.set()

    def run_ready(self) -> None:
        """Complete every woken request (synchronously)."""
        while self.ready:
            ready, self.ready = self.ready, []
            for op in ready:
                op.queued = False
                if not op.done:
                    self._complete(op, False)

    def complete_now(self, op: Delayed) -> None:
        """Answer ``op`` at once with what it has (as if its deadline had passed)."""
        if not op.done:
            self._complete(op, True)

    def expire(self, now: float) -> None:
        heap = self._heap
        while heap and heap[0][0] <= now:
            op = heapq.heappop(heap)[2]
            if not op.done:
                self._complete(op, True)

    def _complete(self, op: Delayed, expired: bool) -> None:
        try:
            if op.try_complete(expired):
                op.finish()
        except Exception as e:  # a bug of ours: never let it stop the other requests
            op.finish()
            if self.on_error is not None:
                self.on_error(op, e)

    def next_deadline(self) -> float:
        heap = self._heap
        while heap and heap[0][2].done:
            heapq.heappop(heap)
        return heap[0][0] if heap else math.inf

    async def run(self) -> None:
        """Complete wakes nobody completed in their own turn, and expire deadlines."""
        while True:
            self._kicked = trio.Event()
            if self.ready:
                self._kicked.set()
            with trio.CancelScope(deadline=self.next_deadline()) as scope:
                self._scope = scope
                await self._kicked.wait()
            self._scope = None
            self._kicked = None
            self.run_ready()
            self.expire(trio.current_time())
