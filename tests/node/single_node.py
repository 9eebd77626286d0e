"""A Broker of a single node over its real one-voter metadata quorum and its
ReplicaManager, for in-process tests of broker logic (what node.py does before
serving, without the server)."""

from __future__ import annotations

import io

from raftlog.node.broker import Broker
from raftlog.node.config import NodeConfig
from raftlog.node.logfmt import EventLog
from raftlog.node.metrics import NodeMetrics
from raftlog.node.quorum_store import QuorumTopicStore
from raftlog.node.replica_manager import ReplicaManager


def open_broker(tmp_path, props: dict | None = None) -> Broker:
    """A registered single node's Broker with its logs open (``broker.replicas``);
    close with close_broker."""
    config = NodeConfig.from_properties({"data.dir": str(tmp_path / "data"), **(props or {})})
    store = QuorumTopicStore(config, None)
    try:
        store.register()
        events = EventLog(config.node_id, stream=io.StringIO())
        replicas = ReplicaManager(config, events, store, NodeMetrics())
        broker = Broker(config, events, store, replicas)
        replicas.registered = True
        replicas.open()
    except BaseException:
        store.close()
        raise
    return broker


def close_broker(broker: Broker) -> None:
    try:
        broker.replicas.close()
    finally:
        broker.store.close()
