"""TransactionalId ACLs (issue #33) against a real node process with ACLs on: a native
SASL_SSL listener for raftlog's SDK and CLI, a SASL_PLAINTEXT Kafka listener for
confluent-kafka. A transactional producer needs WRITE on its transactional id: without
it the SDK and Kafka clients are refused (TRANSACTIONAL_ID_AUTHORIZATION_FAILED, the
message naming the ``raftlog acls add`` command) and nothing is written; with it
(literal or prefixed) their transactions commit. Kafka's CreateAcls / DescribeAcls /
DeleteAcls carry the resource type (5) both ways."""

from __future__ import annotations

import os
import time

import pytest

from raftlog.client import Admin, Consumer, Producer, TopicPartition
from raftlog.client.conn import BrokerConnection
from raftlog.client.security import ClientSecurity
from raftlog.errors import ApiError, ErrorCode
from raftlog.protocol import Api
from raftlog.records import encode_batch
from tests.certs import make_certs
from tests.node.test_kafka_security import ADMIN_PW, admin_of, sasl_conf, start

ck = pytest.importorskip("confluent_kafka")
from confluent_kafka.admin import (  # noqa: E402
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    AdminClient,
    ResourcePatternType,
    ResourceType,
)

DENIED = ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED


@pytest.fixture(scope="module")
def env(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("txnacl")
    certs = make_certs(str(tmp / "certs"))
    cert, key = certs.issue("node", "node1", hosts=("127.0.0.1",))
    certs.keystore = os.path.join(certs.dir, "node-keystore.pem")
    with open(certs.keystore, "w") as f:
        f.write(open(cert).read() + open(key).read())
    node = start(tmp, certs, "SASL_PLAINTEXT", native="SASL_SSL", extra={
        "authorizer.enable": "true", "super.users": "User:admin",
        "transaction.state.log.num.partitions": "2",
        "connection.failed.authentication.max": "1000"})
    try:
        with admin_of(node, certs) as a:
            a.create_user("alice", "alice-pw", "SCRAM-SHA-256")
            for t in ("pay", "kpay"):
                a.create_topic(t, 1)
            # alice may write both topics: only her transactional ids are missing
            a.create_acls([("User:alice", "topic", t, "literal", "write", "allow")
                           for t in ("pay", "kpay")])
        yield certs, node
    finally:
        node.stop()
    assert "handler_failed" not in node.log_text()  # (kafka_handler_failed too)


def alice_opts(certs) -> dict:
    return {"security_protocol": "SASL_SSL", "ssl_cafile": certs.cafile,
            "sasl_mechanism": "SCRAM-SHA-256", "sasl_plain_username": "alice",
            "sasl_plain_password": "alice-pw"}


def committed(node, certs, topic: str, want: int) -> list:
    """The read_committed records of ``topic``-0 (``want`` of them), read as the admin."""
    c = Consumer(node.bootstrap, isolation_level="read_committed",
                 auto_offset_reset="earliest", security_protocol="SASL_SSL",
                 ssl_cafile=certs.cafile, sasl_mechanism="SCRAM-SHA-512",
                 sasl_plain_username="admin", sasl_plain_password=ADMIN_PW)
    c.assign([TopicPartition(topic, 0)])
    got, deadline = [], time.monotonic() + 20
    try:
        while len(got) < want and time.monotonic() < deadline:
            got += [r.value for r in c.poll(timeout_ms=200)]
    finally:
        c.close()
    return got


def high_watermark(node, certs, topic: str) -> int:
    with admin_of(node, certs) as a:
        return a.end_offsets([TopicPartition(topic, 0)])[TopicPartition(topic, 0)]


def sdk_commit(node, certs, tid: str, values: list) -> None:
    p = Producer(node.bootstrap, transactional_id=tid, **alice_opts(certs))
    try:
        p.init_transactions()
        p.begin_transaction()
        for v in values:
            p.send("pay", v, partition=0)
        p.commit_transaction()
    finally:
        p.close()


def test_sdk_producer_without_the_acl_is_refused_and_writes_nothing(env):
    certs, node = env
    p = Producer(node.bootstrap, transactional_id="payments", **alice_opts(certs))
    try:
        with pytest.raises(ApiError) as e:
            p.init_transactions()
    finally:
        p.close()
    assert e.value.code is DENIED
    assert ("`raftlog acls add --principal User:alice --operation write --transactional-id "
            "payments`") in e.value.message, e.value.message
    # a transactional produce carrying an id she may not write is refused before
    # anything is appended, though she may write the topic
    batch = encode_batch([b"sneaked"], producer_id=1, producer_epoch=0, base_sequence=0,
                         transactional=True)
    conn = BrokerConnection("127.0.0.1", node.port, 10,
                            security=ClientSecurity(**alice_opts(certs)))
    try:
        with pytest.raises(ApiError) as e:
            conn.request(Api.PRODUCE, {"acks": -1, "transactional_id": "payments",
                                       "parts": [["pay", 0, len(batch)]]}, batch)
        assert e.value.code is DENIED
        assert "may not write transactional_id 'payments' (PRODUCE)" in e.value.message
        # (the same produce without the id: her topic WRITE is enough to reach the log,
        # which refuses a transactional batch outside a transaction)
        h = conn.request(Api.PRODUCE, {"acks": -1, "parts": [["pay", 0, len(batch)]]},
                         batch).header
        assert h["parts"][0].error != 0
    finally:
        conn.close()
    assert high_watermark(node, certs, "pay") == 0


def test_sdk_producer_commits_with_write_on_the_id_literal_and_prefixed(env):
    certs, node = env
    with admin_of(node, certs) as a:
        a.create_acls([("User:alice", "transactional_id", "sdk-literal", "literal", "write",
                        "allow"),
                       ("User:alice", "transactional_id", "sdk-pre-", "prefixed", "write",
                        "allow")])
        assert sorted(a.describe_acls(resource_type="transactional_id")) == [
            ("User:alice", "transactional_id", "sdk-literal", "literal", "write", "allow"),
            ("User:alice", "transactional_id", "sdk-pre-", "prefixed", "write", "allow")]
    start = high_watermark(node, certs, "pay")
    sdk_commit(node, certs, "sdk-literal", [b"a1", b"a2"])
    sdk_commit(node, certs, "sdk-pre-7", [b"b1"])
    assert committed(node, certs, "pay", 3)[-3:] == [b"a1", b"a2", b"b1"]
    assert high_watermark(node, certs, "pay") > start
    # her own transactions are hers to describe and list (WRITE implies DESCRIBE)...
    with Admin(node.bootstrap, **alice_opts(certs)) as a:
        listed = {t.transactional_id for t in a.list_transactions()}
        assert {"sdk-literal", "sdk-pre-7"} <= listed
        got = a.describe_transactions(["sdk-pre-7", "someone-else"])
        assert not isinstance(got["sdk-pre-7"], Exception), got
        assert isinstance(got["someone-else"], ApiError)
        assert got["someone-else"].code is DENIED
    # ... and a literal ACL is that name only
    p = Producer(node.bootstrap, transactional_id="sdk-literal-2", **alice_opts(certs))
    try:
        with pytest.raises(ApiError) as e:
            p.init_transactions()
        assert e.value.code is DENIED
    finally:
        p.close()
    with admin_of(node, certs) as a:  # the admin lists them all
        assert {"sdk-literal", "sdk-pre-7"} <= {t.transactional_id
                                                for t in a.list_transactions()}
        gone = a.delete_acls(resource_type="transactional_id", resource_name="sdk-pre-")
        assert len(gone) == 1
    with Admin(node.bootstrap, **alice_opts(certs)) as a:  # no longer hers to see
        assert "sdk-pre-7" not in {t.transactional_id for t in a.list_transactions()}


def _kafka_admin(node, certs) -> AdminClient:
    return AdminClient(sasl_conf(node, certs, "SASL_PLAINTEXT", "SCRAM-SHA-512", "admin",
                                 ADMIN_PW))


def test_confluent_kafka_transactional_producer_needs_the_acl(env):
    certs, node = env
    conf = sasl_conf(node, certs, "SASL_PLAINTEXT", "SCRAM-SHA-256", "alice", "alice-pw",
                     **{"transactional.id": "ck-pay-1"})
    p = ck.Producer(conf)
    with pytest.raises(ck.KafkaException) as e:
        p.init_transactions(20)
    assert e.value.args[0].code() == ck.KafkaError.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
    del p
    assert high_watermark(node, certs, "kpay") == 0
    # CreateAcls with resource type 5 (prefixed), as the admin, over the Kafka wire
    admin = _kafka_admin(node, certs)
    acl = AclBinding(ResourceType.TRANSACTIONAL_ID, "ck-pay-", ResourcePatternType.PREFIXED,
                     "User:alice", "*", AclOperation.WRITE, AclPermissionType.ALLOW)
    for f in admin.create_acls([acl]).values():
        assert f.result(20) is None
    p = ck.Producer(conf)
    p.init_transactions(20)
    p.begin_transaction()
    for v in (b"k1", b"k2"):
        p.produce("kpay", v, partition=0)
    p.commit_transaction(20)
    assert committed(node, certs, "kpay", 2) == [b"k1", b"k2"]
    # the other producer of the prefix is allowed too; another id is not
    other = ck.Producer({**conf, "transactional.id": "ck-other"})
    with pytest.raises(ck.KafkaException) as e:
        other.init_transactions(20)
    assert e.value.args[0].code() == ck.KafkaError.TRANSACTIONAL_ID_AUTHORIZATION_FAILED


def test_kafka_acl_calls_round_trip_resource_type_5(env):
    certs, node = env
    admin = _kafka_admin(node, certs)
    bindings = [AclBinding(ResourceType.TRANSACTIONAL_ID, "rt-lit", ResourcePatternType.LITERAL,
                           "User:carol", "*", AclOperation.DESCRIBE, AclPermissionType.ALLOW),
                AclBinding(ResourceType.TRANSACTIONAL_ID, "*", ResourcePatternType.LITERAL,
                           "User:carol", "*", AclOperation.WRITE, AclPermissionType.DENY)]
    for f in admin.create_acls(bindings).values():
        assert f.result(20) is None
    # a READ on a transactional id is not Kafka's (nor ours): refused
    bad = AclBinding(ResourceType.TRANSACTIONAL_ID, "x", ResourcePatternType.LITERAL,
                     "User:carol", "*", AclOperation.READ, AclPermissionType.ALLOW)
    with pytest.raises(ck.KafkaException):
        for f in admin.create_acls([bad]).values():
            f.result(20)
    flt = AclBindingFilter(ResourceType.TRANSACTIONAL_ID, None, ResourcePatternType.ANY,
                           "User:carol", None, AclOperation.ANY, AclPermissionType.ANY)
    got = admin.describe_acls(flt).result(20)
    assert sorted((b.restype, b.name, b.resource_pattern_type, b.operation, b.permission_type)
                  for b in got) == sorted(
        (b.restype, b.name, b.resource_pattern_type, b.operation, b.permission_type)
        for b in bindings)
    # the native side sees the same bindings
    with admin_of(node, certs) as a:
        assert sorted(a.describe_acls(principal="User:carol")) == [
            ("User:carol", "transactional_id", "*", "literal", "write", "deny"),
            ("User:carol", "transactional_id", "rt-lit", "literal", "describe", "allow")]
    # MATCH: the literal name, and the wildcard
    match = AclBindingFilter(ResourceType.TRANSACTIONAL_ID, "rt-lit", ResourcePatternType.MATCH,
                             None, None, AclOperation.ANY, AclPermissionType.ANY)
    assert len(admin.describe_acls(match).result(20)) == 2
    deleted = [b for f in admin.delete_acls([flt]).values() for b in f.result(20)]
    assert len(deleted) == 2 and {b.restype for b in deleted} == {ResourceType.TRANSACTIONAL_ID}
    assert admin.describe_acls(flt).result(20) == []


def test_cli_transactional_id_acls(env, tmp_path, capsys):
    from raftlog.client.cli import main

    certs, node = env
    cfg = tmp_path / "client.properties"
    cfg.write_text(f"security.protocol=SASL_SSL\nssl.truststore.location={certs.cafile}\n"
                   f"sasl.mechanism=SCRAM-SHA-512\nsasl.username=admin\n"
                   f"sasl.password={ADMIN_PW}\n")
    cfg.chmod(0o600)
    base = ["--bootstrap-server", node.bootstrap, "--command-config", str(cfg)]
    assert main(["acls", "add", "--principal", "User:dave", "--operation", "write",
                 "--transactional-id", "cli-pay", *base]) == 0
    assert main(["acls", "add", "--principal", "User:dave", "--operation", "describe",
                 "--transactional-id", "cli-", "--pattern", "prefixed", *base]) == 0
    capsys.readouterr()
    assert main(["acls", "list", "--resource-type", "transactional_id", *base]) == 0
    out = capsys.readouterr().out
    assert "allow User:dave write transactional_id literal cli-pay" in out
    assert "allow User:dave describe transactional_id prefixed cli-" in out
    assert main(["acls", "list", "--transactional-id", "cli-pay", *base]) == 0
    out = capsys.readouterr().out
    assert "cli-pay" in out and "prefixed cli-" not in out
    # bad input: a type that does not exist, an operation a transactional id has not
    assert main(["acls", "list", "--resource-type", "txn", *base]) == 1
    err = capsys.readouterr().err
    assert "'txn' is not one of topic, group, cluster, transactional_id" in err
    assert main(["acls", "add", "--principal", "User:dave", "--operation", "read",
                 "--transactional-id", "cli-pay", *base]) == 1
    assert "does not apply to a transactional_id (valid: all, describe, write)" in \
        capsys.readouterr().err
    assert main(["acls", "add", "--principal", "User:dave", "--resource-type",
                 "transactional_id", *base]) == 1
    assert "--transactional-id" in capsys.readouterr().err
    assert main(["acls", "remove", "--resource-type", "transactional_id", "--principal",
                 "User:dave", *base]) == 0
    assert "2 ACL binding(s) removed" in capsys.readouterr().err
    with admin_of(node, certs) as a:
        assert a.describe_acls(principal="User:dave") == []
