"""The Raft port under hostile peers (metadata/raft_port.py): three real voters in this
process on 127.0.0.1, attacked over real sockets."""

from __future__ import annotations

import socket
import struct
import threading
import time

import pytest

from raftlog.metadata import raft_hello as H
from raftlog.metadata import raft_port
from raftlog.metadata import records as R
from raftlog.metadata.quorum import MetadataQuorum

from ..conftest import free_ports

pytestmark = pytest.mark.slow

PASSWORD = "test-secret-0123456789"


def _wait(cond, timeout_s=15.0):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if (got := cond()):
            return got
        time.sleep(0.05)
    raise AssertionError("condition not met in time")


@pytest.fixture
def trio(tmp_path):
    voters = {i: ("127.0.0.1", p) for i, p in enumerate(free_ports(3), 1)}
    qs = [MetadataQuorum(i, voters, str(tmp_path / f"n{i}"), password=PASSWORD) for i in voters]
    leader = _wait(lambda: next((q for q in qs if q.is_leader), None))
    assert leader.propose(R.NoOp()).ok
    yield voters, qs, leader
    for q in qs:
        q.close()


def _connect(addr, source: str | None = None) -> socket.socket:
    s = socket.socket()
    if source:
        s.bind((source, 0))
    s.settimeout(10)
    s.connect(addr)
    return s


def _recv_exact(s: socket.socket, n: int) -> bytes:
    data = b""
    while len(data) < n:
        chunk = s.recv(n - len(data))
        if not chunk:
            break
        data += chunk
    return data


def _closed(s: socket.socket, timeout_s: float = 10.0) -> bool:
    """Did the server close ``s`` within ``timeout_s``? (whatever it sent before)"""
    s.settimeout(0.2)
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            if not s.recv(65536):
                return True
        except TimeoutError:
            continue
        except OSError:  # reset
            return True
    return False


def _hello(s: socket.socket, password=PASSWORD, identity="readonly") -> None:
    challenge = _recv_exact(s, H.CHALLENGE_BYTES)
    s.sendall(H.answer(H.hello_key(password), H.read_challenge(challenge), identity))


def _addr(voters, q) -> tuple:
    return voters[q.node_id]


def test_a_passwordless_24mb_stream_forces_no_election(trio):
    """pysyncobj buffered the whole announced message before checking anything
    (quadratically): 24 MB streamed at the controller's Raft port cost it its
    leadership. Now the stream is cut after one hello's worth of bytes."""
    voters, qs, leader = trio
    term, leader_id = leader.term, leader.node_id
    total = 24 * 1024 * 1024
    sent = [0, 0]  # bytes, connections
    stop = threading.Event()

    def stream():
        chunk = struct.pack("i", 2**31 - 1) + b"\xa5" * (64 * 1024 - 4)
        started = time.monotonic()
        while sent[0] < total and not stop.is_set() and time.monotonic() - started < 60:
            try:
                with _connect(_addr(voters, leader)) as s:
                    sent[1] += 1
                    while sent[0] < total:
                        s.sendall(chunk)
                        sent[0] += len(chunk)
            except OSError:  # closed by the server: the attacker just reconnects
                time.sleep(0.01)

    attacker = threading.Thread(target=stream, daemon=True)
    attacker.start()
    writes = 0
    try:
        while attacker.is_alive() or writes < 10:
            assert leader.propose(R.NoOp(), timeout_s=5.0).ok  # metadata writes keep working
            writes += 1
    finally:
        stop.set()
        attacker.join(10)
    assert leader.is_leader and leader.term == term
    assert all(q.leader_id == leader_id and q.term == term for q in qs)
    assert raft_port.STATS["HelloError"] >= 1


def test_an_oversized_length_prefix_closes_the_connection_at_once(trio):
    voters, qs, leader = trio
    term = leader.term
    host, port = _addr(voters, leader)
    before = raft_port.STATS["frame_too_large"]
    with _connect((host, port)) as s:
        _hello(s)  # a peer that knows the password ...
        s.sendall(struct.pack("i", 2**31 - 1) + b"x" * 1000)  # ... announces 2 GiB
        assert _closed(s)
    assert raft_port.STATS["frame_too_large"] == before + 1
    with _connect((host, port)) as s:  # a negative length, too
        _hello(s)
        s.sendall(struct.pack("i", -5))
        assert _closed(s)
    assert leader.is_leader and leader.term == term
    assert leader.propose(R.NoOp()).ok


def test_a_wrong_hmac_hello_is_dropped(trio):
    voters, qs, leader = trio
    term = leader.term
    before = raft_port.STATS["HelloError"]
    with _connect(_addr(voters, leader)) as s:
        _hello(s, password="wrong-secret-0123456789")
        s.sendall(b"\0" * 4096)  # nothing after a refused hello is read
        assert _closed(s)
    with _connect(_addr(voters, leader)) as s:  # an answer not to this connection's nonce
        _recv_exact(s, H.CHALLENGE_BYTES)
        s.sendall(H.answer(H.hello_key(PASSWORD), b"\0" * H.NONCE_BYTES, "readonly"))
        assert _closed(s)
    assert raft_port.STATS["HelloError"] == before + 2
    assert leader.is_leader and leader.term == term
    assert leader.propose(R.NoOp()).ok


def test_a_silent_connection_is_closed_after_the_hello_deadline(trio):
    voters, qs, leader = trio
    before = raft_port.STATS["hello_timeout"]
    with _connect(_addr(voters, leader)) as s:
        assert len(_recv_exact(s, H.CHALLENGE_BYTES)) == H.CHALLENGE_BYTES
        assert _closed(s, timeout_s=H.HELLO_TIMEOUT_S + 10)
    assert raft_port.STATS["hello_timeout"] >= before + 1


def test_connections_per_address_are_limited(trio):
    """One address may hold HELLOS_PER_ADDRESS_MAX connections in their hello; the next
    is closed on accept (before any challenge), another address is still served."""
    voters, qs, leader = trio
    addr = _addr(voters, leader)
    held = []
    try:
        for _ in range(H.HELLOS_PER_ADDRESS_MAX):
            held.append(_connect(addr, source="127.0.0.2"))
            assert len(_recv_exact(held[-1], H.CHALLENGE_BYTES)) == H.CHALLENGE_BYTES
        before = raft_port.STATS["connection_limit"]
        with _connect(addr, source="127.0.0.2") as s:
            s.settimeout(10)
            assert s.recv(H.CHALLENGE_BYTES) == b""  # closed, no challenge
        assert raft_port.STATS["connection_limit"] == before + 1
        with _connect(addr, source="127.0.0.3") as s:
            assert len(_recv_exact(s, H.CHALLENGE_BYTES)) == H.CHALLENGE_BYTES
    finally:
        for s in held:
            s.close()
    # the slots come back once those connections are gone
    def admitted():
        with _connect(addr, source="127.0.0.2") as s:
            s.settimeout(10)
            return len(s.recv(H.CHALLENGE_BYTES)) > 0
    assert _wait(admitted)
    assert leader.propose(R.NoOp()).ok


def test_the_raft_port_may_bind_another_address(tmp_path):
    """``bind`` (raft.listener): a voter listens on 0.0.0.0 while the others dial
    its voter address; the quorum elects and replicates."""
    voters = {i: ("127.0.0.1", p) for i, p in enumerate(free_ports(2), 1)}
    qs = [MetadataQuorum(1, voters, str(tmp_path / "n1"), password=PASSWORD,
                         bind=("0.0.0.0", voters[1][1])),
          MetadataQuorum(2, voters, str(tmp_path / "n2"), password=PASSWORD)]
    try:
        leader = _wait(lambda: next((q for q in qs if q.is_leader), None))
        assert leader.propose(R.AllocateProducerIds(1, 10)).ok
        _wait(lambda: all(q.state.next_producer_id == 10 for q in qs))
        with _connect(("127.0.0.2", voters[1][1])) as s:  # any interface answers
            assert len(_recv_exact(s, H.CHALLENGE_BYTES)) == H.CHALLENGE_BYTES
    finally:
        for q in qs:
            q.close()


def test_our_own_voters_never_refuse_each_other(tmp_path):
    """A correct quorum elects, replicates and takes a restarted voter back (which
    dials and is dialled again, through the hello) without a single refusal on the
    Raft port."""
    watched = ("FrameError", "HelloError", "bad_key_exchange", "identity_mismatch",
               "unknown_voter", "hello_timeout", "connection_limit")
    before = {k: raft_port.STATS[k] for k in watched}
    voters = {i: ("127.0.0.1", p) for i, p in enumerate(free_ports(3), 1)}
    qs = [MetadataQuorum(i, voters, str(tmp_path / f"n{i}"), password=PASSWORD) for i in voters]
    try:
        for _ in range(3):
            leader = _wait(lambda: next((q for q in qs if q.is_leader), None))
            assert leader.propose(R.AllocateProducerIds(1, 10)).ok
            _wait(lambda: len({q.state.next_producer_id for q in qs}) == 1)
            i = next(j for j, q in enumerate(qs) if q is not leader)
            qs[i].close()
            qs[i] = MetadataQuorum(i + 1, voters, str(tmp_path / f"n{i + 1}"), password=PASSWORD)
        _wait(lambda: len({q.state.next_producer_id for q in qs}) == 1)
        assert {k: raft_port.STATS[k] for k in watched} == before
    finally:
        for q in qs:
            q.close()


def test_nothing_goes_out_before_the_key_exchange_ends():
    """pysyncobj's transport sent over any connected socket, also one whose random keys
    were not exchanged yet: the message went out unwrapped and the peer dropped the
    connection (seen with pre-votes through the harness's Raft proxies). A learner
    dials a voter that answers the hello but not the key exchange: nothing is sent."""
    from pysyncobj import SyncObj, SyncObjConf

    from raftlog.metadata.quorum import harden_pysyncobj

    harden_pysyncobj()
    with socket.create_server(("127.0.0.1", 0)) as srv:
        srv.settimeout(10)
        voter = f"127.0.0.1:{srv.getsockname()[1]}"
        obj = SyncObj(None, [voter], SyncObjConf(autoTick=False, password=PASSWORD),
                      transportClass=raft_port.HardenedTransport)
        try:
            obj.doTick(0.0)  # dials
            peer, _ = srv.accept()
            with peer:
                peer.settimeout(10)
                peer.sendall(H.challenge(b"\1" * H.NONCE_BYTES))
                got = b""
                while len(got) < H.ANSWER_BYTES + H.LENGTH_PREFIX_BYTES:
                    obj.doTick(0.05)
                    peer.settimeout(0.05)
                    try:
                        got += peer.recv(65536)
                    except TimeoutError:
                        pass
                assert H.check_answer(H.hello_key(PASSWORD), b"\1" * H.NONCE_BYTES,
                                      got[:H.ANSWER_BYTES]) == "readonly"
                frame = got[H.ANSWER_BYTES:]
                length = H.frame_length(frame[:H.LENGTH_PREFIX_BYTES])
                while len(frame) < H.LENGTH_PREFIX_BYTES + length:  # the learner's key
                    frame += peer.recv(65536)
                transport = obj._SyncObj__transport
                node = next(iter(obj._SyncObj__otherNodes))
                assert transport.send(node, {"type": "apply_command", "command": b"x"}) is False
                peer.settimeout(1.0)
                with pytest.raises(TimeoutError):
                    peer.recv(65536)
        finally:
            obj.destroy()
            obj.doTick(0.0)


def test_a_metadata_record_too_large_for_a_raft_frame_is_refused_clearly(tmp_path):
    """What a Raft frame must carry is bounded: a record above ENVELOPE_BYTES_MAX is
    refused before it is proposed, with what to do, and nothing changes."""
    from raftlog.errors import ErrorCode
    from raftlog.metadata.quorum import ENVELOPE_BYTES_MAX

    q = MetadataQuorum(1, {1: ("127.0.0.1", 0)}, str(tmp_path / "raft"), listen=False)
    try:
        _wait(lambda: q.is_leader)
        from raftlog.acl import AclBinding, Operation, PatternType, Permission, ResourceType

        bindings = tuple(
            AclBinding("User:alice", ResourceType.TOPIC, f"{'t' * 200}{i}", PatternType.LITERAL,
                       Operation.READ, Permission.ALLOW).as_tuple()
            for i in range(ENVELOPE_BYTES_MAX // 200))
        before = q.state
        result = q.propose(R.CreateAcls(bindings))
        assert not result.ok and result.code == ErrorCode.INVALID_REQUEST
        assert "split the request" in result.error
        assert q.state is before
        assert q.propose(R.CreateAcls(bindings[:10])).ok  # a smaller one goes through
    finally:
        q.close()


class _Peer:
    """A peer that knows the password, speaking pysyncobj's protocol after the hello
    (its key exchange, then what it likes)."""

    def __init__(self, addr, identity: str):
        import os as _os

        from pysyncobj.encryptor import getEncryptor

        self.fernet = getEncryptor(PASSWORD)
        self.s = _connect(addr)
        _hello(self.s, identity=identity)
        self.my_key = _os.urandom(32)
        self.send(self.my_key)
        self.their_key = self.recv()[1]  # (our key, theirs)

    def send(self, message, wrap: bool = False) -> None:
        import zlib

        import pysyncobj.pickle as p

        if wrap:
            message = (self.their_key, message)
        body = self.fernet.encrypt_at_time(zlib.compress(p.dumps(message)), int(time.monotonic()))
        self.s.sendall(struct.pack("i", len(body)) + body)

    def recv(self):
        import zlib

        import pysyncobj.pickle as p

        length = H.frame_length(_recv_exact(self.s, H.LENGTH_PREFIX_BYTES))
        return p.loads(zlib.decompress(self.fernet.decrypt(_recv_exact(self.s, length))))


def test_a_peer_is_held_to_the_identity_its_hello_signed(trio):
    """The hello signs a name; pysyncobj then takes the name the peer sends next. A
    learner's hello (``readonly``) followed by a voter's name, or by one of
    pysyncobj's utility commands (``status``, ``add``, ... : never ours), is refused."""
    voters, qs, leader = trio
    term = leader.term
    other = next(q for q in qs if q is not leader)
    for said, reason in ((f"{voters[other.node_id][0]}:{voters[other.node_id][1]}",
                          "identity_mismatch"), (["status"], "identity_mismatch")):
        before = raft_port.STATS[reason]
        peer = _Peer(_addr(voters, leader), identity="readonly")
        with peer.s:
            peer.send(said, wrap=True)
            assert _closed(peer.s)
        assert raft_port.STATS[reason] == before + 1
    peer = _Peer(_addr(voters, leader), identity="readonly")  # as signed: accepted
    with peer.s:
        peer.send("readonly", wrap=True)
        peer.s.settimeout(10)
        assert peer.recv()[1]["type"] == "append_entries"  # the leader feeds its learner
    assert leader.is_leader and leader.term == term
