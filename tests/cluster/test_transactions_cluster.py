"""Transactions end to end (issue #33) on real node processes: the SDK's transactional
producer and read_committed consumer against 3 nodes, the coordinator's failover, the
zombie fenced, the timeout abort."""

from __future__ import annotations

import time

import pytest

from raftlog.client import Consumer, Producer, ProducerFencedError, TopicPartition
from raftlog.protocol import Api

from .cluster import LocalCluster, until

pytestmark = pytest.mark.slow

TXN_SETTINGS = {"transaction.state.log.num.partitions": "2",
                "offsets.topic.num.partitions": "2",
                "transaction.abort.timed.out.transaction.cleanup.interval.ms": "100"}


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    c = LocalCluster(tmp_path_factory.mktemp("txn"), 3,
                     **{k.replace(".", "_"): v for k, v in TXN_SETTINGS.items()}).start()
    yield c
    c.stop()


def _topic(cluster, name: str, partitions: int = 2) -> str:
    with cluster.admin() as a:
        a.create_topic(name, partitions=partitions, replication_factor=3)
    for p in range(partitions):
        until(lambda p=p: len(cluster.partition(name, p).isr) == 3, timeout_s=30)
    return name


def _read(bootstrap: str, topic: str, partitions: int, isolation: str, want: int,
          timeout_s: float = 30.0) -> list[bytes]:
    """Values read from the start until ``want`` arrived (or the time is up)."""
    c = Consumer(bootstrap, isolation_level=isolation, auto_offset_reset="earliest")
    try:
        c.assign([(topic, p) for p in range(partitions)])
        got: list[bytes] = []
        deadline = time.monotonic() + timeout_s
        while len(got) < want and time.monotonic() < deadline:
            got += [r.value for r in c.poll(timeout_ms=300)]
        # what more comes within a short while (nothing may, for the exact count)
        got += [r.value for r in c.poll(timeout_ms=500)]
        return got
    finally:
        c.close()


def _coordinator_of(cluster, tid: str) -> int:
    """The node coordinating ``tid`` (FindCoordinator, key type transaction)."""
    from raftlog.client.conn import BrokerConnection

    def find():
        n = cluster.alive()[0]
        conn = BrokerConnection(n.host, n.port, 10)
        try:
            return conn.request(Api.FIND_COORDINATOR, {"key": tid, "key_type": 1}
                                ).header["node_id"]
        except Exception:
            return None
        finally:
            conn.close()

    return until(find, timeout_s=30)


def test_commit_is_seen_abort_is_not(cluster):
    topic = _topic(cluster, "txn-basic")
    p = Producer(cluster.bootstrap, transactional_id="basic")
    try:
        p.init_transactions()
        p.begin_transaction()
        for i in range(10):
            p.send(topic, b"commit-%d" % i, partition=i % 2)
        p.commit_transaction()
        p.begin_transaction()
        for i in range(10):
            p.send(topic, b"abort-%d" % i, partition=i % 2)
        p.abort_transaction()
        p.begin_transaction()
        p.send_many(topic, [b"commit-last"], partition=1)
        p.commit_transaction()
    finally:
        p.close()
    committed = _read(cluster.bootstrap, topic, 2, "read_committed", 11)
    assert sorted(committed) == sorted([b"commit-%d" % i for i in range(10)] + [b"commit-last"])
    everything = _read(cluster.bootstrap, topic, 2, "read_uncommitted", 21)
    assert len(everything) == 21  # the aborted data, and never a marker
    assert all(v.startswith((b"commit-", b"abort-")) for v in everything)


def test_the_next_transaction_is_not_answered_concurrent_transactions(cluster):
    """A commit returns once the decision is durable, so the next transaction's first
    AddPartitionsToTxn meets the last one's markers still being written: the coordinator
    answers it once they are (and CompleteCommit is), not with CONCURRENT_TRANSACTIONS
    that the client would sleep on and ask again."""
    topic = _topic(cluster, "txn-back-to-back", partitions=3)
    p = Producer(cluster.bootstrap, transactional_id="back-to-back")
    want = []
    try:
        p.init_transactions()  # (may back off while __transaction_state is created)
        p._txn.stats.clear()
        for i in range(6):
            p.begin_transaction()
            for part in range(3):
                values = [b"%d-%d-%d" % (i, part, j) for j in range(50)]
                p.send_many(topic, values, partition=part)
                want += values
            p.commit_transaction()
        stats = dict(p._txn.stats)
    finally:
        p.close()
    # one AddPartitionsToTxn per transaction at best (the I/O thread adds what the
    # sends noted meanwhile in one), one per partition at worst; none asked again
    assert 6 <= stats["ADD_PARTITIONS_TO_TXN"][0] <= 18, stats
    assert "backoff" not in stats, stats  # (no CONCURRENT_TRANSACTIONS reached the client)
    got = _read(cluster.bootstrap, topic, 3, "read_committed", len(want))
    assert sorted(got) == sorted(want)


@pytest.mark.parametrize("isolation", ["read_committed", "read_uncommitted"])
def test_position_moves_past_markers_and_aborted_batches_at_the_end(cluster, isolation):
    """A partition ending in a commit marker, or in an aborted transaction and its
    marker: once the consumer returned the last record, position() is the end of the
    log (as Kafka's), so lag reaches 0 and committed offsets do not point at a marker."""
    topic = _topic(cluster, f"txn-end-{isolation[5:]}", partitions=2)
    p = Producer(cluster.bootstrap, transactional_id=f"end-{isolation}")
    try:
        p.init_transactions()
        p.begin_transaction()
        p.send_many(topic, [b"a", b"b"], partition=0)
        p.send_many(topic, [b"c"], partition=1)
        p.commit_transaction()  # partition 0: a, b, commit marker
        p.begin_transaction()
        p.send_many(topic, [b"x", b"y"], partition=1)
        p.abort_transaction()  # partition 1: c, marker, [x, y] (aborted), abort marker
    finally:
        p.close()
    tps = [TopicPartition(topic, 0), TopicPartition(topic, 1)]
    c = Consumer(cluster.bootstrap, isolation_level=isolation, auto_offset_reset="earliest")
    try:
        c.assign(tps)
        ends = {tps[0]: 3, tps[1]: 5}  # (the markers follow the calls' return)
        until(lambda: c.end_offsets(tps) == ends, timeout_s=30)
        want = 3 if isolation == "read_committed" else 5
        got: list = []
        until(lambda: (got.extend(c.poll(timeout_ms=200)) or True)
              and len(got) >= want and all(c.position(tp) == ends[tp] for tp in tps),
              timeout_s=30)
        assert sorted(r.value for r in got) == sorted(
            [b"a", b"b", b"c"] + ([] if isolation == "read_committed" else [b"x", b"y"]))
    finally:
        c.close()


def test_open_transaction_holds_read_committed_back(cluster):
    topic = _topic(cluster, "txn-lso", partitions=1)
    p = Producer(cluster.bootstrap, transactional_id="lso")
    plain = Producer(cluster.bootstrap)
    try:
        p.init_transactions()
        p.begin_transaction()
        p.send(topic, b"open", partition=0)
        p.flush()
        plain.send(topic, b"after", partition=0).result(timeout=10)
        # the open transaction's first offset is the LSO: nothing after it is served
        assert _read(cluster.bootstrap, topic, 1, "read_committed", 1, timeout_s=2) == []
        assert sorted(_read(cluster.bootstrap, topic, 1, "read_uncommitted", 2)) == [
            b"after", b"open"]
        p.commit_transaction()
        assert sorted(_read(cluster.bootstrap, topic, 1, "read_committed", 2)) == [
            b"after", b"open"]
    finally:
        p.close()
        plain.close()


def test_zombie_is_fenced_and_its_transaction_aborted(cluster):
    topic = _topic(cluster, "txn-zombie")
    old = Producer(cluster.bootstrap, transactional_id="zombie")
    new = Producer(cluster.bootstrap, transactional_id="zombie")
    try:
        old.init_transactions()
        old.begin_transaction()
        old.send(topic, b"zombie", partition=0)
        old.flush()
        new.init_transactions()  # aborts the old instance's transaction, bumps the epoch
        # a new partition: the old instance's I/O thread asks the coordinator to add it
        # and is told it is fenced -- the send fails, the commit raises, and every
        # later call says so at once
        late = old.send(topic, b"zombie-2", partition=1)
        with pytest.raises(ProducerFencedError):
            late.result(timeout=30)
        with pytest.raises(ProducerFencedError):
            old.commit_transaction()
        with pytest.raises(ProducerFencedError):
            old.send(topic, b"zombie-3", partition=0)
        new.begin_transaction()
        new.send(topic, b"new", partition=0)
        new.commit_transaction()
    finally:
        old.close()
        new.close()
    assert _read(cluster.bootstrap, topic, 2, "read_committed", 1) == [b"new"]


def test_abandoned_transaction_is_aborted_after_its_timeout(cluster):
    topic = _topic(cluster, "txn-timeout", partitions=1)
    p = Producer(cluster.bootstrap, transactional_id="abandoned", transaction_timeout_ms=1000)
    plain = Producer(cluster.bootstrap)
    try:
        p.init_transactions()
        p.begin_transaction()
        p.send(topic, b"abandoned", partition=0)
        p.flush()
        plain.send(topic, b"later", partition=0).result(timeout=10)
        # the coordinator aborts it after 1 s: the LSO moves past it, "later" shows
        assert _read(cluster.bootstrap, topic, 1, "read_committed", 1, timeout_s=20) == [b"later"]
    finally:
        plain.close()
        p._closed = True  # (its transaction is gone; nothing to flush)
        p._acc.close()


@pytest.mark.parametrize("when", ["after_commit", "mid_transaction"])
def test_coordinator_killed_the_next_one_finishes(tmp_path, when):
    cluster = LocalCluster(tmp_path, 3, **{k.replace(".", "_"): v
                                           for k, v in TXN_SETTINGS.items()}).start()
    try:
        topic = _topic(cluster, "txn-failover")
        tid = f"failover-{when}"
        p = Producer(cluster.bootstrap, transactional_id=tid, request_timeout_ms=5000)
        p.init_transactions()
        coordinator = _coordinator_of(cluster, tid)
        p.begin_transaction()
        for i in range(6):
            p.send(topic, b"v%d" % i, partition=i % 2)
        if when == "mid_transaction":
            p.flush()
            cluster.node(coordinator).kill()
            p.commit_transaction()  # finds the new coordinator, which loaded the state
        else:
            p.commit_transaction()
            cluster.node(coordinator).kill()  # maybe before every marker was written
        p.close()
        alive = ",".join(n.bootstrap for n in cluster.alive())
        assert sorted(_read(alive, topic, 2, "read_committed", 6, timeout_s=60)) == [
            b"v%d" % i for i in range(6)]
    finally:
        cluster.stop()


def test_offsets_sent_to_the_transaction_commit_only_with_it(cluster):
    """Read-process-write: the consumed offsets commit with the output, or not at all."""
    from raftlog.client import TopicPartition

    src, dst = _topic(cluster, "rpw-in", partitions=1), _topic(cluster, "rpw-out", partitions=1)
    plain = Producer(cluster.bootstrap)
    for i in range(10):
        plain.send(src, b"in-%d" % i, partition=0)
    plain.flush()
    plain.close()
    c = Consumer(cluster.bootstrap, group_id="rpw", enable_auto_commit=False,
                 auto_offset_reset="earliest", session_timeout_ms=6000)
    p = Producer(cluster.bootstrap, transactional_id="rpw")
    tp = TopicPartition(src, 0)
    try:
        c.subscribe([src])
        got: list = []
        deadline = time.monotonic() + 30
        while len(got) < 10 and time.monotonic() < deadline:
            got += c.poll(timeout_ms=300)
        assert len(got) == 10
        p.init_transactions()
        p.begin_transaction()
        p.send(dst, b"out-0-4", partition=0)
        p.send_offsets_to_transaction({tp: 5}, c.group_metadata())
        p.commit_transaction()
        until(lambda: c.committed(tp) == 5, timeout_s=20)
        p.begin_transaction()
        p.send(dst, b"out-5-9", partition=0)
        p.send_offsets_to_transaction({tp: 10}, c.group_metadata())
        p.abort_transaction()
        p.begin_transaction()  # (a later transaction's marker passes the aborted one)
        p.send(dst, b"out-again", partition=0)
        p.commit_transaction()
        assert sorted(_read(cluster.bootstrap, dst, 1, "read_committed", 2)) == [
            b"out-0-4", b"out-again"]
        assert c.committed(tp) == 5  # the aborted transaction's offsets never count
    finally:
        p.close()
        c.close()
