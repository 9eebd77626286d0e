"""A plaintext client on a TLS listener: told what to do, instead of a reset.

Before the TLS handshake the node peeks at the connection's first bytes. A TLS client
starts with a handshake record; anything else is a client without the listener's
security settings (the commonest day-one mistake with ``raftlog up --security``). A
native client gets one plaintext error response to its first request naming the
settings to give (the CLI prints it); a Kafka client only a log line (Kafka clients
expect no plaintext answer from a TLS port). Either way the connection is closed.
"""

from __future__ import annotations

import socket

import trio

from raftlog.errors import ErrorCode, RemoteProtocolError
from raftlog.protocol import FrameDecoder, encode_frame, error_response
from raftlog.wire_sniff import NATIVE, SNIFF_BYTES, looks_tls, plaintext_on_tls_hint, sniff

#: The refused client's first request is read up to this size (an error answer needs
#: only its id).
FIRST_FRAME_MAX_BYTES = 1 << 20
#: How long a connection that sent part of a non-TLS first message may take for the rest.
PEEK_PATIENCE_S = 1.0


async def peek_head(sock: socket.socket, n: int = SNIFF_BYTES) -> bytes:
    """Up to ``n`` first bytes of ``sock``, left unread (MSG_PEEK): as soon as they show
    a TLS handshake, else once ``n`` arrived or PEEK_PATIENCE_S passed; b"" if the peer
    closed first. Waits (unbounded: the caller's handshake timeout bounds it) for the
    first byte."""
    head = b""
    with trio.move_on_after(PEEK_PATIENCE_S) as wait:
        wait.deadline = float("inf")  # (no patience limit until a first byte came)
        while True:
            await trio.lowlevel.wait_readable(sock)
            try:
                head = sock.recv(n, socket.MSG_PEEK)
            except BlockingIOError:
                continue
            if not head or looks_tls(head) or len(head) >= n:
                return head
            if wait.deadline == float("inf"):
                wait.deadline = trio.current_time() + PEEK_PATIENCE_S
            await trio.sleep(0.005)  # (the rest of a split first message)
    return head


async def refuse_plaintext(sock: socket.socket, head: bytes, listener_name: str,
                           protocol: str) -> tuple[str, str]:
    """Answer a native client's first request with the hint (best effort, bounded);
    returns (the client's protocol: native, kafka or unknown, the hint)."""
    kind = (sniff(head) if len(head) >= SNIFF_BYTES else None) or "unknown"
    hint = plaintext_on_tls_hint(listener_name, protocol)
    if kind == NATIVE:
        decoder = FrameDecoder(FIRST_FRAME_MAX_BYTES)
        with trio.move_on_after(PEEK_PATIENCE_S):
            try:
                frame = None
                while frame is None:
                    await trio.lowlevel.wait_readable(sock)
                    try:
                        data = sock.recv(1 << 16)
                    except BlockingIOError:
                        continue
                    if not data:
                        return kind, hint
                    decoder.receive_data(data)
                    frame = decoder.next_frame()
                answer = encode_frame(error_response(frame.header.get("id", 0),
                                                     ErrorCode.INVALID_REQUEST, hint))
                await trio.lowlevel.wait_writable(sock)
                sock.send(answer)  # (small: one send; whatever it takes is all it gets)
            except (OSError, RemoteProtocolError):
                pass
    return kind, hint
