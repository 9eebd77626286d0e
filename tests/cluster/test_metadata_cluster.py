"""Three real node processes sharing a metadata quorum on loopback."""

from __future__ import annotations

import threading
import time

import pytest

from raftlog.client import Admin, ApiError, Consumer, ErrorCode, Producer, TopicPartition

from ..conftest import NodeProcess, free_ports

pytestmark = pytest.mark.slow
SESSION_MS = 2000


@pytest.fixture
def cluster(tmp_path):
    ports = free_ports(6)
    raft = {i: ports[2 + i] for i in (1, 2, 3)}
    voters = ",".join(f"{i}@127.0.0.1:{p}" for i, p in raft.items())
    nodes = [
        NodeProcess(str(tmp_path / f"node-{i}"), ports[i - 1], node_id=i,
                    extra={"controller.quorum.voters": voters, "raft.password": "test-secret-0123456789",
                           "broker.session.timeout.ms": str(SESSION_MS),
                           "broker.heartbeat.interval.ms": "200"})
        for i in (1, 2, 3)
    ]
    for n in nodes:
        n.start()
    yield nodes
    for n in nodes:
        n.stop()


def _until(fn, timeout_s=15.0):
    deadline = time.monotonic() + timeout_s
    last = None
    while time.monotonic() < deadline:
        try:
            last = fn()
            if last:
                return last
        except Exception as e:  # nodes may be electing
            last = e
        time.sleep(0.1)
    raise AssertionError(f"condition not met: {last!r}")


def _view(node):
    """What one node says about topics and the controller."""
    with Admin(node.bootstrap) as a:
        topics = {t: a.describe_topic(t) for t in a.list_topics()}
        return a.describe_cluster().controller_id, {
            name: [(p.partition, p.leader, p.replicas, p.isr, p.leader_epoch) for p in d.partitions]
            for name, d in topics.items()
        }


def test_cluster_metadata_failover_and_restart(cluster):
    _until(lambda: len(Admin(cluster[0].bootstrap).describe_cluster().brokers) == 3 and all(
        not b.fenced for b in Admin(cluster[0].bootstrap).describe_cluster().brokers))
    admin = Admin(cluster[1].bootstrap)
    admin.create_topic("events", partitions=3, replication_factor=1)
    with pytest.raises(ApiError) as e:
        admin.create_topic("too-replicated", partitions=1, replication_factor=4)
    assert e.value.code == ErrorCode.INVALID_REPLICATION_FACTOR
    # every node answers Metadata from its own copy, and the copies agree
    views = _until(lambda: (v := [_view(n) for n in cluster]) and all(x == v[0] for x in v) and v)
    controller, topics = views[0]
    leaders = sorted(p[1] for p in topics["events"])
    assert leaders == [1, 2, 3]  # one partition led by each node

    # produce through any node: the client routes each partition to its leader
    servers = ",".join(n.bootstrap for n in cluster)
    with Producer(servers, acks=1, enable_idempotence=False) as p:
        metas = [p.send("events", b"v%d" % i, partition=i % 3).result(10) for i in range(30)]
    assert sorted({m.partition for m in metas}) == [0, 1, 2]

    # kill the controller: another is elected and the survivors agree on the metadata
    victim = next(n for n in cluster if n.node_id == controller)
    survivors = [n for n in cluster if n is not victim]
    victim.kill()
    start = time.monotonic()
    new_views = _until(lambda: (v := [_view(n) for n in survivors]) and v[0] == v[1]
                       and v[0][0] not in (-1, controller) and v, timeout_s=10)
    assert time.monotonic() - start < 5 + 2  # Raft failover (pysyncobj, no PreVote) plus polling
    assert new_views[0][1]["events"] == topics["events"]
    Admin(survivors[0].bootstrap).create_topic("after-failover", partitions=1)

    # the killed node rejoins with everything it missed
    victim.start()
    _until(lambda: "after-failover" in _view(victim)[1])

    # full-cluster restart keeps topics, configs and data
    for n in cluster:
        n.stop()
    for n in cluster:
        n.start()
    _until(lambda: set(_view(cluster[2])[1]) == {"events", "after-failover"})
    _until(lambda: all(p[1] > 0 for p in _view(cluster[2])[1]["events"]), timeout_s=30)
    c = Consumer(servers, auto_offset_reset="earliest")
    c.assign([TopicPartition("events", p) for p in range(3)])
    got = []
    deadline = time.monotonic() + 15
    while len(got) < 30 and time.monotonic() < deadline:
        got += c.poll(timeout_ms=500)
    c.close()
    assert sorted(r.value for r in got) == sorted(b"v%d" % i for i in range(30))


def test_dead_broker_is_fenced_and_returns(cluster):
    _until(lambda: [b.fenced for b in Admin(cluster[0].bootstrap).describe_cluster().brokers]
           == [False, False, False])
    Admin(cluster[0].bootstrap).create_topic("t", partitions=3)
    controller = _until(lambda: (c := _view(cluster[0])[0]) > 0 and c)
    victim = next(n for n in cluster if n.node_id != controller)
    watcher = next(n for n in cluster if n is not victim)
    victim.kill()

    def fenced():
        with Admin(watcher.bootstrap) as a:
            brokers = {b.id: b.fenced for b in a.describe_cluster().brokers}
            parts = {p.partition: p.leader for p in a.describe_topic("t").partitions}
        return brokers[victim.node_id] and victim.node_id not in parts.values() and parts

    # Usually within the session timeout + 2 s; the bound is loose because a controller
    # election under CI load restarts the new controller's grace period (timing is for bench/).
    parts = _until(fenced, timeout_s=SESSION_MS / 1000 + 15)
    assert -1 in parts.values()  # its replication-factor-1 partition is offline, not moved
    victim.start()
    _until(lambda: not {b.id: b.fenced for b in Admin(watcher.bootstrap).describe_cluster().brokers}[victim.node_id]
           and -1 not in {p.leader for p in Admin(watcher.bootstrap).describe_topic("t").partitions})


def test_wrong_password_voter_stays_out_and_topics_grow(tmp_path):
    """A voter configured with the wrong Raft password never joins (nor disturbs) the
    quorum; the two others are a majority and keep working. CreatePartitions goes
    through the quorum in cluster mode."""
    from .cluster import LocalCluster, until

    c = LocalCluster(tmp_path, 3)
    c.node(3).extra["raft.password"] = "not-the-secret-0123456789"
    try:
        for n in c.nodes:
            n.start()
        first_two = c.admin(c.node(1))
        until(lambda: {b.id for b in first_two.describe_cluster().brokers if not b.fenced} == {1, 2},
              timeout_s=30)
        time.sleep(2)  # node 3 kept trying meanwhile
        assert {b.id for b in first_two.describe_cluster().brokers} == {1, 2}
        first_two.create_topic("grow", partitions=1, replication_factor=2)
        first_two.create_partitions("grow", 3)
        parts = until(lambda: (d := first_two.describe_topic("grow").partitions) and len(d) == 3
                      and all(p.leader in (1, 2) for p in d) and d)
        assert all(sorted(p.replicas) == [1, 2] for p in parts)
        with pytest.raises(ApiError) as e:
            first_two.create_partitions("grow", 2)
        assert e.value.code == ErrorCode.INVALID_PARTITIONS
        with Producer(c.node(1).bootstrap, acks="all") as p:
            assert p.send("grow", b"x", partition=2).result(30).offset == 0
        first_two.close()
    finally:
        c.stop()


def test_unreachable_peers_stop_the_node_with_one_clear_line(tmp_path):
    ports = free_ports(4)
    voters = f"1@127.0.0.1:{ports[1]},2@127.0.0.1:{ports[2]},3@127.0.0.1:{ports[3]}"
    n = NodeProcess(str(tmp_path / "lonely"), ports[0], node_id=1,
                    extra={"controller.quorum.voters": voters, "raft.password": "lonely-secret-0123456789",
                           "broker.registration.timeout.ms": "1500"})
    n.start()
    assert n.proc.wait(60) == 1
    last = n.log_text().strip().splitlines()[-1]
    assert last.startswith("raftlog node: cannot join the cluster: could not register")
    assert voters in last


def test_create_topics_waits_for_configured_nodes_still_starting(tmp_path):
    """A replication factor the configured voters can hold waits (bounded) for the nodes
    still registering; one above the voters is refused at once."""
    ports = free_ports(6)
    voters = ",".join(f"{i}@127.0.0.1:{ports[2 + i]}" for i in (1, 2, 3))
    nodes = [NodeProcess(str(tmp_path / f"node-{i}"), ports[i - 1], node_id=i,
                         extra={"controller.quorum.voters": voters, "raft.password": "test-secret-0123456789"})
             for i in (1, 2, 3)]
    try:
        for n in nodes[:2]:
            n.start()
        _until(lambda: len(Admin(nodes[0].bootstrap).describe_cluster().brokers) == 2)
        with pytest.raises(ApiError) as e:
            Admin(nodes[0].bootstrap).create_topic("too-many", replication_factor=4)
        assert e.value.code == ErrorCode.INVALID_REPLICATION_FACTOR
        starter = threading.Timer(0.5, nodes[2].start)
        starter.start()  # the third node comes up while the creation waits for it
        Admin(nodes[0].bootstrap, request_timeout_ms=30_000).create_topic(
            "three", replication_factor=3)
        starter.join()
        assert len(Admin(nodes[0].bootstrap).describe_topic("three").partitions[0].replicas) == 3
    finally:
        for n in nodes:
            n.stop()


def test_a_restarted_node_never_calls_an_existing_topic_unknown(cluster):
    """Until its registration commits, a restarted node's metadata may lag: it answers
    METADATA with the retriable BROKER_NOT_AVAILABLE, and clients ask another node."""
    from raftlog.client.conn import BrokerConnection
    from raftlog.protocol import Api

    _until(lambda: Admin(cluster[0].bootstrap).create_topic("known", replication_factor=3) or True)
    n = cluster[2]
    n.kill()
    n.start()
    answers = set()
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and "ok" not in answers:
        conn = BrokerConnection("127.0.0.1", n.port, 5.0)
        try:
            topic = conn.request(Api.METADATA, {"topics": ["known"]}).header["topics"][0]
            assert topic.error == 0, topic  # never UNKNOWN_TOPIC_OR_PARTITION
            answers.add("ok")
        except ApiError as e:
            assert e.code == ErrorCode.BROKER_NOT_AVAILABLE, e
            answers.add("starting")
        finally:
            conn.close()
    assert "ok" in answers
    # a client bootstrapped at the restarted node first finds the topic through the others
    n.kill()
    n.start()
    c = Consumer(",".join(x.bootstrap for x in (n, cluster[0], cluster[1])))
    try:
        c.assign([TopicPartition("known", 0)])
    finally:
        c.close()


def test_admin_writes_ride_out_a_controller_election(cluster):
    """Every metadata write of the Admin client, sent right after the controller was
    killed, meets NOT_CONTROLLER while the survivors elect a new one: each is asked
    again until its request timeout (as Kafka's admin client does) and succeeds once,
    instead of failing the user's first command after a node restart."""
    _until(lambda: len(Admin(cluster[0].bootstrap).describe_cluster().brokers) == 3)
    with Admin(cluster[0].bootstrap) as a:
        a.create_topic("ride", partitions=1, replication_factor=1)
        a.create_topic("gone", partitions=1, replication_factor=1)
        controller = a.describe_cluster().controller_id
    victim = next(n for n in cluster if n.node_id == controller)
    survivor = next(n for n in cluster if n is not victim)
    victim.kill()
    with Admin(survivor.bootstrap, request_timeout_ms=30_000) as a:
        a.incremental_alter_configs("ride", [("retention.ms", "set", "3600000")])
        a.create_partitions("ride", 2)
        a.create_acls([("User:bob", "topic", "ride", "literal", "read", "allow")])
        a.delete_topic("gone")
        a.create_topic("made-after", partitions=1, replication_factor=1)
        new = a.describe_cluster().controller_id
        assert new not in (-1, controller)
        assert a.describe_configs(topic="ride") and len(a.describe_topic("ride").partitions) == 2
        assert a.describe_acls(principal="User:bob")
        assert "gone" not in a.list_topics() and "made-after" in a.list_topics()
