"""The longest event-loop step: a trio Instrument timing every task step.

A task step is what one task runs between two checkpoints; while it runs, no other
task of the node (heartbeats, other clients' requests) can. One slow step is what
"a request froze the node" means, so the node measures it: two ``perf_counter``
calls per step, no allocation. Exposed by node/metrics.py as
``raftlog_event_loop_step_max_seconds`` (longest step since the previous scrape) and
``raftlog_event_loop_slow_steps_total`` (steps over :data:`SLOW_STEP_S`).
"""

from __future__ import annotations

import time

import trio

#: A step longer than this is counted as slow (the issue #35 bound on any request).
SLOW_STEP_S = 0.050


class LoopWatch(trio.abc.Instrument):
    """Times every task step of the trio run it is added to (trio thread only)."""

    def __init__(self) -> None:
        self._started = 0.0
        #: longest step since :meth:`take_max` last ran, seconds
        self.max_s = 0.0
        #: name of the task of that step (what to look at when it is long)
        self.max_task = ""
        #: steps longer than SLOW_STEP_S since start
        self.slow_steps = 0

    def before_task_step(self, task) -> None:
        self._started = time.perf_counter()

    def after_task_step(self, task) -> None:
        started, self._started = self._started, 0.0
        if not started:  # the step that added this instrument: its start is unknown
            return
        d = time.perf_counter() - started
        if d > self.max_s:
            self.max_s, self.max_task = d, task.name
        if d > SLOW_STEP_S:
            self.slow_steps += 1

    def take_max(self) -> tuple[float, str]:
        """(longest step, its task) since the previous call; starts a new window."""
        out = (self.max_s, self.max_task)
        self.max_s, self.max_task = 0.0, ""
        return out
