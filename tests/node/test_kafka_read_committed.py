"""Kafka clients' read_committed (Fetch isolation_level 1) over transactions the SDK wrote
(issue #33): confluent-kafka's consumer -- read_committed by default -- never returns an
aborted record, and stops at an open transaction (the last stable offset); the markers
reach it as Kafka's control batches, which it never returns either."""

from __future__ import annotations

import time

import pytest

from raftlog.client import Admin, Producer

from ..conftest import kafka_node

confluent_kafka = pytest.importorskip("confluent_kafka")


@pytest.fixture(scope="module")
def knode(tmp_path_factory):
    n = kafka_node(str(tmp_path_factory.mktemp("krc") / "node"))
    yield n
    n.stop()


def _read(knode, topic: str, isolation: str, want: int, timeout_s: float = 30.0) -> list:
    c = confluent_kafka.Consumer({"bootstrap.servers": knode.kafka, "group.id": f"g-{isolation}",
                                 "auto.offset.reset": "earliest",
                                 "isolation.level": isolation, "enable.auto.commit": False})
    try:
        c.assign([confluent_kafka.TopicPartition(topic, 0, 0)])
        got, deadline = [], time.monotonic() + timeout_s
        while len(got) < want and time.monotonic() < deadline:
            m = c.poll(0.2)
            if m is not None and m.error() is None:
                got.append(m.value())
        end = time.monotonic() + 1.0  # and nothing more comes
        while time.monotonic() < end:
            m = c.poll(0.2)
            if m is not None and m.error() is None:
                got.append(m.value())
        return got
    finally:
        c.close()


def test_confluent_read_committed_skips_aborted_and_waits_for_open(knode):
    with Admin(knode.bootstrap) as a:
        a.create_topic("krc", partitions=1, replication_factor=1)
    p = Producer(knode.bootstrap, transactional_id="krc")
    try:
        p.init_transactions()
        p.begin_transaction()
        p.send("krc", b"committed", partition=0)
        p.commit_transaction()
        p.begin_transaction()
        p.send("krc", b"aborted", partition=0)
        p.abort_transaction()
        p.begin_transaction()
        p.send("krc", b"open", partition=0)
        p.flush()
        assert _read(knode, "krc", "read_committed", 1) == [b"committed"]
        assert _read(knode, "krc", "read_uncommitted", 3) == [b"committed", b"aborted", b"open"]
        p.commit_transaction()
        assert _read(knode, "krc", "read_committed", 2) == [b"committed", b"open"]
    finally:
        p.close()
