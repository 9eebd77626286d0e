"""Admin: topics, configs and the cluster."""

from __future__ import annotations

import time
from dataclasses import dataclass

from raftlog.protocol import Api

from .conn import Cluster
from .errors import BrokerNotAvailableError, api_error

#: Tries of a read-only admin request when the node it went to is gone.
READ_ATTEMPTS = 3
READ_BACKOFF_S = 0.1
READ_ONLY_APIS = frozenset({Api.METADATA, Api.DESCRIBE_CLUSTER, Api.API_VERSIONS})


@dataclass(frozen=True, slots=True)
class PartitionDescription:
    partition: int
    leader: int
    replicas: tuple
    isr: tuple
    leader_epoch: int
    offline_replicas: tuple = ()

    @property
    def under_replicated(self) -> bool:
        return len(self.isr) < len(self.replicas)

    @property
    def offline(self) -> bool:
        return self.leader < 0


@dataclass(frozen=True, slots=True)
class TopicDescription:
    name: str
    config: dict
    partitions: tuple
    topic_id: str = ""


@dataclass(frozen=True, slots=True)
class BrokerDescription:
    id: int
    host: str
    port: int
    rack: str | None = None
    fenced: bool = False


@dataclass(frozen=True, slots=True)
class ClusterDescription:
    cluster_id: str
    controller_id: int
    brokers: tuple


class Admin:
    """Administrative operations; each call is synchronous and raises ApiError subclasses."""

    def __init__(
        self, bootstrap_servers: str = "127.0.0.1:9092", *, request_timeout_ms: int = 30_000
    ):
        self.timeout_s = request_timeout_ms / 1000
        self._cluster = Cluster(bootstrap_servers, self.timeout_s)

    def _call(self, api: Api, fields: dict):
        """One request to any node. Read-only requests are retried on a fresh
        connection (up to READ_ATTEMPTS) when a node went away; writes are not,
        so a lost answer never turns into a confusing second attempt."""
        attempts = READ_ATTEMPTS if api in READ_ONLY_APIS else 1
        for attempt in range(attempts):
            try:
                conn = self._cluster.any_connection()
                return conn.request(api, fields, timeout_s=self.timeout_s).header
            except BrokerNotAvailableError:
                if attempt + 1 >= attempts:
                    raise
                time.sleep(READ_BACKOFF_S)
        raise AssertionError("unreachable")

    def create_topic(
        self,
        name: str,
        partitions: int = 1,
        replication_factor: int = 1,
        config: dict | None = None,
    ) -> None:
        """Create a topic. Raises TopicAlreadyExistsError, or ApiError (INVALID_*)."""
        h = self._call(
            Api.CREATE_TOPICS,
            {
                "topics": [
                    {
                        "name": name,
                        "partitions": partitions,
                        "replication_factor": replication_factor,
                        "config": {k: str(v) for k, v in (config or {}).items()},
                    }
                ],
                "timeout_ms": int(self.timeout_s * 1000),
            },
        )
        _, code, message = h["results"][0]
        if code:
            raise api_error(code, message)

    def delete_topic(self, name: str) -> None:
        h = self._call(
            Api.DELETE_TOPICS, {"names": [name], "timeout_ms": int(self.timeout_s * 1000)}
        )
        _, code, message = h["results"][0]
        if code:
            raise api_error(code, message)

    def list_topics(self, include_internal: bool = False) -> list[str]:
        """Topic names; internal ones (``__consumer_offsets``) only when asked."""
        h = self._call(Api.METADATA, {"topics": None})
        return sorted(t["name"] for t in h["topics"] if not t["error"]
                      and (include_internal or not t["name"].startswith("__")))

    def describe_topic(self, name: str) -> TopicDescription:
        h = self._call(Api.METADATA, {"topics": [name], "include_configs": True})
        t = h["topics"][0]
        if t["error"]:
            raise api_error(t["error"], t.get("message", ""))
        parts = tuple(
            PartitionDescription(p[0], p[2], tuple(p[4]), tuple(p[5]), p[3], tuple(p[6]))
            for p in sorted(t["partitions"])
        )
        return TopicDescription(
            t["name"], dict(t.get("config") or {}), parts, t.get("topic_id", "")
        )

    def describe_cluster(self) -> ClusterDescription:
        h = self._call(Api.DESCRIBE_CLUSTER, {})
        brokers = tuple(BrokerDescription(b[0], b[1], b[2], b[3], bool(b[4])) for b in h["brokers"])
        return ClusterDescription(h["cluster_id"], h["controller_id"], brokers)

    def alter_config(self, topic: str, config: dict) -> None:
        """Set (value) or remove (None) topic config keys."""
        self._call(
            Api.ALTER_CONFIGS,
            {
                "topic": topic,
                "config": {k: (None if v is None else str(v)) for k, v in config.items()},
            },
        )

    def elect_leaders(self, partitions=None) -> list[tuple]:
        """Preferred-leader election: give each partition back to its first replica
        where that replica is alive and in the ISR. ``partitions``: iterable of
        (topic, partition) or TopicPartition; None means all. Returns
        [(topic, partition, error_code, message)]; code 0 includes "nothing to do"."""
        parts = None if partitions is None else [[tp[0], tp[1]] for tp in partitions]
        h = self._call(Api.ELECT_LEADERS, {"parts": parts})
        return [tuple(r) for r in h["results"]]

    def create_partitions(self, topic: str, count: int) -> None:
        """Grow ``topic`` to ``count`` partitions."""
        self._call(Api.CREATE_PARTITIONS, {"topic": topic, "count": count})

    def close(self) -> None:
        self._cluster.close()

    def __enter__(self) -> Admin:
        return self

    def __exit__(self, *exc) -> None:
        self.close()
