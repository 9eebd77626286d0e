"""The node's two clocks, named for what they measure.

* :func:`node_ms` -- elapsed time for the node's own rules (ISR lag, broker session
  and fencing, rebalance of leadership): trio's clock, so a ``MockClock`` drives them
  in tests. Outside a trio run (a blocking test that drives a ReplicaManager directly, a
  worker thread) it falls back to the monotonic clock; a node uses one or the other
  for a given rule, never both.
* :func:`wall_ms` -- wall-clock milliseconds for what is compared with record
  timestamps or kept across restarts (retention, flush.ms).
* :class:`SteadyWallClock` -- reads as the wall clock when created, then advances with
  the monotonic clock: the consumer-group coordinator's clock, whose member sessions
  and rebalance deadlines must not fire (or stall) because the wall clock was stepped
  by minutes, while the timestamps it persists (commits, group state) stay about wall
  time. A step of the wall clock reaches them at the node's next start.
"""

from __future__ import annotations

import time

import trio


def node_ms() -> int:
    try:
        return int(trio.current_time() * 1000)
    except RuntimeError:  # not in a trio run
        return int(time.monotonic() * 1000)


def wall_ms() -> int:
    return int(time.time() * 1000)


class SteadyWallClock:
    """Milliseconds: the wall clock at creation plus monotonic time elapsed since.
    Never jumps when the wall clock is stepped (see the module docstring)."""

    def __init__(self):
        self._base_ms = time.time() * 1000 - time.monotonic() * 1000

    def __call__(self) -> int:
        return int(self._base_ms + time.monotonic() * 1000)
