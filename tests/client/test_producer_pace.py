"""The default producer (acks=all, idempotence) keeps up with a steady rate against a
real node: records sent faster than round trips return join the open batch instead of
queueing as one-record batches (issue #16), so the backlog stays bounded."""

from __future__ import annotations

import time

import pytest

from raftlog.client import Admin, Producer

SECONDS = 3.0


def _paced(p: Producer, topic: str, rate: int) -> tuple[int, list]:
    """Send at ``rate`` records/s for SECONDS (in 1 ms ticks); the largest number of
    records sent and not yet acknowledged, seen at any tick, and the futures."""
    futures: list = []
    acked = 0  # futures[:acked] are all done
    worst = 0
    start = time.perf_counter()
    total = int(rate * SECONDS)
    while len(futures) < total:
        now = time.perf_counter()
        due = min(total, int((now - start) * rate) + 1)
        while len(futures) < due:
            futures.append(p.send(topic, b"%08d" % len(futures) + b"x" * 92, partition=0))
        while acked < len(futures) and futures[acked].done():
            acked += 1
        worst = max(worst, len(futures) - acked)
        time.sleep(max(0.0, start + len(futures) / rate - time.perf_counter()))
    return worst, futures


@pytest.mark.parametrize("linger", [{}, {"linger_ms": 5}], ids=["defaults", "linger-5"])
@pytest.mark.parametrize("rate", [1000, 5000, 20000])
def test_the_default_producer_keeps_up_with_a_steady_rate(node, rate, linger):
    topic = f"pace-{rate}"
    Admin(node.bootstrap).create_topic(topic)
    with Producer(node.bootstrap, **linger) as p:  # acks=all and idempotence: the defaults
        assert p.enable_idempotence
        worst, futures = _paced(p, topic, rate)
        end = time.monotonic()
        for f in futures:
            f.result(30)
        drain_s = time.monotonic() - end
    offsets = [f.result().offset for f in futures]
    assert offsets == list(range(len(futures)))
    # Bounded: never more than 0.2 s of records waiting (the old accumulator
    # fell behind without bound at 5000/s: ~9 s of backlog after 10 s), and the last
    # records are acknowledged promptly after the sending stops.
    assert worst <= rate // 5, f"{worst} records waited for acknowledgement at {rate}/s"
    assert drain_s < 2.0, f"{drain_s:.1f} s to acknowledge the backlog at {rate}/s"
