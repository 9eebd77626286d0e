"""A follower whose disk is full leaves the ISR while acks=all writes go on, and catches
up and rejoins by itself once space returns; every replica ends with exactly what was
acknowledged. (The disk is filled with RLIMIT_FSIZE on the running node: see
tests/node/test_full_disk.py.)"""

from __future__ import annotations

import pytest

from raftlog.client import Producer

from ..node.test_full_disk import events, fill_disk, free_disk, produce_until_recovered, send_all
from .cluster import LocalCluster


@pytest.mark.slow
def test_follower_with_a_full_disk_leaves_the_isr_and_catches_up(tmp_path):
    cluster = LocalCluster(tmp_path, 3).start()
    try:
        with cluster.admin() as a:
            a.create_topic("f", partitions=1, replication_factor=3,
                           config={"min.insync.replicas": 2})
        cluster.wait_isr("f", 0, {1, 2, 3})
        leader = cluster.partition("f", 0).leader
        follower = cluster.node(next(i for i in (1, 2, 3) if i != leader))
        fid = follower.node_id
        value = b"y" * 1000
        with Producer(cluster.bootstrap, acks="all", linger_ms=2) as prod:
            acked, errors = send_all(prod, "f", [b"a%04d" % i + value for i in range(50)])
            assert not errors
            fill_disk(follower, "f")
            # acks=all keeps working: the follower stops advancing and leaves the ISR
            more, errors = send_all(prod, "f", [b"b%04d" % i + value for i in range(300)])
            assert not errors, errors[:3]
            acked.update(more)
            others = {1, 2, 3} - {fid}
            cluster.wait_isr("f", 0, others)
            assert len(events(follower, "log_dir_unwritable")) == 1
            free_disk(follower)
            cluster.wait_isr("f", 0, {1, 2, 3})  # caught up by itself
            more, errors = send_all(prod, "f", [b"c%04d" % i + value for i in range(50)])
            assert not errors
            acked.update(more)
            produce_until_recovered(prod, "f", follower, acked)
        assert len(events(follower, "log_dir_recovered")) == 1
        cluster.wait_isr("f", 0, {1, 2, 3})
        cluster.stop()
        want = sorted(acked.items())
        for n in (1, 2, 3):
            got = [(o, v) for o, _k, v in cluster.read_replica(n, "f")]
            assert got == want, f"replica on node {n} differs"
    finally:
        cluster.stop()
