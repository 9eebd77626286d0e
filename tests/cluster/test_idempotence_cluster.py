"""Idempotent producers across a leader failover, real node processes (issue #7)."""

from __future__ import annotations

import os
import threading

import pytest

from raftlog import records
from raftlog.client import Producer
from raftlog.config import LogConfig
from raftlog.log import PartitionLog

from .cluster import LocalCluster, until

pytestmark = pytest.mark.slow


def _batch_headers(cluster, node_id: int, topic: str, partition: int) -> list:
    path = os.path.join(cluster.node(node_id).data_dir, f"{topic}-{partition}")
    log = PartitionLog.open(path, LogConfig())
    try:
        out, offset = [], log.log_start_offset
        while offset < log.log_end_offset:
            data = log.read_bytes(offset, 1 << 20)
            hs = [h for _p, h in records.iter_batches(data)]
            if not hs:
                break
            out += hs
            offset = hs[-1].next_offset
        return out
    finally:
        log.close()


def test_leader_failover_during_idempotent_produce_leaves_no_duplicate_or_gap(tmp_path):
    cluster = LocalCluster(tmp_path, 3).start()
    try:
        with cluster.admin() as a:
            a.create_topic("idem", partitions=1, replication_factor=3)
        cluster.wait_isr("idem", 0, {1, 2, 3})
        stop = threading.Event()
        acked, failed = {}, []

        def produce():
            # several batches in flight per request round; every send is retried
            with Producer(cluster.bootstrap, acks="all", linger_ms=2, retries=1000,
                          request_timeout_ms=3000, delivery_timeout_ms=120_000) as prod:
                assert prod.enable_idempotence
                i = 0
                while not stop.is_set():
                    futs = [(b"v%06d" % j, prod.send("idem", b"v%06d" % j, partition=0))
                            for j in range(i, i + 20)]
                    i += 20
                    for v, f in futs:
                        try:
                            acked[v] = f.result(120).offset
                        except Exception as e:
                            failed.append(repr(e))

        t = threading.Thread(target=produce)
        t.start()
        until(lambda: len(acked) > 500, timeout_s=30)
        leader = cluster.partition("idem", 0).leader
        cluster.node(leader).kill()
        until(lambda: len(acked) > 2000, timeout_s=60)
        stop.set()
        t.join(120)
        assert not failed, failed[:3]
        cluster.node(leader).start()
        survivor = next(n for n in cluster.nodes if n.node_id != leader)
        cluster.wait_isr("idem", 0, {1, 2, 3}, via=survivor, timeout_s=60)
    finally:
        cluster.stop()
    logs = [cluster.read_replica(i, "idem", 0) for i in (1, 2, 3)]
    assert logs[0] == logs[1] == logs[2]
    values = [v for _o, _k, v in logs[0]]
    assert len(values) == len(set(values)), "a record was appended twice"
    offsets = {v: o for o, _k, v in logs[0]}
    assert all(offsets.get(v) == o for v, o in acked.items()), "an acknowledged record moved or vanished"
    # per producer id and epoch, batch sequences are contiguous from 0: no gap
    seqs: dict = {}
    for h in _batch_headers(cluster, 1, "idem", 0):
        assert h.producer_id >= 0
        key = (h.producer_id, h.producer_epoch)
        expected = seqs.get(key, 0)
        assert h.base_sequence == expected, f"producer {key}: sequence {h.base_sequence}, expected {expected}"
        seqs[key] = h.base_sequence + h.last_offset_delta + 1
