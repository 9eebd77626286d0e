"""The Kafka listener with TLS, SASL/SCRAM and ACLs, against a real node process, with
confluent-kafka (librdkafka): the native listeners' certificates, credentials, failure
limiter and ACLs serve it (node/server.py, node/authn.py, node/authz.py)."""

from __future__ import annotations

import os
import re
import socket
import time

import pytest

from raftlog import scram
from raftlog.client import Admin
from raftlog.kafka.wire import FrameDecoder, decode_response, encode_request
from tests.certs import make_certs
from tests.conftest import NodeProcess, free_ports

ck = pytest.importorskip("confluent_kafka")
from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402

ADMIN_PW = "admin-secret-123"


@pytest.fixture(scope="module")
def certs(tmp_path_factory):
    c = make_certs(str(tmp_path_factory.mktemp("kcerts")))
    cert, key = c.issue("node", "node1", hosts=("127.0.0.1",))
    c.keystore = os.path.join(c.dir, "node-keystore.pem")
    with open(c.keystore, "w") as f:
        f.write(open(cert).read() + open(key).read())
    return c


def start(tmp, certs, protocol: str, native: str = "PLAINTEXT", extra=None) -> NodeProcess:
    """A node with ``kafka.listener=<protocol>://127.0.0.1:<port>``; its native listener
    ``native`` (SASL_SSL: the admin user below is its inter-broker user)."""
    port, kport = free_ports(2)
    props = {"listeners": f"{native}://127.0.0.1:{port}",
             "kafka.listener": f"{protocol}://127.0.0.1:{kport}",
             "ssl.keystore.location": certs.keystore,
             "offsets.topic.replication.factor": "1", "offsets.topic.num.partitions": "2",
             "group.initial.rebalance.delay.ms": "0"}
    if "SASL" in protocol or "SASL" in native:
        props.update({"sasl.enabled.mechanisms": "SCRAM-SHA-256,SCRAM-SHA-512,PLAIN",
                      "inter.broker.sasl.username": "admin",
                      "inter.broker.sasl.password": ADMIN_PW,
                      "connection.failed.authentication.delay.ms": "0"})
    n = NodeProcess(str(tmp / f"node-{protocol}"), port, extra={**props, **(extra or {})})
    n.start()
    n.kafka = f"127.0.0.1:{kport}"
    deadline = time.monotonic() + 20
    while True:  # the Kafka listener starts after the native one
        try:
            socket.create_connection(("127.0.0.1", kport), timeout=5).close()
            return n
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.05)


def client_conf(node, certs, protocol: str, **kw) -> dict:
    conf = {"bootstrap.servers": node.kafka, "security.protocol": protocol}
    if "SSL" in protocol:
        conf["ssl.ca.location"] = certs.cafile
    return {**conf, **kw}


def produce_consume(conf: dict, topic: str, n: int = 200) -> list:
    """Produce n records (acks=all, idempotent) and consume them back through one group."""
    errors = []
    p = ck.Producer({**conf, "acks": "all", "enable.idempotence": True, "linger.ms": 2})
    for i in range(n):
        p.produce(topic, key=b"k%d" % i, value=b"v%d" % i,
                  on_delivery=lambda e, m: e and errors.append(e))
    assert p.flush(30) == 0 and not errors, errors
    c = ck.Consumer({**conf, "group.id": f"g-{topic}", "auto.offset.reset": "earliest"})
    c.subscribe([topic])
    got, deadline = [], time.monotonic() + 30
    while len(got) < n and time.monotonic() < deadline:
        m = c.poll(0.5)
        if m is not None and not m.error():
            got.append((m.key(), m.value()))
    c.close()
    return sorted(got)


def expected(n: int = 200) -> list:
    return sorted((b"k%d" % i, b"v%d" % i) for i in range(n))


def create_topic(conf: dict, name: str, partitions: int = 2) -> None:
    admin = AdminClient(conf)  # (kept alive until its futures are done)
    for f in admin.create_topics([NewTopic(name, partitions, 1)]).values():
        f.result(20)


def test_ssl_kafka_listener_produce_consume(tmp_path, certs):
    node = start(tmp_path, certs, "SSL")
    try:
        conf = client_conf(node, certs, "SSL")
        create_topic(conf, "tls")
        assert produce_consume(conf, "tls") == expected()
        # a client that does not trust the node's CA fails its handshake; others go on
        other = make_certs(str(tmp_path / "other"))
        bad = ck.Producer({**conf, "ssl.ca.location": other.cafile, "message.timeout.ms": 3000})
        failed = []
        bad.produce("tls", b"never", on_delivery=lambda e, m: failed.append(e))
        bad.flush(10)
        assert failed and failed[0].code() == ck.KafkaError._MSG_TIMED_OUT
        assert produce_consume(conf, "tls", 0) == []
        with Admin(node.bootstrap) as a:
            assert "tls" in a.list_topics()
        assert "tls_handshake_failed" in node.log_text()
    finally:
        node.stop()
    assert "kafka_handler_failed" not in node.log_text()


def _scram_login(node, user: str, password: str) -> dict:
    """A SCRAM-SHA-256 login over raw Kafka frames: the last SaslAuthenticate answer."""
    with _connect(node) as s:
        assert _call(s, 17, 1, 1, {"mechanism": "SCRAM-SHA-256"})[1]["error_code"] == 0
        client = scram.ScramClient("SCRAM-SHA-256", user, password)
        _, body = _call(s, 36, 2, 2, {"auth_bytes": client.first()})
        if body["error_code"] == 0:
            _, body = _call(s, 36, 2, 3, {"auth_bytes": client.final(body["auth_bytes"])})
        return body


def test_failed_logins_block_one_user_of_an_address_on_the_kafka_listener(tmp_path, certs):
    """Issue 35/32: per (address, user): after two wrong passwords for admin, admin is
    refused from this address and told for how long; another user is not collateral."""
    node = start(tmp_path, certs, "SASL_PLAINTEXT", native="SASL_SSL",
                 extra={"connection.failed.authentication.max": "2"})
    try:
        for _ in range(2):
            body = _scram_login(node, "admin", "wrong")
            assert body["error_code"] == 58 and "authentication failed" in body["error_message"]
        body = _scram_login(node, "admin", ADMIN_PW)  # the right password, but blocked
        assert body["error_code"] == 58
        assert re.fullmatch(r"too many failed logins for user admin from 127\.0\.0\.1: "
                            r"blocked for \d+ s", body["error_message"]), body
        body = _scram_login(node, "carol", "any")  # another user: checked as usual
        assert body["error_code"] == 58 and "authentication failed" in body["error_message"]
        assert "address_blocked" in node.log_text() and "user=admin" in node.log_text()
    finally:
        node.stop()


def sasl_conf(node, certs, protocol: str, mechanism: str, user: str, password: str,
              **kw) -> dict:
    return client_conf(node, certs, protocol, **{
        "sasl.mechanism": mechanism, "sasl.username": user, "sasl.password": password, **kw})


def admin_of(node, certs) -> Admin:
    """The raftlog Admin over the native SASL_SSL listener, as the admin user."""
    return Admin(node.bootstrap, security_protocol="SASL_SSL", ssl_cafile=certs.cafile,
                 sasl_mechanism="SCRAM-SHA-512", sasl_plain_username="admin",
                 sasl_plain_password=ADMIN_PW)


@pytest.mark.parametrize("protocol", ["SASL_PLAINTEXT", "SASL_SSL"])
def test_sasl_scram_kafka_listener(tmp_path, certs, protocol):
    node = start(tmp_path, certs, protocol, native="SASL_SSL",
                 extra={"connection.failed.authentication.max": "1000"})
    try:
        with admin_of(node, certs) as a:
            a.create_user("alice", "alice-pw", "SCRAM-SHA-256")
            a.create_user("bob", "bob-pw", "SCRAM-SHA-512")
        alice = sasl_conf(node, certs, protocol, "SCRAM-SHA-256", "alice", "alice-pw")
        bob = sasl_conf(node, certs, protocol, "SCRAM-SHA-512", "bob", "bob-pw")
        create_topic(alice, "s1")
        assert produce_consume(alice, "s1") == expected()
        assert produce_consume(bob, "s1", 0) == []
        # a wrong password: the client reports an authentication error
        errors = []
        wrong = sasl_conf(node, certs, protocol, "SCRAM-SHA-256", "alice", "nope",
                          error_cb=errors.append, **{"message.timeout.ms": 3000})
        p = ck.Producer(wrong)
        p.produce("s1", b"never")
        p.flush(5)
        assert any(e.code() == ck.KafkaError._AUTHENTICATION for e in errors), errors
        # an unknown user and a mechanism the user has no credential for fail alike
        errors.clear()
        p = ck.Producer({**wrong, "sasl.username": "mallory", "sasl.mechanism": "SCRAM-SHA-512"})
        p.produce("s1", b"never")
        p.flush(5)
        assert any(e.code() == ck.KafkaError._AUTHENTICATION for e in errors), errors
        # the node keeps serving the others
        assert produce_consume(bob, "s1", 0) == []
        if protocol == "SASL_SSL":  # PLAIN (over TLS) against the same SCRAM credential
            plain = sasl_conf(node, certs, protocol, "PLAIN", "bob", "bob-pw")
            assert produce_consume(plain, "s1", 0) == []
        log = node.log_text()
        assert "authentication_failed" in log and "listener=kafka" in log
    finally:
        node.stop()
    assert "kafka_handler_failed" not in node.log_text()


def _connect(node) -> socket.socket:
    host, port = node.kafka.split(":")
    return socket.create_connection((host, int(port)), timeout=10)


def _call(s: socket.socket, key: int, version: int, cid: int, body: dict):
    """Send one request; (correlation id, body) of the answer, or None: closed."""
    s.sendall(encode_request(key, version, cid, body))
    dec = FrameDecoder()
    while (frame := dec.next_frame()) is None:
        data = s.recv(65536)
        if not data:
            return None
        dec.receive_data(data)
    return decode_response(key, version, frame)


def test_sasl_before_authentication_and_failure_limit(tmp_path, certs):
    """Before authentication only ApiVersions and SASL are served; failures answer
    SASL_AUTHENTICATION_FAILED (58), close, and count per address (and per user: see
    test_security_node.py); a blocked client is told so at its SASL step."""
    node = start(tmp_path, certs, "SASL_PLAINTEXT", native="SASL_SSL",
                 extra={"connection.failed.authentication.max": "3",
                        "connection.failed.authentication.max.per.address": "3"})
    try:
        with _connect(node) as s:
            _, body = _call(s, 18, 3, 1, {"client_software_name": "t",
                                          "client_software_version": "1"})
            keys = {a["api_key"]: (a["min_version"], a["max_version"]) for a in body["api_keys"]}
            assert keys[17] == (0, 1) and keys[36] == (0, 2)
            assert _call(s, 3, 1, 2, {"topics": None}) is None  # Metadata first: closed
        with _connect(node) as s:
            _, body = _call(s, 17, 1, 1, {"mechanism": "GSSAPI"})
            assert body["error_code"] == 33 and "SCRAM-SHA-256" in body["mechanisms"]
        with _connect(node) as s:  # a wrong password
            assert _call(s, 17, 1, 1, {"mechanism": "SCRAM-SHA-256"})[1]["error_code"] == 0
            client = scram.ScramClient("SCRAM-SHA-256", "admin", "wrong")
            _, body = _call(s, 36, 2, 2, {"auth_bytes": client.first()})
            assert body["error_code"] == 0
            _, body = _call(s, 36, 2, 3, {"auth_bytes": client.final(body["auth_bytes"])})
            assert body["error_code"] == 58 and "authentication failed" in body["error_message"]
            assert s.recv(10) == b""
        with _connect(node) as s:  # blocked: three failures from this address
            assert _call(s, 17, 1, 1, {"mechanism": "SCRAM-SHA-256"})[1]["error_code"] == 0
            client = scram.ScramClient("SCRAM-SHA-256", "admin", ADMIN_PW)
            _, body = _call(s, 36, 2, 2, {"auth_bytes": client.first()})
            assert body["error_code"] == 58
            assert re.fullmatch(r"too many failed logins from 127\.0\.0\.1: blocked for "
                                r"\d+ s", body["error_message"]), body
            assert s.recv(10) == b""
        assert "address_blocked" in node.log_text()
    finally:
        node.stop()
    assert "kafka_handler_failed" not in node.log_text()


def _consume_assigned(conf: dict, topic: str, n: int, timeout_s: float = 15):
    """(records, errors) of a consumer assigned partition 0 of ``topic`` from offset 0."""
    c = ck.Consumer({**conf, "group.id": "unused", "enable.auto.commit": False})
    c.assign([ck.TopicPartition(topic, 0, 0)])
    got, errors, deadline = [], [], time.monotonic() + timeout_s
    while len(got) < n and not errors and time.monotonic() < deadline:
        m = c.poll(0.3)
        if m is None:
            continue
        if m.error():
            errors.append(m.error().code())
        else:
            got.append(m.value())
    c.close()
    return got, errors


def _authed(node, user: str, password: str) -> socket.socket:
    """A raw connection authenticated with SCRAM (SHA-512 for admin, else SHA-256)."""
    mech = "SCRAM-SHA-512" if user == "admin" else "SCRAM-SHA-256"
    s = _connect(node)
    assert _call(s, 17, 1, 1, {"mechanism": mech})[1]["error_code"] == 0
    client = scram.ScramClient(mech, user, password)
    _, body = _call(s, 36, 2, 2, {"auth_bytes": client.first()})
    _, body = _call(s, 36, 2, 3, {"auth_bytes": client.final(body["auth_bytes"])})
    assert body["error_code"] == 0
    return s


def _topics(node, user: str, password: str, names=None) -> dict:
    """{topic: error code} of a Metadata v1 request (librdkafka's list_topics() sends
    a Metadata v12 with 3 bytes past its fields, which the listener's decoder refuses:
    not used here)."""
    with _authed(node, user, password) as s:
        topics = None if names is None else [{"name": n} for n in names]
        _, body = _call(s, 3, 1, 4, {"topics": topics})
        return {t["name"]: t["error_code"] for t in body["topics"]}


def _fetch(node, user: str, password: str, topic: str) -> tuple[int, bytes]:
    """(error code, records) of a Fetch v4 of partition 0 from offset 0."""
    with _authed(node, user, password) as s:
        _, body = _call(s, 1, 4, 4, {
            "replica_id": -1, "max_wait_ms": 0, "min_bytes": 0, "max_bytes": 1 << 20,
            "isolation_level": 0, "topics": [{"topic": topic, "partitions": [
                {"partition": 0, "fetch_offset": 0, "partition_max_bytes": 1 << 20}]}]})
        (row,) = body["responses"][0]["partitions"]
        return row["error_code"], row["records"] or b""


def test_acls_on_the_kafka_listener(tmp_path, certs):
    node = start(tmp_path, certs, "SASL_PLAINTEXT", native="SASL_SSL",
                 extra={"authorizer.enable": "true", "super.users": "User:admin",
                        "auto.create.topics.enable": "true"})
    try:
        with admin_of(node, certs) as a:
            a.create_user("alice", "alice-pw", "SCRAM-SHA-256")
            for t in ("aw", "ar", "secret"):
                a.create_topic(t, 1)
            a.create_acls([("User:alice", "topic", "aw", "literal", "write", "allow"),
                           ("User:alice", "topic", "ar", "literal", "read", "allow"),
                           ("User:alice", "topic", "maybe", "literal", "describe", "allow"),
                           ("User:alice", "cluster", "kafka-cluster", "literal", "describe",
                            "allow"),
                           ("User:alice", "group", "unused", "literal", "read", "allow"),
                           ("User:alice", "transactional_id", "alice-", "prefixed", "write",
                            "allow")])
        admin = sasl_conf(node, certs, "SASL_PLAINTEXT", "SCRAM-SHA-512", "admin", ADMIN_PW)
        alice = sasl_conf(node, certs, "SASL_PLAINTEXT", "SCRAM-SHA-256", "alice", "alice-pw")
        # the super user may do everything
        p = ck.Producer(admin)
        for t in ("aw", "ar", "secret"):
            p.produce(t, b"from-admin", partition=0)
        assert p.flush(20) == 0
        assert set(_topics(node, "admin", ADMIN_PW)) >= {"aw", "ar", "secret"}
        assert _consume_assigned(admin, "secret", 1) == ([b"from-admin"], [])
        # Metadata: what alice may not describe is not there
        assert _topics(node, "alice", "alice-pw") == {"aw": 0, "ar": 0}
        # named, it looks unknown (3), and is not auto-created
        assert _topics(node, "alice", "alice-pw", ["secret", "ar", "new-one"]) == {
            "secret": 3, "ar": 0, "new-one": 3}
        # WRITE: alice produces to aw, not to ar
        results = {}  # by topic: librdkafka reports two topics' deliveries in either order
        p = ck.Producer({**alice, "message.timeout.ms": 5000})
        p.produce("aw", b"ok", partition=0, on_delivery=lambda e, m: results.update(aw=e))
        p.produce("ar", b"no", partition=0, on_delivery=lambda e, m: results.update(ar=e))
        p.flush(20)
        assert results["aw"] is None
        assert results["ar"].code() == ck.KafkaError.TOPIC_AUTHORIZATION_FAILED
        # READ: alice fetches ar, not aw
        assert _consume_assigned(alice, "ar", 1) == ([b"from-admin"], [])
        assert _fetch(node, "alice", "alice-pw", "aw") == (29, b"")  # TOPIC_AUTHORIZATION_FAILED
        code, records = _fetch(node, "alice", "alice-pw", "ar")
        assert code == 0 and b"from-admin" in records
        code, records = _fetch(node, "admin", ADMIN_PW, "aw")
        assert code == 0 and b"from-admin" in records and b"ok" in records
        assert _consume_assigned(admin, "ar", 2, timeout_s=3) == ([b"from-admin"], [])
        # auto-creation needs CREATE (on the cluster or the topic), as Kafka's
        assert _topics(node, "alice", "alice-pw", ["maybe"]) == {"maybe": 29}
        assert _topics(node, "admin", ADMIN_PW, ["by-admin"]) == {"by-admin": 0}
        with admin_of(node, certs) as a:
            topics = a.list_topics()
            assert "new-one" not in topics and "maybe" not in topics and "by-admin" in topics
        # KIP-664 (transactions admin): DescribeProducers needs READ on the topic (per
        # partition 29); DescribeTransactions DESCRIBE on each transactional id (53,
        # TRANSACTIONAL_ID_AUTHORIZATION_FAILED, per id); ListTransactions lists only
        # the ids the principal may describe
        with admin_of(node, certs) as a:
            a.create_user("bob", "bob-pw", "SCRAM-SHA-256")
        with _authed(node, "alice", "alice-pw") as s:
            _, body = _call(s, 61, 0, 5, {"topics": [{"name": "aw", "partition_indexes": [0]},
                                                     {"name": "ar", "partition_indexes": [0]}]})
            codes = {t["name"]: t["partitions"][0]["error_code"] for t in body["topics"]}
            assert codes == {"aw": 29, "ar": 0}
            _, body = _call(s, 66, 1, 6, {"state_filters": [], "producer_id_filters": [],
                                          "duration_filter": -1})
            assert body["error_code"] == 0
            _, body = _call(s, 65, 0, 7, {"transactional_ids": ["alice-t1", "t1"]})
            codes = [r["error_code"] for r in body["transaction_states"]]
            assert codes[0] != 53 and codes[1] == 53  # (alice-t1: not coordinated yet)
        with _authed(node, "bob", "bob-pw") as s:
            _, body = _call(s, 65, 0, 6, {"transactional_ids": ["alice-t1", "t2"]})
            assert [r["error_code"] for r in body["transaction_states"]] == [53, 53]
        # KIP-430: the cluster operations each principal may perform
        from confluent_kafka.admin import AclOperation as Op

        def cluster_ops(conf):
            client = AdminClient(conf)  # (kept alive until its future is done)
            desc = client.describe_cluster(include_authorized_operations=True)
            return set(desc.result(20).authorized_operations)

        assert cluster_ops(alice) == {Op.DESCRIBE}
        assert cluster_ops(admin) == {Op.CREATE, Op.ALTER, Op.DESCRIBE, Op.CLUSTER_ACTION}
        _transactions_under_acls(node)
    finally:
        node.stop()
    assert "kafka_handler_failed" not in node.log_text()


def _transactions_under_acls(node) -> None:
    """alice may write aw, read ar and the group "unused", and use the transactional
    ids starting "alice-": each transaction API needs WRITE on the id (53 without),
    then Kafka's topic and group checks apply."""
    with _authed(node, "alice", "alice-pw") as s:
        cids = iter(range(100, 10_000))

        def call(key: int, v: int, body: dict, retry=(14, 15, 16, 51)) -> dict:
            deadline = time.monotonic() + 30
            while True:
                _, got = _call(s, key, v, next(cids), body)
                code = got.get("error_code", 0)
                if code not in retry or time.monotonic() > deadline:
                    return got
                time.sleep(0.1)

        assert call(10, 1, {"key": "alice-t", "key_type": 1})["error_code"] == 0
        init = call(22, 1, {"transactional_id": "alice-t", "transaction_timeout_ms": 60_000})
        assert init["error_code"] == 0
        pid, epoch = init["producer_id"], init["producer_epoch"]
        # one partition alice may not write: refused, the others not attempted (55)
        got = call(24, 1, {"v3_and_below_transactional_id": "alice-t",
                           "v3_and_below_producer_id": pid, "v3_and_below_producer_epoch": epoch,
                           "v3_and_below_topics": [{"name": "aw", "partitions": [0]},
                                                   {"name": "ar", "partitions": [0]}]})
        assert {t["name"]: t["results_by_partition"][0]["partition_error_code"]
                for t in got["results_by_topic_v3_and_below"]} == {"aw": 55, "ar": 29}
        # v4 (batched, verify-only) is the brokers': CLUSTER_ACTION
        got = call(24, 4, {"transactions": [{
            "transactional_id": "alice-t", "producer_id": pid, "producer_epoch": epoch,
            "verify_only": True, "topics": [{"name": "aw", "partitions": [0]}]}]})
        assert got["error_code"] == 31
        # AddOffsetsToTxn needs READ on the group
        assert call(25, 1, {"transactional_id": "alice-t", "producer_id": pid,
                            "producer_epoch": epoch, "group_id": "other"})["error_code"] == 30
        # nothing was added: there is no transaction to end
        assert call(26, 1, {"transactional_id": "alice-t", "producer_id": pid,
                            "producer_epoch": epoch, "committed": True})["error_code"] == 48
        # what she may write joins
        got = call(24, 1, {"v3_and_below_transactional_id": "alice-t",
                           "v3_and_below_producer_id": pid, "v3_and_below_producer_epoch": epoch,
                           "v3_and_below_topics": [{"name": "aw", "partitions": [0]}]})
        assert got["results_by_topic_v3_and_below"][0]["results_by_partition"][0][
            "partition_error_code"] == 0
        assert call(25, 1, {"transactional_id": "alice-t", "producer_id": pid,
                            "producer_epoch": epoch, "group_id": "unused"})["error_code"] == 0
        # another id: every transaction API refuses it (53) before anything is done
        assert call(10, 1, {"key": "bob-t", "key_type": 1})["error_code"] == 53
        assert call(22, 1, {"transactional_id": "bob-t",
                            "transaction_timeout_ms": 60_000})["error_code"] == 53
        got = call(24, 1, {"v3_and_below_transactional_id": "bob-t",
                           "v3_and_below_producer_id": pid, "v3_and_below_producer_epoch": epoch,
                           "v3_and_below_topics": [{"name": "aw", "partitions": [0]}]})
        assert got["results_by_topic_v3_and_below"][0]["results_by_partition"][0][
            "partition_error_code"] == 53
        for key, extra in ((25, {"group_id": "unused"}), (26, {"committed": True})):
            assert call(key, 1, {"transactional_id": "bob-t", "producer_id": pid,
                                 "producer_epoch": epoch, **extra})["error_code"] == 53
        assert call(26, 1, {"transactional_id": "alice-t", "producer_id": pid,
                            "producer_epoch": epoch, "committed": False})["error_code"] == 0


def test_sasl_handshake_v0_bare_tokens(tmp_path, certs):
    """After a SaslHandshake v0 the SCRAM messages travel as bare length-prefixed tokens
    (Kafka's original framing); then Kafka requests are served as usual."""
    node = start(tmp_path, certs, "SASL_PLAINTEXT", native="SASL_SSL")
    try:
        with _connect(node) as s:
            assert _call(s, 17, 0, 1, {"mechanism": "SCRAM-SHA-512"})[1]["error_code"] == 0
            client = scram.ScramClient("SCRAM-SHA-512", "admin", ADMIN_PW)

            def token(data: bytes) -> bytes:
                s.sendall(len(data).to_bytes(4, "big") + data)
                dec = FrameDecoder()
                while (frame := dec.next_frame()) is None:
                    dec.receive_data(s.recv(65536))
                return bytes(frame)

            server_final = token(client.final(token(client.first())))
            assert server_final.startswith(b"v=")
            _, body = _call(s, 3, 1, 2, {"topics": None})
            assert body["brokers"]
    finally:
        node.stop()
    assert "kafka_handler_failed" not in node.log_text()
