"""Partition reassignment and decommission on real node processes: acks=all sends go
on during the moves and nothing acknowledged is lost."""

from __future__ import annotations

import json
import subprocess
import sys
import threading

import pytest

from raftlog.client import Admin, Consumer, Producer, TopicPartition

from .cluster import LocalCluster, until

pytestmark = pytest.mark.slow


def _cli(bootstrap: str, *args: str, timeout: float = 90) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "raftlog.client.cli", *args,
                           "--bootstrap-server", bootstrap],
                          capture_output=True, text=True, timeout=timeout)


class Sender(threading.Thread):
    """acks=all sends of distinct values until stopped; remembers the acknowledged."""

    def __init__(self, bootstrap: str, topic: str):
        super().__init__(daemon=True)
        self.bootstrap, self.topic = bootstrap, topic
        self.acked: set = set()
        self.stop = threading.Event()

    def run(self) -> None:
        with Producer(bootstrap_servers=self.bootstrap, acks="all") as p:
            i = 0
            while not self.stop.is_set():
                futures = [(v, p.send(self.topic, v)) for v in
                           (b"%d" % n for n in range(i, i + 50))]
                i += 50
                p.flush()
                self.acked.update(v for v, f in futures if f.exception() is None)


def _read_all(bootstrap: str, topic: str, partitions: int) -> list:
    c = Consumer(bootstrap_servers=bootstrap, auto_offset_reset="earliest")
    try:
        tps = [TopicPartition(topic, i) for i in range(partitions)]
        c.assign(tps)
        ends = c.end_offsets(tps)
        out: list = []
        until(lambda: out.extend(r.value for r in c.poll(200))
              or all(c.position(tp) >= ends[tp] for tp in tps), timeout_s=30)
        return out
    finally:
        c.close()


def test_reassign_then_decommission_under_load(tmp_path):
    cluster = LocalCluster(tmp_path, n=4, voters=3).start()
    try:
        boot = cluster.bootstrap
        with cluster.admin() as a:
            a.create_topic("m", partitions=4, replication_factor=2)
        sender = Sender(boot, "m")
        sender.start()
        until(lambda: len(sender.acked) > 500, timeout_s=20)

        # a plan of our own: partition 0 onto brokers it does not use now
        p0 = cluster.partition("m", 0)
        target = [b for b in (1, 2, 3, 4) if b not in p0.replicas]
        plan = tmp_path / "plan.json"
        plan.write_text(json.dumps({"version": 1, "partitions": [
            {"topic": "m", "partition": 0, "replicas": target}]}))
        r = _cli(boot, "partitions", "reassign", "--plan", str(plan), "--throttle", "10000000")
        assert r.returncode == 0, r.stderr
        assert "1/1 partitions moved" in r.stdout
        assert _cli(boot, "partitions", "reassign", "--verify", "--plan", str(plan)).returncode == 0
        p0 = cluster.partition("m", 0)
        assert list(p0.replicas) == target and set(p0.isr) == set(target)

        # a move that cannot finish (1 byte/s: one batch, then a debt of its size) is
        # cancelled back to where it was
        with Producer(bootstrap_servers=boot, acks="all") as p:
            for i in range(5):  # several batches in partition 1
                p.send("m", b"x%d" % i, partition=1)
                p.flush()
        p1 = cluster.partition("m", 1)
        stuck = [b for b in (1, 2, 3, 4) if b not in p1.replicas][:1] + [p1.replicas[0]]
        with cluster.admin() as a:
            [res] = a.alter_partition_reassignments({("m", 1): stuck}, throttle_bytes_per_sec=1)
            assert res.error == 0, res
            assert [(x.topic, x.partition) for x in a.list_partition_reassignments()] == [("m", 1)]
        r = _cli(boot, "partitions", "reassign", "--cancel")
        assert r.returncode == 0 and "cancelled 1" in r.stdout, (r.stdout, r.stderr)
        p1_after = cluster.partition("m", 1)
        assert p1_after.replicas == p1.replicas

        # decommission broker 4: every replica moves off it, then it is unregistered
        r = _cli(boot, "cluster", "decommission", "--node", "4")
        assert r.returncode == 0, (r.stdout, r.stderr)
        with Admin(cluster.node(1).bootstrap) as a:
            assert 4 not in [b.id for b in a.describe_cluster().brokers]
            for p in a.describe_topic("m").partitions:
                assert 4 not in p.replicas and len(p.replicas) == 2

        sender.stop.set()
        sender.join(30)
        seen = _read_all(cluster.node(1).bootstrap, "m", 4)
        assert sender.acked and sender.acked <= set(seen)  # nothing acknowledged lost
        assert len(seen) == len(set(seen))  # and nothing twice
    finally:
        cluster.stop()
