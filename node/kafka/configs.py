"""What DescribeConfigs tells Kafka clients about configs beyond their values: each
config's type (DescribeConfigs v3+, KIP-507 ``config_type``) and a broker's own static
configs (a BROKER resource, ``config_source`` STATIC_BROKER_CONFIG, read-only: raftlog
has no dynamic broker configs)."""

from __future__ import annotations

#: Kafka's ConfigType codes (DescribeConfigsResponse ``config_type``).
UNKNOWN, BOOLEAN, STRING, INT, SHORT, LONG, DOUBLE, LIST, CLASS, PASSWORD = range(10)
#: Kafka's ConfigSource codes.
SOURCE_TOPIC, SOURCE_STATIC_BROKER, SOURCE_DEFAULT = 1, 4, 5

#: Types of the topic configs raftlog serves and of the broker configs it reports, as
#: Kafka's ConfigDef declares them.
CONFIG_TYPES = {
    "segment.bytes": INT, "segment.ms": LONG, "index.interval.bytes": INT,
    "retention.ms": LONG, "retention.bytes": LONG, "cleanup.policy": LIST,
    "delete.retention.ms": LONG, "min.compaction.lag.ms": LONG, "flush.messages": LONG,
    "flush.ms": LONG, "max.message.bytes": INT, "min.insync.replicas": INT,
    "message.timestamp.type": STRING, "unclean.leader.election.enable": BOOLEAN,
    "compression.type": STRING, "write.caching": BOOLEAN,
    "node.id": INT, "broker.id": INT, "advertised.listeners": LIST, "listeners": LIST,
    "log.dirs": LIST, "num.partitions": INT, "default.replication.factor": INT,
    "auto.create.topics.enable": BOOLEAN, "broker.rack": STRING,
    "offsets.topic.num.partitions": INT, "offsets.topic.replication.factor": SHORT,
    "group.initial.rebalance.delay.ms": INT, "process.roles": LIST,
}


def config_type(name: str) -> int:
    return CONFIG_TYPES.get(name, UNKNOWN)


def broker_configs(config, advertised: tuple[str, int]) -> dict[str, str | None]:
    """This node's static configs as Kafka names them; ``advertised``: the host and port
    its Kafka listener tells clients."""
    host, port = advertised
    host = f"[{host}]" if ":" in host else host
    listener = f"{config.kafka_protocol.name}://{host}:{port}"
    return {
        "node.id": str(config.node_id), "broker.id": str(config.node_id),
        "advertised.listeners": listener,
        "listeners": f"{config.kafka_protocol.name}://{config.kafka_host}:{config.kafka_port}",
        "log.dirs": config.data_dir, "num.partitions": str(config.num_partitions),
        "default.replication.factor": str(config.default_replication_factor),
        "auto.create.topics.enable": str(config.auto_create_topics_enable).lower(),
        "broker.rack": config.broker_rack,
        "offsets.topic.num.partitions": str(config.offsets_topic_num_partitions),
        "offsets.topic.replication.factor": str(config.offsets_topic_replication_factor),
        "group.initial.rebalance.delay.ms": str(config.group_initial_rebalance_delay_ms),
        "process.roles": ",".join(config.process_roles),
    }
