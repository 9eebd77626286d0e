"""Partition replication with real node processes on loopback (issue #6)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time

import pytest

from raftlog.client import ApiError, Consumer, ErrorCode, Producer, TopicPartition

from .cluster import LocalCluster, until

pytestmark = pytest.mark.slow


@pytest.fixture
def cluster(tmp_path):
    c = LocalCluster(tmp_path, 3)
    try:
        yield c.start()
    finally:
        for n in c.nodes:
            if n.proc is not None and n.proc.poll() is None:
                os.kill(n.proc.pid, signal.SIGCONT)
        c.stop()


def cluster_status(via) -> dict:
    """`raftlog cluster status --json`, run as a user would."""
    out = subprocess.run([sys.executable, "-m", "raftlog.client.cli", "cluster", "status", "--json",
                          "--bootstrap-server", via.bootstrap],
                         capture_output=True, text=True, timeout=60, check=True).stdout
    return json.loads(out)


def offset_ranges(log) -> list:
    """[(first, last), ...] runs of consecutive offsets: a compact view of a replica."""
    out: list = []
    for o, _k, _v in log:
        if out and o == out[-1][1] + 1:
            out[-1][1] = o
        else:
            out.append([o, o])
    return out


def consume_all(bootstrap: str, topic: str, partition: int, expect: int, timeout_s: float = 30.0):
    c = Consumer(bootstrap, auto_offset_reset="earliest", fetch_max_wait_ms=100)
    c.assign([TopicPartition(topic, partition)])
    out, deadline = [], time.monotonic() + timeout_s
    try:
        while len(out) < expect and time.monotonic() < deadline:
            out += c.poll(timeout_ms=200, max_records=100_000)
    finally:
        c.close()
    return out


def test_acks_all_replicates_to_every_replica_and_survives_full_restart(cluster):
    with cluster.admin() as a:
        a.create_topic("rep", partitions=2, replication_factor=3)
    for p in (0, 1):
        cluster.wait_isr("rep", p, {1, 2, 3})
    with Producer(cluster.bootstrap, acks="all", linger_ms=2) as prod:
        futs = [prod.send("rep", b"v%d" % i, key=b"k%d" % i, partition=i % 2) for i in range(2000)]
        metas = [f.result(30) for f in futs]
    acked = {(m.partition, m.offset): b"v%d" % i for i, m in enumerate(metas)}
    # consumers see only what the HW covers, and every acknowledged record
    for p in (0, 1):
        got = consume_all(cluster.bootstrap, "rep", p, 1000)
        assert {(p, r.offset): r.value for r in got} == {k: v for k, v in acked.items() if k[0] == p}
    # restart every node: nothing acknowledged is lost, replicas end identical
    cluster.stop()
    for p in (0, 1):
        logs = [cluster.read_replica(i, "rep", p) for i in (1, 2, 3)]
        assert logs[0] == logs[1] == logs[2]
        assert {(p, o): v for o, _k, v in logs[0]} == {k: v for k, v in acked.items() if k[0] == p}
    cluster.start()
    for p in (0, 1):
        got = consume_all(cluster.bootstrap, "rep", p, 1000)
        assert {(p, r.offset): r.value for r in got} == {k: v for k, v in acked.items() if k[0] == p}


def test_pipelined_acks_all_requests_on_one_connection_answer_in_order(cluster):
    """The leader appends pipelined acks=all requests while earlier ones wait for the
    followers; the answers still leave in request order, offsets in append order."""
    import socket

    from raftlog.protocol import Api, ClientConnection
    from raftlog.records import encode_batch

    with cluster.admin() as a:
        a.create_topic("pipe", partitions=2, replication_factor=3)
    leaders = {p: cluster.wait_isr("pipe", p, {1, 2, 3}).leader for p in (0, 1)}
    node = next(n for n in cluster.nodes if n.node_id == leaders[0])
    host, port = node.bootstrap.rsplit(":", 1)
    sock = socket.create_connection((host, int(port)), timeout=30)
    conn = ClientConnection(max_in_flight=1000)
    ids, data = [], []
    for i in range(200):
        batch = encode_batch([b"r%d" % i], timestamp=0)
        rid, frame = conn.send_request(Api.PRODUCE, {"acks": -1, "timeout_ms": 20_000,
                                                     "parts": [["pipe", 0, len(batch)]]}, batch)
        ids.append(rid)
        data.append(frame)
    sock.sendall(b"".join(data))  # all 200 in flight at once
    got = []
    while len(got) < len(ids):
        while (f := conn.next_response()) is not None:
            got.append(f)
        if len(got) < len(ids):
            chunk = sock.recv(1 << 20)
            assert chunk, "the leader closed the connection"
            conn.receive_data(chunk)
    sock.close()
    assert [f.header["id"] for f in got] == ids
    parts = [f.header["parts"][0] for f in got]
    assert all(p[2] == 0 for p in parts), parts[:3]
    assert [p[3] for p in parts] == list(range(200))
    assert [r.value for r in consume_all(cluster.bootstrap, "pipe", 0, 200)] == [
        b"r%d" % i for i in range(200)]


def test_leader_sigkill_under_acks_all_load_loses_nothing(cluster):
    with cluster.admin() as a:
        a.create_topic("load", partitions=1, replication_factor=3)
    cluster.wait_isr("load", 0, {1, 2, 3})
    acked: dict[int, bytes] = {}
    failed = []
    stop = threading.Event()

    def produce():
        with Producer(cluster.bootstrap, acks="all", linger_ms=1, retries=50,
                      request_timeout_ms=5000, delivery_timeout_ms=60_000) as prod:
            i = 0
            while not stop.is_set():
                v = b"r%06d" % i
                i += 1
                try:
                    m = prod.send("load", v, partition=0).result(60)
                    acked[m.offset] = v
                except Exception as e:  # the test checks that acknowledged data survives
                    failed.append(repr(e))

    t = threading.Thread(target=produce, daemon=True)
    t.start()
    until(lambda: len(acked) > 200, timeout_s=30)
    old = cluster.partition("load")
    victim = cluster.node(old.leader)
    victim.kill()
    before_kill = len(acked)
    new = until(lambda: (p := cluster.partition("load")).leader not in (-1, old.leader) and p,
                timeout_s=30)
    assert new.leader_epoch > old.leader_epoch
    assert new.offline_replicas == (old.leader,)
    status = cluster_status(cluster.node(new.leader))
    assert status["under_replicated"] >= 1 and status["offline"] == 0
    until(lambda: len(acked) > before_kill + 200, timeout_s=60)  # the producer resumed
    stop.set()
    t.join(60)
    got = consume_all(",".join(n.bootstrap for n in cluster.alive()), "load", 0, max(acked) + 1)
    by_offset = {r.offset: r.value for r in got}
    assert len(by_offset) == len(got)  # one record per offset
    lost = {o: v for o, v in acked.items() if by_offset.get(o) != v}
    assert not lost, f"{len(lost)} acknowledged records lost or moved, e.g. {sorted(lost)[:5]}"
    # the killed node returns, truncates what it must, and ends identical to the others
    victim.start()
    cluster.wait_isr("load", 0, {1, 2, 3}, timeout_s=60, via=cluster.node(new.leader))
    # back in the ISR, the preferred replica leads again (automatic balancing)
    until(lambda: cluster.partition("load", 0, cluster.node(new.leader)).leader == old.replicas[0],
          timeout_s=30)
    assert cluster_status(cluster.node(new.leader))["under_replicated"] == 0
    cluster.stop()
    logs = [cluster.read_replica(i, "load") for i in (1, 2, 3)]
    assert logs[0] == logs[1] == logs[2], [offset_ranges(x) for x in logs]


def test_paused_follower_leaves_isr_and_rejoins(tmp_path):
    # Lag (3 s) well below the session timeout (20 s): the ISR shrinks because the
    # follower stops fetching, not because the controller fenced it.
    c = LocalCluster(tmp_path, 3, broker_session_timeout_ms=20_000,
                     replica_lag_time_max_ms=1500).start()
    try:
        with c.admin() as a:
            a.create_topic("slow", partitions=1, replication_factor=3)
        p = c.wait_isr("slow", 0, {1, 2, 3})
        follower = next(r for r in p.replicas if r != p.leader)
        os.kill(c.node(follower).proc.pid, signal.SIGSTOP)
        try:
            with Producer(c.node(p.leader).bootstrap, acks="all", linger_ms=1) as prod:
                t0 = time.monotonic()
                prod.send("slow", b"while paused", partition=0).result(30)
            # acks=all waited for the shrink: the write needed the lagging follower until then
            assert time.monotonic() - t0 >= 1.0
            shrunk = c.partition("slow")
            assert follower not in shrunk.isr and shrunk.leader == p.leader
            with c.admin() as a:
                assert not {b.id: b.fenced for b in a.describe_cluster().brokers}[follower]
        finally:
            os.kill(c.node(follower).proc.pid, signal.SIGCONT)
        c.wait_isr("slow", 0, {1, 2, 3})
    finally:
        for n in c.nodes:
            if n.proc is not None and n.proc.poll() is None:
                os.kill(n.proc.pid, signal.SIGCONT)
        c.stop()


def test_divergent_tail_is_truncated_on_return(cluster):
    with cluster.admin() as a:
        a.create_topic("div", partitions=1, replication_factor=3)
    p = cluster.wait_isr("div", 0, {1, 2, 3})
    leader = cluster.node(p.leader)
    with Producer(leader.bootstrap, acks="all", linger_ms=1) as prod:
        for i in range(100):
            prod.send("div", b"c%d" % i, partition=0)
        prod.flush(30)
    followers = [cluster.node(r) for r in p.replicas if r != p.leader]
    for f in followers:
        os.kill(f.proc.pid, signal.SIGSTOP)
    try:
        with Producer(leader.bootstrap, acks=1, enable_idempotence=False) as prod:
            for i in range(50):
                prod.send("div", b"lost%d" % i, partition=0).result(10)  # never replicated
        leader.kill()
    finally:
        for f in followers:
            os.kill(f.proc.pid, signal.SIGCONT)
    new = until(lambda: (q := cluster.partition("div")).leader not in (-1, p.leader) and q,
                timeout_s=30)
    with Producer(cluster.node(new.leader).bootstrap, acks="all", linger_ms=1) as prod:
        for i in range(30):
            prod.send("div", b"new%d" % i, partition=0)
        prod.flush(30)
    leader.start()
    cluster.wait_isr("div", 0, {1, 2, 3}, timeout_s=60, via=cluster.node(new.leader))
    cluster.stop()
    logs = [cluster.read_replica(i, "div") for i in (1, 2, 3)]
    assert logs[0] == logs[1] == logs[2]
    values = [v for _o, _k, v in logs[0]]
    # A fetch response the old leader sent just before the pause may still deliver its
    # first unreplicated records; what no follower got is gone from every replica.
    kept = values[100:-30]
    assert values[:100] == [b"c%d" % i for i in range(100)]
    assert values[-30:] == [b"new%d" % i for i in range(30)]
    assert kept == [b"lost%d" % i for i in range(len(kept))] and len(kept) < 50


def test_min_insync_replicas_with_five_voters(tmp_path):
    """Five voters: with two nodes dead the quorum still commits, so the ISR shrinks
    and acks=all is refused with NOT_ENOUGH_REPLICAS; with three dead, metadata writes
    fail clearly."""
    c = LocalCluster(tmp_path, 5).start()
    try:
        with c.admin() as a:
            a.create_topic("mir", partitions=1, replication_factor=3,
                           config={"min.insync.replicas": "2"})
        p = c.wait_isr("mir", 0, set(until(lambda: c.partition("mir").replicas)))
        for r in p.replicas:
            if r != p.leader:
                c.node(r).kill()
        until(lambda: tuple(c.partition("mir").isr) == (p.leader,), timeout_s=30)
        with Producer(c.node(p.leader).bootstrap, acks="all", retries=0) as prod:
            with pytest.raises(ApiError) as e:
                prod.send("mir", b"x", partition=0).result(30)
            assert e.value.code == ErrorCode.NOT_ENOUGH_REPLICAS
        with Producer(c.node(p.leader).bootstrap, acks=1, enable_idempotence=False) as prod:
            assert prod.send("mir", b"y", partition=0).result(30).offset >= 0
        # two voters dead: metadata still commits
        with c.admin() as a:
            a.create_topic("still-writable", partitions=1, replication_factor=1)
        # a third dead voter: no majority, writes fail with a clear error, not a hang
        third = next(n for n in c.alive() if n.node_id != p.leader)
        third.kill()
        with c.admin() as a:
            with pytest.raises(ApiError) as e:
                a.create_topic("no-quorum", partitions=1, replication_factor=1)
        assert e.value.code in (ErrorCode.REQUEST_TIMED_OUT, ErrorCode.NOT_CONTROLLER)
    finally:
        c.stop()


def test_leader_with_corrupt_segment_hands_over_and_repairs_from_replicas(cluster):
    """A bit flip in a closed segment of the preferred leader is detected on read, never
    served; the node gives leadership to an intact replica, truncates to the bad data and
    fetches it again, so every replica ends identical and consumers see every record."""
    with cluster.admin() as a:
        a.create_topic("rot", partitions=1, replication_factor=3, config={"segment.bytes": "4096"})
    p = cluster.wait_isr("rot", 0, {1, 2, 3})
    # batches of 1 KiB at most: several closed 4 KiB segments, however the sends are
    # batched (under load the first record went alone and the other 299 in one 20 KiB
    # batch: one tiny closed segment, everything else in the active one)
    with Producer(cluster.bootstrap, acks="all", linger_ms=1, batch_size=1024) as prod:
        futs = [prod.send("rot", b"v%04d" % i + b"." * 60, partition=0) for i in range(300)]
        assert [f.result(30).offset for f in futs] == list(range(300))
    preferred = cluster.node(p.replicas[0])
    preferred.stop()
    seg_dir = os.path.join(preferred.data_dir, "rot-0")
    # a closed segment (not the last) holding at least 400 bytes
    segs = sorted(f for f in os.listdir(seg_dir) if f.endswith(".log"))[:-1]
    closed = next(f for f in segs if os.path.getsize(os.path.join(seg_dir, f)) >= 400)
    with open(os.path.join(seg_dir, closed), "r+b") as f:  # flip one bit in a record value
        f.seek(200)
        b = f.read(1)
        f.seek(200)
        f.write(bytes([b[0] ^ 0x10]))
    other = next(n for n in cluster.nodes if n is not preferred)
    until(lambda: cluster.partition("rot", 0, other).leader not in (-1, preferred.node_id),
          timeout_s=30)
    # the read path must find the flip: its scrubber (which would find it first, ~2 s
    # after the start, and repair it as a follower: tests/cluster/test_scrub.py) is off
    preferred.extra["log.scrub.bytes.per.sec"] = "0"
    preferred.start()
    # back in the ISR, it becomes leader again (preferred), finds the flip on the first read
    cluster.wait_isr("rot", 0, {1, 2, 3}, timeout_s=60, via=other)
    until(lambda: cluster.partition("rot", 0, preferred).leader == preferred.node_id,
          timeout_s=30)
    # read through it (its own metadata says it leads; another node's may lag a moment
    # and send the consumer to the old leader, which serves intact data)
    got = consume_all(preferred.bootstrap, "rot", 0, 300, timeout_s=60)
    assert [r.value[:5] for r in got] == [b"v%04d" % i for i in range(300)]
    assert "log_corrupt" in preferred.log_text()
    cluster.wait_isr("rot", 0, {1, 2, 3}, timeout_s=60, via=other)
    cluster.stop()
    logs = [cluster.read_replica(i, "rot") for i in (1, 2, 3)]
    assert logs[0] == logs[1] == logs[2]


def test_follower_that_lost_its_unsynced_tail_rejoins_identical(cluster):
    """#34: a follower whose tail did not reach its disk (simulated: killed, then its
    segment file cut mid-batch while stopped) recovers to a prefix, fetches the rest
    from the leader (whose HW never counted what was not on every ISR disk) and rejoins
    the ISR with a log identical to the others."""
    with cluster.admin() as a:
        a.create_topic("tail", partitions=1, replication_factor=3)
    p = cluster.wait_isr("tail", 0, {1, 2, 3})
    leader = cluster.node(p.leader)
    with Producer(leader.bootstrap, acks="all", linger_ms=1) as prod:
        metas = [prod.send("tail", b"a%d" % i, partition=0) for i in range(300)]
        prod.flush(30)
    acked = {m.result(1).offset: b"a%d" % i for i, m in enumerate(metas)}
    victim = cluster.node(next(r for r in p.replicas if r != p.leader))
    victim.kill()
    seg = os.path.join(victim.data_dir, "tail-0", "00000000000000000000.log")
    size = os.path.getsize(seg)
    with open(seg, "r+b") as f:  # the unsynced tail is gone: cut mid-batch
        f.truncate(size // 2 + 7)
    with Producer(leader.bootstrap, acks="all", linger_ms=1) as prod:
        metas = [prod.send("tail", b"b%d" % i, partition=0) for i in range(100)]
        prod.flush(60)
    acked.update({m.result(1).offset: b"b%d" % i for i, m in enumerate(metas)})
    victim.start()
    cluster.wait_isr("tail", 0, {1, 2, 3}, timeout_s=60, via=leader)
    with Producer(leader.bootstrap, acks="all", linger_ms=1) as prod:
        metas = [prod.send("tail", b"c%d" % i, partition=0) for i in range(50)]
        prod.flush(30)
    acked.update({m.result(1).offset: b"c%d" % i for i, m in enumerate(metas)})
    cluster.stop()
    logs = [cluster.read_replica(i, "tail") for i in (1, 2, 3)]
    assert logs[0] == logs[1] == logs[2]
    assert {o: v for o, _k, v in logs[0]} == acked
