"""Fetch sessions, pure: what a session holds and marks, and how a follower fetching
through one counts as caught up (replica.FollowerState)."""

from __future__ import annotations

from raftlog.node.fetch_session import FetchSession
from raftlog.node.replica import LeaderState


class _Part:
    """Just the registration a Partition offers a session."""

    def __init__(self):
        self.sessions = set()

    def add_session(self, s):
        self.sessions.add(s)

    def remove_session(self, s):
        self.sessions.discard(s)


class _Waiter:
    def __init__(self):
        self.woken = 0

    def set(self):
        self.woken += 1


def test_update_upserts_marks_and_registers_and_forgets():
    a, b = _Part(), _Part()
    parts = {("t", 0): a, ("t", 1): b}
    s = FetchSession(replica=2)
    keys = s.update([["t", 0, 5, 100, 3], ["t", 1, 0, 100, 3]], [], parts.get)
    assert keys == [("t", 0), ("t", 1)]
    assert s.take_dirty() == [("t", 0), ("t", 1)] and not s.dirty
    assert s in a.sessions and s in b.sessions
    # an incremental fetch: one offset moved, one partition forgotten
    s.update([["t", 0, 9, 100, 3]], [["t", 1]], parts.get)
    assert s.parts[("t", 0)].offset == 9 and ("t", 1) not in s.parts
    assert s not in b.sessions and s.take_dirty() == [("t", 0)]


def test_marks_wake_only_on_log_end_moves_and_only_for_held_partitions():
    s = FetchSession(replica=2)
    s.update([["t", 0, 0, 100, 1]], [], {("t", 0): _Part()}.get)
    s.take_dirty()
    w = s.waiter = _Waiter()
    s.mark(("t", 0), False)  # a high watermark move: evaluated, nobody woken
    assert s.dirty == {("t", 0)} and w.woken == 0
    s.mark(("t", 0), True)
    assert w.woken == 1
    s.mark(("t", 9), True)  # not in the session
    assert ("t", 9) not in s.dirty and w.woken == 1


def test_news_is_a_changed_high_watermark_or_log_start():
    s = FetchSession(replica=2)
    s.update([["t", 0, 0, 100, 1]], [], {}.get)
    assert s.is_news(("t", 0), 0, 0)  # never answered: news
    s.sent(("t", 0), 10, 0)
    assert not s.is_news(("t", 0), 10, 0)
    assert s.is_news(("t", 0), 11, 0) and s.is_news(("t", 0), 10, 4)


def test_close_unregisters_everywhere():
    a = _Part()
    s = FetchSession(replica=2)
    s.update([["t", 0, 0, 100, 1]], [], {("t", 0): a}.get)
    s.close()
    assert s.closed and not a.sessions and not s.parts


def test_a_session_follower_that_has_everything_stays_caught_up():
    st = LeaderState(leader_id=1, replicas=(1, 2), now_ms=0)
    s = FetchSession(replica=2)
    st.on_fetch(2, 50, 50, now_ms=1_000, session=s)
    # the follower keeps fetching through the session without naming the partition
    s.last_fetch_ms = 30_000
    assert st.lagging((1, 2), 30_000, 10_000, leader_leo=50) == []
    # data appended since it last named the partition: its last word is old
    assert st.lagging((1, 2), 30_000, 10_000, leader_leo=60) == [2]
    # a closed session proves nothing
    s.closed = True
    assert st.lagging((1, 2), 30_000, 10_000, leader_leo=50) == [2]


def test_a_session_follower_counts_as_fetching_for_isr_expansion():
    st = LeaderState(leader_id=1, replicas=(1, 2), now_ms=0)
    s = FetchSession(replica=2)
    st.on_fetch(2, 50, 50, now_ms=1_000, session=s)
    s.last_fetch_ms = 40_000
    assert st.caught_up((1,), 50, 0, 45_000, 10_000) == [2]
    s.closed = True
    assert st.caught_up((1,), 50, 0, 45_000, 10_000) == []
