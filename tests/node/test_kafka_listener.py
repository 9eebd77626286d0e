"""The Kafka listener against a real node process, with stock Kafka clients:
kafka-python (pure Python) and, when installed, confluent-kafka (librdkafka)."""

from __future__ import annotations

import socket
import struct
import time

import pytest

from raftlog.client import Admin, Consumer, Producer, TopicPartition
from raftlog.kafka.wire import FrameDecoder, decode_response, encode_request
from tests.conftest import kafka_node, kafka_python_read

kafka = pytest.importorskip("kafka")
from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer  # noqa: E402
from kafka.admin import NewTopic  # noqa: E402
from kafka.structs import TopicPartition as KTP  # noqa: E402


@pytest.fixture(scope="module")
def knode(tmp_path_factory):
    """One node with the Kafka listener on; shared by this module's tests (each uses
    its own topics and groups)."""
    n = kafka_node(str(tmp_path_factory.mktemp("kafka") / "node-1"), 4)
    yield n
    n.stop()
    assert "kafka_handler_failed" not in n.log_text()


def _admin(node) -> KafkaAdminClient:
    return KafkaAdminClient(bootstrap_servers=node.kafka, request_timeout_ms=10_000)


def test_kafka_python_idempotent_acks_all_producer_and_consumer(knode):
    admin = _admin(knode)
    admin.create_topics([NewTopic("kp", 2, 1)])
    p = KafkaProducer(bootstrap_servers=knode.kafka, acks="all", enable_idempotence=True,
                      compression_type="gzip", linger_ms=2)
    sent = [(b"k%d" % i, b"v%d" % i, [("n", b"%d" % i)]) for i in range(500)]
    futs = [p.send("kp", key=k, value=v, headers=h) for k, v, h in sent]
    metas = [f.get(timeout=20) for f in futs]
    p.close()
    for part in (0, 1):  # offsets dense and in send order per partition
        assert sorted(m.offset for m in metas if m.partition == part) == \
            list(range(sum(m.partition == part for m in metas)))
    c = KafkaConsumer("kp", bootstrap_servers=knode.kafka, auto_offset_reset="earliest")
    got = [(m.key, m.value, m.headers) for m in kafka_python_read(c, len(sent))]
    c.close()
    assert sorted(got) == sorted(sent)
    admin.close()


def test_records_cross_listeners_unchanged(knode):
    Admin(knode.bootstrap).create_topic("cross", partitions=1)
    kp = KafkaProducer(bootstrap_servers=knode.kafka, acks="all")
    kp.send("cross", key=b"from-kafka", value=b"v1", headers=[("h", b"x"), ("e", b"")],
            timestamp_ms=1_600_000_000_123).get(timeout=20)
    kp.close()
    with Producer(knode.bootstrap, acks="all") as p:
        p.send("cross", b"v2", key=b"from-raftlog", headers=[("a", b"1"), ("n", None)],
               partition=0).result(20)
    c = Consumer(knode.bootstrap, auto_offset_reset="earliest", fetch_max_wait_ms=100)
    c.assign([TopicPartition("cross", 0)])
    recs, deadline = [], time.monotonic() + 10
    while len(recs) < 2 and time.monotonic() < deadline:
        recs += c.poll(timeout_ms=200)
    c.close()
    assert [(r.offset, r.key, r.value, r.headers) for r in recs] == [
        (0, b"from-kafka", b"v1", (("h", b"x"), ("e", b""))),
        (1, b"from-raftlog", b"v2", (("a", b"1"), ("n", None)))]
    assert recs[0].timestamp == 1_600_000_000_123
    kc = KafkaConsumer(bootstrap_servers=knode.kafka)
    kc.assign([KTP("cross", 0)])
    kc.seek_to_beginning()
    seen = [(m.offset, m.key, m.value, tuple(m.headers), m.timestamp)
            for m in kafka_python_read(kc, 2)]
    by_time = kc.offsets_for_times({KTP("cross", 0): 1_600_000_000_124})  # (ListOffsets)
    kc.close()
    assert by_time[KTP("cross", 0)].offset == 1  # the first record at or after that time
    assert seen == [(r.offset, r.key, r.value, r.headers, r.timestamp) for r in recs]


def test_kafka_python_group_commits_and_resumes(knode):
    admin = _admin(knode)
    admin.create_topics([NewTopic("grp", 2, 1)])
    p = KafkaProducer(bootstrap_servers=knode.kafka, acks="all")
    for i in range(40):
        p.send("grp", value=b"%d" % i, partition=i % 2)
    p.flush()

    def member():
        return KafkaConsumer("grp", bootstrap_servers=knode.kafka, group_id="g-kp",
                             auto_offset_reset="earliest", enable_auto_commit=False,
                             session_timeout_ms=6000,
                             heartbeat_interval_ms=500)

    c = member()
    first = [m.value for m in kafka_python_read(c, 40)]
    assert sorted(first, key=int) == [b"%d" % i for i in range(40)]
    assert c.assignment() == {KTP("grp", 0), KTP("grp", 1)}
    c.commit()
    c.close()
    groups = admin.list_groups()
    assert any(g["group_id"] == "g-kp" for g in groups)
    offsets = admin.list_group_offsets("g-kp")["g-kp"]
    assert {tp.partition: om.offset for tp, om in offsets.items()} == {0: 20, 1: 20}
    for i in range(40, 44):
        p.send("grp", value=b"%d" % i, partition=i % 2)
    p.close()
    c = member()
    resumed = [m.value for m in kafka_python_read(c, 4)]  # only what came after the commit
    c.close()
    assert sorted(resumed) == [b"40", b"41", b"42", b"43"]
    admin.close()


def test_admin_create_describe_delete(knode):
    admin = _admin(knode)
    res = admin.create_topics([NewTopic("adm", 3, 1, topic_configs={"retention.ms": "1234"})])
    assert res["topics"][0]["error_code"] == 0
    again = admin.create_topics([NewTopic("adm", 3, 1)], raise_errors=False)
    assert again["topics"][0]["error_code"] == 36  # TOPIC_ALREADY_EXISTS
    assert "adm" in admin.list_topics()
    from kafka.admin import ConfigResource, ConfigResourceType

    described = admin.describe_configs([ConfigResource(ConfigResourceType.TOPIC, "adm")])
    modified = described["topic"]["adm"]  # only what the topic sets (kafka-python's default)
    assert {k: v["value"] for k, v in modified.items()} == {"retention.ms": "1234"}
    assert admin.describe_cluster()["brokers"][0]["port"] == int(knode.kafka.split(":")[1])
    admin.delete_topics(["adm"])
    deadline = time.monotonic() + 10
    while "adm" in admin.list_topics() and time.monotonic() < deadline:
        time.sleep(0.1)
    assert "adm" not in admin.list_topics()
    admin.close()


def _connect(node) -> socket.socket:
    host, port = node.kafka.split(":")
    return socket.create_connection((host, int(port)), timeout=10)


def _recv_frame(s: socket.socket) -> bytes | None:
    dec = FrameDecoder()
    while True:
        frame = dec.next_frame()
        if frame is not None:
            return frame
        data = s.recv(65536)
        if not data:
            return None
        dec.receive_data(data)


def test_unknown_apis_versions_and_malformed_frames_leave_the_node_serving(knode):
    with _connect(knode) as s:
        # an API we do not serve: an UNSUPPORTED_VERSION answer, the connection stays
        s.sendall(struct.pack(">ihhi", 10, 57, 0, 7) + b"\xff\xff")
        frame = _recv_frame(s)
        assert struct.unpack(">ih", frame) == (7, 35)
        # ApiVersions v9: a v0 answer listing what we serve
        s.sendall(struct.pack(">ihhi", 10, 18, 9, 8) + b"\xff\xff")
        cid, body = decode_response(18, 0, _recv_frame(s))
        assert cid == 8 and body["error_code"] == 35
        assert {a["api_key"] for a in body["api_keys"]} >= {0, 1, 3, 11}
        # and a good request still works on the same connection
        s.sendall(encode_request(18, 3, 9, {"client_software_name": "t",
                                            "client_software_version": "1"}))
        cid, body = decode_response(18, 3, _recv_frame(s))
        assert cid == 9 and body["error_code"] == 0
    bad_frames = [
        struct.pack(">i", 2**31 - 1) + b"x",  # lying length beyond max.frame.bytes
        struct.pack(">i", -4),  # negative length
        struct.pack(">i", 10) + struct.pack(">hhi", 3, 1, 5) + b"\x7f\xff",  # string overruns
        struct.pack(">i", 14) + struct.pack(">hhi", 3, 1, 5) + b"\xff\xff" + b"\x7f\xff\xff\xff",
    ]
    for bad in bad_frames:
        with _connect(knode) as s:
            s.sendall(bad)
            assert _recv_frame(s) is None  # closed, no answer
    with _connect(knode) as s:  # the node still serves
        s.sendall(encode_request(3, 1, 11, {"topics": None}))
        cid, body = decode_response(3, 1, _recv_frame(s))
        assert cid == 11 and body["brokers"][0]["port"] == int(knode.kafka.split(":")[1])


def test_confluent_kafka_idempotent_producer_and_group(knode):
    ck = pytest.importorskip("confluent_kafka")
    from confluent_kafka.admin import AdminClient, ConfigResource
    from confluent_kafka.admin import NewTopic as CNewTopic

    a = AdminClient({"bootstrap.servers": knode.kafka})
    for f in a.create_topics([CNewTopic("ck", 3, 1)]).values():
        f.result(20)
    [cfg] = a.describe_configs([ConfigResource("topic", "ck")]).values()
    assert "retention.ms" in cfg.result(20)
    assert "ck" in a.list_topics(timeout=20).topics  # (an all-topics Metadata v12)
    errors = []
    p = ck.Producer({"bootstrap.servers": knode.kafka, "enable.idempotence": True,
                     "acks": "all", "compression.type": "lz4", "linger.ms": 5})
    for i in range(2000):
        p.produce("ck", key=b"k%d" % i, value=b"v%d" % i, headers=[("i", b"%d" % i)],
                  on_delivery=lambda e, m: e and errors.append(e))
    assert p.flush(30) == 0 and not errors
    c = ck.Consumer({"bootstrap.servers": knode.kafka, "group.id": "g-ck",
                     "auto.offset.reset": "earliest", "enable.auto.commit": False})
    c.subscribe(["ck"])
    got, deadline = [], time.monotonic() + 30
    while len(got) < 2000 and time.monotonic() < deadline:
        m = c.poll(0.5)
        if m is not None and not m.error():
            got.append((m.key(), m.value(), tuple(m.headers())))
    c.commit(asynchronous=False)
    c.close()
    assert sorted(got) == sorted((b"k%d" % i, b"v%d" % i, (("i", b"%d" % i),))
                                 for i in range(2000))


def test_aiokafka_producer_and_group_consumer(knode):
    aiokafka = pytest.importorskip("aiokafka")
    import asyncio

    async def run():
        p = aiokafka.AIOKafkaProducer(bootstrap_servers=knode.kafka, acks="all",
                                      enable_idempotence=True)
        await p.start()
        try:
            for i in range(20):
                await p.send("aio", b"%d" % i, key=b"k", headers=[("i", b"%d" % i)])
            await p.flush()
        finally:
            await p.stop()
        c = aiokafka.AIOKafkaConsumer("aio", bootstrap_servers=knode.kafka, group_id="g-aio",
                                      auto_offset_reset="earliest", enable_auto_commit=False)
        await c.start()
        try:
            got = []
            while len(got) < 20:
                m = await asyncio.wait_for(c.getone(), 20)
                got.append((m.offset, m.value, tuple(m.headers)))
            await c.commit()
            committed = await c.committed(aiokafka.TopicPartition("aio", 0))
        finally:
            await c.stop()
        return got, committed

    Admin(knode.bootstrap).create_topic("aio", partitions=1)
    got, committed = asyncio.run(run())
    assert got == [(i, b"%d" % i, (("i", b"%d" % i),)) for i in range(20)]
    assert committed == 20


_VALID = [  # (api key, version, body) requests a client could send
    (18, 3, {"client_software_name": "f", "client_software_version": "1"}),
    (3, 9, {"topics": None, "allow_auto_topic_creation": False}),
    (1, 11, {"max_wait_ms": 0, "min_bytes": 1, "max_bytes": 1000, "topics": [
        {"topic": "fz", "partitions": [{"partition": 0, "fetch_offset": 0,
                                         "partition_max_bytes": 1000}]}]}),
    (2, 5, {"replica_id": -1, "topics": [{"name": "fz", "partitions": [
        {"partition_index": 0, "timestamp": -2}]}]}),
    (11, 5, {"group_id": "fz-g", "session_timeout_ms": 6000, "rebalance_timeout_ms": 100,
             "member_id": "nobody", "protocol_type": "consumer",
             "protocols": [{"name": "range", "metadata": b"\x00"}]}),
]


def test_fuzzed_requests_never_take_the_node_down(knode):
    """Valid requests with bytes flipped, cut, or their frame length lying: each gets an
    answer or a closed connection, and afterwards the node answers a good request."""
    from hypothesis import HealthCheck, given, settings
    from hypothesis import strategies as st

    from raftlog.node.kafka.handlers import FETCH_MAX_WAIT_MS

    Admin(knode.bootstrap).create_topic("fz", partitions=1)
    with Producer(knode.bootstrap) as p:  # a fetch from offset 0 has data: answered at once
        p.send("fz", b"x" * 2000, partition=0).result(10)

    @settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck))
    @given(data=st.data())
    def fuzz(data):
        key, v, body = data.draw(st.sampled_from(_VALID))
        frame = bytearray(encode_request(key, v, 1, body))
        for _ in range(data.draw(st.integers(0, 4))):
            i = data.draw(st.integers(4, len(frame) - 1))
            frame[i] = data.draw(st.integers(0, 255))
        if data.draw(st.booleans()):  # the length lies (never beyond what we send)
            frame[:4] = struct.pack(">i", data.draw(st.integers(-5, len(frame) - 4)))
        with _connect(knode) as s:
            # a mutated fetch may be a valid long poll (max wait up to the node's cap)
            s.settimeout(FETCH_MAX_WAIT_MS / 1000 + 5)
            s.sendall(bytes(frame))
            s.shutdown(socket.SHUT_WR)
            while s.recv(65536):  # answers, then the close
                pass

    fuzz()
    with _connect(knode) as s:
        s.sendall(encode_request(3, 1, 12, {"topics": None}))
        cid, body = decode_response(3, 1, _recv_frame(s))
        assert cid == 12 and any(t["name"] == "fz" for t in body["topics"])


def test_confluent_kafka_cooperative_sticky_group_rebalances_when_a_member_leaves(knode):
    ck = pytest.importorskip("confluent_kafka")
    import threading

    Admin(knode.bootstrap).create_topic("coop", partitions=4)
    p = ck.Producer({"bootstrap.servers": knode.kafka})
    for i in range(400):
        p.produce("coop", b"%d" % i, partition=i % 4)
    assert p.flush(20) == 0
    state = {"a": (set(), []), "b": (set(), [])}
    stop = {"a": threading.Event(), "b": threading.Event()}

    def member(name):
        c = ck.Consumer({"bootstrap.servers": knode.kafka, "group.id": "g-coop",
                         "auto.offset.reset": "earliest", "session.timeout.ms": 6000,
                         "heartbeat.interval.ms": 300,
                         "partition.assignment.strategy": "cooperative-sticky"})
        c.subscribe(["coop"])
        while not stop[name].is_set():
            m = c.poll(0.1)
            if m is not None and not m.error():
                state[name][1].append(int(m.value()))
            state[name] = ({tp.partition for tp in c.assignment()}, state[name][1])
        c.close()

    threads = {n: threading.Thread(target=member, args=(n,), daemon=True) for n in "ab"}
    for t in threads.values():
        t.start()

    def until(cond, timeout_s=30):
        deadline = time.monotonic() + timeout_s
        while not cond():
            assert time.monotonic() < deadline, f"timed out; state {state}"
            time.sleep(0.1)

    until(lambda: state["a"][0] and state["b"][0]
          and state["a"][0] | state["b"][0] == {0, 1, 2, 3})
    kept = set(state["a"][0])
    stop["b"].set()
    threads["b"].join(20)
    until(lambda: state["a"][0] == {0, 1, 2, 3})
    assert kept <= state["a"][0]  # sticky: a kept what it had
    until(lambda: len(set(state["a"][1]) | set(state["b"][1])) == 400)
    stop["a"].set()
    threads["a"].join(20)


def test_one_group_mixes_a_raftlog_consumer_and_a_kafka_consumer(knode):
    """The coordinator keeps raftlog's subscription form; the Kafka listener converts
    Kafka's consumer-protocol bytes at its edge, so either kind may lead the group."""
    import threading

    Admin(knode.bootstrap).create_topic("mix", partitions=4)
    with Producer(knode.bootstrap, acks="all") as p:
        for i in range(200):
            p.send("mix", b"%d" % i, partition=i % 4)
    seen = {"raftlog": (set(), set()), "kafka": (set(), set())}
    stop = threading.Event()

    def raftlog_member():
        c = Consumer(knode.bootstrap, group_id="g-mix", auto_offset_reset="earliest",
                     partition_assignment_strategy="range", session_timeout_ms=6000)
        c.subscribe(["mix"])
        while not stop.is_set():
            vals = {int(r.value) for r in c.poll(timeout_ms=100)}
            seen["raftlog"] = ({tp.partition for tp in c.assignment()}, seen["raftlog"][1] | vals)
        c.close()

    def kafka_member():
        c = KafkaConsumer("mix", bootstrap_servers=knode.kafka, group_id="g-mix",
                          auto_offset_reset="earliest", session_timeout_ms=6000,
                          heartbeat_interval_ms=300)
        while not stop.is_set():
            vals = {int(r.value) for recs in c.poll(timeout_ms=100).values() for r in recs}
            seen["kafka"] = ({tp.partition for tp in c.assignment()}, seen["kafka"][1] | vals)
        c.close()

    threads = [threading.Thread(target=f, daemon=True) for f in (raftlog_member, kafka_member)]
    threads[0].start()  # the raftlog consumer first: it leads, assigning to a Kafka member
    time.sleep(1)
    threads[1].start()
    try:
        deadline = time.monotonic() + 40
        while time.monotonic() < deadline:
            a, b = seen["raftlog"][0], seen["kafka"][0]
            if a and b and not a & b and a | b == {0, 1, 2, 3} \
                    and len(seen["raftlog"][1] | seen["kafka"][1]) == 200:
                break
            time.sleep(0.1)
        assert seen["raftlog"][0] and seen["kafka"][0], seen
        assert seen["raftlog"][0] | seen["kafka"][0] == {0, 1, 2, 3}
        assert seen["raftlog"][1] | seen["kafka"][1] == set(range(200))
    finally:
        stop.set()
        for t in threads:
            t.join(20)


def test_kcat_produces_and_consumes(knode):
    import shutil
    import subprocess

    if shutil.which("kcat") is None:
        pytest.skip("kcat is not installed (Debian package kcat)")
    Admin(knode.bootstrap).create_topic("kcat", partitions=1)
    produced = subprocess.run(
        ["kcat", "-b", knode.kafka, "-P", "-t", "kcat", "-K", ":", "-H", "h=x",
         "-X", "topic.request.required.acks=-1"],
        input=b"k1:v1\nk2:v2\n", capture_output=True, timeout=30)
    assert produced.returncode == 0, produced.stderr
    consumed = subprocess.run(
        ["kcat", "-b", knode.kafka, "-C", "-t", "kcat", "-o", "beginning", "-e",
         "-f", "%o %k=%s %h\\n"], capture_output=True, timeout=30)
    assert consumed.returncode == 0, consumed.stderr
    assert consumed.stdout.decode().splitlines() == ["0 k1=v1 h=x", "1 k2=v2 h=x"]
    c = Consumer(knode.bootstrap, auto_offset_reset="earliest")
    c.assign([TopicPartition("kcat", 0)])
    recs, deadline = [], time.monotonic() + 10
    while len(recs) < 2 and time.monotonic() < deadline:
        recs += c.poll(timeout_ms=200)
    c.close()
    assert [(r.key, r.value, r.headers) for r in recs] == [(b"k1", b"v1", (("h", b"x"),)),
                                                          (b"k2", b"v2", (("h", b"x"),))]


def test_long_poll_fetch_is_answered_when_a_record_arrives(knode):
    """A Fetch at the log end with max_wait 60 s parks; a produce through the native
    listener wakes it (the socket would time out long before max_wait otherwise)."""
    Admin(knode.bootstrap).create_topic("lp", partitions=1)
    fetch = {"replica_id": -1, "max_wait_ms": 60_000, "min_bytes": 1, "max_bytes": 1 << 20,
             "isolation_level": 0, "session_id": 0, "session_epoch": -1, "topics": [
                 {"topic": "lp", "partitions": [{"partition": 0, "fetch_offset": 0,
                                                 "partition_max_bytes": 1 << 20}]}]}
    with _connect(knode) as s:
        s.settimeout(20)
        s.sendall(encode_request(1, 11, 21, fetch))
        time.sleep(0.3)  # (let it park; answered either way)
        with Producer(knode.bootstrap, acks=1) as p:
            p.send("lp", b"wake", partition=0).result(10)
        cid, body = decode_response(1, 11, _recv_frame(s))
    part = body["responses"][0]["partitions"][0]
    assert cid == 21 and part["error_code"] == 0 and part["high_watermark"] == 1
    from raftlog.kafka import batch as kafka_batch

    [(pos, h)] = list(kafka_batch.iter_batches(part["records"]))
    assert kafka_batch.decode_records(part["records"], pos, h).values == [b"wake"]
