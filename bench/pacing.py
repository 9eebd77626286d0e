"""Load-generator hygiene shared by the benchmarks."""

from __future__ import annotations


def precise_timers() -> None:
    """This process's timer slack to 1 ns (Linux prctl PR_SET_TIMERSLACK).

    With the default 50 us slack every sleep of an open-loop load generator ends late
    (measured here: 79 us at p50, 132 us at p99 for 1 ms sleeps; 28 / 74 us with 1 ns),
    and a latency stamped with the *scheduled* send time would count that against the
    system measured. A no-op where prctl is missing."""
    try:
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(29, 1, 0, 0, 0)  # 29: PR_SET_TIMERSLACK
    except (OSError, AttributeError):
        pass


def paced(rate: float, total: int):
    """Yield ``(i, due_ns)`` for i in ``0 .. total-1`` on a fixed schedule of ``rate`` per second from now (open
    loop: each is yielded at, or as soon as possible after, its due time; a caller that
    falls behind is not waited for), sleeping until each is due."""
    import time

    start_ns = time.monotonic_ns()
    for i in range(total):
        due_ns = start_ns + i * 1_000_000_000 // rate
        ahead = (due_ns - time.monotonic_ns()) / 1e9
        if ahead > 0:
            time.sleep(ahead)
        yield i, due_ns
