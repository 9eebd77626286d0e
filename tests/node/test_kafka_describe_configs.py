"""DescribeConfigs on the Kafka listener as Kafka answers it (found by kafka-python's own
suite, tests/clientsuite): a broker resource lists the node's static configs
(STATIC_BROKER_CONFIG, read-only), every config carries its type (v3+), and a broker
resource naming another broker is refused with INVALID_REQUEST."""

from __future__ import annotations

import pytest

from tests.conftest import kafka_node
from tests.node.test_kafka_compat import _call

DESCRIBE_CONFIGS, INVALID_REQUEST = 32, 42

ck = pytest.importorskip("confluent_kafka")
kafka = pytest.importorskip("kafka")
from confluent_kafka.admin import AdminClient, ConfigResource, ConfigSource  # noqa: E402
from kafka import KafkaAdminClient  # noqa: E402
from kafka.admin import ConfigResource as KConfigResource  # noqa: E402
from kafka.admin import ConfigResourceType, NewTopic  # noqa: E402


@pytest.fixture(scope="module")
def knode(tmp_path_factory):
    n = kafka_node(str(tmp_path_factory.mktemp("dc") / "node"))
    yield n
    n.stop()


def test_broker_resource_lists_static_configs(knode):
    admin = AdminClient({"bootstrap.servers": knode.kafka})
    [fut] = admin.describe_configs([ConfigResource("BROKER", "1")]).values()
    entries = fut.result(timeout=20)
    adv = entries["advertised.listeners"]
    assert adv.value == f"PLAINTEXT://{knode.kafka}"
    assert adv.source == ConfigSource.STATIC_BROKER_CONFIG.value and adv.is_read_only
    assert entries["node.id"].value == "1"
    assert entries["offsets.topic.replication.factor"].value == "1"


def test_config_types_and_another_brokers_resource(knode):
    admin = KafkaAdminClient(bootstrap_servers=knode.kafka, request_timeout_ms=20_000)
    try:
        admin.create_topics([NewTopic("dct", 1, 1)])
        got = admin.describe_configs([KConfigResource(ConfigResourceType.TOPIC, "dct")],
                                     config_filter="all")["topic"]["dct"]
        assert got["retention.bytes"]["config_type"] == "LONG"
        assert got["cleanup.policy"]["config_type"] == "LIST"
        assert got["unclean.leader.election.enable"]["config_type"] == "BOOLEAN"
        broker = admin.describe_configs([KConfigResource(ConfigResourceType.BROKER, "1")],
                                        config_filter="all")["broker"]["1"]
        assert broker["advertised.listeners"]["config_type"] == "LIST"
    finally:
        admin.close()
    # (clients route a broker resource to that broker: ask node 1 about broker 7 raw)
    body = {"resources": [{"resource_type": 4, "resource_name": "7",
                           "configuration_keys": None}],
            "include_synonyms": False, "include_documentation": False}
    [row] = _call(knode, DESCRIBE_CONFIGS, 4, body)["results"]
    assert row["error_code"] == INVALID_REQUEST and row["configs"] == []
