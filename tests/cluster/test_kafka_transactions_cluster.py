"""Kafka clients' transactional producers on the Kafka listener (issue #33) against 3 node
processes: kafka-python, confluent-kafka and aiokafka each commit a transaction of
records to 3 partitions plus a group's offsets and abort a second; read_committed
consumers of the same library (and the SDK's) see exactly the committed records,
read_uncommitted ones see both; a second instance with the same transactional id
fences the first. Bad input gets Kafka's error and writes nothing."""

from __future__ import annotations

import asyncio
import socket
import struct
import time

import pytest

from raftlog.client import Consumer
from raftlog.kafka import batch as kafka_batch
from raftlog.kafka.wire import decode_response, encode_request

from ..conftest import free_ports, kafka_python_read
from .cluster import LocalCluster, until

pytestmark = pytest.mark.slow

TXN_SETTINGS = {"transaction_state_log_num_partitions": 2, "offsets_topic_num_partitions": 2,
                "offsets_topic_replication_factor": 3, "group_initial_rebalance_delay_ms": 0}
COMMITTED = [b"c0", b"c1", b"c2"]
ABORTED = [b"a0", b"a1", b"a2"]
#: Kafka's error codes
INVALID_TXN_STATE = 48


@pytest.fixture(scope="module")
def kc(tmp_path_factory):
    """(cluster, Kafka bootstrap, {node id: Kafka address})."""
    cluster = LocalCluster(tmp_path_factory.mktemp("ktxn"), 3, **TXN_SETTINGS)
    kports = free_ports(3)
    addrs = {i: f"127.0.0.1:{p}" for i, p in enumerate(kports, 1)}
    brokers = ",".join(f"{i}@{a}" for i, a in addrs.items())
    for n, addr in zip(cluster.nodes, addrs.values()):
        n.extra.update({"kafka.listener": addr, "kafka.brokers": brokers})
    cluster.start()
    yield cluster, ",".join(addrs.values()), addrs
    cluster.stop()
    for n in cluster.nodes:
        assert "kafka_handler_failed" not in n.log_text()


def _topic(cluster, name: str, partitions: int = 3) -> str:
    with cluster.admin() as a:
        a.create_topic(name, partitions=partitions, replication_factor=3)
    for p in range(partitions):
        until(lambda p=p: len(cluster.partition(name, p).isr) == 3, timeout_s=30)
    return name


def _sdk_read_committed(cluster, topic: str, want: int) -> list:
    c = Consumer(cluster.bootstrap, isolation_level="read_committed",
                 auto_offset_reset="earliest")
    try:
        c.assign([(topic, p) for p in range(3)])
        got, deadline = [], time.monotonic() + 30
        while len(got) < want and time.monotonic() < deadline:
            got += [r.value for r in c.poll(timeout_ms=300)]
        got += [r.value for r in c.poll(timeout_ms=500)]
        return got
    finally:
        c.close()


# --------------------------------------------------------------------------- kafka-python


def test_kafka_python_transactional_producer(kc):
    from kafka import KafkaConsumer, KafkaProducer
    from kafka.errors import KafkaError
    from kafka.structs import OffsetAndMetadata
    from kafka.structs import TopicPartition as KTP

    cluster, bootstrap, _ = kc
    topic = _topic(cluster, "kp")
    p = KafkaProducer(bootstrap_servers=bootstrap, transactional_id="kp-t")
    p.init_transactions()
    p.begin_transaction()
    for i, v in enumerate(COMMITTED):
        p.send(topic, v, partition=i)
    p.send_offsets_to_transaction({KTP(topic, 0): OffsetAndMetadata(1, "", -1)}, "kp-g")
    p.commit_transaction()
    p.begin_transaction()
    for i, v in enumerate(ABORTED):
        p.send(topic, v, partition=i)
    p.flush()
    p.abort_transaction()

    def read(isolation: str, want: int) -> list:
        c = KafkaConsumer(bootstrap_servers=bootstrap, isolation_level=isolation,
                          auto_offset_reset="earliest", enable_auto_commit=False)
        c.assign([KTP(topic, i) for i in range(3)])
        got = [m.value for m in kafka_python_read(c, want, timeout_s=30)]
        got += [m.value for recs in c.poll(timeout_ms=500).values() for m in recs]
        c.close()
        return sorted(got)

    assert read("read_committed", 3) == COMMITTED
    assert read("read_uncommitted", 6) == sorted(COMMITTED + ABORTED)
    assert sorted(_sdk_read_committed(cluster, topic, 3)) == COMMITTED
    g = KafkaConsumer(bootstrap_servers=bootstrap, group_id="kp-g", enable_auto_commit=False)
    assert g.committed(KTP(topic, 0)) == 1
    g.close()

    # a second instance fences the first: its next transaction fails, nothing lands
    p2 = KafkaProducer(bootstrap_servers=bootstrap, transactional_id="kp-t")
    p2.init_transactions()
    with pytest.raises(KafkaError):
        p.begin_transaction()
        p.send(topic, b"zombie", partition=0)
        p.commit_transaction()
    p2.begin_transaction()
    p2.send(topic, b"c3", partition=0)
    p2.commit_transaction()
    assert read("read_committed", 4) == sorted(COMMITTED + [b"c3"])
    p.close(timeout=5)
    p2.close()


# --------------------------------------------------------------------------- confluent-kafka


def test_confluent_kafka_transactional_producer(kc):
    ck = pytest.importorskip("confluent_kafka")
    cluster, bootstrap, _ = kc
    topic = _topic(cluster, "ck")
    conf = {"bootstrap.servers": bootstrap, "transactional.id": "ck-t"}
    p = ck.Producer(conf)
    p.init_transactions(30)
    group = ck.Consumer({"bootstrap.servers": bootstrap, "group.id": "ck-g"})
    p.begin_transaction()
    for i, v in enumerate(COMMITTED):
        p.produce(topic, v, partition=i)
    p.send_offsets_to_transaction([ck.TopicPartition(topic, 0, 1)],
                                  group.consumer_group_metadata(), 30)
    p.commit_transaction(30)
    p.begin_transaction()
    for i, v in enumerate(ABORTED):
        p.produce(topic, v, partition=i)
    p.flush(30)
    p.abort_transaction(30)

    def read(isolation: str, want: int) -> list:
        c = ck.Consumer({"bootstrap.servers": bootstrap, "group.id": f"ck-{isolation}",
                         "isolation.level": isolation, "enable.auto.commit": False})
        c.assign([ck.TopicPartition(topic, i, 0) for i in range(3)])
        got, deadline = [], time.monotonic() + 30
        while len(got) < want and time.monotonic() < deadline:
            m = c.poll(0.2)
            if m is not None and m.error() is None:
                got.append(m.value())
        end = time.monotonic() + 0.5
        while time.monotonic() < end:
            m = c.poll(0.1)
            if m is not None and m.error() is None:
                got.append(m.value())
        c.close()
        return sorted(got)

    assert read("read_committed", 3) == COMMITTED
    assert read("read_uncommitted", 6) == sorted(COMMITTED + ABORTED)
    [tp] = group.committed([ck.TopicPartition(topic, 0)], 30)
    assert tp.offset == 1
    group.close()

    p2 = ck.Producer(conf)
    p2.init_transactions(30)  # fences p
    with pytest.raises(ck.KafkaException) as e:
        p.begin_transaction()
        p.produce(topic, b"zombie", partition=0)
        p.commit_transaction(30)
    assert e.value.args[0].fatal() or e.value.args[0].code() in (
        ck.KafkaError._FENCED, ck.KafkaError.PRODUCER_FENCED, ck.KafkaError.INVALID_PRODUCER_EPOCH)
    assert read("read_committed", 3) == COMMITTED


# --------------------------------------------------------------------------- aiokafka


def test_aiokafka_transactional_producer(kc):
    aiokafka = pytest.importorskip("aiokafka")
    from aiokafka.errors import KafkaError
    from aiokafka.structs import TopicPartition as ATP

    cluster, bootstrap, _ = kc
    topic = _topic(cluster, "ak")

    async def read(isolation: str, want: int) -> list:
        c = aiokafka.AIOKafkaConsumer(bootstrap_servers=bootstrap, isolation_level=isolation,
                                      auto_offset_reset="earliest", enable_auto_commit=False)
        await c.start()
        try:
            c.assign([ATP(topic, i) for i in range(3)])
            got, deadline = [], time.monotonic() + 30
            while len(got) < want and time.monotonic() < deadline:
                for recs in (await c.getmany(timeout_ms=300)).values():
                    got += [r.value for r in recs]
            for recs in (await c.getmany(timeout_ms=500)).values():
                got += [r.value for r in recs]
            return sorted(got)
        finally:
            await c.stop()

    async def run():
        p = aiokafka.AIOKafkaProducer(bootstrap_servers=bootstrap, transactional_id="ak-t")
        await p.start()
        try:
            async with p.transaction():
                for i, v in enumerate(COMMITTED):
                    await p.send_and_wait(topic, v, partition=i)
                await p.send_offsets_to_transaction({ATP(topic, 0): 1}, "ak-g")
            await p.begin_transaction()
            for i, v in enumerate(ABORTED):
                await p.send_and_wait(topic, v, partition=i)
            await p.abort_transaction()
            assert await read("read_committed", 3) == COMMITTED
            assert await read("read_uncommitted", 6) == sorted(COMMITTED + ABORTED)
            p2 = aiokafka.AIOKafkaProducer(bootstrap_servers=bootstrap, transactional_id="ak-t")
            await p2.start()  # fences p
            try:
                with pytest.raises(KafkaError):
                    async with p.transaction():
                        await p.send_and_wait(topic, b"zombie", partition=0)
            finally:
                await p2.stop()
        finally:
            await p.stop()
        g = aiokafka.AIOKafkaConsumer(bootstrap_servers=bootstrap, group_id="ak-g",
                                      enable_auto_commit=False)
        await g.start()
        try:
            assert await g.committed(ATP(topic, 0)) == 1
        finally:
            await g.stop()
        assert await read("read_committed", 3) == COMMITTED

    asyncio.run(asyncio.wait_for(run(), 120))


# --------------------------------------------------------------------------- bad input


def _kcall(addr: str, key: int, v: int, body: dict) -> dict:
    host, port = addr.split(":")
    with socket.create_connection((host, int(port)), timeout=20) as s:
        s.sendall(encode_request(key, v, 7, body))
        buf = b""
        while len(buf) < 4 or len(buf) < 4 + struct.unpack(">i", buf[:4])[0]:
            chunk = s.recv(65536)
            assert chunk, "the listener closed the connection"
            buf += chunk
    return decode_response(key, v, buf[4:])[1]


def _until_ok(fn, retriable=(14, 15, 16, 51), timeout_s: float = 30.0) -> dict:
    """Call ``fn`` until its error_code is not one of Kafka's retriable ``retriable``
    (COORDINATOR_LOAD_IN_PROGRESS, COORDINATOR_NOT_AVAILABLE, NOT_COORDINATOR,
    CONCURRENT_TRANSACTIONS)."""
    deadline = time.monotonic() + timeout_s
    while True:
        r = fn()
        if r["error_code"] not in retriable or time.monotonic() > deadline:
            return r
        time.sleep(0.1)


def test_bad_transactional_requests_get_kafkas_errors_and_write_nothing(kc):
    cluster, _bootstrap, addrs = kc
    topic = _topic(cluster, "kbad", partitions=1)
    coord = _until_ok(lambda: _kcall(addrs[1], 10, 1, {"key": "bad-t", "key_type": 1}))
    assert coord["error_code"] == 0
    at = f"{coord['host']}:{coord['port']}"
    init = _until_ok(lambda: _kcall(at, 22, 1, {"transactional_id": "bad-t",
                                                 "transaction_timeout_ms": 60_000}))
    assert init["error_code"] == 0
    pid, epoch = init["producer_id"], init["producer_epoch"]
    # EndTxn without a transaction
    end = _kcall(at, 26, 1, {"transactional_id": "bad-t", "producer_id": pid,
                             "producer_epoch": epoch, "committed": True})
    assert end["error_code"] == INVALID_TXN_STATE
    # a transactional produce to a partition never added to the transaction
    batch = kafka_batch.encode_batch([b"stray"], timestamps=[int(time.time() * 1000)],
                                     producer_id=pid, producer_epoch=epoch, base_sequence=0,
                                     transactional=True)
    leader = addrs[cluster.partition(topic, 0).leader]
    got = _kcall(leader, 0, 7, {"transactional_id": "bad-t", "acks": -1, "timeout_ms": 10_000,
                                "topic_data": [{"name": topic, "partition_data": [
                                    {"index": 0, "records": batch}]}]})
    [row] = got["responses"][0]["partition_responses"]
    assert row["error_code"] == INVALID_TXN_STATE
    # ... and a transactional batch in a produce without a transactional id is refused
    got = _kcall(leader, 0, 7, {"transactional_id": None, "acks": -1, "timeout_ms": 10_000,
                                "topic_data": [{"name": topic, "partition_data": [
                                    {"index": 0, "records": batch}]}]})
    assert got["responses"][0]["partition_responses"][0]["error_code"] != 0
    from kafka import KafkaConsumer
    from kafka.structs import TopicPartition as KTP

    c = KafkaConsumer(bootstrap_servers=_bootstrap)
    assert c.end_offsets([KTP(topic, 0)]) == {KTP(topic, 0): 0}  # nothing was written
    c.close()


def test_the_metadata_quorum_is_described_on_both_listeners_and_the_cli(kc, capsys):
    """(On this module's cluster.) DescribeQuorum: the SDK's Admin asks the controller
    (every voter's log end known, none lagging by much); kafka-python's
    describe_metadata_quorum through a node that is not the controller is answered
    with the controller's view (forwarded); ``raftlog cluster quorum`` prints it."""
    from kafka import KafkaAdminClient

    from raftlog.client.cli import main as cli

    cluster, _bootstrap, addrs = kc
    with cluster.admin() as a:
        # (a controller elected a moment ago knows no follower's log end until it acks)
        until(lambda: all(v.log_end_offset > 0 for v in a.describe_quorum().voters),
              timeout_s=30)
        q = a.describe_quorum()
        controller = a.describe_cluster().controller_id
    assert q.from_leader and q.leader_id == controller and q.leader_epoch >= 1
    assert sorted(v.id for v in q.voters) == [1, 2, 3]
    assert all(v.lag >= 0 for v in q.voters), q.voters
    assert q.high_watermark > 0
    other = next(i for i in addrs if i != controller)
    admin = KafkaAdminClient(bootstrap_servers=addrs[other])
    try:
        got = admin.describe_metadata_quorum()
    finally:
        admin.close()
    [topic] = got["topics"]
    [p] = topic["partitions"]
    assert topic["topic_name"] == "__cluster_metadata" and p["leader_id"] == controller
    assert p["error"] is None and sorted(n["node_id"] for n in got["nodes"]) == [1, 2, 3]
    voters = {v["replica_id"]: v for v in p["current_voters"]}
    assert sorted(voters) == [1, 2, 3] and all(v["log_end_offset"] > 0 for v in voters.values())
    # a user's mistakes: another topic, another partition of the metadata log
    admin = KafkaAdminClient(bootstrap_servers=addrs[other])
    try:
        for topic, partition in (("payments", 0), ("__cluster_metadata", 1)):
            wrong = admin._manager.run(admin._async_describe_quorum, topic, partition)
            [row] = wrong["topics"][0]["partitions"]
            assert "UnknownTopicOrPartition" in row["error"], row
            assert "__cluster_metadata-0" in row["error"] and row["leader_id"] == -1, row
            assert row["current_voters"] == [], row
    finally:
        admin.close()
    assert cli(["cluster", "quorum", "--bootstrap-server", cluster.bootstrap]) == 0
    out = capsys.readouterr().out
    assert f"controller {controller}, term" in out and "(controller)" in out
