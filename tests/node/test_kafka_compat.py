"""Kafka compatibility in depth (issue #37), one real node with the Kafka listener and
stock clients (confluent-kafka, kafka-python): auto-creation only on a Metadata that
allows it (never on Produce), Kafka's error codes for illegal topic names, the node's
rack and cluster authorized operations, and Fetch answers bounded as Kafka bounds
them (through a frame-counting proxy on real sockets)."""

from __future__ import annotations

import socket
import threading
import time

import pytest

from raftlog.client import Admin, Producer
from raftlog.kafka import batch as kafka_batch
from raftlog.kafka.wire import FrameDecoder, decode_response, encode_request
from tests.conftest import NodeProcess, free_ports, wait_for_port

kafka = pytest.importorskip("kafka")
ck = pytest.importorskip("confluent_kafka")
from confluent_kafka.admin import AdminClient  # noqa: E402
from confluent_kafka.admin import NewTopic as CNewTopic  # noqa: E402
from kafka import KafkaAdminClient, KafkaConsumer  # noqa: E402
from kafka.admin import NewTopic  # noqa: E402

UNKNOWN_TOPIC, LEADER_NOT_AVAILABLE, INVALID_TOPIC, FENCED_INSTANCE_ID = 3, 5, 17, 82
MIB = 1024 * 1024


class FrameProxy:
    """A TCP proxy in front of the node's Kafka listener that records the size of every
    frame the node sends back (the node advertises the proxy: kafka.brokers)."""

    def __init__(self, upstream_port: int, port: int):
        self.upstream = ("127.0.0.1", upstream_port)
        self.sizes: list[int] = []
        self._lock = threading.Lock()
        self._srv = socket.create_server(("127.0.0.1", port))
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self._srv.accept()
            except OSError:
                return
            try:
                server = socket.create_connection(self.upstream)
            except OSError:
                client.close()
                continue
            threading.Thread(target=self._pump, args=(client, server, False), daemon=True).start()
            threading.Thread(target=self._pump, args=(server, client, True), daemon=True).start()

    def _pump(self, src, dst, count: bool) -> None:
        dec = FrameDecoder(1 << 30)
        try:
            while data := src.recv(1 << 20):
                dst.sendall(data)
                if count:
                    dec.receive_data(data)
                    while (frame := dec.next_frame()) is not None:
                        with self._lock:
                            self.sizes.append(len(frame))
        except OSError:
            pass
        finally:
            for s in (src, dst):
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass

    def close(self) -> None:
        self._srv.close()


@pytest.fixture(scope="module")
def cnode(tmp_path_factory):
    """One node with the Kafka listener (reached through a FrameProxy), auto-creation
    on with 2 partitions, and a rack."""
    port, kport, pport = free_ports(3)
    proxy = FrameProxy(kport, pport)
    n = NodeProcess(str(tmp_path_factory.mktemp("kcompat") / "node-1"), port, extra={
        "kafka.listener": f"127.0.0.1:{kport}",
        "kafka.brokers": f"1@127.0.0.1:{pport}",
        "offsets.topic.replication.factor": "1",
        "offsets.topic.num.partitions": "2",
        "group.initial.rebalance.delay.ms": "0",
        "auto.create.topics.enable": "true",
        "num.partitions": "2",
        "broker.rack": "rack-a",
    })
    n.start()
    wait_for_port("127.0.0.1", kport, 20, n.proc)
    n.kafka = f"127.0.0.1:{pport}"
    n.proxy = proxy
    yield n
    n.stop()
    proxy.close()
    assert "kafka_handler_failed" not in n.log_text()


def _call(node, api: int, version: int, body: dict) -> dict:
    host, port = node.kafka.split(":")
    with socket.create_connection((host, int(port)), timeout=20) as s:
        s.sendall(encode_request(api, version, 1, body))
        dec = FrameDecoder()
        while (frame := dec.next_frame()) is None:
            data = s.recv(65536)
            assert data, "the node closed the connection"
            dec.receive_data(data)
    return decode_response(api, version, frame)[1]


def _metadata(node, names, allow: bool, version: int = 9, **extra) -> dict:
    return _call(node, 3, version, {"topics": [{"name": n} for n in names],
                                    "allow_auto_topic_creation": allow, **extra})


def _topics(node) -> list:
    return Admin(node.bootstrap).list_topics()


def test_metadata_auto_creates_only_when_the_request_allows_it(cnode):
    no = _metadata(cnode, ["ac-no"], allow=False)
    assert [(t["name"], t["error_code"]) for t in no["topics"]] == [("ac-no", UNKNOWN_TOPIC)]
    assert no["brokers"] and "ac-no" not in _topics(cnode)
    yes = _metadata(cnode, ["ac-yes"], allow=True)
    [t] = yes["topics"]
    assert t["error_code"] == 0 and len(t["partitions"]) == 2  # num.partitions
    assert "ac-yes" in _topics(cnode)
    # the raftlog admin client never creates what it describes
    assert Admin(cnode.bootstrap).describe_topics(["ac-admin"]) == []
    assert "ac-admin" not in _topics(cnode)


def test_a_deleted_topic_stays_deleted_under_a_subscribed_consumer(cnode):
    a = AdminClient({"bootstrap.servers": cnode.kafka})
    for f in a.create_topics([CNewTopic("gone", 1, 1)]).values():
        f.result(20)
    c = ck.Consumer({"bootstrap.servers": cnode.kafka, "group.id": "g-gone",
                     "topic.metadata.refresh.interval.ms": 200,
                     "allow.auto.create.topics": False})
    c.subscribe(["gone"])
    try:
        deadline = time.monotonic() + 20
        while not c.assignment() and time.monotonic() < deadline:
            c.poll(0.2)
        assert c.assignment()
        for f in a.delete_topics(["gone"]).values():
            f.result(20)
        # the consumer asks for the topic again and is told it is unknown (not recreated)
        unknown = False
        while not unknown and time.monotonic() < deadline + 20:
            m = c.poll(0.2)
            unknown = m is not None and m.error() is not None and \
                m.error().code() == ck.KafkaError.UNKNOWN_TOPIC_OR_PART
        assert unknown
    finally:
        c.close()
    assert "gone" not in _topics(cnode)


def test_produce_never_auto_creates(cnode):
    batch = kafka_batch.encode_batch([b"x"], timestamps=[int(time.time() * 1000)])
    body = {"transactional_id": None, "acks": 1, "timeout_ms": 5000, "topic_data": [
        {"name": "ac-produce", "partition_data": [{"index": 0, "records": batch}]}]}
    got = _call(cnode, 0, 7, body)
    [part] = got["responses"][0]["partition_responses"]
    assert part["error_code"] == UNKNOWN_TOPIC  # retriable: the producer asks Metadata
    assert "ac-produce" not in _topics(cnode)
    # and the raftlog producer still gets an auto-created topic, through its Metadata
    with Producer(cnode.bootstrap) as p:
        assert p.send("ac-sdk", b"x").result(20).offset == 0


@pytest.mark.parametrize("name", ["bad/name", ".", "..", "x" * 250, "sp ace"])
def test_illegal_topic_names_get_invalid_topic_exception(cnode, name):
    admin = KafkaAdminClient(bootstrap_servers=cnode.kafka, request_timeout_ms=10_000)
    try:
        res = admin.create_topics([NewTopic(name, 1, 1)], raise_errors=False)
        assert res["topics"][0]["error_code"] == INVALID_TOPIC
    finally:
        admin.close()
    a = AdminClient({"bootstrap.servers": cnode.kafka})
    with pytest.raises(ck.KafkaException) as e:
        a.create_topics([CNewTopic(name, 1, 1)])[name].result(20)
    assert e.value.args[0].code() == ck.KafkaError.TOPIC_EXCEPTION
    for allow in (True, False):  # Metadata too, created or not
        [t] = _metadata(cnode, [name], allow=allow)["topics"]
        assert t["error_code"] == INVALID_TOPIC


def test_rack_and_cluster_authorized_operations(cnode):
    a = AdminClient({"bootstrap.servers": cnode.kafka})
    desc = a.describe_cluster(include_authorized_operations=True).result(20)
    assert [(n.id, n.rack) for n in desc.nodes] == [(1, "rack-a")]
    from confluent_kafka.admin import AclOperation

    # ACLs off: every operation the cluster resource supports
    assert set(desc.authorized_operations) == {
        AclOperation.CREATE, AclOperation.ALTER, AclOperation.DESCRIBE,
        AclOperation.CLUSTER_ACTION}
    plain = a.describe_cluster().result(20)
    assert not plain.authorized_operations  # not asked: not given
    admin = KafkaAdminClient(bootstrap_servers=cnode.kafka, request_timeout_ms=10_000)
    try:
        assert [b["rack"] for b in admin.describe_cluster()["brokers"]] == ["rack-a"]
    finally:
        admin.close()
    md = _metadata(cnode, [], allow=False, version=10,
                   include_cluster_authorized_operations=True)
    assert [b["rack"] for b in md["brokers"]] == ["rack-a"]
    assert md["cluster_authorized_operations"] == sum(1 << c for c in (5, 7, 8, 9))
    # the raftlog admin client sees the rack too
    assert [b.rack for b in Admin(cnode.bootstrap).describe_cluster().brokers] == ["rack-a"]


def _fill(node, topic: str) -> tuple[int, int]:
    """20 MiB in one partition: batches of 256 KiB, then of 2 MiB. (records, largest
    batch bytes)."""
    Admin(node.bootstrap).create_topic(topic, partitions=1,
                                       config={"max.message.bytes": str(4 * MIB)})
    value = b"v" * 10_000
    n = 0
    with Producer(node.bootstrap, batch_size=256 * 1024, linger_ms=5) as p:
        for _ in range(1000):
            p.send(topic, value, partition=0)
            n += 1
        p.flush()
    with Producer(node.bootstrap, batch_size=2 * MIB, linger_ms=50) as p:
        for _ in range(1100):
            p.send(topic, value, partition=0)
            n += 1
        p.flush()
    return n, 2 * MIB + 64 * 1024


def test_fetch_answers_keep_to_max_bytes_but_for_one_batch(cnode):
    n, largest = _fill(cnode, "big")
    bound = MIB + largest  # Kafka's: max_bytes, plus at most one oversized batch
    cnode.proxy.sizes.clear()
    c = ck.Consumer({"bootstrap.servers": cnode.kafka, "group.id": "g-big",
                     "auto.offset.reset": "earliest", "enable.auto.commit": False,
                     "fetch.max.bytes": MIB, "max.partition.fetch.bytes": 50 * MIB,
                     "receive.message.max.bytes": 10 * MIB})
    c.subscribe(["big"])
    got, deadline = 0, time.monotonic() + 60
    try:
        while got < n and time.monotonic() < deadline:
            m = c.poll(0.5)
            if m is not None and not m.error():
                got += 1
    finally:
        c.close()
    assert got == n
    assert max(cnode.proxy.sizes) <= bound
    cnode.proxy.sizes.clear()
    kc = KafkaConsumer("big", bootstrap_servers=cnode.kafka, auto_offset_reset="earliest",
                       fetch_max_bytes=MIB, max_partition_fetch_bytes=50 * MIB,
                       consumer_timeout_ms=5000)
    got = sum(1 for _ in kc)
    kc.close()
    assert got == n
    assert max(cnode.proxy.sizes) <= bound


def test_fetch_of_two_partitions_returns_the_second_only_within_what_is_left(cnode):
    """A raw Fetch: the first partition with data may give one batch over the limit,
    a later one only what fits."""
    Admin(cnode.bootstrap).create_topic("two", partitions=2)
    with Producer(cnode.bootstrap, batch_size=64 * 1024) as p:
        for part in (0, 1):
            p.send_many("two", [b"y" * 1000] * 50, partition=part)  # one ~50 KB batch each
        p.flush()

    def fetch(max_bytes, part_max):
        body = {"replica_id": -1, "max_wait_ms": 0, "min_bytes": 0, "max_bytes": max_bytes,
                "isolation_level": 0, "session_id": 0, "session_epoch": -1, "topics": [
                    {"topic": "two", "partitions": [
                        {"partition": p, "fetch_offset": 0, "log_start_offset": -1,
                         "partition_max_bytes": part_max, "current_leader_epoch": -1}
                        for p in (0, 1)]}],
                "forgotten_topics_data": [], "rack_id": ""}
        got = _call(cnode, 1, 11, body)
        return [len(p["records"] or b"") for p in got["responses"][0]["partitions"]]

    one, two = fetch(MIB, MIB)
    assert 50_000 < one < 60_000 and 50_000 < two < 60_000
    assert fetch(1000, MIB) == [one, 0]  # over max_bytes: the first batch alone
    assert fetch(MIB, 1000) == [one, 0]  # over partition_max_bytes: the same
    assert fetch(one + 100, MIB) == [one, 0]  # the second batch does not fit what is left


# ---------------------------------------------------------------------- groups


def _produce_some(node, topic: str, partitions: int, n: int = 20) -> None:
    Admin(node.bootstrap).create_topic(topic, partitions=partitions)
    with Producer(node.bootstrap) as p:
        for i in range(n):
            p.send(topic, b"%d" % i, partition=i % partitions)


def test_a_replaced_static_member_is_fenced(cnode):
    """KIP-345: a second instance with the same group.instance.id takes the member's
    place; the first one's next heartbeat (or commit) gets FENCED_INSTANCE_ID, not
    UNKNOWN_MEMBER_ID (which would have it rejoin and fence the new one in turn)."""
    _produce_some(cnode, "static", 2)

    def member(client_id):
        return ck.Consumer({"bootstrap.servers": cnode.kafka, "group.id": "g-static",
                            "group.instance.id": "inst-1", "client.id": client_id,
                            "session.timeout.ms": 10_000, "heartbeat.interval.ms": 200,
                            "auto.offset.reset": "earliest", "enable.auto.commit": False})

    first = member("first")
    first.subscribe(["static"])
    deadline = time.monotonic() + 30
    while len(first.assignment()) < 2 and time.monotonic() < deadline:
        first.poll(0.2)
    assert len(first.assignment()) == 2
    second = member("second")
    second.subscribe(["static"])
    fatal = []
    try:
        while not fatal and time.monotonic() < deadline + 30:
            for c in (first, second):
                m = c.poll(0.1)
                if m is not None and m.error() is not None and \
                        m.error().code() == ck.KafkaError._FATAL:
                    fatal.append((c, m.error().str()))
        [(c, why)] = fatal
        assert c is first and "fenced by other consumer with same group.instance.id" in why
        while len(second.assignment()) < 2 and time.monotonic() < deadline + 60:
            second.poll(0.2)
        assert len(second.assignment()) == 2
        a = AdminClient({"bootstrap.servers": cnode.kafka})
        [g] = a.describe_consumer_groups(["g-static"])["g-static"].result(20).members
        assert g.group_instance_id == "inst-1"  # one member: the new instance
    finally:
        second.close()
        first.close()


def test_a_static_member_is_fenced_for_kafka_python_too(cnode):
    """The old instance's commit with its member id and instance id: FENCED_INSTANCE_ID."""
    _produce_some(cnode, "static-kp", 1)

    def member():
        return KafkaConsumer("static-kp", bootstrap_servers=cnode.kafka, group_id="g-static-kp",
                             group_instance_id="kp-1", auto_offset_reset="earliest",
                             enable_auto_commit=False, session_timeout_ms=10_000,
                             heartbeat_interval_ms=200, consumer_timeout_ms=2000)

    first = member()
    assert len(list(first)) == 20
    second = member()
    assert len(list(second)) == 20  # (joined in first's place, with a new member id)
    from kafka.errors import FencedInstanceIdError

    with pytest.raises(FencedInstanceIdError):
        first.commit()
    second.commit()
    member_id = second._coordinator._generation.member_id
    second.close()  # (a static member does not leave on close: its instance id stays)
    first.close()
    # LeaveGroup v3+: a member named with another instance id is fenced; a static member
    # named by its instance id alone leaves
    leave = {"group_id": "g-static-kp", "members": [
        {"member_id": member_id, "group_instance_id": "kp-other"}]}
    [row] = _call(cnode, 13, 4, leave)["members"]
    assert row["error_code"] == FENCED_INSTANCE_ID
    leave["members"] = [{"member_id": "", "group_instance_id": "kp-1"}]
    [row] = _call(cnode, 13, 4, leave)["members"]
    assert row["error_code"] == 0
    [g] = _call(cnode, 15, 5, {"groups": ["g-static-kp"],
                                "include_authorized_operations": False})["groups"]
    assert g["members"] == [] and g["group_state"] in ("Empty", "PreparingRebalance")


def test_offset_commits_keep_the_leader_epoch_and_refuse_unknown_partitions(cnode):
    _produce_some(cnode, "epochs", 2)
    commit = {"group_id": "g-epochs", "generation_id_or_member_epoch": -1, "member_id": "",
              "group_instance_id": None, "retention_time_ms": -1, "topics": [
                  {"name": "epochs", "partitions": [
                      {"partition_index": 0, "committed_offset": 5, "committed_leader_epoch": 7,
                       "committed_metadata": "m"},
                      {"partition_index": 1, "committed_offset": 3,
                       "committed_leader_epoch": -1, "committed_metadata": None},
                      {"partition_index": 9, "committed_offset": 1,
                       "committed_leader_epoch": -1, "committed_metadata": None}]},
                  {"name": "no-such-topic", "partitions": [
                      {"partition_index": 0, "committed_offset": 1,
                       "committed_leader_epoch": -1, "committed_metadata": None}]}]}
    deadline = time.monotonic() + 20  # (the group's coordinator may be loading)
    while _call(cnode, 10, 3, {"key": "g-epochs", "key_type": 0})["error_code"] != 0:
        assert time.monotonic() < deadline
    got = _call(cnode, 8, 8, commit)
    while any(p["error_code"] in (14, 15, 16) for t in got["topics"] for p in t["partitions"]):
        assert time.monotonic() < deadline  # (COORDINATOR_LOAD_IN_PROGRESS, ...: retriable)
        got = _call(cnode, 8, 8, commit)
    codes = {(t["name"], p["partition_index"]): p["error_code"]
             for t in got["topics"] for p in t["partitions"]}
    assert codes == {("epochs", 0): 0, ("epochs", 1): 0, ("epochs", 9): UNKNOWN_TOPIC,
                     ("no-such-topic", 0): UNKNOWN_TOPIC}
    fetched = _call(cnode, 9, 7, {"group_id": "g-epochs", "require_stable": False,
                                  "topics": [{"name": "epochs", "partition_indexes": [0, 1]}]})
    rows = {p["partition_index"]: (p["committed_offset"], p["committed_leader_epoch"])
            for t in fetched["topics"] for p in t["partitions"]}
    assert rows == {0: (5, 7), 1: (3, -1)}
    assert "no-such-topic" not in _topics(cnode)  # (a commit never creates a topic)
    # confluent-kafka: a consumer commits the epoch of what it consumed, and reads it back
    c = ck.Consumer({"bootstrap.servers": cnode.kafka, "group.id": "g-epochs-ck",
                     "auto.offset.reset": "earliest", "enable.auto.commit": False})
    c.assign([ck.TopicPartition("epochs", 0)])
    deadline, m = time.monotonic() + 20, None
    while m is None and time.monotonic() < deadline:
        m = c.poll(0.2)
        m = m if m is not None and not m.error() else None
    assert m is not None
    c.commit(message=m, asynchronous=False)
    [tp] = c.committed([ck.TopicPartition("epochs", 0)], timeout=20)
    c.close()
    assert (tp.offset, tp.leader_epoch) == (m.offset() + 1, m.leader_epoch())
    assert m.leader_epoch() is not None and m.leader_epoch() >= 0
    # kafka-python reads it back too
    from kafka.structs import TopicPartition as KTP

    admin = KafkaAdminClient(bootstrap_servers=cnode.kafka, request_timeout_ms=10_000)
    try:
        om = admin.list_group_offsets("g-epochs")["g-epochs"][KTP("epochs", 0)]
        assert (om.offset, om.leader_epoch) == (5, 7)
    finally:
        admin.close()


def test_a_replaced_static_member_of_the_sdk_is_fenced(cnode):
    """The same on the native listener with the raftlog consumer: the replaced instance
    gets FENCED_INSTANCE_ID on its next group request and stops; the new one keeps the
    partitions."""
    from raftlog.client import Consumer
    from raftlog.errors import ApiError, ErrorCode

    _produce_some(cnode, "static-sdk", 2)

    def member():
        c = Consumer(cnode.bootstrap, group_id="g-static-sdk", group_instance_id="sdk-1",
                     auto_offset_reset="earliest", session_timeout_ms=10_000,
                     enable_auto_commit=False,
                     heartbeat_interval_ms=200)
        c.subscribe(["static-sdk"])
        return c

    first = member()
    deadline = time.monotonic() + 30
    while len(first.assignment()) < 2 and time.monotonic() < deadline:
        first.poll(timeout_ms=100)
    assert len(first.assignment()) == 2
    second = member()
    fenced = None
    try:
        while fenced is None and time.monotonic() < deadline + 30:
            second.poll(timeout_ms=100)
            try:
                first.poll(timeout_ms=100)
            except ApiError as e:
                fenced = e
        assert fenced is not None and fenced.code is ErrorCode.FENCED_INSTANCE_ID
        while len(second.assignment()) < 2 and time.monotonic() < deadline + 60:
            second.poll(timeout_ms=100)
        assert len(second.assignment()) == 2
    finally:
        second.close()
        first.close()
