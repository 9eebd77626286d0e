"""The end of a read turn (server.end_turn): on a follower's connection its fetch answer
goes out before the requests its fetch woke are answered (#36: it carries the next
records to replicate); on any other connection the woken requests come first, as
before. Real sockets (a socketpair), no node."""

from __future__ import annotations

import socket

import trio

from raftlog.node.fetch_session import FetchSession
from raftlog.node.outbox import Outbox
from raftlog.node.purgatory import Delayed, Purgatory
from raftlog.node.server import Conn, end_turn

ANSWER = b"the follower's fetch answer"


class Woken(Delayed):
    """A woken request (an acks=all produce) that notes what the peer of ``sock`` had
    received when it was answered."""

    __slots__ = ("peer", "seen")

    def __init__(self, purgatory, peer):
        super().__init__(purgatory, trio.current_time() + 60)
        self.peer = peer
        self.seen = None

    def try_complete(self, expired: bool) -> bool:
        try:
            self.seen = self.peer.recv(1024, socket.MSG_PEEK)
        except BlockingIOError:
            self.seen = b""
        return True


def _turn(follower: bool) -> tuple[bytes, bytes]:
    """One turn's end with the connection's own answer queued and one woken request:
    (what the peer had when the woken request was answered, what it has after)."""

    async def main():
        ours, peer = socket.socketpair()
        ours.setblocking(False)
        peer.setblocking(False)
        try:
            out = Outbox()
            out.add(ANSWER)
            conn = Conn(ours, out, None)
            if follower:
                conn.session = FetchSession(replica=2)
            purgatory = Purgatory()
            op = Woken(purgatory, peer)
            op.set()  # (woken this turn, as by a follower's report moving the HW)
            end_turn(conn, purgatory.run_ready)
            assert op.done
            if out.pieces:
                await out.flush(ours)
            return op.seen, peer.recv(1024)
        finally:
            ours.close()
            peer.close()

    return trio.run(main)


def test_a_followers_fetch_answer_goes_before_the_requests_it_woke():
    seen, after = _turn(follower=True)
    assert seen == ANSWER and after == ANSWER


def test_other_connections_answer_the_woken_requests_first():
    seen, after = _turn(follower=False)
    assert seen == b"" and after == ANSWER
