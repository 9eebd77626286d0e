"""A byte-rate token bucket: what bounds the bytes a leader sends to the replicas a
reassignment adds (Kafka's replication throttle). Pure: the caller passes the time."""

from __future__ import annotations


class ByteRate:
    """At most ``rate`` bytes/s on average, bursts up to one second's worth. A read
    may overshoot what was allowed (a record batch is never split): the debt is paid
    before anything more is allowed."""

    def __init__(self) -> None:
        self.tokens = 0.0
        self.at: float | None = None

    def allowance(self, rate: int, now: float) -> int:
        """Bytes that may be sent now at ``rate`` bytes/s (0 while in debt)."""
        assert rate > 0, rate
        if self.at is None:
            self.tokens = float(rate)  # start with a second's worth
        else:
            self.tokens = min(float(rate), self.tokens + max(0.0, now - self.at) * rate)
        self.at = now
        return max(0, int(self.tokens))

    def spend(self, n: int) -> None:
        assert n >= 0, n
        self.tokens -= n
