"""Value types shared by the SDK's rooms (consumer, group member, admin, CLI, Spark)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True, order=True)
class TopicPartition:
    topic: str
    partition: int


@dataclass(frozen=True, slots=True)
class OffsetAndTimestamp:
    offset: int
    timestamp: int


@dataclass(frozen=True, slots=True)
class ConsumerGroupMetadata:
    """A consumer's view of its group (Kafka's ``groupMetadata()``), plus the node that
    coordinates it as far as this consumer knows (None before it found one)."""

    group_id: str
    generation_id: int
    member_id: str
    coordinator_id: int | None = None
