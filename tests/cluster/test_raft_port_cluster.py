"""The Raft port of real node processes under a hostile neighbour (issue #35): a
password-less 24 MB stream at the controller's Raft port, then 40 MB at every voter,
force no election and metadata writes go on; a wrong hello and an oversized frame are
cut off at once; the cluster still elects and replicates through a controller's
restart."""

from __future__ import annotations

import socket
import struct
import threading
import time

import pytest

from raftlog.metadata import raft_hello as H

from .cluster import LocalCluster, until

pytestmark = pytest.mark.slow

PASSWORD = "test-secret-0123456789"  # LocalCluster's raft.password
STREAM_BYTES = 24 * 1024 * 1024


def _raft_addresses(cluster: LocalCluster) -> dict:
    voters = cluster.nodes[0].extra["controller.quorum.voters"]
    out = {}
    for entry in voters.split(","):
        node_id, _, addr = entry.partition("@")
        host, _, port = addr.rpartition(":")
        out[int(node_id)] = (host, int(port))
    return out


def _views(cluster: LocalCluster) -> set:
    """{(controller id, controller epoch)} as every live node sees it."""
    views = set()
    for n in cluster.alive():
        with cluster.admin(via=n) as a:
            d = a.describe_cluster()
        views.add((d.controller_id, d.controller_epoch))
    return views


def _stream(addr, stop: threading.Event, sent: list, total: int = STREAM_BYTES) -> None:
    """What the attacker did: a 2 GiB length prefix and then bytes, no password;
    reconnect when cut off. Bounded by ``total`` bytes and 60 s."""
    chunk = struct.pack("i", 2**31 - 1) + b"\xa5" * (64 * 1024 - 4)
    started = time.monotonic()
    while sent[0] < total and not stop.is_set() and time.monotonic() - started < 60:
        try:
            with socket.create_connection(addr, timeout=10) as s:
                while sent[0] < total and not stop.is_set():
                    s.sendall(chunk)
                    sent[0] += len(chunk)
        except OSError:
            time.sleep(0.01)


def _closed(s: socket.socket, timeout_s: float = 10.0) -> bool:
    s.settimeout(0.2)
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            if not s.recv(65536):
                return True
        except TimeoutError:
            continue
        except OSError:
            return True
    return False


def _hello(s: socket.socket, password: str) -> None:
    challenge = b""
    while len(challenge) < H.CHALLENGE_BYTES:
        got = s.recv(H.CHALLENGE_BYTES - len(challenge))
        assert got, "closed before the challenge"
        challenge += got
    s.sendall(H.answer(H.hello_key(password), H.read_challenge(challenge), "readonly"))


def _attack_while_creating(cluster, targets, total: int, created: list) -> list:
    """Stream ``total`` bytes at each Raft address in ``targets`` while creating topics
    (at least 5); returns the bytes sent per target."""
    stop, sent = threading.Event(), [[0] for _ in targets]
    attackers = [threading.Thread(target=_stream, args=(t, stop, n, total), daemon=True)
                 for t, n in zip(targets, sent, strict=True)]
    for t in attackers:
        t.start()
    try:
        with cluster.admin() as a:
            done = len(created)
            while any(t.is_alive() for t in attackers) or len(created) < done + 5:
                name = f"during-{len(created)}"
                a.create_topic(name, partitions=1, replication_factor=3)
                created.append(name)
    finally:
        stop.set()
        for t in attackers:
            t.join(15)
    return [n[0] for n in sent]


def test_a_hostile_neighbour_on_the_raft_port_moves_no_controller(tmp_path):
    cluster = LocalCluster(tmp_path, n=3)
    # node 1's Raft port binds every interface (raft.listener); the others dial its
    # voter address
    raft_port_1 = _raft_addresses(cluster)[1][1]
    cluster.node(1).extra["raft.listener"] = f"0.0.0.0:{raft_port_1}"
    cluster.start()
    try:
        with socket.create_connection(("127.0.0.2", raft_port_1), timeout=10) as s:
            assert len(s.recv(H.CHALLENGE_BYTES)) > 0  # bound beyond its voter address
        view = until(lambda: (v := _views(cluster)) and len(v) == 1
                     and next(iter(v))[0] > 0 and v, timeout_s=30)
        controller, epoch = next(iter(view))
        addr = _raft_addresses(cluster)[controller]
        # 1. a password-less 24 MB stream at the controller while topics are created,
        # then 40 MB at every voter at once
        created = []
        for targets, total in (([addr], STREAM_BYTES),
                               (list(_raft_addresses(cluster).values()), 40 * 1024 * 1024)):
            sent = _attack_while_creating(cluster, targets, total, created)
            assert all(n >= total for n in sent)  # every stream went out (and was refused)
            assert _views(cluster) == {(controller, epoch)}  # no election
        with cluster.admin() as a:
            assert set(created) <= set(a.list_topics())

        # 2. a wrong hello, and a peer with the password announcing 2 GiB: cut off
        with socket.create_connection(addr, timeout=10) as s:
            _hello(s, "wrong-secret-0123456789")
            assert _closed(s)
        with socket.create_connection(addr, timeout=10) as s:
            _hello(s, PASSWORD)
            s.sendall(struct.pack("i", 2**31 - 1))
            assert _closed(s)
        assert _views(cluster) == {(controller, epoch)}

        # 3. the hello holds between our own nodes: a new controller is elected when
        # this one stops, and it rejoins (dialling and dialled again) when it restarts
        victim = cluster.node(controller)
        victim.stop()
        new = until(lambda: (v := _views(cluster)) and len(v) == 1
                    and next(iter(v))[0] not in (-1, controller) and v, timeout_s=30)
        with cluster.admin() as a:
            a.create_topic("after-election", partitions=1, replication_factor=2)
        victim.start()
        until(lambda: _views(cluster) == new, timeout_s=30)
        with cluster.admin(via=victim) as a:
            until(lambda: "after-election" in a.list_topics(), timeout_s=30)
    finally:
        cluster.stop()
