"""The Kafka listener's pure parts: config keys and where other brokers' Kafka
listeners are."""

from __future__ import annotations

import pytest

from raftlog.errors import ConfigError
from raftlog.listeners import SecurityProtocol
from raftlog.node.config import NodeConfig
from raftlog.node.kafka.server import KafkaServer


def _server(**props) -> KafkaServer:
    return KafkaServer(NodeConfig.from_properties(props), broker=None, replicas=None, events=None)


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
    # an unencrypted Kafka listener: off loopback only when allowed
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


def test_kafka_listener_security_protocol():
    assert NodeConfig.from_properties(
        {"kafka.listener": "127.0.0.1:19092"}).kafka_protocol is SecurityProtocol.PLAINTEXT
    for proto in SecurityProtocol:
        c = NodeConfig.from_properties({"kafka.listener": f"{proto.value.lower()}://127.0.0.1:1",
                                        "ssl.keystore.location": "/etc/raftlog/node.pem"})
        assert (c.kafka_protocol, c.kafka_host, c.kafka_port) == (proto, "127.0.0.1", 1)
    c = NodeConfig.from_properties({"kafka.listener": "SASL_SSL://0.0.0.0:19093",
                                    "ssl.keystore.location": "/etc/raftlog/node.pem"})
    assert c.kafka_protocol is SecurityProtocol.SASL_SSL and c.security_enabled
    with pytest.raises(ConfigError, match=r"kafka.listener: 'TLS' is not one of PLAINTEXT, "):
        NodeConfig.from_properties({"kafka.listener": "TLS://127.0.0.1:19092"})
    with pytest.raises(ConfigError, match="kafka.listener.*not host:port"):
        NodeConfig.from_properties({"kafka.listener": "SSL://nope"})
    # TLS needs the node's certificate
    with pytest.raises(ConfigError, match="ssl.keystore.location"):
        NodeConfig.from_properties({"kafka.listener": "SSL://127.0.0.1:19092"})
    # unencrypted off loopback: PLAINTEXT and SASL_PLAINTEXT need the allowance
    for proto in ("PLAINTEXT", "SASL_PLAINTEXT"):
        with pytest.raises(ConfigError, match="unencrypted.*allow.plaintext.listeners"):
            NodeConfig.from_properties({"kafka.listener": f"{proto}://0.0.0.0:19092"})
    assert NodeConfig.from_properties({
        "kafka.listener": "SASL_PLAINTEXT://0.0.0.0:19092",
        "allow.plaintext.listeners": "true"}).kafka_port == 19092
    # PLAIN would send passwords in the clear there
    with pytest.raises(ConfigError, match="PLAIN would send passwords"):
        NodeConfig.from_properties({"kafka.listener": "SASL_PLAINTEXT://0.0.0.0:19092",
                                    "allow.plaintext.listeners": "true",
                                    "sasl.enabled.mechanisms": "SCRAM-SHA-256,PLAIN"})
