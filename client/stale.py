"""When a request to a partition leader has gone unanswered for too long, and whether
the metadata shows that its partitions moved: pure logic, no sockets.

A crashed leader resets its connections and the client retries at once; a hung one
(SIGSTOP, a partition that drops packets) answers nothing, and its connections stay
open. Waiting out ``request_timeout_ms`` (30 s) there would keep a producer's batches,
or a consumer's fetch, on the old leader long after the controller has fenced it
(``broker.session.timeout.ms``) and elected another. So, as a Kafka client drops a
connection whose node is no longer the leader:

- a request outstanding far longer than this connection's requests usually take
  (:class:`ResponseClock`) makes its node a *suspect*: the client refreshes the
  metadata of its partitions, from another node, every ``recheck_s`` while it waits;
- when the metadata (from that refresh, or any other, e.g. after NOT_LEADER on another
  request) shows one of the request's partitions led by another node at a newer leader
  epoch (:func:`moved`), the client drops the connection to the stale node and sends
  the request's batches (in sequence order, with idempotence) or fetch to the new one.

Only a newer leader epoch counts: metadata from a node that has not yet heard of the
election it was sent under (an older epoch) must not move a request back.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

#: A request is never overdue sooner than this after it was sent (beyond any long-poll
#: wait of its own): a busy node's fsync or GC pause is not a hang.
OVERDUE_MIN_S = 1.0
#: ... nor sooner than this many times the connection's typical answer time.
OVERDUE_FACTOR = 20.0
#: Weight of a new answer time in the running average.
EWMA_WEIGHT = 0.2
#: Longest wait of a client's I/O thread for a metadata answer (at most its request
#: timeout): it blocks every partition meanwhile, and a node that leaves a metadata
#: request unanswered this long is hung (a suspect: the next refresh asks another).
IO_METADATA_TIMEOUT_S = 5.0


class ResponseClock:
    """The typical answer time of one client's requests, and when one is overdue.

    ``overdue_after()`` = max(OVERDUE_MIN_S, OVERDUE_FACTOR x the running average),
    capped at ``cap_s`` (half the request timeout: the early look must come early)."""

    def __init__(self, cap_s: float, min_s: float = OVERDUE_MIN_S,
                 factor: float = OVERDUE_FACTOR):
        self.cap_s = cap_s
        self.min_s = min(min_s, cap_s)
        self.factor = factor
        self.average_s: float | None = None

    def observe(self, seconds: float) -> None:
        """A request was answered ``seconds`` after it was sent (long-poll wait excluded)."""
        seconds = max(seconds, 0.0)
        if self.average_s is None:
            self.average_s = seconds
        else:
            self.average_s += EWMA_WEIGHT * (seconds - self.average_s)

    def overdue_after(self) -> float:
        typical = self.factor * (self.average_s or 0.0)
        return min(self.cap_s, max(self.min_s, typical))

    def overdue(self, sent_at: float, now: float, extra_s: float = 0.0) -> bool:
        """Has a request sent at ``sent_at`` waited too long (``extra_s``: its own
        long-poll wait, e.g. a fetch's max_wait_ms)?"""
        return now - sent_at > extra_s + self.overdue_after()


class Recheck:
    """At most one metadata refresh every ``interval_s`` while some request is overdue."""

    def __init__(self, interval_s: float):
        self.interval_s = interval_s
        self._next = 0.0

    def due(self, now: float) -> bool:
        if now < self._next:
            return False
        self._next = now + self.interval_s
        return True


def moved(topics: Mapping, node_id: int | None,
          sent: Iterable[tuple[str, int, int]]) -> tuple[str, int, int, int] | None:
    """The first of ``sent`` -- (topic, partition, leader epoch it was sent under) --
    that ``topics`` (Cluster.topics: topic -> partition -> PartitionMeta) shows led by
    a node other than ``node_id`` at a newer epoch, as (topic, partition, new leader,
    new epoch); None when every one is still led by ``node_id`` (or unknown)."""
    if node_id is None:
        return None
    for topic, partition, epoch in sent:
        meta = (topics.get(topic) or {}).get(partition)
        if (meta is not None and meta.leader >= 0 and meta.leader != node_id
                and meta.leader_epoch > epoch):
            return topic, partition, meta.leader, meta.leader_epoch
    return None
