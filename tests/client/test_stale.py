"""client/stale.py: when a request to a leader is overdue, and whether its partitions
moved (pure logic; the suspects test only connects to closed ports)."""

from __future__ import annotations

import re

import pytest

from raftlog.client.conn import Cluster, PartitionMeta
from raftlog.client.errors import BrokerNotAvailableError
from raftlog.client.stale import OVERDUE_MIN_S, Recheck, ResponseClock, moved
from raftlog.localnode import free_ports


def test_a_request_is_overdue_after_the_floor_or_many_typical_answers():
    clock = ResponseClock(cap_s=15.0)
    assert not clock.overdue(sent_at=0.0, now=OVERDUE_MIN_S - 0.01)
    assert clock.overdue(sent_at=0.0, now=OVERDUE_MIN_S + 0.01)
    for _ in range(50):
        clock.observe(0.2)  # a slow node: answers take 200 ms
    assert abs(clock.average_s - 0.2) < 1e-6
    assert not clock.overdue(0.0, 3.9) and clock.overdue(0.0, 4.1)  # 20 x 0.2 s
    # a long-poll's own wait is not counted against it
    assert not clock.overdue(0.0, 4.4, extra_s=0.5) and clock.overdue(0.0, 4.6, extra_s=0.5)


def test_the_overdue_look_comes_by_half_the_request_timeout():
    clock = ResponseClock(cap_s=2.0)
    for _ in range(50):
        clock.observe(5.0)
    assert clock.overdue_after() == 2.0
    assert ResponseClock(cap_s=0.5).overdue_after() == 0.5  # the floor is capped too


def test_recheck_is_rate_limited():
    r = Recheck(0.1)
    assert r.due(10.0)
    assert not r.due(10.05)
    assert r.due(10.11)


def _topics(leader: int, epoch: int) -> dict:
    return {"t": {0: PartitionMeta(0, leader, epoch, (1, 2, 3), (1, 2, 3))}}


def test_moved_needs_another_leader_at_a_newer_epoch():
    sent = [("t", 0, 5)]
    assert moved(_topics(2, 6), 1, sent) == ("t", 0, 2, 6)
    assert moved(_topics(1, 6), 1, sent) is None  # same node (re-elected)
    assert moved(_topics(2, 5), 1, sent) is None  # a node behind the election sent under
    assert moved(_topics(2, 4), 1, sent) is None
    assert moved(_topics(-1, 6), 1, sent) is None  # no leader yet: keep waiting
    assert moved({}, 1, sent) is None  # unknown
    assert moved(_topics(2, 6), None, sent) is None  # not a leader connection
    assert moved(_topics(2, 6), 1, [("u", 0, 0), ("t", 0, 5)]) == ("t", 0, 2, 6)


def _order_tried(c: Cluster) -> list[int]:
    """The ports any_connection tried, in order (nothing listens on them: each refuses)."""
    with pytest.raises(BrokerNotAvailableError) as e:
        c.any_connection()
    return [int(x) for x in re.findall(r"cannot connect to 127\.0\.0\.1:(\d+)", str(e.value))]


def test_a_suspect_is_asked_for_metadata_last():
    a, b = free_ports(2)  # (free: nothing listens, so each connection is refused)
    c = Cluster(f"127.0.0.1:{a},127.0.0.1:{b}")
    assert _order_tried(c) == [a, b]
    c.suspect(("127.0.0.1", a))
    assert _order_tried(c) == [b, a]
    c.clear_suspect(("127.0.0.1", a))
    assert _order_tried(c) == [a, b]
    c.suspect(("127.0.0.1", a), for_s=-1)  # expired
    assert _order_tried(c) == [a, b]


def test_a_metadata_answer_with_a_leaderless_partition_is_spotted():
    """(client/conn.py) A node whose metadata shows a wanted partition without a leader
    is asked after the others next time: its view may be the stale one."""
    from raftlog.client.conn import leaderless
    from raftlog.protocol import PartitionMetadata, TopicMetadata

    def header(*leaders, error=0):
        return {"topics": [TopicMetadata("t", error, partitions=[
            PartitionMetadata(i, 0, leader, 1, [1, 2, 3], [1, 2, 3], []) for i, leader in
            enumerate(leaders)])]}

    assert leaderless(header(1, -1)) and not leaderless(header(1, 2))
    assert not leaderless(header(-1, error=3))  # (an unknown topic: not a stale leader)
