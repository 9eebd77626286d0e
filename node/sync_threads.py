"""The worker threads that run the logs' group-commit syncs (fdatasync) off the event loop.

``trio.to_thread.run_sync`` costs ~245 us of CPU per call on this project's 2-core
machines (its capacity limiter's checkpoints, a context copy, the thread cache's
hand-off, the cancellation machinery); a sync is ~120 us of CPU of its own. These threads
wait on one queue and hand the result back to the waiting task directly
(``reschedule``): ~165 us a hop, measured side by side with the same no-op job. One
sync per log is in flight at most (raftlog/group_commit.py), so the queue holds at most
one job per durable log; at most ``max_threads`` run at once, started as jobs find no
idle thread and ended after IDLE_EXIT_S without work (a node in a test process leaves
none behind for long).

A waiting task cannot be cancelled (as ``to_thread.run_sync`` by default): the sync
runs to its end and its result is delivered, so a log is never left with a sync whose
outcome nobody saw.
"""

from __future__ import annotations

import queue
import threading

import outcome
import trio

#: An idle worker thread ends after this long without a job.
IDLE_EXIT_S = 10.0


class SyncThreads:
    """``await threads.run_sync(fn, *args)`` runs ``fn(*args)`` in one of at most
    ``max_threads`` worker threads and returns its result (or raises its exception)."""

    def __init__(self, max_threads: int, name: str = "raftlog-sync"):
        assert max_threads >= 1, max_threads
        self.max_threads = max_threads
        self.name = name
        self._jobs: queue.SimpleQueue = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._threads = 0  # alive
        self._pending = 0  # jobs submitted and not finished (queued or running)

    @property
    def threads(self) -> int:
        return self._threads

    async def run_sync(self, fn, *args):
        token = trio.lowlevel.current_trio_token()
        task = trio.lowlevel.current_task()
        self._submit((fn, args, token, task))
        return await trio.lowlevel.wait_task_rescheduled(
            lambda _raise_cancel: trio.lowlevel.Abort.FAILED)

    def _submit(self, job: tuple) -> None:
        with self._lock:
            self._pending += 1
            start = self._pending > self._threads and self._threads < self.max_threads
            if start:
                self._threads += 1
            self._jobs.put(job)
        if start:
            try:
                threading.Thread(target=self._work, name=self.name, daemon=True).start()
            except BaseException:
                with self._lock:
                    self._threads -= 1
                raise

    def _work(self) -> None:
        while True:
            try:
                fn, args, token, task = self._jobs.get(timeout=IDLE_EXIT_S)
            except queue.Empty:
                with self._lock:  # (a job put meanwhile is taken, not left behind)
                    if self._jobs.empty():
                        self._threads -= 1
                        return
                continue
            result = outcome.capture(fn, *args)
            with self._lock:
                self._pending -= 1
            try:
                token.run_sync_soon(trio.lowlevel.reschedule, task, result)
            except trio.RunFinishedError:  # (the node stopped: nobody waits any more)
                pass
