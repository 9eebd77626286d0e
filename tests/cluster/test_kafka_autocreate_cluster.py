"""Auto-creation and racks through the Kafka listeners of a 3-node cluster (issue #37):
topics auto-created by Metadata get ``default.replication.factor`` and
``num.partitions``; Metadata requests racing to create the same topic on different
nodes are each answered with the topic (or the retriable LEADER_NOT_AVAILABLE), never
TOPIC_ALREADY_EXISTS and never an empty broker list; each broker advertises its
``broker.rack``."""

from __future__ import annotations

import socket
import threading

import pytest

from raftlog.kafka.wire import FrameDecoder, decode_response, encode_request

from ..conftest import free_ports, wait_for_port
from .cluster import LocalCluster, until

ck = pytest.importorskip("confluent_kafka")
from confluent_kafka.admin import AdminClient  # noqa: E402

pytestmark = pytest.mark.slow
LEADER_NOT_AVAILABLE = 5


def _metadata(address: str, topic: str) -> dict:
    host, port = address.split(":")
    with socket.create_connection((host, int(port)), timeout=30) as s:
        s.sendall(encode_request(3, 9, 1, {"topics": [{"name": topic}],
                                           "allow_auto_topic_creation": True}))
        dec = FrameDecoder()
        while (frame := dec.next_frame()) is None:
            data = s.recv(65536)
            assert data, "the node closed the connection"
            dec.receive_data(data)
    return decode_response(3, 9, frame)[1]


def test_auto_created_topics_get_the_configured_replication_factor_and_races_are_answered(
        tmp_path):
    cluster = LocalCluster(tmp_path, 3, auto_create_topics_enable="true",
                           default_replication_factor=3, num_partitions=2,
                           offsets_topic_replication_factor=3, offsets_topic_num_partitions=3)
    kports = free_ports(3)
    brokers = ",".join(f"{i}@127.0.0.1:{p}" for i, p in enumerate(kports, 1))
    for i, (n, kport) in enumerate(zip(cluster.nodes, kports), 1):
        n.extra.update({"kafka.listener": f"127.0.0.1:{kport}", "kafka.brokers": brokers,
                        "broker.rack": f"rack-{i}"})
    cluster.start()
    try:
        for n, kport in zip(cluster.nodes, kports):
            wait_for_port("127.0.0.1", kport, 20, n.proc)
        addresses = [f"127.0.0.1:{p}" for p in kports]
        bootstrap = ",".join(addresses)
        a = AdminClient({"bootstrap.servers": bootstrap})
        nodes = a.describe_cluster().result(30).nodes
        assert sorted((x.id, x.rack) for x in nodes) == [(1, "rack-1"), (2, "rack-2"),
                                                         (3, "rack-3")]

        # three Metadata requests, one per node, creating the same topics at once
        for k in range(5):
            topic = f"race-{k}"
            answers: list = [None] * 3
            start = threading.Barrier(3)

            def ask(i, topic=topic, answers=answers, start=start):
                start.wait()
                answers[i] = _metadata(addresses[i], topic)

            threads = [threading.Thread(target=ask, args=(i,)) for i in range(3)]
            for t in threads:
                t.start()
            for t in threads:
                t.join(60)
            for got in answers:
                assert len(got["brokers"]) == 3
                [row] = got["topics"]
                assert row["error_code"] in (0, LEADER_NOT_AVAILABLE), row
            assert any(got["topics"][0]["error_code"] == 0 for got in answers)
            with cluster.admin() as adm:
                parts = adm.describe_topic(topic).partitions
            assert len(parts) == 2 and all(len(p.replicas) == 3 for p in parts)

        # a librdkafka producer to a topic it names first: created by its Metadata, RF 3
        errors: list = []
        p = ck.Producer({"bootstrap.servers": bootstrap, "acks": "all"})
        for i in range(100):
            p.produce("ck-auto", value=b"%d" % i, on_delivery=lambda e, m: e and errors.append(e))
        assert p.flush(60) == 0 and not errors
        with cluster.admin() as adm:
            parts = adm.describe_topic("ck-auto").partitions
        assert len(parts) == 2 and all(len(x.replicas) == 3 for x in parts)
        until(lambda: all(len(cluster.partition("ck-auto", i).isr) == 3 for i in range(2)),
              timeout_s=30)
    finally:
        cluster.stop()
