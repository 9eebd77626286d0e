"""The Kafka listener's pure parts: config keys and where other brokers' Kafka
listeners are."""

from __future__ import annotations

import pytest

from raftlog.errors import ConfigError
from raftlog.node.config import NodeConfig
from raftlog.node.kafka_server import KafkaServer


def _server(**props) -> KafkaServer:
    return KafkaServer(NodeConfig.from_properties(props), broker=None, events=None)


def test_listener_is_off_by_default_and_parsed_when_set():
    assert NodeConfig.from_properties({}).kafka_port is None
    c = NodeConfig.from_properties({"kafka.listener": "0.0.0.0:19092",
                                    "kafka.advertised.listener": "kafka1.example:19092",
                                    "kafka.brokers": "2@10.0.0.2:19092,3@10.0.0.3:19093",
                                    "allow.plaintext.listeners": "true"})
    assert (c.kafka_host, c.kafka_port) == ("0.0.0.0", 19092)
    assert c.kafka_advertised == ("kafka1.example", 19092)
    assert c.kafka_brokers == {2: ("10.0.0.2", 19092), 3: ("10.0.0.3", 19093)}
    with pytest.raises(ConfigError, match="kafka.listener"):
        NodeConfig.from_properties({"kafka.listener": "nope"})
    # no TLS or SASL on the Kafka listener yet: off loopback only when allowed
    with pytest.raises(ConfigError, match="allow.plaintext.listeners"):
        NodeConfig.from_properties({"kafka.listener": "0.0.0.0:19092"})


def test_kafka_addresses_of_self_listed_and_derived_brokers():
    s = _server(**{"node.id": "1", "listeners": "127.0.0.1:9092",
                   "kafka.listener": "127.0.0.1:19092", "kafka.brokers": "3@10.0.0.3:7777"})
    assert s.kafka_address(1, "127.0.0.1", 9092) == ("127.0.0.1", 19092)
    assert s.kafka_address(3, "10.0.0.3", 9094) == ("10.0.0.3", 7777)  # listed
    assert s.kafka_address(2, "127.0.0.1", 9093) == ("127.0.0.1", 19093)  # same offset
    s = _server(**{"listeners": "0.0.0.0:9092", "kafka.listener": "0.0.0.0:19092",
                   "kafka.advertised.listener": "broker1:29092",
                   "allow.plaintext.listeners": "true"})
    assert s.kafka_address(1, "broker1", 9092) == ("broker1", 29092)
