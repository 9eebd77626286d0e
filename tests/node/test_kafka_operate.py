"""Operating a node with Kafka's admin calls on the Kafka listener (kafka-python's own
suite used them, tests/clientsuite): DescribeLogDirs, AlterReplicaLogDirs,
ElectLeaders, List/AlterPartitionReassignments, ListConfigResources, each with Kafka's
error codes."""

from __future__ import annotations

import pytest

from tests.conftest import kafka_node

kafka = pytest.importorskip("kafka")
from kafka import KafkaAdminClient  # noqa: E402
from kafka.admin import NewTopic  # noqa: E402
from kafka.structs import TopicPartition, TopicPartitionReplica  # noqa: E402

ELECTION_NOT_NEEDED, UNKNOWN_TOPIC, LOG_DIR_NOT_FOUND = 84, 3, 57


@pytest.fixture(scope="module")
def admin(tmp_path_factory):
    n = kafka_node(str(tmp_path_factory.mktemp("op") / "node-1"))
    a = KafkaAdminClient(bootstrap_servers=n.kafka, request_timeout_ms=20_000)
    a.create_topics([NewTopic("op", 2, 1)])
    a.data_dir = n.data_dir
    yield a
    a.close()
    n.stop()
    assert "kafka_handler_failed" not in n.log_text()


def test_describe_and_alter_log_dirs(admin):
    [row] = admin.describe_log_dirs()
    assert row["broker"] == 1
    [d] = row["log_dirs"]
    assert d["error_code"] == 0 and d["log_dir"] == admin.data_dir
    sizes = {(t["name"], p["partition_index"]) for t in d["topics"] for p in t["partitions"]}
    assert {("op", 0), ("op", 1)} <= sizes
    same = admin.alter_replica_log_dirs({TopicPartitionReplica("op", 0, 1): d["log_dir"]})
    assert same[TopicPartitionReplica("op", 0, 1)] is kafka.errors.NoError
    other = admin.alter_replica_log_dirs({TopicPartitionReplica("op", 1, 1): "/elsewhere"})
    assert other[TopicPartitionReplica("op", 1, 1)].errno == LOG_DIR_NOT_FOUND


def test_elect_leaders_not_needed_and_unknown(admin):
    got = admin.elect_leaders(0, {"op": [0, 1], "nope": [0]}, raise_errors=False)
    codes = {(t, p[0]): p[1] for t, parts in got.replica_election_results for p in parts}
    assert codes == {("op", 0): ELECTION_NOT_NEEDED, ("op", 1): ELECTION_NOT_NEEDED,
                     ("nope", 0): UNKNOWN_TOPIC}


def test_partition_reassignments(admin):
    assert admin.list_partition_reassignments() == {}
    # (one node: nothing to move a replica to, refused per partition)
    got = admin.alter_partition_reassignments({TopicPartition("op", 0): [1]})
    assert got[TopicPartition("op", 0)] is kafka.errors.InvalidRequestError


def test_list_config_resources(admin):
    got = admin.list_config_resources()
    assert got["broker"] == ["1"] and "op" in got["topic"]


def test_describe_topic_partitions_pages(admin):
    whole = admin.describe_topic_partitions(["op"])
    [t] = whole["topics"]
    assert [p["partition_index"] for p in t["partitions"]] == [0, 1]
    assert t["error_code"] == 0 and whole["next_cursor"] is None
    first = admin.describe_topic_partitions(["op"], response_partition_limit=1)
    assert [p["partition_index"] for p in first["topics"][0]["partitions"]] == [0]
    assert first["next_cursor"] == {"topic_name": "op", "partition_index": 1}
    rest = admin.describe_topic_partitions(["op"], response_partition_limit=1,
                                           cursor=first["next_cursor"])
    assert [p["partition_index"] for p in rest["topics"][0]["partitions"]] == [1]
    assert rest["next_cursor"] is None
    [unknown] = admin.describe_topic_partitions(["nope"])["topics"]
    assert unknown["error_code"] == UNKNOWN_TOPIC
