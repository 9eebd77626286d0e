"""Unknown SCRAM users look alike on every node (issue 35 item 7): the fake salt an
unknown user gets is derived from the cluster secret in the replicated metadata, so
two nodes of one cluster -- and one node before and after a restart -- answer the
same salt and iterations, and comparing answers does not tell which users exist."""

from __future__ import annotations

import base64

import pytest

from raftlog import scram
from raftlog.client import Admin
from raftlog.client.conn import BrokerConnection
from raftlog.errors import ApiError, ErrorCode
from raftlog.protocol import Api

from ..conftest import NodeProcess, free_ports
from .cluster import until

pytestmark = pytest.mark.slow

BROKER = ("broker", "broker-secret-0123")
CLIENT = {"security_protocol": "SASL_PLAINTEXT", "sasl_mechanism": "SCRAM-SHA-256",
          "sasl_plain_username": BROKER[0], "sasl_plain_password": BROKER[1]}


def server_first(port: int, user: str, mechanism: str = "SCRAM-SHA-256") -> dict:
    """The salt and iterations node ``port`` answers a client-first message of ``user``
    with (a real SCRAM exchange over the native protocol, stopped after one step)."""
    def once():
        c = BrokerConnection("127.0.0.1", port, 10)
        try:
            c.request(Api.SASL_HANDSHAKE, {"mechanism": mechanism})
            client = scram.ScramClient(mechanism, user, "any-password")
            auth = c.request(Api.SASL_AUTHENTICATE, {"auth": client.first()}).header["auth"]
        except ApiError as e:  # a node still starting (retriable)
            assert e.code is ErrorCode.BROKER_NOT_AVAILABLE, e
            return None
        finally:
            c.close()
        attrs = dict(x.split("=", 1) for x in auth.decode().split(","))
        return {"salt": base64.b64decode(attrs["s"]), "iterations": int(attrs["i"])}

    return until(once, timeout_s=30)


def test_unknown_users_get_the_same_fake_salt_on_every_node_and_across_restarts(tmp_path):
    ports = free_ports(4)
    voters = ",".join(f"{i}@127.0.0.1:{ports[1 + i]}" for i in (1, 2))
    nodes = [NodeProcess(str(tmp_path / f"node-{i}"), ports[i - 1], node_id=i, extra={
        "listeners": f"SASL_PLAINTEXT://127.0.0.1:{ports[i - 1]}",
        "controller.quorum.voters": voters, "raft.password": "cluster-secret-0123456789",
        "inter.broker.sasl.username": BROKER[0], "inter.broker.sasl.password": BROKER[1],
        "super.users": f"User:{BROKER[0]}",
        "connection.failed.authentication.delay.ms": "0"}) for i in (1, 2)]
    try:
        for n in nodes:
            n.start()
        bootstrap = ",".join(n.bootstrap for n in nodes)

        def registered():
            with Admin(bootstrap, **CLIENT) as a:
                return [b.id for b in a.describe_cluster().brokers] == [1, 2]

        until(registered, timeout_s=60)
        with Admin(bootstrap, **CLIENT) as a:
            a.create_user("alice", "alice-password")
        first = {n.node_id: server_first(n.port, "mallory") for n in nodes}
        assert first[1] == first[2], first
        assert first[1]["iterations"] == scram.DEFAULT_ITERATIONS
        assert server_first(nodes[0].port, "mallory") == first[1]  # stable, not per exchange
        other = server_first(nodes[0].port, "trudy")
        assert other["salt"] != first[1]["salt"]  # per user, like real salts
        # (a node answers alice's real salt once it has replayed her creation, which the
        # controller acknowledged: until then it knows no alice and answers a fake one)
        def alice_everywhere():
            alice = {n.node_id: server_first(n.port, "alice") for n in nodes}
            return alice if alice[1] == alice[2] else None

        alice = until(alice_everywhere, timeout_s=30)
        assert alice[1]["salt"] != first[1]["salt"]
        for n in nodes:
            n.restart()
        assert {n.node_id: server_first(n.port, "mallory") for n in nodes} == first
    finally:
        for n in nodes:
            n.stop()
