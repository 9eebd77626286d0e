"""Three real nodes with SASL_SSL on every listener (issue #19): replication between
nodes over TLS + SCRAM with host names verified, acks=all through a leader kill, a
consumer group committing offsets, and ACLs enforced the same on every node."""

from __future__ import annotations

import os
import time

import pytest

from raftlog.client import Admin, ApiError, Consumer, ErrorCode, Producer, TopicPartition
from tests.certs import make_certs

from ..conftest import NodeProcess, free_ports
from .cluster import until

pytestmark = pytest.mark.slow

BROKER = ("broker", "broker-secret-0123")


@pytest.fixture
def secure_cluster(tmp_path):
    certs = make_certs(str(tmp_path / "certs"))
    stores = []
    for i in (1, 2, 3):
        cert, key = certs.issue(f"node{i}", f"node{i}", hosts=("127.0.0.1",))
        path = os.path.join(certs.dir, f"node{i}-keystore.pem")
        with open(path, "w") as f:
            f.write(open(cert).read() + open(key).read())
        stores.append(path)
    ports = free_ports(6)
    voters = ",".join(f"{i}@127.0.0.1:{ports[2 + i]}" for i in (1, 2, 3))
    nodes = [NodeProcess(str(tmp_path / f"node-{i}"), ports[i - 1], node_id=i, extra={
        "listeners": f"SASL_SSL://127.0.0.1:{ports[i - 1]}",
        "controller.quorum.voters": voters, "raft.password": "cluster-secret-0123456789",
        "ssl.keystore.location": stores[i - 1], "ssl.truststore.location": certs.cafile,
        "inter.broker.sasl.username": BROKER[0], "inter.broker.sasl.password": BROKER[1],
        "sasl.mechanism.inter.broker.protocol": "SCRAM-SHA-512",
        "super.users": f"User:{BROKER[0]}", "authorizer.enable": "true",
        "broker.session.timeout.ms": "2000", "broker.heartbeat.interval.ms": "200",
        "replica.lag.time.max.ms": "3000", "offsets.topic.replication.factor": "3",
        "group.initial.rebalance.delay.ms": "0"}) for i in (1, 2, 3)]
    for n in nodes:
        n.start()
    client = {"security_protocol": "SASL_SSL", "ssl_cafile": certs.cafile,
              "sasl_mechanism": "SCRAM-SHA-256", "sasl_plain_username": BROKER[0],
              "sasl_plain_password": BROKER[1]}
    bootstrap = ",".join(n.bootstrap for n in nodes)

    def registered():
        with Admin(bootstrap, **client) as a:
            b = a.describe_cluster().brokers
        return [x.id for x in b] == [1, 2, 3] and not any(x.fenced for x in b)

    until(registered, timeout_s=60)
    try:
        yield nodes, bootstrap, client
    finally:
        for n in nodes:
            n.stop()


def consume(bootstrap, client, topic, expect, group=None, timeout_s=60):
    c = Consumer(bootstrap, group_id=group, auto_offset_reset="earliest",
                 fetch_max_wait_ms=100, **client)
    if group:
        c.subscribe([topic])
    else:
        c.assign([TopicPartition(topic, 0)])
    out, deadline = [], time.monotonic() + timeout_s
    try:
        while len(out) < expect and time.monotonic() < deadline:
            out += c.poll(timeout_ms=200)
        if group:
            c.commit()
    finally:
        c.close()
    return out


def test_sasl_ssl_cluster_replicates_survives_a_kill_and_enforces_acls(secure_cluster):
    nodes, bootstrap, client = secure_cluster
    with Admin(bootstrap, **client) as a:
        a.create_topic("sec", partitions=1, replication_factor=3)
        until(lambda: set(a.describe_topic("sec").partitions[0].isr) == {1, 2, 3}, 30)
        leader = a.describe_topic("sec").partitions[0].leader
    with Producer(bootstrap, acks="all", linger_ms=2, **client) as p:
        first = [p.send("sec", b"a%d" % i) for i in range(500)]
        for f in first:
            f.result(30)
        nodes[leader - 1].kill()  # followers over TLS take over; nothing acked is lost
        second = [p.send("sec", b"b%d" % i) for i in range(500)]
        for f in second:
            f.result(60)
    nodes[leader - 1].start()
    with Admin(bootstrap, **client) as a:
        until(lambda: set(a.describe_topic("sec").partitions[0].isr) == {1, 2, 3}, 60)
    got = consume(bootstrap, client, "sec", 1000, group="g")
    values = [r.value for r in got]
    assert values == [b"a%d" % i for i in range(500)] + [b"b%d" % i for i in range(500)]
    with Admin(bootstrap, **client) as a:
        assert sum(a.list_group_offsets("g").values()) == 1000
        # a user with no ACLs sees nothing and may write nothing, on any node
        a.create_user("mallory", "mallory-pw-000")
    until(lambda: _denied(bootstrap, client), 30)


def _denied(bootstrap, client) -> bool:
    m = {**client, "sasl_plain_username": "mallory", "sasl_plain_password": "mallory-pw-000"}
    with Admin(bootstrap, **m) as a:
        if a.list_topics():
            return False
    with Producer(bootstrap, acks="all", retries=0, delivery_timeout_ms=5000, **m) as p:
        try:
            p.send("sec", b"x").result(10)
        except ApiError as e:
            return e.code in (ErrorCode.TOPIC_AUTHORIZATION_FAILED,
                              ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                              ErrorCode.CLUSTER_AUTHORIZATION_FAILED)
    return False


def test_rolling_move_from_plaintext_to_sasl_ssl_keeps_the_cluster_available(tmp_path):
    """Kafka's three rolling restarts: add a SASL_SSL listener, move inter-broker traffic
    to it, drop PLAINTEXT. A SASL_SSL producer (acks=all) writes throughout; every record
    it had acknowledged is there at the end."""
    import threading

    certs = make_certs(str(tmp_path / "certs"))
    ports = free_ports(9)
    plain, secure, raft = ports[0:3], ports[3:6], ports[6:9]
    voters = ",".join(f"{i}@127.0.0.1:{raft[i - 1]}" for i in (1, 2, 3))
    base = {"controller.quorum.voters": voters, "raft.password": "cluster-secret-0123456789",
            "broker.session.timeout.ms": "2000", "broker.heartbeat.interval.ms": "200",
            "replica.lag.time.max.ms": "3000"}
    nodes = [NodeProcess(str(tmp_path / f"node-{i}"), plain[i - 1], node_id=i, extra=dict(base))
             for i in (1, 2, 3)]
    security = {"ssl.truststore.location": certs.cafile,
                "inter.broker.sasl.username": BROKER[0], "inter.broker.sasl.password": BROKER[1]}
    for i, n in enumerate(nodes, 1):
        cert, key = certs.issue(f"node{i}", f"node{i}", hosts=("127.0.0.1",))
        store = os.path.join(certs.dir, f"node{i}-keystore.pem")
        with open(store, "w") as f:
            f.write(open(cert).read() + open(key).read())
        n.security = {**security, "ssl.keystore.location": store}
    client = {"security_protocol": "SASL_SSL", "ssl_cafile": certs.cafile,
              "sasl_plain_username": BROKER[0], "sasl_plain_password": BROKER[1]}
    t = threading.Thread()  # (the producer, started after the first roll)
    plain_boot = ",".join(f"127.0.0.1:{p}" for p in plain)
    secure_boot = ",".join(f"127.0.0.1:{p}" for p in secure)

    def in_sync(bootstrap, **kw):
        with Admin(bootstrap, **kw) as a:
            until(lambda: set(a.describe_topic("mig").partitions[0].isr) == {1, 2, 3}, 60)

    acked, errors, stop = [], [], threading.Event()

    def roll(step, bootstrap, **kw):
        for i, n in enumerate(nodes, 1):
            before = len(acked)
            n.stop()
            n.extra = {**base, **n.security, **step(i)}
            if "PLAINTEXT://" not in n.extra["listeners"]:
                n.port = secure[i - 1]
            n.start()
            in_sync(bootstrap, **kw)
            if t.is_alive():  # available at every step: the producer gets acks again
                until(lambda before=before: len(acked) > before + 1 or errors, 60)

    try:
        for n in nodes:
            n.start()
        with Admin(plain_boot) as a:
            until(lambda: len(a.describe_cluster().brokers) == 3, 30)
            a.create_topic("mig", partitions=1, replication_factor=3)
        in_sync(plain_boot)
        roll(lambda i: {"listeners": f"PLAINTEXT://127.0.0.1:{plain[i - 1]},"
                                     f"SASL_SSL://127.0.0.1:{secure[i - 1]}",
                        "inter.broker.listener.name": "PLAINTEXT"}, plain_boot)
        def produce():
            with Producer(secure_boot, acks="all", linger_ms=1, **client) as p:
                i = 0
                while not stop.is_set():
                    try:
                        p.send("mig", b"m%d" % i).result(60)
                        acked.append(b"m%d" % i)
                    except Exception as e:  # counted: none expected
                        errors.append(repr(e))
                    i += 1
                    time.sleep(0.005)

        t = threading.Thread(target=produce)
        t.start()
        try:
            roll(lambda i: {"listeners": f"PLAINTEXT://127.0.0.1:{plain[i - 1]},"
                                         f"SASL_SSL://127.0.0.1:{secure[i - 1]}",
                            "inter.broker.listener.name": "SASL_SSL"}, secure_boot, **client)
            roll(lambda i: {"listeners": f"SASL_SSL://127.0.0.1:{secure[i - 1]}"},
                 secure_boot, **client)
        finally:
            stop.set()
            t.join(120)
        assert not errors and len(acked) >= 10
        got = {r.value for r in consume(secure_boot, client, "mig", len(acked))}
        assert set(acked) <= got
    finally:
        for n in nodes:
            n.stop()
