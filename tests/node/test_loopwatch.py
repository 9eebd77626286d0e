"""node/loopwatch.py without sockets: the trio Instrument that times every task step,
and the gauge node/metrics.py renders from it."""

from __future__ import annotations

import time

import trio

from raftlog.node.loopwatch import SLOW_STEP_S, LoopWatch
from raftlog.node.metrics import METRICS


def test_the_longest_step_and_its_task_are_recorded_and_a_scrape_starts_a_new_window():
    watch = LoopWatch()

    async def hog():
        time.sleep(SLOW_STEP_S + 0.01)  # holds the loop: one long step
        await trio.lowlevel.checkpoint()

    async def main():
        trio.lowlevel.add_instrument(watch)
        async with trio.open_nursery() as n:
            n.start_soon(hog, name="hog")
            for _ in range(10):
                await trio.lowlevel.checkpoint()

    trio.run(main)
    assert watch.slow_steps >= 1
    longest, task = watch.take_max()
    assert longest >= SLOW_STEP_S + 0.01 and task == "hog"
    assert watch.take_max() == (0.0, "")  # a new window
    assert watch.slow_steps >= 1  # (a counter: not reset)


def test_the_gauges_are_declared():
    assert METRICS["raftlog_event_loop_step_max_seconds"][0] == "gauge"
    assert METRICS["raftlog_event_loop_slow_steps_total"][0] == "counter"
