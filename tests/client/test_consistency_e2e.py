"""Issue #32 items 4 and 5 against a real node process: what a topic's deletion does to
the groups' committed offsets, what ``groups describe`` shows of a member, the
Consumer's ``max_poll_records``, and the nearest topic config named in errors."""

from __future__ import annotations

import subprocess
import sys
import time

import pytest

from raftlog.client import (
    Admin,
    ApiError,
    BrokerNotAvailableError,
    Consumer,
    ErrorCode,
    Producer,
    TopicPartition,
    UnknownTopicOrPartitionError,
)

from .test_groups_e2e import GROUP_NODE, _until

TP = TopicPartition


def _produce(node, topic: str, n: int, partition: int = 0) -> None:
    with Producer(node.bootstrap, acks="all") as p:
        for i in range(n):
            p.send(topic, b"v%d" % i, partition=partition)
        p.flush()


def _drain(c: Consumer, n: int) -> list:
    got, deadline = [], time.monotonic() + 30
    while len(got) < n and time.monotonic() < deadline:
        got += c.poll(timeout_ms=100)
    assert len(got) == n
    return got


def test_deleting_a_topic_deletes_the_groups_committed_offsets(node_factory):
    node = node_factory(**GROUP_NODE)
    admin = Admin(node.bootstrap)
    admin.create_topic("t", partitions=2)
    admin.create_topic("u")
    _produce(node, "t", 5)
    _produce(node, "u", 3)
    c = Consumer(node.bootstrap, group_id="g", auto_offset_reset="earliest",
                 enable_auto_commit=False, session_timeout_ms=3000)
    c.subscribe(["t", "u"])
    _drain(c, 8)
    c.commit()
    c.close()
    admin.alter_group_offsets("only-t", {TP("t", 0): 2, TP("t", 1): 0})
    _until(lambda: admin.list_group_offsets("g") == {TP("t", 0): 5, TP("t", 1): 0,
                                                      TP("u", 0): 3}, what="commits")

    admin.delete_topic("t")
    _until(lambda: admin.list_group_offsets("g") == {TP("u", 0): 3}, what="t's offsets gone")
    _until(lambda: not admin.describe_group("only-t").exists, what="only-t deleted")
    assert admin.list_group_offsets("only-t") == {}
    assert [x.group_id for x in admin.list_groups()] == ["g"]
    # a consumer that still commits for the deleted topic does not bring its offsets back
    with pytest.raises(UnknownTopicOrPartitionError, match="'t' was deleted"):
        admin.alter_group_offsets("g", {TP("t", 0): 1, TP("u", 0): 2})
    assert admin.list_group_offsets("g") == {TP("u", 0): 2}  # (the other topic's commit holds)

    # a new topic of the same name starts without the old offsets, after a restart too
    admin.create_topic("t", partitions=2)
    admin.close()
    node.restart()
    admin = Admin(node.bootstrap)
    _until(lambda: _offsets_or_none(admin, "g") == {TP("u", 0): 2}, what="reloaded offsets")
    assert admin.list_group_offsets("only-t") == {}
    admin.close()


def _offsets_or_none(admin: Admin, group: str):
    try:
        return admin.list_group_offsets(group)
    except BrokerNotAvailableError:  # the node is registering after the restart
        return None
    except ApiError as e:  # the coordinator is loading after the restart
        if e.retriable:
            return None
        raise


def test_groups_describe_shows_the_sdk_consumers_client_id_and_host(node_factory):
    node = node_factory(**GROUP_NODE)
    admin = Admin(node.bootstrap)
    admin.create_topic("q")
    _produce(node, "q", 2)
    c = Consumer(node.bootstrap, group_id="described", client_id="billing-7",
                 auto_offset_reset="earliest", session_timeout_ms=3000)
    c.subscribe(["q"])
    _drain(c, 2)
    try:
        d = admin.describe_group("described")
        assert len(d.members) == 1
        m = d.members[0]
        assert (m.client_id, m.client_host) == ("billing-7", "127.0.0.1")
        assert m.member_id.startswith("billing-7-")
        out = subprocess.run([sys.executable, "-m", "raftlog.client.cli", "groups", "describe",
                              "described", "--bootstrap-server", node.bootstrap],
                             capture_output=True, text=True, timeout=60)
        assert out.returncode == 0, out.stderr
        assert "billing-7" in out.stdout and "127.0.0.1" in out.stdout
    finally:
        c.close()
        admin.close()


def test_max_poll_records_bounds_each_poll(node):
    Admin(node.bootstrap).create_topic("m")
    _produce(node, "m", 50)
    c = Consumer(node.bootstrap, auto_offset_reset="earliest", max_poll_records=7)
    c.assign([TP("m", 0)])
    got, sizes, deadline = [], [], time.monotonic() + 30
    while len(got) < 50 and time.monotonic() < deadline:
        recs = c.poll(timeout_ms=200)
        sizes.append(len(recs))
        got += recs
    assert [r.offset for r in got] == list(range(50))
    assert max(sizes) == 7  # never more; the prefetched rest waits for the next poll
    c.seek(TP("m", 0), 0)
    assert len(c.poll(timeout_ms=5000, max_records=3)) == 3  # one call's own bound
    c.close()


def test_an_unknown_topic_config_names_the_nearest_key_in_the_sdk_and_the_cli(node):
    admin = Admin(node.bootstrap)
    with pytest.raises(ApiError) as e:
        admin.create_topic("x", config={"retention.hours": "1"})
    assert e.value.code is ErrorCode.INVALID_CONFIG
    assert "unknown topic config 'retention.hours' (did you mean 'retention.ms'?)" in str(e.value)
    admin.create_topic("y")
    with pytest.raises(ApiError, match=r"did you mean 'cleanup.policy'\?"):
        admin.alter_config("y", {"cleanup.polcy": "compact"})
    admin.close()
    out = subprocess.run([sys.executable, "-m", "raftlog.client.cli", "topics", "create", "z",
                          "--config", "retention.hours=1", "--bootstrap-server", node.bootstrap],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 1
    assert "did you mean 'retention.ms'?" in out.stderr


def test_a_kafka_client_gets_the_nearest_topic_config_in_invalid_config(node_factory):
    """The suggestion is made by the node, so a stock Kafka client sees it too."""
    kafka = pytest.importorskip("kafka")
    from kafka.admin import NewTopic

    from ..conftest import free_port

    kport = free_port()
    node_factory(**{"kafka.listener": f"127.0.0.1:{kport}"})
    admin = kafka.KafkaAdminClient(bootstrap_servers=f"127.0.0.1:{kport}",
                                   request_timeout_ms=10_000)
    try:
        res = admin.create_topics([NewTopic("k", 1, 1, topic_configs={"retention.hours": "1"})],
                                  raise_errors=False)
        (topic,) = res["topics"]
        assert topic["error_code"] == 40  # INVALID_CONFIG
        assert "did you mean 'retention.ms'?" in topic["error_message"]
    finally:
        admin.close()
