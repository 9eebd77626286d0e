"""ReplicaManager.reconcile: partitions follow the topic metadata, touching only what changed."""

from __future__ import annotations

from raftlog.node.broker import Broker
from raftlog.records import encode_batch

from .single_node import close_broker, open_broker


def test_unchanged_topics_are_left_alone_and_a_recreated_topic_starts_empty(tmp_path):
    broker = open_broker(tmp_path)
    replicas = broker.replicas
    try:
        broker.create_topic("keep", 2, 1, {})
        broker.create_topic("again", 1, 1, {})
        replicas.reconcile()
        kept = {k: v for k, v in replicas.partitions.items() if k[0] == "keep"}
        replicas.partitions[("again", 0)].log.append(encode_batch([b"old"] * 3))
        # deleted and re-created between two reconciles (one coalesced metadata change)
        broker.store.delete("again")
        broker.store.create("again", 1, {})
        replicas.reconcile()
        assert replicas.partitions[("again", 0)].log.log_end_offset == 0
        assert {k: v for k, v in replicas.partitions.items() if k[0] == "keep"} == kept
        assert all(replicas.partitions[k] is v for k, v in kept.items())
        broker.store.delete("keep")
        replicas.reconcile()
        assert sorted(replicas.partitions) == [("again", 0)]
    finally:
        close_broker(broker)


def test_every_served_api_has_one_route_to_a_real_handler():
    from raftlog.node.routes import ROUTES, SERVED_APIS, Mode
    from raftlog.node.server import Server
    from raftlog.protocol import REQUEST_SCHEMAS

    assert set(SERVED_APIS) == set(ROUTES) <= set(REQUEST_SCHEMAS)
    from raftlog.node.security import Security

    for api, route in ROUTES.items():
        if route.handler == "sasl":  # the server's own SASL gate (node/authn.py)
            continue
        owner = Server if route.mode in (Mode.PARKS, Mode.AWAITS) else Broker
        name = route.handler
        if name.startswith("security."):
            owner, name = Security, name[len("security."):]
        assert callable(getattr(owner, name, None)), (api, route)
        assert callable(route.acl) or isinstance(route.acl, str), (api, route)
