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
