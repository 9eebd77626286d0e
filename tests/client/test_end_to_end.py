"""The SDK against a real node process over real sockets."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time

import pytest

from raftlog.client import (
    Admin,
    ApiError,
    Consumer,
    ErrorCode,
    Producer,
    TopicAlreadyExistsError,
    TopicPartition,
    UnknownTopicOrPartitionError,
)
from raftlog.client.partitioner import partition_for_key


def _read_all(bootstrap, topic, partition, n, timeout_s=10.0):
    c = Consumer(bootstrap, auto_offset_reset="earliest", fetch_max_wait_ms=100)
    c.assign([TopicPartition(topic, partition)])
    out, deadline = [], time.monotonic() + timeout_s
    while len(out) < n and time.monotonic() < deadline:
        out += c.poll(timeout_ms=200, max_records=100_000)
    c.close()
    return out


def test_admin_topics(node):
    a = Admin(node.bootstrap)
    a.create_topic(
        "events", partitions=3, replication_factor=1, config={"retention.ms": "604800000"}
    )
    assert a.list_topics() == ["events"]
    d = a.describe_topic("events")
    assert d.name == "events" and d.config["retention.ms"] == "604800000"
    assert [(p.partition, p.leader, p.replicas, p.isr, p.leader_epoch) for p in d.partitions] == [
        (0, 1, (1,), (1,), 0),
        (1, 1, (1,), (1,), 0),
        (2, 1, (1,), (1,), 0),
    ]
    with pytest.raises(TopicAlreadyExistsError):
        a.create_topic("events")
    a.alter_config("events", {"retention.ms": "1000"})
    assert a.describe_topic("events").config["retention.ms"] == "1000"
    a.create_partitions("events", 4)
    assert len(a.describe_topic("events").partitions) == 4
    c = a.describe_cluster()
    assert c.controller_id == 1 and [b.id for b in c.brokers] == [1]
    a.delete_topic("events")
    assert a.list_topics() == []
    with pytest.raises(UnknownTopicOrPartitionError):
        a.describe_topic("events")
    with pytest.raises(ApiError) as e:
        a.create_topic("x", config={"retention.ms": "soon"})
    assert e.value.code == ErrorCode.INVALID_CONFIG and "retention.ms" in str(e.value)


def test_order_keys_headers_timestamps(node):
    Admin(node.bootstrap).create_topic("t", partitions=4)
    with Producer(node.bootstrap, acks="all", linger_ms=2) as p:
        metas = [
            p.send(
                "t",
                b"v%d" % i,
                key=b"key-%d" % (i % 10),
                headers=[("i", b"%d" % i)],
                timestamp_ms=1_000_000 + i,
            ).result(10)
            for i in range(200)
        ]
        none_meta = p.send("t", None, key=b"tomb").result(10)
    for i, m in enumerate(metas):
        assert m.partition == partition_for_key(b"key-%d" % (i % 10), 4)
    by_part: dict[int, list] = {}
    for i, m in enumerate(metas):
        by_part.setdefault(m.partition, []).append((m.offset, i))
    for part, expected in by_part.items():
        recs = _read_all(node.bootstrap, "t", part, len(expected) + (part == none_meta.partition))
        got = {r.offset: r for r in recs}
        offsets = [o for o, _ in expected]
        assert offsets == sorted(offsets) == list(range(offsets[0], offsets[0] + len(offsets)))
        for off, i in expected:
            r = got[off]
            assert (r.value, r.key, r.headers, r.timestamp) == (
                b"v%d" % i,
                b"key-%d" % (i % 10),
                (("i", b"%d" % i),),
                1_000_000 + i,
            )
    tomb = _read_all(node.bootstrap, "t", none_meta.partition, none_meta.offset + 1)[-1]
    assert tomb.value is None and tomb.key == b"tomb"


def test_send_many_and_compression(node):
    Admin(node.bootstrap).create_topic("bulk", partitions=2)
    with Producer(node.bootstrap, acks=1, enable_idempotence=False, compression_type="zstd") as p:
        f1 = p.send_many("bulk", [b"a%d" % i for i in range(1000)], partition=1)
        f2 = p.send_many("bulk", [b"b%d" % i for i in range(1000)], partition=1)
        m1, m2 = f1.result(10), f2.result(10)
    assert (m1.offsets, m2.offsets) == (range(0, 1000), range(1000, 2000))
    recs = _read_all(node.bootstrap, "bulk", 1, 2000)
    assert [r.value for r in recs] == [b"a%d" % i for i in range(1000)] + [
        b"b%d" % i for i in range(1000)
    ]


def test_long_poll_wakes_on_new_data(node):
    Admin(node.bootstrap).create_topic("lp")
    c = Consumer(node.bootstrap, auto_offset_reset="latest", fetch_max_wait_ms=10_000)
    tp = TopicPartition("lp", 0)
    c.assign([tp])
    assert c.position(tp) == 0
    sent_at = []

    def produce_later():
        time.sleep(0.5)
        with Producer(node.bootstrap, acks=1, enable_idempotence=False, linger_ms=0) as p:
            sent_at.append(time.monotonic())
            p.send("lp", b"wake", partition=0).result(5)

    threading.Thread(target=produce_later).start()
    recs = c.poll(timeout_ms=8000)
    received = time.monotonic()
    c.close()
    assert [r.value for r in recs] == [b"wake"]
    # woken by the append, not by the 10 s fetch.max.wait.ms
    assert received - sent_at[0] < 5


def test_seek_position_offsets_for_times(node):
    Admin(node.bootstrap).create_topic("s")
    with Producer(node.bootstrap, acks=1, enable_idempotence=False) as p:
        for i in range(10):
            p.send("s", b"%d" % i, partition=0, timestamp_ms=5000 + 100 * i)
    c = Consumer(node.bootstrap, auto_offset_reset="earliest")
    tp = TopicPartition("s", 0)
    c.assign([tp])
    assert c.beginning_offsets([tp]) == {tp: 0} and c.end_offsets([tp]) == {tp: 10}
    c.seek(tp, 7)
    assert [r.offset for r in c.poll(timeout_ms=3000, max_records=2)] == [7, 8]
    assert c.position(tp) == 9
    c.seek_to_beginning(tp)
    assert c.position(tp) == 0
    c.seek_to_end(tp)
    assert c.position(tp) == 10
    res = c.offsets_for_times({tp: 5250})
    assert res[tp].offset == 3 and res[tp].timestamp == 5300
    assert c.offsets_for_times({tp: 10**12})[tp] is None
    with pytest.raises(ValueError):
        c.seek(tp, -1)
    with pytest.raises(ValueError):
        c.seek(TopicPartition("s", 5), 0)
    c.close()


def test_restart_keeps_acknowledged_data(node):
    Admin(node.bootstrap).create_topic("durable", partitions=2)
    with Producer(node.bootstrap, acks="all") as p:
        futures = [p.send("durable", b"%d" % i, partition=i % 2) for i in range(1000)]
        acked = [f.result(10) for f in futures]
    node.restart()
    for part in (0, 1):
        recs = _read_all(node.bootstrap, "durable", part, 500)
        assert [r.value for r in recs] == [b"%d" % i for i in range(part, 1000, 2)]
        assert [r.offset for r in recs] == [m.offset for m in acked if m.partition == part]


def test_sigkill_keeps_acknowledged_data(node):
    """The OS keeps what the node wrote: SIGKILL loses nothing acknowledged."""
    Admin(node.bootstrap).create_topic("killed")
    with Producer(node.bootstrap, acks=1, enable_idempotence=False) as p:
        p.send_many("killed", [b"x%d" % i for i in range(5000)], partition=0).result(10)
    node.kill()
    node.start()
    assert len(_read_all(node.bootstrap, "killed", 0, 5000)) == 5000


def test_unknown_topic_errors_are_clear(node):
    with Producer(node.bootstrap) as p:
        with pytest.raises(UnknownTopicOrPartitionError, match="nope"):
            p.send("nope", b"x")
    c = Consumer(node.bootstrap)
    with pytest.raises(UnknownTopicOrPartitionError):
        c.assign([TopicPartition("nope", 0)])
    c.close()


def test_producer_to_dead_node_fails_futures_within_delivery_timeout(node):
    Admin(node.bootstrap).create_topic("gone")
    p = Producer(
        node.bootstrap,
        acks=1,
        enable_idempotence=False,
        delivery_timeout_ms=1500,
        request_timeout_ms=500,
        retry_backoff_ms=50,
    )
    p.send("gone", b"first", partition=0).result(5)
    node.stop()
    f = p.send("gone", b"lost", partition=0)
    with pytest.raises(Exception) as e:
        f.result(timeout=10)
    assert "delivery_timeout_ms" in str(e.value) or "connect" in str(e.value)
    p.close(timeout=5)


def test_cli_round_trip(node):
    def cli(*args, stdin=None):
        return subprocess.run(
            [
                sys.executable,
                "-m",
                "raftlog.client.cli",
                *args,
                "--bootstrap-server",
                node.bootstrap,
            ],
            input=stdin,
            capture_output=True,
            timeout=60,
        )

    assert cli("topics", "create", "cli", "--partitions", "1").returncode == 0
    dup = cli("topics", "create", "cli")
    assert dup.returncode == 1 and b"TOPIC_ALREADY_EXISTS" in dup.stderr
    assert (
        cli(
            "produce", "--topic", "cli", "--key-separator", ":", stdin=b"k1:hello\nworld\n"
        ).returncode
        == 0
    )
    out = cli(
        "consume",
        "--topic",
        "cli",
        "--from-beginning",
        "--max-messages",
        "2",
        "--timeout-ms",
        "10000",
    )
    assert out.stdout.decode().splitlines() == ["0:0\tk1\thello", "0:1\t\tworld"]
    assert b"Partition: 0" in cli("topics", "describe", "cli").stdout
    bad = cli("topics", "create", "bad name")
    assert bad.returncode == 1 and b"INVALID_TOPIC" in bad.stderr


def test_auto_create_only_when_configured(node, node_factory):
    with Producer(node.bootstrap) as p:
        with pytest.raises(UnknownTopicOrPartitionError):
            p.send("auto", b"x")
    auto = node_factory(**{"auto.create.topics.enable": "true", "num.partitions": "3"})
    with Producer(auto.bootstrap) as p:
        assert p.send("auto", b"x").result(10).offset == 0
    assert len(Admin(auto.bootstrap).describe_topic("auto").partitions) == 3


def test_send_to_missing_partition_fails_at_once(node):
    Admin(node.bootstrap).create_topic("two", partitions=2)
    with Producer(node.bootstrap) as p:
        with pytest.raises(UnknownTopicOrPartitionError, match="2 partitions; 5"):
            p.send("two", b"x", partition=5)
        with pytest.raises(UnknownTopicOrPartitionError):
            p.send("two", b"x", partition=-1)
        with pytest.raises(UnknownTopicOrPartitionError):
            p.send_many("two", [b"x"], partition=2)
        assert p.send("two", b"ok", partition=1).result(10).partition == 1


def test_acks_zero_sends_without_waiting(node):
    Admin(node.bootstrap).create_topic("fire")
    with Producer(node.bootstrap, acks=0, enable_idempotence=False) as p:
        metas = [p.send("fire", b"%d" % i, partition=0).result(10) for i in range(100)]
    assert {m.offset for m in metas} == {-1}  # no offsets without an answer, as Kafka
    assert [r.value for r in _read_all(node.bootstrap, "fire", 0, 100)] == [
        b"%d" % i for i in range(100)
    ]


def test_cli_perf_produce_and_consume(node):
    def cli(*args):
        return subprocess.run(
            [
                sys.executable,
                "-m",
                "raftlog.client.cli",
                *args,
                "--bootstrap-server",
                node.bootstrap,
            ],
            capture_output=True,
            timeout=60,
        )

    assert cli("topics", "create", "perf").returncode == 0
    out = cli("perf", "produce", "--topic", "perf", "--num-records", "2000", "--json")
    produced = json.loads(out.stdout)
    assert produced["records"] == 2000 and produced["rec_s"] > 0 and "p99_ms" in produced
    out = cli("perf", "consume", "--topic", "perf", "--num-records", "2000", "--timeout-ms", "5000")
    assert out.returncode == 0 and out.stdout.startswith(b"2000 records in"), out.stderr
