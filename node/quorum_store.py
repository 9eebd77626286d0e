"""Topics and brokers from the replicated metadata quorum (cluster mode).

Same interface as :class:`~raftlog.node.topics.LocalTopicStore`. Mutations propose
records through the quorum and block until committed (the server runs them in a
worker thread); the node's partitions follow the committed state through
``Broker.reconcile``, scheduled on the trio thread by the quorum's commit callback.
"""

from __future__ import annotations

import os
import time
import uuid

from raftlog.errors import ApiError, ErrorCode
from raftlog.metadata import records as R
from raftlog.metadata.controller import PlacementError, place_replicas
from raftlog.metadata.errors import NotControllerError, QuorumTimeoutError
from raftlog.metadata.quorum import MetadataQuorum

from .config import NodeConfig
from .topics import PartitionInfo, TopicInfo

#: Attempts to register this broker at start (one per REGISTER_BACKOFF_S).
REGISTER_ATTEMPTS = 120
REGISTER_BACKOFF_S = 0.5
PROPOSE_TIMEOUT_S = 5.0


class QuorumTopicStore:
    def __init__(self, config: NodeConfig, on_commit):
        self.config = config
        self.node_id = config.node_id
        self.incarnation_id = uuid.uuid4().hex
        self.quorum = MetadataQuorum(
            config.node_id,
            config.controller_quorum_voters,
            os.path.join(config.data_dir, "__raft"),
            password=config.raft_password,
            on_commit=on_commit,
        )
        self._cache_state = None
        self._cache_topics: dict[str, TopicInfo] = {}

    # ------------------------------------------------------------------ reads

    @property
    def topics(self) -> dict[str, TopicInfo]:
        state = self.quorum.state
        if state is not self._cache_state:
            self._cache_topics = {
                name: TopicInfo(
                    name, t.topic_id, dict(t.configs),
                    tuple(PartitionInfo(p.partition, p.leader, p.leader_epoch, p.replicas, p.isr,
                                        p.partition_epoch) for p in t.partitions),
                )
                for name, t in state.topics.items()
            }
            self._cache_state = state
        return self._cache_topics

    def brokers(self) -> list:
        rows = []
        for b in sorted(self.quorum.state.brokers.values(), key=lambda b: b.broker_id):
            host, port = b.listeners[0] if b.listeners else ("", 0)
            rows.append([b.broker_id, host, port, b.rack, b.fenced])
        return rows

    @property
    def controller_id(self) -> int:
        leader = self.quorum.leader_id
        return -1 if leader is None else leader

    # ------------------------------------------------------------------ writes (blocking)

    def _propose(self, record) -> R:
        try:
            result = self.quorum.propose(record, PROPOSE_TIMEOUT_S)
        except NotControllerError as e:
            raise ApiError(ErrorCode.NOT_CONTROLLER, str(e)) from None
        except QuorumTimeoutError as e:
            raise ApiError(ErrorCode.REQUEST_TIMED_OUT, str(e)) from None
        return result

    def register(self) -> None:
        """Register this broker (new incarnation) and unfence it; retries while no
        quorum is available. Durable when it returns."""
        host, port = self.config.advertised
        records = [R.RegisterBroker(self.node_id, self.incarnation_id, ((host, port),)),
                   R.UnfenceBroker(self.node_id, self.incarnation_id)]
        for record in records:
            for _ in range(REGISTER_ATTEMPTS):
                try:
                    if self._propose(record).ok:
                        break
                except ApiError:
                    pass
                time.sleep(REGISTER_BACKOFF_S)
            else:
                raise ApiError(ErrorCode.REQUEST_TIMED_OUT, "could not register with the metadata quorum")

    def create(self, name: str, partitions: int, config: dict, replication_factor: int = 1) -> TopicInfo:
        if name in self.topics:
            raise ApiError(ErrorCode.TOPIC_ALREADY_EXISTS, f"topic {name!r} already exists")
        try:
            assignments = place_replicas(self.quorum.state, partitions, replication_factor)
        except PlacementError as e:
            raise ApiError(ErrorCode.INVALID_REPLICATION_FACTOR, str(e)) from None
        record = R.CreateTopic(name, uuid.uuid4().hex, assignments, tuple(sorted(config.items())))
        result = self._propose(record)
        if not result.ok:
            code = ErrorCode.TOPIC_ALREADY_EXISTS if "exists" in result.error else ErrorCode.INVALID_REQUEST
            raise ApiError(code, result.error)
        return self.topics[name]

    def delete(self, name: str) -> TopicInfo:
        info = self.topics.get(name)
        if info is None:
            raise ApiError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"topic {name!r} does not exist")
        result = self._propose(R.DeleteTopic(name))
        if not result.ok:
            raise ApiError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, result.error)
        return info

    def set_config(self, name: str, config: dict) -> TopicInfo:
        for key, value in sorted(config.items()):
            result = self._propose(R.ConfigChange(name, key, value))
            if not result.ok:
                raise ApiError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, result.error)
        return self.topics[name]

    def add_partitions(self, name: str, count: int) -> TopicInfo:
        raise ApiError(ErrorCode.POLICY_VIOLATION,
                       "adding partitions to a topic is not supported in cluster mode yet")

    def close(self) -> None:
        self.quorum.close()
