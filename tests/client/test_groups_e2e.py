"""Consumer groups against one real node process: queue and pub/sub semantics,
committed offsets across restarts, cooperative rebalancing, zombie fencing."""

from __future__ import annotations

import time

import pytest

from raftlog.client import (
    Admin,
    CommitFailedError,
    Consumer,
    ConsumerRebalanceListener,
    Producer,
    TopicPartition,
)

GROUP_NODE = {"group.initial.rebalance.delay.ms": "0", "group.min.session.timeout.ms": "500",
              "offsets.topic.num.partitions": "4"}


def _consumer(node, group, **kw) -> Consumer:
    kw.setdefault("auto_offset_reset", "earliest")
    kw.setdefault("session_timeout_ms", 3000)
    return Consumer(node.bootstrap, group_id=group, **kw)


def _until(pred, timeout_s=20.0, what="condition"):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        v = pred()
        if v:
            return v
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


def _drain(consumers, want: int, timeout_s=30.0) -> list:
    got = []
    deadline = time.monotonic() + timeout_s
    while len(got) < want and time.monotonic() < deadline:
        for c in consumers:
            got += c.poll(timeout_ms=50)
    return got


def _produce(node, topic, n, partitions):
    with Producer(node.bootstrap, acks=1) as p:
        for i in range(n):
            p.send(topic, f"v{i}".encode(), partition=i % partitions)
        p.flush()


def test_one_group_shares_partitions_two_groups_each_read_everything(node_factory):
    node = node_factory(**GROUP_NODE)
    Admin(node.bootstrap).create_topic("q", partitions=4)
    _produce(node, "q", 400, 4)
    a, b = _consumer(node, "g1"), _consumer(node, "g1")
    a.subscribe(["q"])
    b.subscribe(["q"])
    got = _drain([a, b], 400)
    assert sorted(r.value for r in got) == sorted(f"v{i}".encode() for i in range(400))
    _until(lambda: len(a.assignment()) == 2 and len(b.assignment()) == 2, what="2+2 split")
    assert not a.assignment() & b.assignment()
    ma, mb = a.group_metadata(), b.group_metadata()
    assert ma.group_id == mb.group_id == "g1" and ma.member_id != mb.member_id
    assert ma.generation_id == mb.generation_id >= 1
    assert ma.coordinator_id == mb.coordinator_id == 1  # (the one node)
    solo = Consumer(node.bootstrap)
    assert solo.group_metadata() is None  # no group
    solo.close()
    other = _consumer(node, "g2")
    other.subscribe(["q"])
    got2 = _drain([other], 400)
    assert sorted(r.value for r in got2) == sorted(r.value for r in got)
    for c in (a, b, other):
        c.close()


def test_committed_offsets_survive_a_node_restart_and_resume(node_factory):
    node = node_factory(**GROUP_NODE)
    Admin(node.bootstrap).create_topic("r", partitions=2)
    _produce(node, "r", 100, 2)
    c = _consumer(node, "g", enable_auto_commit=False)
    c.subscribe(["r"])
    got = _drain([c], 100)
    assert len(got) == 100
    c.commit()
    tp0 = TopicPartition("r", 0)
    assert c.committed(tp0) == 50
    c.close()
    node.restart()
    _produce(node, "r", 10, 2)
    c = _consumer(node, "g")
    _until(lambda: c.committed(tp0) is not None, what="offsets loaded")
    assert c.committed(tp0) == 50
    c.subscribe(["r"])
    rest = _drain([c], 10)
    assert sorted(r.value for r in rest) == sorted(f"v{i}".encode() for i in range(10))
    c.close()


class Recorder(ConsumerRebalanceListener):
    def __init__(self):
        self.assigned, self.revoked, self.lost = [], [], []

    def on_assigned(self, partitions):
        self.assigned.append(set(partitions))

    def on_revoked(self, partitions):
        self.revoked.append(set(partitions))

    def on_lost(self, partitions):
        self.lost.append(set(partitions))


def test_cooperative_rebalance_revokes_only_what_moves_and_close_hands_over(node_factory):
    node = node_factory(**GROUP_NODE)
    Admin(node.bootstrap).create_topic("c", partitions=6)
    la, lb = Recorder(), Recorder()
    a = _consumer(node, "coop")
    a.subscribe(["c"], listener=la)
    _until(lambda: len(a.assignment()) == 6, what="a owns all 6")
    a.poll(timeout_ms=10)
    b = _consumer(node, "coop")
    b.subscribe(["c"], listener=lb)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and not (len(a.assignment()) == 3 == len(b.assignment())):
        a.poll(timeout_ms=20)
        b.poll(timeout_ms=20)
    assert len(a.assignment()) == 3 and len(b.assignment()) == 3
    # a revoked exactly the three partitions b got, never all six (cooperative)
    assert all(len(r) <= 3 for r in la.revoked)
    assert set().union(*la.revoked) == b.assignment()
    a.close()
    _until(lambda: len(b.assignment()) == 6, what="b owns all after a leaves")
    b.close()


def test_a_member_beyond_the_partition_count_stays_idle(node_factory):
    node = node_factory(**GROUP_NODE)
    Admin(node.bootstrap).create_topic("one", partitions=1)
    a, b = _consumer(node, "idle"), _consumer(node, "idle")
    a.subscribe(["one"])
    b.subscribe(["one"])
    _until(lambda: len(a.assignment()) + len(b.assignment()) == 1, what="one owner")
    time.sleep(0.5)
    assert len(a.assignment()) + len(b.assignment()) == 1
    a.close()
    b.close()


def test_zombie_commit_is_refused_after_its_session_expired(node_factory):
    node = node_factory(**GROUP_NODE)
    Admin(node.bootstrap).create_topic("z", partitions=2)
    _produce(node, "z", 20, 2)
    z = _consumer(node, "zg", enable_auto_commit=False, session_timeout_ms=1000,
                  heartbeat_interval_ms=300)
    z.subscribe(["z"])
    _drain([z], 20)
    member = z._member
    # freeze the zombie's membership thread: no heartbeats, so the coordinator expires it
    member._closed = True
    member._thread.join(5)
    live = _consumer(node, "zg")
    live.subscribe(["z"])
    _until(lambda: len(live.assignment()) == 2, what="live member owns both")
    with pytest.raises(CommitFailedError, match="ILLEGAL_GENERATION|UNKNOWN_MEMBER_ID"):
        z.commit({TopicPartition("z", 0): 1})
    live.close()
    z.close()  # (the zombie's fetch thread must not outlive the test)


def test_pattern_subscription_picks_up_a_new_topic(node_factory):
    node = node_factory(**GROUP_NODE)
    admin = Admin(node.bootstrap)
    admin.create_topic("logs.a")
    c = _consumer(node, "pat")
    c.subscribe(pattern=r"logs\..*")
    _until(lambda: c.assignment() == {TopicPartition("logs.a", 0)}, what="logs.a assigned")
    admin.create_topic("logs.b")
    admin.create_topic("other")
    _until(lambda: {tp.topic for tp in c.assignment()} == {"logs.a", "logs.b"}, timeout_s=20,
           what="logs.b assigned")
    c.close()


def test_a_member_that_stops_polling_leaves_and_rejoins_on_its_next_poll(node_factory):
    node = node_factory(**GROUP_NODE)
    Admin(node.bootstrap).create_topic("slow", partitions=2)
    lazy_listener = Recorder()
    lazy = _consumer(node, "mp", max_poll_interval_ms=1500)
    lazy.subscribe(["slow"], listener=lazy_listener)
    busy = _consumer(node, "mp")
    busy.subscribe(["slow"])
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline and not (len(lazy.assignment()) == 1 == len(busy.assignment())):
        lazy.poll(timeout_ms=20)
        busy.poll(timeout_ms=20)
    assert len(lazy.assignment()) == 1
    # lazy stops polling: after max_poll_interval_ms it leaves and busy owns both
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline and len(busy.assignment()) < 2:
        busy.poll(timeout_ms=50)
    assert len(busy.assignment()) == 2 and lazy.assignment() == set()
    assert lazy_listener.lost, "leaving for a stalled poll loop reports the partitions lost"
    # its next poll rejoins
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline and len(lazy.assignment()) != 1:
        lazy.poll(timeout_ms=20)
        busy.poll(timeout_ms=20)
    assert len(lazy.assignment()) == 1 and len(busy.assignment()) == 1
    lazy.close()
    busy.close()


def test_close_during_a_long_rebalance_returns_promptly(node_factory):
    node = node_factory(**GROUP_NODE)
    Admin(node.bootstrap).create_topic("long", partitions=2)
    stuck = _consumer(node, "lr", session_timeout_ms=25_000, max_poll_interval_ms=25_000)
    stuck.subscribe(["long"])
    _until(lambda: len(stuck.assignment()) == 2, what="first member owns both")
    stuck._member._closed = True  # it never rejoins: the next rebalance waits for it
    stuck._member._thread.join(5)
    joiner = _consumer(node, "lr")
    joiner.subscribe(["long"])
    time.sleep(1.0)  # joiner is now waiting in JoinGroup for the stuck member
    assert joiner.assignment() == set()
    started = time.monotonic()
    joiner.close()
    assert time.monotonic() - started < 10, "close() waited for the rebalance"
    stuck.close()  # (its fetch thread must not outlive the test)
