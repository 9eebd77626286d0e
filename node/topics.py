"""Topic and partition metadata as the node sees it, and the single-node store.

:class:`TopicInfo` / :class:`PartitionInfo` are what handlers read. A node without a
metadata quorum (``raftlog up`` with one node) keeps them in :class:`LocalTopicStore`,
a CBOR file written atomically; a cluster node derives them from the replicated
metadata state instead.
"""

from __future__ import annotations

import os
import re
import uuid
from dataclasses import dataclass, field, replace

import cbor2

from raftlog.checkpoint import atomic_write, makedirs_durable
from raftlog.config import LogConfig
from raftlog.errors import ApiError, ConfigError, ErrorCode

TOPIC_NAME_RE = re.compile(r"^[a-zA-Z0-9._-]{1,249}$")
MAX_PARTITIONS = 10_000
_STORE_VERSION = 1


@dataclass(frozen=True, slots=True)
class PartitionInfo:
    partition: int
    leader: int
    leader_epoch: int
    replicas: tuple[int, ...]
    isr: tuple[int, ...]
    partition_epoch: int = 0
    #: replicas on fenced (or unregistered) brokers
    offline_replicas: tuple[int, ...] = ()
    #: a reassignment in progress: the replicas being added, and the leader's
    #: throttle for them (bytes/s, 0 = none)
    adding: tuple[int, ...] = ()
    throttle: int = 0


@dataclass(frozen=True, slots=True)
class TopicInfo:
    name: str
    topic_id: str
    config: dict = field(default_factory=dict)
    partitions: tuple[PartitionInfo, ...] = ()


def validate_topic_name(name: str) -> None:
    """Raise ApiError(INVALID_TOPIC) unless ``name`` is a legal topic name (as Kafka)."""
    if not isinstance(name, str) or not TOPIC_NAME_RE.match(name) or name in (".", ".."):
        raise ApiError(
            ErrorCode.INVALID_TOPIC,
            f"topic name {name!r} is invalid: use 1-249 characters of [a-zA-Z0-9._-]",
        )


def validate_topic_config(config: dict, defaults: dict | None = None) -> LogConfig:
    """The LogConfig of a topic, or ApiError(INVALID_CONFIG) naming the key."""
    merged = dict(defaults or {})
    merged.update({k: v for k, v in config.items() if v is not None})
    try:
        return LogConfig.from_dict(merged)
    except ConfigError as e:
        raise ApiError(ErrorCode.INVALID_CONFIG, str(e)) from None


class LocalTopicStore:
    """Topics of a single node, persisted at ``<data_dir>/__meta/topics.cbor``.

    Every mutation is durable when it returns (atomic write with fsync).
    """

    def __init__(self, data_dir: str, node_id: int):
        self.node_id = node_id
        self._dir = os.path.join(data_dir, "__meta")
        self._path = os.path.join(self._dir, "topics.cbor")
        makedirs_durable(self._dir)
        self.topics: dict[str, TopicInfo] = self._load()

    def _load(self) -> dict[str, TopicInfo]:
        try:
            with open(self._path, "rb") as f:
                raw = cbor2.loads(f.read())
        except FileNotFoundError:
            return {}
        except Exception as e:
            raise ConfigError(f"topic metadata {self._path} is unreadable: {e}") from None
        if not isinstance(raw, dict) or raw.get("v") != _STORE_VERSION:
            raise ConfigError(f"topic metadata {self._path} has an unknown format")
        out = {}
        for t in raw["topics"]:
            parts = tuple(
                PartitionInfo(p, self.node_id, 0, (self.node_id,), (self.node_id,))
                for p in range(t["partitions"])
            )
            out[t["name"]] = TopicInfo(t["name"], t["id"], dict(t["config"]), parts)
        return out

    def _save(self) -> None:
        raw = {
            "v": _STORE_VERSION,
            "topics": [
                {"name": t.name, "id": t.topic_id, "partitions": len(t.partitions), "config": t.config}
                for t in self.topics.values()
            ],
        }
        atomic_write(self._path, cbor2.dumps(raw))

    def create(self, name: str, partitions: int, config: dict, replication_factor: int = 1) -> TopicInfo:
        if name in self.topics:
            raise ApiError(ErrorCode.TOPIC_ALREADY_EXISTS, f"topic {name!r} already exists")
        parts = tuple(
            PartitionInfo(p, self.node_id, 0, (self.node_id,), (self.node_id,))
            for p in range(partitions)
        )
        info = TopicInfo(name, uuid.uuid4().hex, dict(config), parts)
        self.topics[name] = info
        self._save()
        return info

    def delete(self, name: str) -> TopicInfo:
        info = self.topics.pop(name, None)
        if info is None:
            raise ApiError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"topic {name!r} does not exist")
        self._save()
        return info

    def set_config(self, name: str, config: dict) -> TopicInfo:
        info = self.topics[name]
        merged = {**info.config, **config}
        merged = {k: v for k, v in merged.items() if v is not None}
        self.topics[name] = info = replace(info, config=merged)
        self._save()
        return info

    def allocate_producer_ids(self, count: int) -> int:
        """Reserve ``count`` producer ids; durable (fsync) before any is handed out,
        so ids are never reused after a restart. Returns the first."""
        path = os.path.join(self._dir, "producer_ids.cbor")
        try:
            with open(path, "rb") as f:
                first = int(cbor2.loads(f.read())["next"])
        except FileNotFoundError:
            first = 0
        except Exception as e:
            raise ConfigError(f"producer id counter {path} is unreadable: {e}") from None
        atomic_write(path, cbor2.dumps({"next": first + count}))
        return first

    def add_partitions(self, name: str, count: int) -> TopicInfo:
        info = self.topics[name]
        parts = info.partitions + tuple(
            PartitionInfo(p, self.node_id, 0, (self.node_id,), (self.node_id,))
            for p in range(len(info.partitions), count)
        )
        self.topics[name] = info = replace(info, partitions=parts)
        self._save()
        return info
