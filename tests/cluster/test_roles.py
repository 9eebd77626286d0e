"""Node roles as real processes: node 1 is a controller only (votes, serves no
partitions), nodes 2 and 3 are controller,broker, node 4 is broker-only (serves
partitions and follows the metadata log without voting)."""

from __future__ import annotations

import time

import pytest

from raftlog.client import Admin, Consumer, Producer, TopicPartition

from .cluster import SESSION_MS, LocalCluster, until

pytestmark = pytest.mark.slow


def _controller(node) -> int:
    with Admin(node.bootstrap) as a:
        return a.describe_cluster().controller_id


def _round_trip(bootstrap: str, topic: str, partitions: int, tag: bytes) -> None:
    with Producer(bootstrap_servers=bootstrap, acks="all") as p:
        futures = [p.send(topic, tag + b"%d" % i, partition=i % partitions) for i in range(200)]
        p.flush()
        assert all(f.result(10) for f in futures)
    c = Consumer(bootstrap_servers=bootstrap, auto_offset_reset="earliest")
    try:
        c.assign([TopicPartition(topic, i) for i in range(partitions)])
        seen: set = set()
        until(lambda: seen.update(r.value for r in c.poll(200) if r.value.startswith(tag))
              or len(seen) == 200, timeout_s=20)
    finally:
        c.close()


def test_controller_only_and_broker_only_nodes(tmp_path):
    cluster = LocalCluster(tmp_path, n=4, voters=3, roles={1: "controller"}).start()
    try:
        learner = cluster.node(4)
        with cluster.admin() as a:
            assert [b.id for b in a.describe_cluster().brokers] == [2, 3, 4]
            a.create_topic("r", partitions=4, replication_factor=3)
        parts = [cluster.partition("r", i) for i in range(4)]
        assert all(set(p.replicas) == {2, 3, 4} for p in parts)  # never on node 1
        assert any(p.leader == 4 for p in parts)
        _round_trip(cluster.bootstrap, "r", 4, b"a")

        # kill controllers until node 1 (controller only) is the active one: the learner
        # follows every new controller and never becomes one
        for _ in range(6):
            old = until(lambda: _controller(learner))
            assert old in (1, 2, 3)
            if old == 1:
                break
            cluster.node(old).kill()
            until(lambda old=old: _controller(learner) not in (-1, None, old), timeout_s=20)
            cluster.node(old).start()
            until(cluster._all_registered, timeout_s=30)
        assert _controller(learner) == 1
        # the brokers' heartbeats reach a controller that serves no partitions
        time.sleep(2 * SESSION_MS / 1000)
        with cluster.admin() as a:
            assert not any(b.fenced for b in a.describe_cluster().brokers)
        _round_trip(cluster.bootstrap, "r", 4, b"b")

        # the broker-only node dies: node 1 fences it and its leaderships move
        learner.kill()

        def moved():
            with Admin(cluster.node(2).bootstrap) as a:
                fenced = {b.id: b.fenced for b in a.describe_cluster().brokers}
                leaders = {p.leader for p in a.describe_topic("r").partitions}
            return fenced[4] and 4 not in leaders

        until(moved, timeout_s=20)
        _round_trip(",".join(n.bootstrap for n in cluster.alive()), "r", 4, b"c")
    finally:
        cluster.stop()
