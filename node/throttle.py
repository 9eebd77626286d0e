"""A byte-rate token bucket: what bounds the bytes a leader sends to the replicas a
reassignment adds (Kafka's replication throttle). Pure: the caller passes the time."""

from __future__ import annotations

#: Bursts are bounded to this many seconds' worth of the rate: a throttled copy flows
#: in small steps instead of a second's worth at once (which would stall the other
#: traffic of the nodes it passes through).
BURST_S = 0.1


class ByteRate:
    """At most ``rate`` bytes/s on average, bursts up to ``burst_s`` seconds' worth. A
    read may overshoot what was allowed (a record batch is never split): the debt is
    paid before anything more is allowed."""

    def __init__(self, burst_s: float = BURST_S) -> None:
        self.burst_s = burst_s
        self.tokens = 0.0
        self.at: float | None = None

    def allowance(self, rate: int, now: float) -> int:
        """Bytes that may be sent now at ``rate`` bytes/s (0 while in debt)."""
        assert rate > 0, rate
        burst = max(1.0, rate * self.burst_s)
        if self.at is None:
            self.tokens = burst
        else:
            self.tokens = min(burst, self.tokens + max(0.0, now - self.at) * rate)
        self.at = now
        return max(0, int(self.tokens))

    def wait_s(self, rate: int, chunk_s: float = 0.01) -> float:
        """Seconds until ``chunk_s`` seconds' worth is allowed again (0 if it is)."""
        assert rate > 0, rate
        return max(0.0, (rate * chunk_s - self.tokens) / rate)

    def spend(self, n: int) -> None:
        assert n >= 0, n
        self.tokens -= n

    def settle(self, reserved: int, used: int) -> None:
        """A round that reserved ``reserved`` bytes (spent them up front, so rounds
        running at once share one allowance) received ``used``: the rest goes back, an
        overshoot (a batch is never split) stays as debt."""
        assert reserved >= 0 and used >= 0, (reserved, used)
        self.tokens += reserved - used
