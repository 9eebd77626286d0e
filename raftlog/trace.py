"""Where a record's time goes: opt-in hop stamps along its path (issue #36).

Off unless asked (``trace.events`` on a node, ``Producer(trace=True)`` in the SDK): then
each place a record passes stamps an *event* -- ``(hop, topic, partition, first offset,
last offset, CLOCK_MONOTONIC ns)`` -- per batch or per range of offsets, never per
record, into a bounded ring (:class:`TraceLog`; the oldest events go first, ``dropped``
counts them). Every process on one machine reads the same CLOCK_MONOTONIC, so events of
the SDK and of every node of a local cluster line up (``bench/latency_budget.py`` runs
them all on one machine; across machines the stamps do not compare).

A record's path, in order (:data:`HOPS`; a replicated partition takes the follower hops,
a durable one -- ``write.caching=false`` -- the syncs):

=================  ====================================================================
``enqueue``        the application called ``send`` (the bench stamps it in the value)
``send``           the SDK's I/O thread wrote the produce request holding the batch
``leader_read``    the leader's server read the request's bytes from the socket
``leader_append``  the leader appended the batch to its log
``leader_sync``    the leader's group-commit fdatasync covering it returned (durable)
``follower_fetch`` the leader answered a follower's fetch with it (first follower)
``follower_append`` a follower appended it (the last of the followers)
``follower_sync``  a follower's sync covering it returned (the last; durable)
``follower_report`` the leader learned a follower holds it -- on disk, when durable --
                   from that follower's next fetch (the last follower: the HW waits
                   for every ISR member)
``hw_advance``     the leader's high watermark passed it (acks=all answers, consumers see it)
``ack``            the SDK got the produce answer
``consumer_answer`` the leader answered a consumer's fetch with it
``consumer_return`` the consumer's ``poll`` returned it (the bench stamps it)
=================  ====================================================================

The follower hops are also stamped per replica, as ``<hop>@<broker id>`` (:func:`at`):
the hops above take the first follower's fetch and the last follower's append, so their
step mixes the two followers; :func:`replica_budget` gives each follower's own path.

:func:`hop_times` joins events into per-offset times and :func:`budget` summarises
them per hop; all three are pure.
"""

from __future__ import annotations

import collections
import time

HOPS = ("enqueue", "send", "leader_read", "leader_append", "leader_sync", "follower_fetch",
        "follower_append", "follower_sync", "follower_report", "hw_advance", "ack",
        "consumer_answer", "consumer_return")

#: hops where several events cover one offset (one per follower): the *last* one counts
#: (the high watermark waits for every ISR member); elsewhere the first one does.
LAST_WINS = frozenset({"follower_append", "follower_sync", "follower_report"})

#: events a node keeps at most (``trace.events`` is checked against it)
MAX_EVENTS = 10_000_000

#: the follower hops also stamped per replica (``<hop>@<broker id>``)
REPLICA_HOPS = ("follower_fetch", "follower_append", "follower_sync", "follower_report")


def at(hop: str, replica: int) -> str:
    """The name of ``hop``'s per-replica stamp for broker ``replica``."""
    return f"{hop}@{replica}"


class TraceLog:
    """A bounded ring of hop events. ``stamp`` is O(1); ``drain`` hands them out."""

    __slots__ = ("events", "dropped", "capacity")

    def __init__(self, capacity: int):
        if not 0 < capacity <= MAX_EVENTS:
            raise ValueError(f"trace capacity must be 1..{MAX_EVENTS}, not {capacity}")
        self.capacity = capacity
        self.events: collections.deque = collections.deque(maxlen=capacity)
        self.dropped = 0

    def stamp(self, hop: str, topic: str, partition: int, first: int, last: int,
              t_ns: int | None = None) -> None:
        """Offsets ``first..last`` (inclusive) passed ``hop`` at ``t_ns`` (now)."""
        if last < first:
            return
        if len(self.events) == self.capacity:
            self.dropped += 1
        self.events.append((hop, topic, partition, first, last,
                            time.monotonic_ns() if t_ns is None else t_ns))

    def drain(self) -> list:
        """Every event kept, oldest first; the ring is empty afterwards."""
        out = list(self.events)
        self.events.clear()
        return out


def hop_times(events, topic: str, partition: int, offsets=None) -> dict:
    """``{hop: {offset: t_ns}}`` of one partition from events (lists or tuples, any
    order, any process): per offset the earliest event covering it, or the latest for
    :data:`LAST_WINS` hops. ``offsets``: only those (a set), else every covered one."""
    out: dict = {}
    for hop, t, p, first, last, t_ns in events:
        if t != topic or p != partition:
            continue
        times = out.setdefault(hop, {})
        late = hop in LAST_WINS
        for o in range(first, last + 1):
            if offsets is not None and o not in offsets:
                continue
            old = times.get(o)
            if old is None or (t_ns > old if late else t_ns < old):
                times[o] = t_ns
    return out


def _pct(sorted_values: list, q: float) -> float:
    return sorted_values[min(len(sorted_values) - 1, int(q * len(sorted_values)))]


def budget(times: dict, hops=HOPS) -> list[dict]:
    """Per hop present in ``times`` (in path order): how many records it saw, and the
    median and p99 in ms of (a) the time since ``enqueue`` and (b) the step from the
    previous present hop, each over the records stamped at both ends."""
    present = [h for h in hops if times.get(h)]
    rows = []
    origin = times.get("enqueue", {})
    prev = None
    for hop in present:
        t = times[hop]
        since = sorted((t[o] - origin[o]) / 1e6 for o in t if o in origin)
        step = (sorted((t[o] - times[prev][o]) / 1e6 for o in t if o in times[prev])
                if prev is not None else [])
        rows.append({
            "hop": hop, "records": len(t),
            "since_enqueue_p50_ms": round(_pct(since, 0.5), 3) if since else None,
            "since_enqueue_p99_ms": round(_pct(since, 0.99), 3) if since else None,
            "step_p50_ms": round(_pct(step, 0.5), 3) if step else None,
            "step_p99_ms": round(_pct(step, 0.99), 3) if step else None,
        })
        prev = hop
    return rows


def replica_budget(times: dict) -> dict:
    """Per follower (``{broker id: rows}``, from the per-replica stamps in ``times``):
    :func:`budget` of its own path -- ``enqueue``, ``leader_append``, then its
    ``follower_fetch``, ``follower_append``, ``follower_sync`` and ``follower_report``."""
    replicas = sorted({int(h.rsplit("@", 1)[1]) for h in times
                       if "@" in h and h.rsplit("@", 1)[0] in REPLICA_HOPS})
    out = {}
    for r in replicas:
        own = {h: times[h] for h in ("enqueue", "leader_append") if h in times}
        own.update({h: times[at(h, r)] for h in REPLICA_HOPS if at(h, r) in times})
        out[r] = budget(own, ("enqueue", "leader_append") + REPLICA_HOPS)
    return out
