"""The segment scrubber in a real 3-node cluster: a bit flipped in a closed segment of
a follower (partition 0) and of a leader (partition 1) is found and repaired from the
other replicas -- every replica ends byte-identical -- and consumers never see a
corrupt batch."""

from __future__ import annotations

import glob
import os

import pytest

from raftlog.checkpoint import PartitionCheckpoint
from raftlog.client import Producer
from raftlog.config import LogConfig
from raftlog.log import PartitionLog
from raftlog.records import HEADER_SIZE, iter_batches

from .cluster import LocalCluster, until
from .test_replication import consume_all

pytestmark = pytest.mark.slow


def closed_segments(node, topic: str, partition: int) -> list[str]:
    paths = sorted(glob.glob(os.path.join(node.data_dir, f"{topic}-{partition}", "*.log")))
    return paths[:-1]


def flip_bit(path: str, nth_batch: int = 1) -> int:
    """Flip one bit in the records of a batch of the segment at ``path`` (the running
    node's page cache sees it); returns the batch's base offset."""
    with open(path, "r+b") as f:
        data = f.read()
        pos, h = list(iter_batches(data, verify=True))[nth_batch]
        at = pos + HEADER_SIZE + 5
        f.seek(at)
        f.write(bytes([data[at] ^ 0x01]))
    return h.base_offset


def replica_bytes(node, topic: str, partition: int) -> bytes:
    """Every batch of one replica, as stored (node stopped)."""
    log = PartitionLog.open(os.path.join(node.data_dir, f"{topic}-{partition}"), LogConfig())
    try:
        out, offset = [], log.log_start_offset
        while offset < log.log_end_offset:
            sl = log.read(offset, 1 << 20)  # CRC-checked: a corrupt batch raises
            out.append(sl.read_bytes())
            offset = sl.next_offset
        return b"".join(out)
    finally:
        log.close()


def repairs(node, partition: str) -> list[str]:
    return [line for line in node.log_text().splitlines()
            if "event=scrub_repair " in line and f"partition={partition} " in line]


def test_scrubber_repairs_a_flipped_bit_on_a_follower_and_on_a_leader(tmp_path):
    cluster = LocalCluster(tmp_path, 3, log_scrub_bytes_per_sec=2_000_000).start()
    try:
        with cluster.admin() as a:
            a.create_topic("s", partitions=2, replication_factor=3,
                           config={"segment.bytes": 16 * 1024})
        for p in (0, 1):
            cluster.wait_isr("s", p, {1, 2, 3})
        with Producer(cluster.bootstrap, acks="all", linger_ms=1, batch_size=4096) as prod:
            futs = [(i, prod.send("s", b"%05d" % i + b"z" * 300, partition=i % 2))
                    for i in range(600)]
            acked = {(f.result(30).partition, f.result(30).offset): b"%05d" % i + b"z" * 300
                     for i, f in futs}
        leaders = {p: cluster.partition("s", p).leader for p in (0, 1)}
        follower0 = cluster.node(next(i for i in (1, 2, 3) if i != leaders[0]))
        leader1 = cluster.node(leaders[1])
        for node, p in ((follower0, 0), (leader1, 1)):
            until(lambda node=node, p=p: len(closed_segments(node, "s", p)) >= 3)
        bad0 = flip_bit(closed_segments(follower0, "s", 0)[1])
        bad1 = flip_bit(closed_segments(leader1, "s", 1)[1])

        # found by the scrubber (no reader touches these bytes), one line each
        line0 = until(lambda: repairs(follower0, "s-0"), timeout_s=30)
        assert f"offset={bad0} " in line0[0] and "action=truncate_and_refetch" in line0[0]
        line1 = until(lambda: repairs(leader1, "s-1"), timeout_s=30)
        assert f"offset={bad1} " in line1[0] and "action=resign_then_refetch" in line1[0]
        until(lambda: "event=leadership_resigned" in leader1.log_text(), timeout_s=30)
        for node, p, bad in ((follower0, 0, bad0), (leader1, 1, bad1)):  # cut at the bad batch
            until(lambda node=node, p=p, bad=bad: f"event=replica_truncated partition=s-{p} "
                  f"from_offset={bad} " in node.log_text(), timeout_s=30)
        for p in (0, 1):  # the repaired replicas caught up and are in sync
            cluster.wait_isr("s", p, {1, 2, 3}, timeout_s=60)
        with Producer(cluster.bootstrap, acks="all", linger_ms=1) as prod:
            # acknowledged with the ISR {1, 2, 3}: every replica holds everything before
            for p in (0, 1):
                m = prod.send("s", b"after", partition=p).result(30)
                acked[(p, m.offset)] = b"after"

        # consumers see every acknowledged record, intact (the client checks CRCs)
        for p in (0, 1):
            got = consume_all(cluster.bootstrap, "s", p, 301)
            assert {(p, r.offset): r.value for r in got} == \
                {k: v for k, v in acked.items() if k[0] == p}
        assert len(repairs(follower0, "s-0")) == 1
    finally:
        cluster.stop()
    for p in (0, 1):  # every replica's bytes equal (read with CRC checks)
        copies = [replica_bytes(cluster.node(n), "s", p) for n in (1, 2, 3)]
        assert copies[0] and copies[0] == copies[1] == copies[2], f"s-{p} replicas differ"


def test_a_sole_in_sync_leader_whose_segment_was_damaged_keeps_what_it_acknowledged(tmp_path):
    """The jepsen corrupt + kill schedule that lost acknowledged records (seed 58): the
    only in-sync replica is killed, a closed segment of its log is cut short, and it is
    elected again as it restarts. Recovery used to cut its log at the damage -- dropping
    the intact segments after it, records only it held -- and the other replicas then
    truncated to that. Now the hole is a lost range (never served), the segments after
    it stay, the first read of the hole hands the partition to a replica that has it,
    and the damaged copy fetches it back: every acknowledged record is read."""
    cluster = LocalCluster(tmp_path, 5).start()  # (3 voters stay up: ISR changes commit)
    try:
        with cluster.admin() as a:
            a.create_topic("g", partitions=1, replication_factor=3,
                           config={"segment.bytes": 16 * 1024, "min.insync.replicas": 1})
        replicas = set(until(lambda: cluster.partition("g", 0)).replicas)
        cluster.wait_isr("g", 0, replicas)
        acked = {}

        def write(lo: int, hi: int) -> None:
            with Producer(cluster.bootstrap, acks="all", linger_ms=1, batch_size=4096) as prod:
                for i, f in [(i, prod.send("g", b"%05d" % i + b"z" * 300, partition=0))
                             for i in range(lo, hi)]:
                    acked[f.result(30).offset] = b"%05d" % i + b"z" * 300

        write(0, 300)  # on every replica
        lead = cluster.node(cluster.partition("g", 0).leader)
        others = [cluster.node(i) for i in sorted(replicas) if i != lead.node_id]
        for n in others:
            n.stop()
        cluster.wait_isr("g", 0, {lead.node_id}, via=lead)
        write(300, 600)  # on the leader only (min.insync.replicas 1)
        segs = closed_segments(lead, "g", 0)
        assert len(segs) >= 3, (segs, os.listdir(lead.data_dir), acked and max(acked))
        victim = segs[1]  # offsets the others hold as well
        cp_path = os.path.join(lead.data_dir, "g-0", "partition.checkpoint")
        until(lambda: PartitionCheckpoint.read(cp_path).recovery_point >= 600, timeout_s=30)
        lead.kill()
        os.truncate(victim, os.path.getsize(victim) // 2 + 100)  # (mid-batch)
        for n in others:
            n.start()
        lead.start()
        until(lambda: "event=log_recovered_lost_range" in lead.log_text(), timeout_s=30)
        cluster.wait_isr("g", 0, replicas, timeout_s=60)

        got = consume_all(cluster.bootstrap, "g", 0, len(acked), timeout_s=60)
        assert {r.offset: r.value for r in got} == acked
        until(lambda: "event=leadership_resigned" in lead.log_text(), timeout_s=30)
        cluster.wait_isr("g", 0, replicas, timeout_s=60)
    finally:
        cluster.stop()
    copies = [replica_bytes(cluster.node(n), "g", 0) for n in sorted(replicas)]
    assert copies[0] and copies[0] == copies[1] == copies[2]
