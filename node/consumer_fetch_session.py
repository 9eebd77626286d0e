"""Consumers' fetch sessions (KIP-227) on both listeners, on the followers'
mechanism (node/fetch_session.py): one session code and one cache (held by the
ReplicaManager) for Kafka clients (node/kafka/handlers.py, Kafka rows) and the SDK
consumer (node/server.py and ReplicaManager.fetch_consumer_session_once, native rows,
fields ``session_id``/``session_epoch`` of raftlog/protocol.py's FETCH).

A Kafka consumer's first fetch with ``session_epoch`` 0 opens a session here: the
partitions it names, their fetch offsets and limits, are kept, and the answer carries
the session's id. Its later fetches (``session_id``, the next epoch) name only the
partitions whose fetch offset or limits changed and ``forgotten_topics_data`` drops
some; the answer holds only partitions with news -- records, or a high watermark, last
stable offset, log start offset or error other than the session last sent. The node
reads only *marked* partitions: those the fetch names, and those whose high watermark
or role moved since (the partition marks its sessions, Partition.wake_waiters; a log
end move alone is no news to a consumer), so a consumer of a thousand quiet partitions
costs one read of what moved, not of what exists.

Sessions live in a per-node :class:`SessionCache` of ``max.incremental.fetch.session.
cache.slots`` (Kafka's default 1,000): when it is full, a new session takes the slot
of the least recently used one idle for at least ``EVICTION_IDLE_MS`` (Kafka's
``min.incremental.fetch.session.eviction.ms``, 120 s), or the fetch is answered
without a session (``session_id`` 0: the client goes on with full fetches). A session
dies with its connection too. Errors as Kafka's: an unknown session id answers
FETCH_SESSION_ID_NOT_FOUND, a wrong epoch INVALID_FETCH_SESSION_EPOCH; the client
then opens a new session with a full fetch.
"""

from __future__ import annotations

import collections
import secrets

from .fetch_session import FetchSession

#: Kafka's error codes of a fetch session (Errors.java)
FETCH_SESSION_ID_NOT_FOUND = 70
INVALID_FETCH_SESSION_EPOCH = 71
#: ``session_epoch`` of a full fetch that opens a session, and of one without any
INITIAL_EPOCH = 0
FINAL_EPOCH = -1
#: Kafka's min.incremental.fetch.session.eviction.ms
EVICTION_IDLE_MS = 120_000
#: Kafka's max.incremental.fetch.session.cache.slots default
DEFAULT_SLOTS = 1000


def next_epoch(epoch: int) -> int:
    """The epoch a session expects after ``epoch`` (Kafka's: 1 after the int32 max)."""
    return 1 if epoch >= 2**31 - 1 else epoch + 1


class ConsumerSession(FetchSession):
    """The partitions one consumer fetches through one session. ``mark`` keeps the
    moves that are news to a consumer -- the high watermark (and the last stable
    offset and role, which move with it or wake the same waiters) -- and wakes the
    session's waiting fetch; a log end move alone is not (consumers read below the
    high watermark)."""

    __slots__ = ("session_id", "epoch", "last_used_ms", "owner", "sent_lso",
                 "checked_version")

    def __init__(self, session_id: int, now_ms: int, owner=None) -> None:
        super().__init__(-1)
        self.session_id = session_id
        self.epoch = next_epoch(INITIAL_EPOCH)
        self.last_used_ms = now_ms
        #: the connection it was opened on (it dies with it)
        self.owner = owner
        #: {key: last stable offset last sent}
        self.sent_lso: dict = {}
        #: the node's ``partitions_version`` when every kept partition's Partition
        #: object was last checked (see :meth:`apply`); None: never
        self.checked_version = None

    def mark(self, key: tuple, leo_only: bool) -> None:
        if leo_only or key not in self.parts:
            return
        self.dirty.add(key)
        if self.waiter is not None:
            self.waiter.set()

    def apply(self, named: list, forgotten, lookup, version=None) -> None:
        """A fetch of this session: drop ``forgotten`` (topic, partition) pairs, upsert
        ``named`` [topic, partition, offset, max_bytes, epoch] (partition >= 0), and
        register again every partition whose Partition object changed (a topic deleted
        and re-created, a partition that came to this node since): it is read again.

        ``version``: the node's ``partitions_version`` (ReplicaManager), which moves
        whenever a Partition object is added to or removed from the node. The kept
        partitions are checked only when it moved since the last check, so a fetch of
        a session of N partitions costs what it names, not N dict lookups; None: check
        every time."""
        self.update(named, forgotten, lookup)
        if version is not None and version == self.checked_version:
            return  # (no Partition came or went since: the named ones were looked up)
        for key, sp in list(self.parts.items()):
            if self.registered.get(key) is not lookup(key):
                self.update([[*key, sp.offset, sp.max_bytes, sp.epoch]], (), lookup)
        self.checked_version = version

    def news(self, key: tuple, row: dict) -> bool:
        """Whether the (Kafka) answer row of ``key`` goes in an incremental answer."""
        return self.news_of(key, bool(row["records"]), row["error_code"],
                            row["high_watermark"], row["last_stable_offset"],
                            row["log_start_offset"])

    def news_of(self, key: tuple, records: bool, error: int, hw: int, lso: int,
                start: int) -> bool:
        """Whether the row of ``key`` goes in an incremental answer (records, an error,
        or an offset other than last sent); records what it sends."""
        sp = self.parts.get(key)
        if sp is None:
            return True
        if records:
            # read again by the next fetch (KIP-227: the broker reads every partition
            # at its session offset): a client that does not name a new offset --
            # it sought back to this one, or dropped the answer -- gets the records
            # again instead of silence until the partition's next write
            self.dirty.add(key)
        news = (records or error != 0 or hw != sp.sent_hw
                or start != sp.sent_log_start or lso != self.sent_lso.get(key))
        if news:
            sp.sent_hw, sp.sent_log_start = hw, start
            self.sent_lso[key] = lso
        return news

    def unread(self, key: tuple, end: int) -> bool:
        """A row without records nor error: is there data below ``end`` (the last stable
        offset or high watermark) the byte budget left out? Then the next answer reads
        it again (see :meth:`take_dirty`)."""
        sp = self.parts.get(key)
        return sp is not None and sp.offset < end

    def drop(self, key: tuple) -> None:
        super().drop(key)
        self.sent_lso.pop(key, None)


class SessionCache:
    """A node's consumer fetch sessions by id, bounded (see the module docstring)."""

    def __init__(self, slots: int = DEFAULT_SLOTS, eviction_idle_ms: int = EVICTION_IDLE_MS):
        assert slots >= 0
        self.slots = slots
        self.eviction_idle_ms = eviction_idle_ms
        self.sessions: collections.OrderedDict[int, ConsumerSession] = collections.OrderedDict()
        self.evicted = 0
        self.refused = 0

    def __len__(self) -> int:
        return len(self.sessions)

    def open(self, now_ms: int, owner=None) -> ConsumerSession | None:
        """A new session, or None when every slot is taken by a session used within
        ``eviction_idle_ms`` (the fetch then goes without one)."""
        if len(self.sessions) >= self.slots:
            oldest = next(iter(self.sessions.values()), None)
            if oldest is None or now_ms - oldest.last_used_ms < self.eviction_idle_ms:
                self.refused += 1
                return None
            self.close(oldest.session_id)
            self.evicted += 1
        while True:
            sid = secrets.randbelow(2**31 - 1) + 1  # (0 means "no session")
            if sid not in self.sessions:
                break
        s = ConsumerSession(sid, now_ms, owner)
        self.sessions[sid] = s
        return s

    def begin(self, session_id: int, epoch: int, now_ms: int,
              owner=None) -> tuple[ConsumerSession | None, int]:
        """A fetch's ``session_id`` and ``session_epoch``, on either listener: (the
        session to use (its epoch moved on), 0); (None, 0): a fetch without a session
        (epoch -1 closes ``session_id``; or every slot is busy); (None, code): answer
        FETCH_SESSION_ID_NOT_FOUND or INVALID_FETCH_SESSION_EPOCH (the client then
        opens a new session with a full fetch)."""
        if epoch == FINAL_EPOCH or epoch == INITIAL_EPOCH:
            self.close(session_id)
            if epoch == FINAL_EPOCH:
                return None, 0
            return self.open(now_ms, owner), 0
        session = self.get(session_id, now_ms)
        if session is None:
            return None, FETCH_SESSION_ID_NOT_FOUND
        if session.epoch != epoch:
            return None, INVALID_FETCH_SESSION_EPOCH
        session.epoch = next_epoch(epoch)
        return session, 0

    def get(self, session_id: int, now_ms: int) -> ConsumerSession | None:
        s = self.sessions.get(session_id)
        if s is not None:
            s.last_used_ms = now_ms
            self.sessions.move_to_end(session_id)
        return s

    def close(self, session_id: int) -> None:
        s = self.sessions.pop(session_id, None)
        if s is not None:
            s.close()

    def close_owned_by(self, owner) -> None:
        """A connection closed: its sessions go with it."""
        for sid in [sid for sid, s in self.sessions.items() if s.owner is owner]:
            self.close(sid)
