"""Operating transactions on 3 real node processes (issue #33, KIP-664): ``raftlog
transactions list|describe|describe-producers|abort|find-hanging`` run as a user runs
them, the LSO beside the HW in ``raftlog topics describe``, group lag against the LSO,
and the same answers through the Kafka listener (kafka-python's admin client)."""

from __future__ import annotations

import contextlib
import io
import json
import subprocess
import sys

import pytest

from raftlog.client import Consumer, Producer, TopicPartition
from raftlog.client.cli import main as main_cli

from ..conftest import free_ports
from .cluster import LocalCluster, until

pytestmark = pytest.mark.slow

SETTINGS = {"transaction.state.log.num.partitions": "2",
            "offsets.topic.num.partitions": "2",
            "group.initial.rebalance.delay.ms": "0"}


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    c = LocalCluster(tmp_path_factory.mktemp("txn-admin"), 3,
                     **{k.replace(".", "_"): v for k, v in SETTINGS.items()})
    kports = free_ports(3)
    brokers = ",".join(f"{i}@127.0.0.1:{p}" for i, p in enumerate(kports, 1))
    for n, kport in zip(c.nodes, kports):
        n.extra.update({"kafka.listener": f"127.0.0.1:{kport}", "kafka.brokers": brokers})
    c.kafka_bootstrap = ",".join(f"127.0.0.1:{p}" for p in kports)
    c.start()
    yield c
    c.stop()


def cli(cluster, *argv) -> tuple[int, str, str]:
    """``raftlog ARGV`` in this process (its startup is most of a command's time);
    (exit status, stdout, stderr)."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            rc = main_cli([*argv, "--bootstrap-server", cluster.bootstrap])
        except SystemExit as e:
            rc = e.code
    return rc, out.getvalue(), err.getvalue()


def cli_process(cluster, *argv) -> tuple[int, str, str]:
    """``raftlog ARGV`` as its own process, as a user runs it."""
    p = subprocess.run([sys.executable, "-m", "raftlog.client.cli", *argv,
                        "--bootstrap-server", cluster.bootstrap],
                       capture_output=True, text=True, timeout=60)
    return p.returncode, p.stdout, p.stderr


def _topic(cluster, name: str, partitions: int = 1) -> str:
    with cluster.admin() as a:
        a.create_topic(name, partitions=partitions, replication_factor=3)
    for p in range(partitions):
        until(lambda p=p: len(cluster.partition(name, p).isr) == 3, timeout_s=30)
    return name


def _ends(cluster, topic: str) -> dict:
    """{partition: (HW, LSO)} as ``raftlog topics describe --json`` shows them."""
    rc, out, err = cli(cluster, "topics", "describe", topic, "--json")
    assert rc == 0, err
    return {p["partition"]: (p["high_watermark"], p["last_stable_offset"])
            for p in json.loads(out)["partitions"]}


def test_list_describe_lso_and_lag_of_an_open_transaction(cluster):
    topic = _topic(cluster, "ops-open", partitions=2)
    plain = Producer(cluster.bootstrap)
    p = Producer(cluster.bootstrap, transactional_id="ops-1")
    try:
        plain.send(topic, b"before", partition=0).result(10)  # offset 0: not transactional
        p.init_transactions()
        p.begin_transaction()
        p.send_many(topic, [b"t1", b"t2"], partition=0)
        p.send(topic, b"t3", partition=1)
        p.flush()
        plain.send(topic, b"after", partition=0).result(10)  # offset 3, behind the open txn

        rc, out, err = cli(cluster, "transactions", "list", "--json")
        assert rc == 0, err
        row = next(r for r in json.loads(out) if r["transactional_id"] == "ops-1")
        assert row["state"] == "Ongoing" and row["duration_ms"] >= 0
        assert row["coordinator"] in (1, 2, 3)
        rc, text, _ = cli(cluster, "transactions", "list")
        header = text.splitlines()[0].split()
        assert header == ["TRANSACTIONAL-ID", "COORDINATOR", "PRODUCER-ID", "STATE", "DURATION"]
        assert any(line.split()[0] == "ops-1" and "Ongoing" in line for line in text.splitlines())

        # positionally and with --transactional-id: the same answer
        rc, out, err = cli(cluster, "transactions", "describe", "ops-1", "--json")
        assert rc == 0, err
        d = json.loads(out)
        assert d["state"] == "Ongoing" and d["coordinator"] == row["coordinator"]
        assert d["partitions"] == [[topic, 0], [topic, 1]]
        assert d["start_ms"] > 0 and d["timeout_ms"] == 60_000
        rc, out2, _ = cli(cluster, "transactions", "describe", "--transactional-id", "ops-1",
                          "--json")
        assert json.loads(out2)["producer_id"] == d["producer_id"]

        rc, out, err = cli(cluster, "transactions", "describe-producers", "--topic", topic,
                           "--partition", "0", "--json")
        assert rc == 0, err
        starts = {q["producer_id"]: q["current_transaction_start_offset"]
                  for q in json.loads(out)["producers"]}
        assert starts[d["producer_id"]] == 1 and None in starts.values()  # (the plain one)

        # the LSO waits at the open transaction's first offset, below the HW
        ends = _ends(cluster, topic)
        assert ends == {0: (4, 1), 1: (1, 0)}
        rc, text, _ = cli(cluster, "topics", "describe", topic)
        assert "\tHW: 4\tLSO: 1" in text
        # the SDK consumer's end offsets are Kafka's: the LSO when read_committed
        tps = [TopicPartition(topic, 0), TopicPartition(topic, 1)]
        for level, want in (("read_committed", [1, 0]), ("read_uncommitted", [4, 1])):
            with Consumer(cluster.bootstrap, isolation_level=level) as c:
                assert [c.end_offsets(tps)[tp] for tp in tps] == want, level

        # group lag: against the LSO by default (read_committed), the HW if asked
        c = Consumer(cluster.bootstrap, group_id="ops-g", enable_auto_commit=False)
        try:
            c.commit({TopicPartition(topic, 0): 1, TopicPartition(topic, 1): 0})
        finally:
            c.close()
        rc, out, err = cli(cluster, "groups", "describe", "ops-g", "--json")
        assert rc == 0, err
        g = json.loads(out)
        assert g["isolation_level"] == "read_committed"
        assert [(o["partition"], o["log_end_offset"], o["lag"]) for o in g["offsets"]] == [
            (0, 1, 0), (1, 0, 0)]
        rc, out, _ = cli(cluster, "groups", "describe", "ops-g", "--isolation",
                         "read_uncommitted", "--json")
        assert [o["lag"] for o in json.loads(out)["offsets"]] == [3, 1]
        rc, text, _ = cli(cluster, "groups", "describe", "ops-g")
        assert "against the last stable offset (read_committed)" in text

        p.commit_transaction()  # (answered once PrepareCommit is durable)
        until(lambda: _ends(cluster, topic) == {0: (5, 5), 1: (2, 2)}, timeout_s=15)

        def described() -> dict:
            rc, out, err = cli(cluster, "transactions", "describe", "ops-1", "--json")
            assert rc == 0, err
            return json.loads(out)

        # the coordinator records CompleteCommit once every marker is written: the LSOs
        # above move a moment before it (a CI run under load described PrepareCommit)
        until(lambda: described()["state"] != "PrepareCommit", timeout_s=15)
        d = described()
        assert d["state"] == "CompleteCommit" and d["partitions"] == []
        assert d["duration_ms"] is None
    finally:
        p.close()
        plain.close()


def test_abort_a_transaction_by_its_start_offset(cluster):
    """The hanging-transaction remedy: the open transaction of a partition is aborted
    by its first offset (its producer is abandoned, never ends it); the LSO moves up
    to the HW and read_committed consumers go past it. find-hanging does not report a
    transaction its coordinator knows."""
    topic = _topic(cluster, "ops-abort")
    p = Producer(cluster.bootstrap, transactional_id="ops-abandoned",
                 transaction_timeout_ms=600_000)
    try:
        p.init_transactions()
        p.begin_transaction()
        p.send_many(topic, [b"a", b"b"], partition=0)
        p.flush()
        assert _ends(cluster, topic) == {0: (2, 0)}

        rc, out, err = cli(cluster, "transactions", "find-hanging", "--broker-id",
                           str(cluster.partition(topic).leader),
                           "--max-transaction-timeout", "0", "--json")
        assert rc == 0, err
        assert [h for h in json.loads(out) if h["topic"] == topic] == []  # coordinator knows it

        # a wrong offset: refused, names the open one, nothing written
        rc, out, err = cli(cluster, "transactions", "abort", "--topic", topic,
                           "--partition", "0", "--start-offset", "1")
        assert rc == 1 and "no open transaction of ops-abort-0 starts at offset 1" in err
        assert "open ones start at 0" in err
        assert _ends(cluster, topic) == {0: (2, 0)}

        rc, out, err = cli_process(cluster, "transactions", "abort", "--topic", topic,
                                   "--partition", "0", "--start-offset", "0", "--json")
        assert rc == 0, err
        assert json.loads(out)["aborted"]["current_transaction_start_offset"] == 0
        assert _ends(cluster, topic) == {0: (3, 3)}  # the marker at 2, replicated
        c = Consumer(cluster.bootstrap, auto_offset_reset="earliest")
        try:
            c.assign([(topic, 0)])
            until(lambda: c.poll(timeout_ms=100) == [] and c.position(TopicPartition(topic, 0)) == 3)
        finally:
            c.close()

        # nothing open any more: a second abort says so
        rc, _, err = cli(cluster, "transactions", "abort", "--topic", topic,
                         "--partition", "0", "--start-offset", "0")
        assert rc == 1 and "it has no open transaction (nothing to abort)" in err
    finally:
        p.close()


def test_the_users_mistakes_get_errors_that_say_what_to_do(cluster):
    """(Usage mistakes need no cluster: tests/client/test_txn_admin.py.)"""
    rc, _, err = cli(cluster, "transactions", "describe", "never-used-id")
    assert rc == 1 and "is unknown to its coordinator" in err
    assert "raftlog transactions list shows the known ones" in err
    rc, _, err = cli(cluster, "transactions", "describe-producers", "--topic", "no-such-topic",
                     "--partition", "0")
    assert rc == 1 and "no topic 'no-such-topic' (raftlog topics list shows the topics)" in err
    _topic(cluster, "ops-one")
    rc, _, err = cli(cluster, "transactions", "abort", "--topic", "ops-one",
                     "--partition", "5", "--start-offset", "0")
    assert rc == 1 and "topic 'ops-one' has no partition 5 (it has 1: 0..0)" in err
    rc, _, err = cli(cluster, "transactions", "find-hanging", "--broker-id", "9")
    assert rc == 1 and "no broker 9 in the cluster" in err
    rc, out, _ = cli(cluster, "transactions", "find-hanging", "--broker-id", "1")
    assert rc == 0 and "no hanging transactions" in out


def test_kafka_python_admin_lists_and_describes_through_the_kafka_listener(cluster):
    """kafka-python's KIP-664 admin calls against the Kafka listener: ListTransactions
    to every broker (v1's duration filter too), DescribeProducers at the leader, and
    DescribeTransactions at the coordinator (sent there directly: this listener's
    FindCoordinator does not find transaction coordinators yet)."""
    pytest.importorskip("kafka")
    from kafka import KafkaAdminClient, KafkaConsumer
    from kafka.protocol.admin.transactions import DescribeTransactionsRequest
    from kafka.structs import TopicPartition as KTP

    topic = _topic(cluster, "ops-kafka")
    p = Producer(cluster.bootstrap, transactional_id="ops-k")
    admin = KafkaAdminClient(bootstrap_servers=cluster.kafka_bootstrap)
    try:
        p.init_transactions()
        p.begin_transaction()
        p.send_many(topic, [b"x", b"y"], partition=0)
        p.flush()
        with cluster.admin() as a:
            native = a.describe_transaction("ops-k")

        by_broker = admin.list_transactions()
        assert set(by_broker) == {1, 2, 3}
        listed = {t.transactional_id: (b, t) for b, ts in by_broker.items() for t in ts}
        broker, row = listed["ops-k"]
        assert broker == native.coordinator and row.state.value == "Ongoing"
        assert row.producer_id == native.producer_id
        ongoing = admin.list_transactions(state_filters=["Ongoing"], duration_filter_ms=0)
        assert "ops-k" in {t.transactional_id for ts in ongoing.values() for t in ts}
        assert not any(t.transactional_id == "ops-k" for ts in admin.list_transactions(
            state_filters=["CompleteAbort"]).values() for t in ts)

        producers = admin.describe_producers([KTP(topic, 0)])[KTP(topic, 0)].active_producers
        mine = next(q for q in producers if q.producer_id == native.producer_id)
        assert mine.current_transaction_start_offset == 0
        assert mine.producer_epoch == native.producer_epoch and mine.last_sequence == 1

        async def describe():
            return await admin._manager.send(
                DescribeTransactionsRequest(transactional_ids=["ops-k", "ops-unknown"]),
                node_id=native.coordinator)

        got = {s.transactional_id: s for s in admin._manager.run(describe).transaction_states}
        assert got["ops-k"].error_code == 0 and got["ops-k"].transaction_state == "Ongoing"
        assert [(t.topic, list(t.partitions)) for t in got["ops-k"].topics] == [(topic, [0])]
        assert got["ops-k"].transaction_start_time_ms == native.start_ms
        assert got["ops-unknown"].error_code in (16, 105)  # NOT_COORDINATOR or NOT_FOUND

        # ListOffsets at read_committed: the latest offset is the LSO
        for level, end in (("read_committed", 0), ("read_uncommitted", 2)):
            kc = KafkaConsumer(bootstrap_servers=cluster.kafka_bootstrap, isolation_level=level)
            try:
                assert kc.end_offsets([KTP(topic, 0)]) == {KTP(topic, 0): end}
            finally:
                kc.close()
        p.abort_transaction()
    finally:
        admin.close()
        p.close()
