"""The node's two clocks, named for what they measure.

* :func:`node_ms` -- elapsed time for the node's own rules (ISR lag, broker session
  and fencing, rebalance of leadership): trio's clock, so a ``MockClock`` drives them
  in tests. Outside a trio run (a blocking test that drives a Broker directly, a
  worker thread) it falls back to the monotonic clock; a node uses one or the other
  for a given rule, never both.
* :func:`wall_ms` -- wall-clock milliseconds for what is compared with record
  timestamps or kept across restarts (retention, flush.ms, offset expiry).
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
