"""Broker-only nodes (process.roles=broker): three voters and one node that serves
partitions and follows the metadata log without voting, as real processes."""

from __future__ import annotations

import pytest

from raftlog.client import Admin, Consumer, Producer, TopicPartition

from .cluster import LocalCluster, until

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


def test_broker_only_node_serves_partitions_and_never_becomes_controller(tmp_path):
    cluster = LocalCluster(tmp_path, n=4, voters=3).start()
    try:
        learner = cluster.node(4)
        with cluster.admin() as a:
            a.create_topic("r", partitions=4, replication_factor=3)
        parts = cluster.partition("r", 0) and [cluster.partition("r", i) for i in range(4)]
        assert any(4 in p.replicas for p in parts) and any(p.leader == 4 for p in parts)
        _round_trip(cluster.bootstrap, "r", 4, b"a")

        # the controller dies: a voter takes over; the learner follows the new one
        old = until(lambda: _controller(learner))
        assert old in (1, 2, 3)
        cluster.node(old).kill()
        new = until(lambda: (c := _controller(learner)) not in (-1, None, old) and c,
                    timeout_s=20)
        assert new in (1, 2, 3)
        _round_trip(",".join(n.bootstrap for n in cluster.alive()), "r", 4, b"b")

        # the broker-only node dies: it is fenced and its leaderships move
        learner.kill()

        def moved():
            with Admin(cluster.node(new).bootstrap) as a:
                fenced = {b.id: b.fenced for b in a.describe_cluster().brokers}
                leaders = {p.leader for p in a.describe_topic("r").partitions}
            return fenced[4] and 4 not in leaders

        until(moved, timeout_s=20)
    finally:
        cluster.stop()
