"""Consumer groups on a 3-node cluster with real processes (issue #7): members in
their own processes closed and SIGKILLed, the coordinator node killed."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time

import pytest

from raftlog.client import Consumer, Producer, TopicPartition
from raftlog.client.conn import BrokerConnection
from raftlog.protocol import Api

from .cluster import LocalCluster, until

pytestmark = pytest.mark.slow

GROUP_SETTINGS = {"group.initial.rebalance.delay.ms": "0",
                  "group.min.session.timeout.ms": "500",
                  "offsets.topic.num.partitions": "3"}
WORKER = os.path.join(os.path.dirname(__file__), "group_worker.py")


@pytest.fixture
def cluster(tmp_path):
    c = LocalCluster(tmp_path, 3)
    for n in c.nodes:
        n.extra.update(GROUP_SETTINGS)
    try:
        yield c.start()
    finally:
        c.stop()


def _assignment(out_dir, name):
    try:
        with open(os.path.join(out_dir, f"{name}.assignment")) as f:
            return {int(x) for x in f.read().split()}
    except FileNotFoundError:
        return None


def _processed(out_dir) -> set:
    seen = set()
    for fn in os.listdir(out_dir):
        if fn.endswith(".records"):
            with open(os.path.join(out_dir, fn)) as f:
                for line in f:
                    parts = line.split()
                    if len(parts) == 3:
                        seen.add(parts[2])
    return seen


class OffsetWatcher(threading.Thread):
    """Reads the group's committed offsets every 100 ms; records any that go back."""

    def __init__(self, bootstrap, group, tps):
        super().__init__(daemon=True)
        self.c = Consumer(bootstrap, group_id=group)
        self.tps, self.stop_flag, self.backwards = tps, False, []
        self.high = {}

    def run(self):
        while not self.stop_flag:
            self.sample()
            time.sleep(0.1)

    def sample(self):
        for tp in self.tps:
            try:
                off = self.c.committed(tp)
            except Exception:
                continue
            if off is not None:
                if off < self.high.get(tp, -1):
                    self.backwards.append((tp, self.high[tp], off))
                self.high[tp] = max(off, self.high.get(tp, -1))


def test_members_share_six_partitions_and_survive_close_and_kill(cluster, tmp_path):
    out = str(tmp_path / "workers")
    os.makedirs(out)
    with cluster.admin() as a:
        a.create_topic("jobs", partitions=6, replication_factor=3)
    sent = []
    with Producer(cluster.bootstrap, acks="all") as p:
        for i in range(600):
            p.send("jobs", f"a{i}".encode(), partition=i % 6)
            sent.append(f"a{i}")
    tps = [TopicPartition("jobs", i) for i in range(6)]
    watcher = OffsetWatcher(cluster.bootstrap, "workers", tps)
    watcher.start()
    procs = {name: subprocess.Popen([sys.executable, WORKER, cluster.bootstrap, "workers", "jobs",
                                     out, name]) for name in ("w1", "w2", "w3")}
    try:
        until(lambda: all(_assignment(out, n) is not None and len(_assignment(out, n)) == 2
                          for n in procs), timeout_s=60)
        owned = [_assignment(out, n) for n in procs]
        assert set().union(*owned) == set(range(6))
        # a clean close: the two others own all six within the session timeout
        procs["w1"].send_signal(signal.SIGTERM)
        assert procs["w1"].wait(30) == 0
        until(lambda: _assignment(out, "w2") | _assignment(out, "w3") == set(range(6))
              and len(_assignment(out, "w2")) == 3, timeout_s=20)
        # a SIGKILL: the survivor gets everything after the session timeout
        procs["w2"].kill()
        procs["w2"].wait()
        until(lambda: _assignment(out, "w3") == set(range(6)), timeout_s=30)
        with Producer(cluster.bootstrap, acks="all") as p:
            for i in range(300):
                p.send("jobs", f"b{i}".encode(), partition=i % 6)
                sent.append(f"b{i}")
        until(lambda: _processed(out) >= set(sent), timeout_s=60)
    finally:
        for pr in procs.values():
            if pr.poll() is None:
                pr.send_signal(signal.SIGTERM)
                pr.wait(30)
        watcher.stop_flag = True
        watcher.join(5)
        watcher.sample()  # once more after every member closed (and committed)
    assert _processed(out) >= set(sent), "a record was never processed"
    assert not watcher.backwards, f"committed offsets went back: {watcher.backwards[:5]}"
    # after the last member closed, everything is committed
    assert sum(watcher.high.values()) == len(sent)


def test_committed_offsets_survive_killing_the_coordinator(cluster):
    with cluster.admin() as a:
        a.create_topic("t", partitions=2, replication_factor=3)
    c = Consumer(cluster.bootstrap, group_id="durable", enable_auto_commit=False)
    offsets = {TopicPartition("t", 0): 7, TopicPartition("t", 1): 11}
    until(lambda: c.commit(offsets) or True, timeout_s=30)
    assert c.committed(TopicPartition("t", 0)) == 7
    c.close()
    alive = cluster.alive()[0]
    conn = BrokerConnection(alive.host, alive.port)
    coord = until(lambda: conn.request(Api.FIND_COORDINATOR, {"key": "durable"}).header,
                  timeout_s=30)["node_id"]
    conn.close()
    cluster.node(coord).kill()
    survivor = next(n for n in cluster.nodes if n.node_id != coord)
    c2 = Consumer(survivor.bootstrap, group_id="durable")
    got = until(lambda: (c2.committed(TopicPartition("t", 0)), c2.committed(TopicPartition("t", 1)))
                if c2.committed(TopicPartition("t", 0)) is not None else None, timeout_s=30)
    assert got == (7, 11)
    # the new coordinator accepts commits too
    c2.commit({TopicPartition("t", 0): 8})
    assert c2.committed(TopicPartition("t", 0)) == 8
    c2.close()
