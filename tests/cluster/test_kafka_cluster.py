"""Stock Kafka clients against a 3-node cluster through the Kafka listeners: topics
with RF 3, an idempotent acks=all producer, and a consumer group that rebalances
when a member leaves."""

from __future__ import annotations

import threading
import time

import pytest

from ..conftest import free_ports, kafka_python_read
from .cluster import LocalCluster, until

kafka = pytest.importorskip("kafka")
from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer  # noqa: E402
from kafka.admin import NewTopic  # noqa: E402
from kafka.structs import TopicPartition as KTP  # noqa: E402

pytestmark = pytest.mark.slow


def _kafka_cluster(tmp_path) -> tuple[LocalCluster, str]:
    cluster = LocalCluster(tmp_path, 3, offsets_topic_replication_factor=3,
                           offsets_topic_num_partitions=3, group_initial_rebalance_delay_ms=0)
    kports = free_ports(3)
    brokers = ",".join(f"{i}@127.0.0.1:{p}" for i, p in enumerate(kports, 1))
    for n, kport in zip(cluster.nodes, kports):
        n.extra.update({"kafka.listener": f"127.0.0.1:{kport}", "kafka.brokers": brokers})
    cluster.start()
    return cluster, ",".join(f"127.0.0.1:{p}" for p in kports)


class _Member(threading.Thread):
    def __init__(self, bootstrap: str, name: str):
        super().__init__(daemon=True, name=name)
        self.c = KafkaConsumer("rg", bootstrap_servers=bootstrap, group_id="g3",
                               client_id=name, auto_offset_reset="earliest",
                               session_timeout_ms=6000, heartbeat_interval_ms=300,
                               max_poll_interval_ms=20000)
        self.stop = threading.Event()
        self.assignment: set = set()
        self.values: list = []
        self.polls = 0
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            while not self.stop.is_set():
                for recs in self.c.poll(timeout_ms=200).values():
                    self.values += [r.value for r in recs]
                self.assignment = {tp.partition for tp in self.c.assignment()}
                self.polls += 1
        except BaseException as e:  # shown by state() when an until() fails
            self.error = e
            raise
        finally:
            self.c.close()

    def state(self) -> str:
        """What this member's client believes (for a failure message: a member that
        stops taking part says here whether its thread died, stopped polling, or
        polls while its client thinks it is in the group)."""
        co = self.c._coordinator
        hb = co.heartbeat
        return (f"{self.name}: alive={self.is_alive()} polls={self.polls} "
                f"error={self.error!r} assignment={sorted(self.assignment)} "
                f"state={co.state} generation={co._generation} "
                f"coordinator={co.coordinator_id} "
                f"last_heartbeat_ok={time.monotonic() - hb.last_receive:.1f}s ago")


def _members_until(members: list, cond, timeout_s: float) -> None:
    try:
        until(cond, timeout_s=timeout_s)
    except AssertionError as e:
        raise AssertionError(f"{e}; members: " + "; ".join(m.state() for m in members)) from None


def test_kafka_clients_against_three_nodes(tmp_path):
    cluster, bootstrap = _kafka_cluster(tmp_path)
    try:
        admin = KafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=20_000)
        admin.create_topics([NewTopic("rg", 3, 3)])
        until(lambda: all(len(cluster.partition("rg", p).isr) == 3 for p in range(3)),
              timeout_s=30)
        ports = {b["port"] for b in admin.describe_cluster()["brokers"]}
        assert ports == {int(a.split(":")[1]) for a in bootstrap.split(",")}
        p = KafkaProducer(bootstrap_servers=bootstrap, acks="all", enable_idempotence=True)
        metas = [p.send("rg", value=b"%d" % i).get(timeout=30) for i in range(300)]
        p.close()
        assert {m.partition for m in metas} == {0, 1, 2}

        _confluent_pipelined_acks_all(bootstrap)

        members = [_Member(bootstrap, f"m{i}") for i in range(3)]
        for m in members:
            m.start()
        _members_until(members, lambda: sorted(x for m in members for x in m.assignment)
                       == [0, 1, 2] and all(m.assignment for m in members), timeout_s=60)
        _members_until(members, lambda: sum(len(m.values) for m in members) >= 300,
                       timeout_s=30)
        members[2].stop.set()  # a member leaves: the other two take its partitions
        members[2].join(20)
        _members_until(members[:2], lambda: sorted(x for m in members[:2] for x in m.assignment)
                       == [0, 1, 2], timeout_s=60)
        for m in members[:2]:
            m.stop.set()
            m.join(20)
        seen = sorted(int(v) for m in members for v in m.values)
        assert set(seen) == set(range(300))  # every record; none lost
        desc = admin.describe_groups(["g3"])["g3"]
        assert desc["error"] is None
        kc = KafkaConsumer(bootstrap_servers=bootstrap)
        kc.assign([KTP("rg", i) for i in range(3)])
        kc.seek_to_beginning()
        assert sorted(int(m.value) for m in kafka_python_read(kc, 300)) == list(range(300))
        kc.close()
        admin.close()
    finally:
        cluster.stop()
    for n in cluster.nodes:
        assert "kafka_handler_failed" not in n.log_text()


def _confluent_pipelined_acks_all(bootstrap: str) -> None:
    """librdkafka keeps up to 5 acks=all produces in flight per connection: they wait for
    the ISR side by side and are answered in order, each record once, in send order."""
    ck = pytest.importorskip("confluent_kafka")
    from confluent_kafka.admin import AdminClient
    from confluent_kafka.admin import NewTopic as CNewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})  # (kept: its futures need it)
    for f in admin.create_topics([CNewTopic("pipe", 1, 3)]).values():
        f.result(30)
    acked: list = []
    p = ck.Producer({"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True,
                     "linger.ms": 1, "batch.num.messages": 50,
                     "max.in.flight.requests.per.connection": 5})
    for i in range(3000):
        p.produce("pipe", b"%d" % i, partition=0,
                  on_delivery=lambda e, m: acked.append((e, m.offset(), int(m.value()))))
        p.poll(0)
    assert p.flush(60) == 0
    assert all(e is None for e, _o, _v in acked)
    assert sorted((o, v) for _e, o, v in acked) == [(i, i) for i in range(3000)]


def test_librdkafka_idempotent_producer_across_a_leader_failover(tmp_path):
    """confluent-kafka (idempotent, acks=all) keeps producing while the partition's
    leader is killed: every acknowledged record is in the log once, at its offset."""
    ck = pytest.importorskip("confluent_kafka")
    cluster, bootstrap = _kafka_cluster(tmp_path)
    try:
        with cluster.admin() as a:
            a.create_topic("kfail", partitions=1, replication_factor=3)
        cluster.wait_isr("kfail", 0, {1, 2, 3})
        acked: dict = {}
        errors: list = []
        stop = threading.Event()

        def report(err, msg):
            if err is None:
                acked[msg.value()] = msg.offset()
            else:
                errors.append(err)

        def produce():
            p = ck.Producer({"bootstrap.servers": bootstrap, "acks": "all",
                             "enable.idempotence": True, "linger.ms": 2,
                             "message.timeout.ms": 120_000})
            i = 0
            while not stop.is_set():
                for _ in range(20):
                    p.produce("kfail", b"v%06d" % i, partition=0, on_delivery=report)
                    i += 1
                p.poll(0.005)
            assert p.flush(120) == 0

        t = threading.Thread(target=produce)
        t.start()
        until(lambda: len(acked) > 500, timeout_s=30)
        leader = cluster.partition("kfail", 0).leader
        cluster.node(leader).kill()
        before = len(acked)
        until(lambda: len(acked) > before + 2000, timeout_s=90)
        stop.set()
        t.join(150)
        assert not errors, errors[:3]
        survivor = next(n for n in cluster.nodes if n.node_id != leader)
        cluster.node(leader).start()
        cluster.wait_isr("kfail", 0, {1, 2, 3}, via=survivor, timeout_s=60)
    finally:
        cluster.stop()
    log = cluster.read_replica(survivor.node_id, "kfail", 0)
    values = [v for _o, _k, v in log]
    assert len(values) == len(set(values)), "a record was appended twice"
    offsets = {v: o for o, _k, v in log}
    assert all(offsets.get(v) == o for v, o in acked.items()), "an acked record moved or vanished"


def test_aiokafka_kcat_and_kafka_python_admin_against_three_nodes(tmp_path):
    """The rest of the issue's list on a 3-node cluster, topics with RF 3: aiokafka
    (idempotent acks=all producer; a group consumer that commits and resumes), kcat
    (produce with acks=-1, consume), kafka-python (consume by timestamp, describe
    configs, delete a topic)."""
    import asyncio
    import shutil
    import subprocess
    import time

    aiokafka = pytest.importorskip("aiokafka")
    from kafka.admin import ConfigResource, ConfigResourceType

    cluster, bootstrap = _kafka_cluster(tmp_path)
    try:
        admin = KafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=20_000)
        admin.create_topics([NewTopic("aio3", 1, 3, topic_configs={"retention.ms": "86400000"}),
                             NewTopic("kc3", 1, 3), NewTopic("gone3", 2, 3)])
        until(lambda: all(len(cluster.partition(t, 0).isr) == 3
                          for t in ("aio3", "kc3", "gone3")), timeout_s=30)

        async def aio(n_from: int, n_to: int, group: str):
            p = aiokafka.AIOKafkaProducer(bootstrap_servers=bootstrap, acks="all",
                                          enable_idempotence=True)
            await p.start()
            try:
                for i in range(n_from, n_to):
                    await p.send("aio3", b"%d" % i, timestamp_ms=1_000_000 + i)
                await p.flush()
            finally:
                await p.stop()
            c = aiokafka.AIOKafkaConsumer("aio3", bootstrap_servers=bootstrap, group_id=group,
                                          auto_offset_reset="earliest", enable_auto_commit=False)
            await c.start()
            try:
                got = []
                while len(got) < n_to - n_from:
                    m = await asyncio.wait_for(c.getone(), 30)
                    got.append(int(m.value))
                await c.commit()
            finally:
                await c.stop()
            return got

        assert asyncio.run(aio(0, 30, "g-aio3")) == list(range(30))
        # the group resumes from its commit: only the records produced after it
        assert asyncio.run(aio(30, 40, "g-aio3")) == list(range(30, 40))

        kc = KafkaConsumer(bootstrap_servers=bootstrap)  # by timestamp
        found = kc.offsets_for_times({KTP("aio3", 0): 1_000_000 + 25})
        assert found[KTP("aio3", 0)].offset == 25
        kc.close()

        if shutil.which("kcat") is not None:
            produced = subprocess.run(
                ["kcat", "-b", bootstrap, "-P", "-t", "kc3", "-K", ":",
                 "-X", "topic.request.required.acks=-1"],
                input=b"k1:v1\nk2:v2\n", capture_output=True, timeout=60)
            assert produced.returncode == 0, produced.stderr
            consumed = subprocess.run(
                ["kcat", "-b", bootstrap, "-C", "-t", "kc3", "-o", "beginning", "-e",
                 "-f", "%o %k=%s\\n"], capture_output=True, timeout=60)
            assert consumed.returncode == 0, consumed.stderr
            assert consumed.stdout.decode().splitlines() == ["0 k1=v1", "1 k2=v2"]

        described = admin.describe_configs([ConfigResource(ConfigResourceType.TOPIC, "aio3")])
        assert described["topic"]["aio3"]["retention.ms"]["value"] == "86400000"
        admin.delete_topics(["gone3"])
        deadline = time.monotonic() + 20
        while "gone3" in admin.list_topics() and time.monotonic() < deadline:
            time.sleep(0.2)
        assert "gone3" not in admin.list_topics()
        admin.close()
    finally:
        cluster.stop()
    for n in cluster.nodes:
        assert "kafka_handler_failed" not in n.log_text()


def test_manual_assignment_and_delete_records_on_every_replica(tmp_path):
    """A topic placed by hand (CreateTopics assignments), then Kafka's DeleteRecords: the
    leader moves its log start offset (checkpointed), the followers follow through
    their fetches, and every replica keeps it across a restart."""
    ck = pytest.importorskip("confluent_kafka")
    from confluent_kafka.admin import AdminClient

    cluster, bootstrap = _kafka_cluster(tmp_path)
    try:
        admin = KafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=20_000)
        # (placed by hand: Kafka's CreateTopics assignments; the first replica leads)
        admin.create_topics([NewTopic("dr", -1, -1, replica_assignments={0: [2, 3, 1]})])
        admin.close()
        until(lambda: len(cluster.partition("dr", 0).isr) == 3, timeout_s=30)
        assert tuple(cluster.partition("dr", 0).replicas) == (2, 3, 1)
        assert cluster.partition("dr", 0).leader == 2
        p = ck.Producer({"bootstrap.servers": bootstrap, "acks": "all"})
        for i in range(10):
            p.produce("dr", b"v%d" % i, partition=0)
        assert p.flush(20) == 0
        ck_admin = AdminClient({"bootstrap.servers": bootstrap})  # (alive until done)
        (fut,) = ck_admin.delete_records([ck.TopicPartition("dr", 0, 6)]).values()
        assert fut.result(20).low_watermark == 6

        def starts():
            with cluster.admin() as a:
                return {d.node_id: [r.log_start_offset for r in d.partitions]
                        for d in a.describe_log_dirs(topics=["dr"])}

        until(lambda: starts() == {1: [6], 2: [6], 3: [6]}, timeout_s=20)
        for n in cluster.nodes:  # the followers and the leader, each restarted
            n.restart()
        until(lambda: starts() == {1: [6], 2: [6], 3: [6]}, timeout_s=30)
    finally:
        cluster.stop()
