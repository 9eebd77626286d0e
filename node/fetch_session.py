"""A follower's fetch session on its leader (KIP-227's incremental fetch, one session
per connection): the partitions the follower fetches here, kept between its fetches,
so that a fetch names -- and its answer holds -- only what changed.

The follower's first fetch on a connection names every partition
(``session=FETCH_SESSION_FULL``); later ones (``FETCH_SESSION_INCREMENTAL``) name
only partitions whose fetch offset or epoch changed, and ``forgotten`` drops some.
The leader evaluates only *marked* partitions: every partition named by a fetch, and
every partition whose log end offset, high watermark or role moved since (the
partition marks its sessions, see Partition.wake_waiters). A partition answered with
an error leaves the session; the follower names it again when it retries. So an idle
follower of thousands of partitions costs its leader one parked request, and a busy
one costs per fetch what moved, not what exists.

The session dies with its connection: a follower that reconnects starts a new one
with a full fetch. Replica bookkeeping for partitions not named again is in
replica.FollowerState (the session's ``last_fetch_ms``).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(slots=True)
class SessionPart:
    """What the follower last told about one partition, and what it was last sent."""

    offset: int
    max_bytes: int
    epoch: int
    sent_hw: int = -1
    sent_log_start: int = -1
    #: the follower's flushed offset as last told (-1: not told, an older follower)
    flushed: int = -1


class FetchSession:
    """The partitions one follower fetches through one connection."""

    __slots__ = ("replica", "parts", "dirty", "registered", "waiter", "last_fetch_ms",
                 "closed")

    def __init__(self, replica: int) -> None:
        self.replica = replica
        self.parts: dict[tuple, SessionPart] = {}
        #: partitions to evaluate at the next answer
        self.dirty: set[tuple] = set()
        #: the Partition objects this session is registered with, by key
        self.registered: dict[tuple, object] = {}
        #: the parked fetch of this session (woken by a mark), if any
        self.waiter = None
        self.last_fetch_ms = 0
        self.closed = False

    def mark(self, key: tuple, wake: bool) -> None:
        """``key`` moved: evaluate it at the next answer; ``wake`` a parked fetch (a
        log end move or a role change; a high watermark alone rides the next answer)."""
        if key in self.parts:
            self.dirty.add(key)
            if wake and self.waiter is not None:
                self.waiter.set()

    def update(self, parts: list, forgotten: list, lookup) -> list:
        """Apply a fetch: drop ``forgotten`` [topic, partition] pairs, upsert ``parts``
        ([topic, partition, offset, max_bytes, epoch]). ``lookup(key)`` is the node's
        Partition for a key, or None. Returns the upserted keys (marked)."""
        for topic, partition in forgotten:
            self.drop((topic, partition))
        keys = []
        for topic, partition, offset, max_bytes, epoch in parts:
            key = (topic, partition)
            sp = self.parts.get(key)
            if sp is None:
                self.parts[key] = SessionPart(offset, max_bytes, epoch)
            else:
                sp.offset, sp.max_bytes, sp.epoch = offset, max_bytes, epoch
            part = lookup(key)
            old = self.registered.get(key)
            if old is not part:
                if old is not None:
                    old.remove_session(self)
                if part is None:
                    self.registered.pop(key, None)
                else:
                    part.add_session(self)
                    self.registered[key] = part
            self.dirty.add(key)
            keys.append(key)
        return keys

    def flushed(self, key: tuple, flushed: int) -> None:
        """The follower told its flushed offset of ``key``."""
        sp = self.parts.get(key)
        if sp is not None:
            sp.flushed = flushed

    def drop(self, key: tuple) -> None:
        self.parts.pop(key, None)
        self.dirty.discard(key)
        part = self.registered.pop(key, None)
        if part is not None:
            part.remove_session(self)

    def take_dirty(self) -> list:
        """The marked keys, in a stable order; the marks are cleared."""
        keys, self.dirty = self.dirty, set()
        return sorted(keys)

    def sent(self, key: tuple, hw: int, log_start: int) -> None:
        sp = self.parts.get(key)
        if sp is not None:
            sp.sent_hw, sp.sent_log_start = hw, log_start

    def is_news(self, key: tuple, hw: int, log_start: int) -> bool:
        """Whether a row without data for ``key`` tells the follower anything."""
        sp = self.parts.get(key)
        return sp is not None and (sp.sent_hw != hw or sp.sent_log_start != log_start)

    def close(self) -> None:
        """The connection closed: unregister from every partition."""
        self.closed = True
        self.waiter = None
        for part in self.registered.values():
            part.remove_session(self)
        self.registered.clear()
        self.parts.clear()
        self.dirty.clear()
