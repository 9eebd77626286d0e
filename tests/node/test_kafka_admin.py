"""Kafka admin APIs (issue 37) on the Kafka listener of a real node process, with
confluent-kafka's AdminClient and kafka-python's KafkaAdminClient: each call
round-trips, and its refusals carry Kafka's error code."""

from __future__ import annotations

import time

import pytest

from raftlog.client import Admin, TopicPartition
from raftlog.kafka import batch as kb
from tests.conftest import kafka_node

ck = pytest.importorskip("confluent_kafka")
kafka = pytest.importorskip("kafka")
from confluent_kafka import KafkaException  # noqa: E402
from confluent_kafka import TopicPartition as CTP  # noqa: E402
from confluent_kafka.admin import (  # noqa: E402
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    NewPartitions,
    NewTopic,
)
from kafka import KafkaAdminClient  # noqa: E402
from kafka.admin import ConfigResource as KConfigResource  # noqa: E402
from kafka.admin import ConfigResourceType as KConfigResourceType  # noqa: E402
from kafka.admin import NewPartitions as KNewPartitions  # noqa: E402
from kafka.structs import TopicPartition as KTP  # noqa: E402

#: Kafka error codes the tests expect
UNKNOWN_TOPIC_OR_PARTITION, INVALID_PARTITIONS, INVALID_REPLICA_ASSIGNMENT = 3, 37, 39
INVALID_CONFIG = 40
GROUP_ID_NOT_FOUND, NON_EMPTY_GROUP, GROUP_SUBSCRIBED_TO_TOPIC = 69, 68, 86


@pytest.fixture(scope="module")
def knode(tmp_path_factory):
    n = kafka_node(str(tmp_path_factory.mktemp("kadmin") / "node-1"), 2)
    yield n
    n.stop()
    assert "kafka_handler_failed" not in n.log_text()


def ck_admin(node) -> AdminClient:
    return AdminClient({"bootstrap.servers": node.kafka})


def kp_admin(node) -> KafkaAdminClient:
    return KafkaAdminClient(bootstrap_servers=node.kafka, request_timeout_ms=10_000)


def ck_code(fut, timeout=20) -> int:
    """The Kafka error code a confluent-kafka admin future ends with (0: success)."""
    try:
        fut.result(timeout)
        return 0
    except KafkaException as e:
        return e.args[0].code()


def create(node, name: str, partitions: int = 1, config=None) -> None:
    a = ck_admin(node)
    for f in a.create_topics([NewTopic(name, partitions, 1, config=config or {})]).values():
        f.result(20)


def until(cond, timeout_s: float = 10.0):
    deadline = time.monotonic() + timeout_s
    while True:
        got = cond()
        if got:
            return got
        assert time.monotonic() < deadline, "condition not met in time"
        time.sleep(0.05)


# ---------------------------------------------------------------------- CreatePartitions


def test_create_partitions_confluent(knode):
    create(knode, "cp1", 1)
    a = ck_admin(knode)
    assert ck_code(a.create_partitions([NewPartitions("cp1", 3)])["cp1"]) == 0
    assert len(Admin(knode.bootstrap).describe_topic("cp1").partitions) == 3
    # validate_only changes nothing
    fs = a.create_partitions([NewPartitions("cp1", 5)], validate_only=True)
    assert ck_code(fs["cp1"]) == 0
    assert len(Admin(knode.bootstrap).describe_topic("cp1").partitions) == 3
    # manual assignments: one replica list per new partition, on known brokers
    assert ck_code(a.create_partitions([NewPartitions("cp1", 4, [[1]])])["cp1"]) == 0
    assert Admin(knode.bootstrap).describe_topic("cp1").partitions[3].replicas == (1,)
    assert ck_code(a.create_partitions([NewPartitions("cp1", 5, [[7]])])["cp1"]) == \
        INVALID_REPLICA_ASSIGNMENT
    assert ck_code(a.create_partitions([NewPartitions("cp1", 6, [[1]])])["cp1"]) == \
        INVALID_REPLICA_ASSIGNMENT  # one list for two new partitions
    # refusals: fewer or as many partitions, an unknown topic
    assert ck_code(a.create_partitions([NewPartitions("cp1", 2)])["cp1"]) == INVALID_PARTITIONS
    assert ck_code(a.create_partitions([NewPartitions("cp1", 4)])["cp1"]) == INVALID_PARTITIONS
    assert ck_code(a.create_partitions([NewPartitions("nope", 4)])["nope"]) == \
        UNKNOWN_TOPIC_OR_PARTITION
    assert len(Admin(knode.bootstrap).describe_topic("cp1").partitions) == 4


def test_create_partitions_kafka_python(knode):
    create(knode, "cp2", 1)
    a = kp_admin(knode)
    try:
        a.create_partitions({"cp2": KNewPartitions(2)})
        assert len(Admin(knode.bootstrap).describe_topic("cp2").partitions) == 2
        with pytest.raises(kafka.errors.InvalidPartitionsError):
            a.create_partitions({"cp2": KNewPartitions(1)})
    finally:
        a.close()


def test_sdk_create_partitions_with_assignments(knode):
    with Admin(knode.bootstrap) as a:
        a.create_topic("cp3", partitions=1)
        a.create_partitions("cp3", 3, assignments=[[1], [1]])
        assert [p.replicas for p in a.describe_topic("cp3").partitions] == [(1,), (1,), (1,)]
        with pytest.raises(Exception, match="unknown broker"):
            a.create_partitions("cp3", 4, assignments=[[9]])


# ---------------------------------------------------------------------- configs


def own_configs(node, topic: str) -> dict:
    return {e.name: e.value for e in Admin(node.bootstrap).describe_configs(topic)
            if e.source == "topic"}


def test_incremental_alter_configs_confluent(knode):
    create(knode, "cfg1", 1, {"retention.ms": "100000", "flush.ms": "5000"})
    a = ck_admin(knode)

    def alter(*entries, validate_only=False):
        res = ConfigResource(ConfigResource.Type.TOPIC, "cfg1", incremental_configs=list(entries))
        (fut,) = a.incremental_alter_configs([res], validate_only=validate_only).values()
        return ck_code(fut)

    S, D, A, SUB = (AlterConfigOpType.SET, AlterConfigOpType.DELETE, AlterConfigOpType.APPEND,
                    AlterConfigOpType.SUBTRACT)
    assert alter(ConfigEntry("retention.ms", "200000", incremental_operation=S),
                 ConfigEntry("flush.ms", None, incremental_operation=D),
                 ConfigEntry("cleanup.policy", "compact", incremental_operation=A)) == 0
    assert own_configs(knode, "cfg1") == {"retention.ms": "200000",
                                          "cleanup.policy": "compact,delete"}
    assert alter(ConfigEntry("cleanup.policy", "delete", incremental_operation=SUB)) == 0
    assert own_configs(knode, "cfg1")["cleanup.policy"] == "compact"
    # validate_only: nothing changes
    assert alter(ConfigEntry("retention.ms", "5", incremental_operation=S),
                 validate_only=True) == 0
    assert own_configs(knode, "cfg1")["retention.ms"] == "200000"
    # refusals: a bad value, an unknown key, APPEND to a config that is no list, unknown topic
    assert alter(ConfigEntry("retention.ms", "soon", incremental_operation=S)) == INVALID_CONFIG
    assert alter(ConfigEntry("retention.mss", "1", incremental_operation=S)) == INVALID_CONFIG
    assert alter(ConfigEntry("retention.ms", "1", incremental_operation=A)) == INVALID_CONFIG
    assert own_configs(knode, "cfg1") == {"retention.ms": "200000", "cleanup.policy": "compact"}
    res = ConfigResource(ConfigResource.Type.TOPIC, "nope", incremental_configs=[
        ConfigEntry("retention.ms", "1", incremental_operation=S)])
    (fut,) = a.incremental_alter_configs([res]).values()
    assert ck_code(fut) == UNKNOWN_TOPIC_OR_PARTITION


@pytest.mark.filterwarnings("ignore::DeprecationWarning")
def test_alter_configs_replaces_the_set(knode):
    create(knode, "cfg2", 1, {"retention.ms": "100000", "flush.ms": "5000"})
    a = ck_admin(knode)
    res = ConfigResource(ConfigResource.Type.TOPIC, "cfg2",
                         set_config={"retention.bytes": "1000000"})
    (fut,) = a.alter_configs([res]).values()  # (deprecated, still sent by librdkafka)
    assert ck_code(fut) == 0
    assert own_configs(knode, "cfg2") == {"retention.bytes": "1000000"}
    bad = ConfigResource(ConfigResource.Type.TOPIC, "cfg2", set_config={"min.insync.replicas": "0"})
    (fut,) = a.alter_configs([bad]).values()
    assert ck_code(fut) == INVALID_CONFIG
    # kafka-python's alter_configs, incremental and not
    k = kp_admin(knode)
    try:
        for incremental in (False, True):
            got = k.alter_configs([KConfigResource(KConfigResourceType.TOPIC, "cfg2",
                                                   configs={"retention.ms": "300000"})],
                                  raise_on_unknown=False, incremental=incremental)
            assert str(got["topic"]["cfg2"]) == "OK"
            assert own_configs(knode, "cfg2")["retention.ms"] == "300000"
            got = k.alter_configs([KConfigResource(KConfigResourceType.TOPIC, "nope",
                                                   configs={"retention.ms": "300000"})],
                                  raise_on_unknown=False, incremental=incremental)
            assert "Error 3" in str(got["topic"]["nope"])  # UNKNOWN_TOPIC_OR_PARTITION
    finally:
        k.close()


def test_sdk_alter_configs(knode):
    with Admin(knode.bootstrap) as a:
        a.create_topic("cfg3", partitions=1, config={"retention.ms": "100000"})
        a.incremental_alter_configs("cfg3", [("cleanup.policy", "set", "compact"),
                                             ("flush.ms", "set", 1000)])
        assert own_configs(knode, "cfg3") == {"retention.ms": "100000",
                                              "cleanup.policy": "compact", "flush.ms": "1000"}
        a.incremental_alter_configs("cfg3", [("flush.ms", "delete", None),
                                             ("cleanup.policy", "append", "delete")])
        assert own_configs(knode, "cfg3") == {"retention.ms": "100000",
                                              "cleanup.policy": "compact,delete"}
        a.alter_configs("cfg3", {"retention.bytes": 5000})
        assert own_configs(knode, "cfg3") == {"retention.bytes": "5000"}
        with pytest.raises(Exception, match="retention.bytes"):
            a.alter_configs("cfg3", {"retention.bytes": "lots"}, validate_only=True)


# ---------------------------------------------------------------------- groups


def commit(node, group: str, offsets: dict) -> None:
    with Admin(node.bootstrap) as a:
        a.alter_group_offsets(group, offsets)


def committed(node, group: str) -> dict:
    with Admin(node.bootstrap) as a:
        return {(tp.topic, tp.partition): o for tp, o in a.list_group_offsets(group).items()}


def test_delete_groups_confluent_and_kafka_python(knode):
    create(knode, "dg", 1)
    for g in ("dg1", "dg2", "dg3"):
        commit(knode, g, {("dg", 0): 5})
    a = ck_admin(knode)
    fs = a.delete_consumer_groups(["dg1", "nope-group"])
    assert ck_code(fs["dg1"]) == 0
    assert ck_code(fs["nope-group"]) == GROUP_ID_NOT_FOUND
    assert committed(knode, "dg1") == {}
    # a group with a member is not deleted
    c = ck.Consumer({"bootstrap.servers": knode.kafka, "group.id": "dg2",
                     "session.timeout.ms": 6000})
    c.subscribe(["dg"])
    try:
        until(lambda: c.poll(0.1) is None and c.assignment())
        assert ck_code(a.delete_consumer_groups(["dg2"])["dg2"]) == NON_EMPTY_GROUP
    finally:
        c.close()
    k = kp_admin(knode)
    try:
        assert k.delete_groups(["dg2", "dg3", "nope-group"]) == {
            "dg2": "OK", "dg3": "OK", "nope-group": "GroupIdNotFoundError"}
    finally:
        k.close()
    assert committed(knode, "dg3") == {}
    with Admin(knode.bootstrap) as sdk:
        commit(knode, "dg4", {("dg", 0): 1})
        got = sdk.delete_groups(["dg4", "nope-group"])
        assert got["dg4"] is None and got["nope-group"].code.name == "GROUP_ID_NOT_FOUND"


def test_offset_delete(knode):
    """(confluent-kafka's Python AdminClient has no delete_consumer_group_offsets:
    kafka-python's and the SDK's.)"""
    create(knode, "od1", 2)
    create(knode, "od2", 1)
    commit(knode, "odg", {("od1", 0): 3, ("od1", 1): 4, ("od2", 0): 7})
    k = kp_admin(knode)
    c = None
    try:
        got = k.delete_group_offsets("odg", [KTP("od1", 0), KTP("nope", 0)])
        assert {(tp.topic, tp.partition): e.errno for tp, e in got.items()} == {
            ("od1", 0): 0, ("nope", 0): UNKNOWN_TOPIC_OR_PARTITION}
        assert committed(knode, "odg") == {("od1", 1): 4, ("od2", 0): 7}
        with pytest.raises(kafka.errors.GroupIdNotFoundError):
            k.delete_group_offsets("nope-group", [KTP("od1", 0)])
        # a member subscribed to od2: its offsets stay; od1's go
        c = ck.Consumer({"bootstrap.servers": knode.kafka, "group.id": "odg",
                         "session.timeout.ms": 6000})
        c.subscribe(["od2"])
        until(lambda: c.poll(0.1) is None and c.assignment())
        got = k.delete_group_offsets("odg", [KTP("od2", 0), KTP("od1", 1)])
        assert {(tp.topic, tp.partition): e.errno for tp, e in got.items()} == {
            ("od2", 0): GROUP_SUBSCRIBED_TO_TOPIC, ("od1", 1): 0}
    finally:
        k.close()
        if c is not None:
            c.close()
    assert committed(knode, "odg") == {("od2", 0): 7}
    with Admin(knode.bootstrap) as sdk:
        got = sdk.delete_consumer_group_offsets("odg", [("od2", 0)])
        assert list(got.values()) == [None]
    assert committed(knode, "odg") == {}


# ---------------------------------------------------------------------- DeleteRecords

OFFSET_OUT_OF_RANGE = 1


def produce(node, topic: str, n: int, partition: int = 0) -> None:
    p = ck.Producer({"bootstrap.servers": node.kafka, "acks": "all"})
    for i in range(n):
        p.produce(topic, b"v%d" % i, partition=partition)
    assert p.flush(20) == 0


def earliest(node, topic: str, partition: int = 0) -> int:
    with Admin(node.bootstrap) as a:
        (off,) = a._list_offsets({TopicPartition(topic, partition): -2}).values()
        return off[0]


def consume_offsets(node, topic: str, partition: int = 0) -> list:
    c = ck.Consumer({"bootstrap.servers": node.kafka, "group.id": f"dr-{topic}",
                     "auto.offset.reset": "earliest", "enable.auto.commit": False})
    c.assign([CTP(topic, partition, ck.OFFSET_BEGINNING)])
    got, deadline = [], time.monotonic() + 10
    while time.monotonic() < deadline:
        m = c.poll(0.2)
        if m is None and got:
            break
        if m is not None and not m.error():
            got.append(m.offset())
    c.close()
    return got


def test_delete_records_confluent(knode):
    create(knode, "dr1", 1)
    produce(knode, "dr1", 10)
    a = ck_admin(knode)
    (fut,) = a.delete_records([CTP("dr1", 0, 4)]).values()
    assert fut.result(20).low_watermark == 4  # the new low watermark
    assert earliest(knode, "dr1") == 4
    assert consume_offsets(knode, "dr1") == list(range(4, 10))
    # refusals: past the high watermark, an unknown topic; a smaller offset changes nothing
    fs = a.delete_records([CTP("dr1", 0, 11)])
    assert ck_code(next(iter(fs.values()))) == OFFSET_OUT_OF_RANGE
    (fut,) = a.delete_records([CTP("dr1", 0, 2)]).values()
    assert fut.result(20).low_watermark == 4
    # (a client finds no leader for an unknown topic: sent raw, the node's answer)
    from tests.node.test_kafka_security import _call, _connect

    with _connect(knode) as s:
        _, body = _call(s, 21, 2, 1, {"timeout_ms": 1000, "topics": [
            {"name": "nope", "partitions": [{"partition_index": 0, "offset": 1}]},
            {"name": "dr1", "partitions": [{"partition_index": 5, "offset": 1}]}]})
    assert [t["partitions"][0]["error_code"] for t in body["topics"]] == [
        UNKNOWN_TOPIC_OR_PARTITION, UNKNOWN_TOPIC_OR_PARTITION]
    # -1: everything up to the high watermark
    (fut,) = a.delete_records([CTP("dr1", 0, -1)]).values()
    assert fut.result(20).low_watermark == 10 and earliest(knode, "dr1") == 10


def test_delete_records_kafka_python_and_sdk(knode):
    create(knode, "dr2", 2)
    produce(knode, "dr2", 6, partition=0)
    produce(knode, "dr2", 6, partition=1)
    k = kp_admin(knode)
    try:
        got = k.delete_records({KTP("dr2", 0): 3})
        assert got[KTP("dr2", 0)]["low_watermark"] == 3
    finally:
        k.close()
    with Admin(knode.bootstrap) as a:
        got = a.delete_records({("dr2", 1): 5, ("dr2", 0): 99})
        assert got[TopicPartition("dr2", 1)] == 5
        assert type(got[TopicPartition("dr2", 0)]).__name__ == "OffsetOutOfRangeError"
    assert (earliest(knode, "dr2", 0), earliest(knode, "dr2", 1)) == (3, 5)


# ---------------------------------------------------------------------- ACLs (authorizer on)

CLUSTER_AUTHORIZATION_FAILED, TOPIC_AUTHORIZATION_FAILED = 31, 29
GROUP_AUTHORIZATION_FAILED, INVALID_REQUEST = 30, 42


@pytest.fixture(scope="module")
def secure(tmp_path_factory):
    """A node whose Kafka listener is SASL_PLAINTEXT with ACLs on (admin: super user)."""
    from tests.node.test_kafka_security import ADMIN_PW, admin_of, make_certs, sasl_conf, start

    c = make_certs(str(tmp_path_factory.mktemp("kacerts")))
    cert, key = c.issue("node", "node1", hosts=("127.0.0.1",))
    c.keystore = str(tmp_path_factory.mktemp("kks") / "node-keystore.pem")
    with open(c.keystore, "w") as f:
        f.write(open(cert).read() + open(key).read())
    node = start(tmp_path_factory.mktemp("kacl"), c, "SASL_PLAINTEXT", native="SASL_SSL",
                 extra={"authorizer.enable": "true", "super.users": "User:admin"})
    with admin_of(node, c) as a:
        a.create_user("alice", "alice-pw", "SCRAM-SHA-256")
        a.create_topic("at", 1)
    node.admin_conf = sasl_conf(node, c, "SASL_PLAINTEXT", "SCRAM-SHA-512", "admin", ADMIN_PW)
    node.alice_conf = sasl_conf(node, c, "SASL_PLAINTEXT", "SCRAM-SHA-256", "alice", "alice-pw")
    node.sdk_admin = lambda: admin_of(node, c)
    yield node
    node.stop()
    assert "kafka_handler_failed" not in node.log_text()


def test_acls_round_trip_and_refusals(secure):
    from confluent_kafka.admin import (
        AclBinding,
        AclBindingFilter,
        AclOperation,
        AclPermissionType,
        ResourcePatternType,
        ResourceType,
    )

    admin, alice = AdminClient(secure.admin_conf), AdminClient(secure.alice_conf)
    read_at = AclBinding(ResourceType.TOPIC, "at", ResourcePatternType.LITERAL, "User:alice",
                         "*", AclOperation.READ, AclPermissionType.ALLOW)
    describe_pre = AclBinding(ResourceType.TOPIC, "a", ResourcePatternType.PREFIXED,
                              "User:alice", "*", AclOperation.DESCRIBE, AclPermissionType.ALLOW)
    on_host = AclBinding(ResourceType.TOPIC, "at", ResourcePatternType.LITERAL, "User:alice",
                         "10.0.0.1", AclOperation.WRITE, AclPermissionType.ALLOW)
    fs = admin.create_acls([read_at, describe_pre, on_host])
    assert [ck_code(fs[b]) for b in (read_at, describe_pre, on_host)] == [0, 0, INVALID_REQUEST]
    # alice may not create, describe or delete ACLs
    fs = alice.create_acls([read_at])
    assert ck_code(fs[read_at]) == CLUSTER_AUTHORIZATION_FAILED
    any_filter = AclBindingFilter(ResourceType.ANY, None, ResourcePatternType.ANY, None, None,
                                  AclOperation.ANY, AclPermissionType.ANY)
    got = admin.describe_acls(any_filter).result(20)
    assert {(b.name, b.resource_pattern_type, b.operation) for b in got} == {
        ("at", ResourcePatternType.LITERAL, AclOperation.READ),
        ("a", ResourcePatternType.PREFIXED, AclOperation.DESCRIBE)}
    match = AclBindingFilter(ResourceType.TOPIC, "at", ResourcePatternType.MATCH, None, None,
                             AclOperation.ANY, AclPermissionType.ANY)
    assert len(admin.describe_acls(match).result(20)) == 2  # the literal and the prefix
    # kafka-python describes them too
    from kafka.admin import (
        ACLFilter,
        ACLOperation,
        ACLPermissionType,
        ACLResourcePatternType,
        ResourcePatternFilter,
    )
    from kafka.admin import ResourceType as KRT
    k, ka = (KafkaAdminClient(bootstrap_servers=secure.kafka, security_protocol="SASL_PLAINTEXT",
                              sasl_mechanism=conf["sasl.mechanism"],
                              sasl_plain_username=conf["sasl.username"],
                              sasl_plain_password=conf["sasl.password"])
             for conf in (secure.admin_conf, secure.alice_conf))
    literal_at = ACLFilter(None, "*", ACLOperation.ANY, ACLPermissionType.ANY,
                           ResourcePatternFilter(KRT.TOPIC, "at", ACLResourcePatternType.LITERAL))
    try:
        acls, err = k.describe_acls(literal_at)
        assert err.errno == 0 and [a.operation for a in acls] == [ACLOperation.READ]
        # (confluent-kafka's describe_acls future drops the top-level error: kafka-python's)
        with pytest.raises(kafka.errors.ClusterAuthorizationFailedError):
            ka.describe_acls(literal_at)
    finally:
        k.close()
        ka.close()
    # delete by filter: what matched is answered
    (fut,) = admin.delete_acls([match]).values()
    assert len(fut.result(20)) == 2
    assert admin.describe_acls(any_filter).result(20) == []


def test_admin_calls_refused_without_acls(secure):
    """alice holds no ALTER / DELETE: each admin call answers its *_AUTHORIZATION_FAILED."""
    alice, admin = AdminClient(secure.alice_conf), AdminClient(secure.admin_conf)
    assert ck_code(alice.create_partitions([NewPartitions("at", 2)])["at"]) == \
        TOPIC_AUTHORIZATION_FAILED
    res = ConfigResource(ConfigResource.Type.TOPIC, "at", incremental_configs=[
        ConfigEntry("retention.ms", "1000", incremental_operation=AlterConfigOpType.SET)])
    (fut,) = alice.incremental_alter_configs([res]).values()
    assert ck_code(fut) == TOPIC_AUTHORIZATION_FAILED
    assert ck_code(alice.delete_consumer_groups(["some-group"])["some-group"]) == \
        GROUP_AUTHORIZATION_FAILED
    from tests.node.test_kafka_security import _authed, _call

    with _authed(secure, "alice", "alice-pw") as sock:  # (raw: alice cannot see "at")
        _, body = _call(sock, 21, 2, 10, {"timeout_ms": 1000, "topics": [
            {"name": "at", "partitions": [{"partition_index": 0, "offset": 0}]}]})
        assert body["topics"][0]["partitions"][0]["error_code"] == TOPIC_AUTHORIZATION_FAILED
        _, body = _call(sock, 47, 0, 11, {"group_id": "some-group", "topics": [
            {"name": "at", "partitions": [{"partition_index": 0}]}]})
        assert body["error_code"] == GROUP_AUTHORIZATION_FAILED
    # the super user may
    assert ck_code(admin.create_partitions([NewPartitions("at", 2)])["at"]) == 0
    (fut,) = admin.incremental_alter_configs([res]).values()
    assert ck_code(fut) == 0


def test_scram_users_round_trip(secure):
    from confluent_kafka.admin import (
        ScramCredentialInfo,
        ScramMechanism,
        UserScramCredentialDeletion,
        UserScramCredentialUpsertion,
    )

    from tests.node.test_kafka_security import _authed

    admin, alice = AdminClient(secure.admin_conf), AdminClient(secure.alice_conf)
    up = UserScramCredentialUpsertion(
        "bob", ScramCredentialInfo(ScramMechanism.SCRAM_SHA_256, 4096), b"bob-pw")
    (fut,) = admin.alter_user_scram_credentials([up]).values()
    assert ck_code(fut) == 0
    _authed(secure, "bob", "bob-pw").close()  # bob logs in with the password set
    got = admin.describe_user_scram_credentials(["bob"])["bob"].result(20)
    assert [(i.mechanism, i.iterations) for i in got.scram_credential_infos] == [
        (ScramMechanism.SCRAM_SHA_256, 4096)]
    # refusals: too few iterations, deleting what is not there, an unknown user, no ALTER
    weak = UserScramCredentialUpsertion(
        "carol", ScramCredentialInfo(ScramMechanism.SCRAM_SHA_256, 10), b"carol-pw")
    (fut,) = admin.alter_user_scram_credentials([weak]).values()
    assert ck_code(fut) == 93  # UNACCEPTABLE_CREDENTIAL
    gone = UserScramCredentialDeletion("bob", ScramMechanism.SCRAM_SHA_512)
    (fut,) = admin.alter_user_scram_credentials([gone]).values()
    assert ck_code(fut) == 91  # RESOURCE_NOT_FOUND
    fs = admin.describe_user_scram_credentials(["nobody"])
    assert ck_code(fs["nobody"]) == 91
    (fut,) = alice.alter_user_scram_credentials([up]).values()
    assert ck_code(fut) == CLUSTER_AUTHORIZATION_FAILED
    # kafka-python: delete bob's credential, then describe
    from kafka.admin import ScramMechanism as KSM
    from kafka.admin import UserScramCredentialDeletion as KDel

    k = KafkaAdminClient(bootstrap_servers=secure.kafka, security_protocol="SASL_PLAINTEXT",
                         sasl_mechanism="SCRAM-SHA-512", sasl_plain_username="admin",
                         sasl_plain_password=secure.admin_conf["sasl.password"])
    try:
        assert k.alter_user_scram_credentials([KDel("bob", KSM.SCRAM_SHA_256)]) == {"bob": None}
        got = k.describe_user_scram_credentials(["bob", "alice"])
        assert got["bob"]["error"] is not None and got["alice"]["error"] is None
    finally:
        k.close()


# ---------------------------------------------------------------------- CreateTopics


def test_create_topics_with_manual_assignments(knode):
    a = ck_admin(knode)
    fs = a.create_topics([NewTopic("ma1", 3, -1, replica_assignment=[[1], [1], [1]])])
    assert ck_code(fs["ma1"]) == 0
    assert [p.replicas for p in Admin(knode.bootstrap).describe_topic("ma1").partitions] == [
        (1,), (1,), (1,)]
    fs = a.create_topics([NewTopic("ma2", 2, -1, replica_assignment=[[1], [5]])])
    assert ck_code(fs["ma2"]) == INVALID_REPLICA_ASSIGNMENT  # broker 5 does not exist
    fs = a.create_topics([NewTopic("ma3", 1, -1, replica_assignment=[[1, 1]])])
    assert ck_code(fs["ma3"]) == INVALID_REPLICA_ASSIGNMENT  # a broker twice
    assert "ma2" not in Admin(knode.bootstrap).list_topics()
    from kafka.admin import NewTopic as KNewTopic

    k = kp_admin(knode)
    try:
        k.create_topics([KNewTopic("ma4", replica_assignments={0: [1], 1: [1]})])
    finally:
        k.close()
    assert len(Admin(knode.bootstrap).describe_topic("ma4").partitions) == 2
    with Admin(knode.bootstrap) as sdk:
        sdk.create_topic("ma5", assignments=[[1], [1]])
        assert len(sdk.describe_topic("ma5").partitions) == 2


def test_create_topic_with_compression_type(knode):
    """compression.type=zstd: a Kafka producer's lz4 batches are stored (and fetched)
    as zstd, and read back unchanged; a codec the node does not offer is INVALID_CONFIG."""
    from tests.node.test_kafka_security import _call, _connect

    create(knode, "ct1", 1, {"compression.type": "zstd"})
    a = ck_admin(knode)
    fs = a.create_topics([NewTopic("ct2", 1, 1, config={"compression.type": "brotli"})])
    assert ck_code(fs["ct2"]) == INVALID_CONFIG
    p = ck.Producer({"bootstrap.servers": knode.kafka, "compression.type": "lz4",
                     "linger.ms": 5})
    values = [b"record-%d " % i * 30 for i in range(200)]
    for v in values:
        p.produce("ct1", v, partition=0)
    assert p.flush(20) == 0
    with _connect(knode) as s:
        _, body = _call(s, 1, 4, 1, {
            "replica_id": -1, "max_wait_ms": 0, "min_bytes": 0, "max_bytes": 1 << 20,
            "isolation_level": 0, "topics": [{"topic": "ct1", "partitions": [
                {"partition": 0, "fetch_offset": 0, "partition_max_bytes": 1 << 20}]}]})
    records = body["responses"][0]["partitions"][0]["records"]
    codecs = {h.attributes & kb.COMPRESSION_MASK for _, h in kb.iter_batches(bytes(records))}
    assert codecs == {4}  # ZSTD
    c = ck.Consumer({"bootstrap.servers": knode.kafka, "group.id": "ct1-g",
                     "auto.offset.reset": "earliest"})
    c.subscribe(["ct1"])
    got, deadline = [], time.monotonic() + 15
    while len(got) < len(values) and time.monotonic() < deadline:
        m = c.poll(0.2)
        if m is not None and not m.error():
            got.append(m.value())
    c.close()
    assert got == values
    assert own_configs(knode, "ct1") == {"compression.type": "zstd"}
