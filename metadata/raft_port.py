"""The Raft port hardened: pysyncobj 0.3.17's TCP transport with raft_hello.py's rules
before trust. quorum.py builds every SyncObj with :class:`HardenedTransport`; with
raft_rules.py and quorum.py, the only modules that touch pysyncobj (its private state
through name-mangled attributes, on its own tick thread only).

What pysyncobj does, and what we do instead:

1. **Buffering before authentication.** pysyncobj accepts any length prefix up to
   2^31-1 and reads the whole message -- appending 64 KiB at a time to a ``bytes``,
   quadratic -- before it decrypts anything: 24 MB streamed without the password cost
   the controller its leadership. Here the accepting side first sends a nonce and
   reads exactly ``raft_hello.ANSWER_BYTES``: a peer that does not answer with the
   HMAC of the password over that nonce is dropped before any length-prefixed
   message is read. The dialling side holds pysyncobj's first messages until it has
   answered.
2. **Frame bound.** After the hello, a length prefix outside
   ``0..raft_hello.FRAME_BYTES_MAX`` closes the connection at once (the body is never
   read); a socket read stops at one largest frame (the rest waits in the kernel),
   into a ``bytearray`` consumed from the front; a frame may not decompress beyond
   ``MESSAGE_BYTES_MAX``; we never send a frame our peers would refuse.
3. **Real checks.** pysyncobj checks a message's Fernet timestamp (never older than
   the last one) and its per-connection random key with ``assert`` -- gone under
   ``python -O``. :func:`open_frame` checks both with ``if`` and compares the key in
   constant time.
4. **Messages before the key exchange.** pysyncobj's ``send`` used any connected
   socket, also one whose random keys were not exchanged yet: a (pre-)vote went out
   unwrapped and the peer dropped the connection. It is now not sent (``False``, as
   for a peer not connected).
5. **Who a peer is.** The identity signed in the hello must be what the peer then
   tells pysyncobj (its voter address, or ``readonly``); pysyncobj's utility commands
   (``status``, ``add``, ``remove``, ``set_version``, ``transfer``: syncobj_admin) are
   refused on the Raft port -- we use none of them.
6. **Connection limits.** Per address at most ``CONNECTIONS_PER_ADDRESS_MAX`` open and
   ``HELLOS_PER_ADDRESS_MAX`` in their hello, ``HELLOS_MAX`` in their hello overall;
   a connection that has not finished its hello (and named itself) within
   ``HELLO_TIMEOUT_S`` is closed -- pysyncobj timed connections out only when they
   had traffic, so a silent one stayed forever. A dialled peer that never sends its
   challenge is dropped after the same deadline and dialled again.

Refusals are counted in :data:`STATS` (this process) and logged, at most one line per
reason every :data:`LOG_EVERY_S`.
"""

from __future__ import annotations

import collections
import errno
import functools
import hmac
import logging
import os
import socket
import struct
import threading
import time
import zlib

import pysyncobj.pickle as _pspickle
from pysyncobj.monotonic import monotonic
from pysyncobj.poller import POLL_EVENT_TYPE
from pysyncobj.tcp_connection import CONNECTION_STATE, TcpConnection
from pysyncobj.tcp_server import TcpServer
from pysyncobj.transport import TCPTransport

from . import raft_hello as H
from .errors import FrameError, HelloError, RaftPortError

logger = logging.getLogger(__name__)

#: Refusals on the Raft port in this process, by reason (tests and operators).
STATS: collections.Counter = collections.Counter()
_STATS_LOCK = threading.Lock()
#: At most one log line per refusal reason this often (an attacker cannot flood logs).
LOG_EVERY_S = 10.0
_last_logged: dict = {}
#: Socket reads per poller event: one largest frame at the default 64 KiB reads.
READS_PER_EVENT_MAX = H.FRAME_BYTES_MAX // (64 * 1024) + 1


def _refuse(reason: str, peer, detail: str) -> None:
    with _STATS_LOCK:
        STATS[reason] += 1
        count = STATS[reason]
        now = time.monotonic()
        if now - _last_logged.get(reason, -LOG_EVERY_S) < LOG_EVERY_S:
            return
        _last_logged[reason] = now
    logger.warning("Raft port: closed a connection from %s (%s): %s [%d so far]",
                   peer, reason, detail, count)


def open_frame(data: bytes, encryptor, last_timestamp: int, rand_key: bytes | None):
    """The message in one frame body and its Fernet timestamp: decrypt (when a
    password is set), check the timestamp is not older than ``last_timestamp``,
    decompress at most MESSAGE_BYTES_MAX, unpickle (quorum.py's restricted
    unpickler), and -- once the connection's random keys are exchanged -- check and
    strip the sender's key. Raises FrameError; never asserts."""
    timestamp = last_timestamp
    if encryptor is not None:
        try:
            timestamp = encryptor.extract_timestamp(data)
        except Exception:
            raise FrameError("undecryptable Raft frame (wrong raft.password?)") from None
        if timestamp < last_timestamp:
            raise FrameError(f"Raft frame stamped {timestamp}, before the last one "
                             f"({last_timestamp}): replayed or reordered")
        try:
            data = encryptor.decrypt(data)
        except Exception:
            raise FrameError("undecryptable Raft frame (wrong raft.password?)") from None
    inflate = zlib.decompressobj()
    try:
        raw = inflate.decompress(data, H.MESSAGE_BYTES_MAX)
    except zlib.error as e:
        raise FrameError(f"corrupt Raft frame: {e}") from None
    if inflate.unconsumed_tail or not inflate.eof:
        raise FrameError(f"Raft frame inflates beyond {H.MESSAGE_BYTES_MAX} bytes "
                         "(or is truncated)")
    try:
        message = _pspickle.loads(raw)
    except Exception as e:
        raise FrameError(f"undecodable Raft message: {e}") from None
    if rand_key is not None:
        if not (isinstance(message, tuple) and len(message) == 2
                and isinstance(message[0], bytes)
                and hmac.compare_digest(message[0], rand_key)):
            raise FrameError("Raft message without this connection's key (replayed "
                             "from another connection?)")
        message = message[1]
    return message, timestamp


class HardenedConnection(TcpConnection):
    """pysyncobj's connection with the hello, the frame bound and real checks.

    ``server`` names the voter end in log lines: our own address (accepting side) or
    the one dialled. ``identity`` is our own name (dialling side; the peer's once its
    hello is checked); ``on_hello`` and ``on_close`` let the server keep its
    per-address counts."""

    def __init__(self, poller, *, key: bytes, server: str, identity: str | None = None,
                 peer=None, on_hello=None, on_close=None, **kw):
        self.rl_key = key
        self.rl_server = server
        self.rl_identity = identity  # the dialler's name: ours, or the peer's once known
        self.rl_peer = peer
        self.rl_buf = bytearray()
        self.rl_pending = bytearray()
        self.rl_hello_done = False
        self.rl_nonce: bytes | None = None
        self.rl_deadline = monotonic() + H.HELLO_TIMEOUT_S
        self._rl_on_hello = on_hello
        self._rl_on_close = on_close
        super().__init__(poller, **kw)
        if kw.get("socket") is not None:  # accepted: challenge the peer at once
            self.rl_nonce = os.urandom(H.NONCE_BYTES)
            self._write(H.challenge(self.rl_nonce))

    @property
    def rl_accepted(self) -> bool:
        return self.rl_nonce is not None

    # ---------------------------------------------------------------- writing

    def _write(self, data: bytes) -> None:
        self._TcpConnection__writeBuffer += data
        self._TcpConnection__trySendBuffer()
        if self._TcpConnection__writeBuffer and self.fileno() is not None:
            self._TcpConnection__poller.subscribe(
                self.fileno(), self._TcpConnection__processConnection,
                POLL_EVENT_TYPE.READ | POLL_EVENT_TYPE.WRITE | POLL_EVENT_TYPE.ERROR)

    def send(self, message):
        if self.sendRandKey:
            message = (self.sendRandKey, message)
        data = zlib.compress(_pspickle.dumps(message), 3)
        if self.encryptor:
            data = self.encryptor.encrypt_at_time(data, int(monotonic()))
        if len(data) > H.FRAME_BYTES_MAX:  # our peers would drop the connection
            _refuse("frame_not_sent", self.rl_server,
                    f"a {len(data)}-byte message was not sent (at most {H.FRAME_BYTES_MAX})")
            return
        frame = struct.pack("i", len(data)) + data
        if not self.rl_hello_done:
            # pysyncobj's first messages (its key exchange) wait for the hello; more
            # than two largest frames before it ends is a bug, not a backlog
            if len(self.rl_pending) + len(frame) > 2 * H.FRAME_BYTES_MAX:
                self._drop("pending_overflow", "messages queued before the hello")
                return
            self.rl_pending += frame
            return
        self._write(frame)

    # ---------------------------------------------------------------- life cycle

    def connect(self, host, port):
        self.rl_buf = bytearray()
        self.rl_pending = bytearray()
        self.rl_hello_done = False
        self.rl_deadline = monotonic() + H.HELLO_TIMEOUT_S
        return super().connect(host, port)

    def disconnect(self):
        self.rl_buf = bytearray()
        self.rl_pending = bytearray()
        on_close, self._rl_on_close = self._rl_on_close, None
        if on_close is not None:
            on_close(self)
        super().disconnect()

    def _drop(self, reason: str, detail: str) -> None:
        _refuse(reason, self.rl_peer or self.rl_server, detail)
        self.disconnect()

    def hello_overdue(self, now: float) -> bool:
        return (not self.rl_hello_done and self.state != CONNECTION_STATE.DISCONNECTED
                and now > self.rl_deadline)

    # ---------------------------------------------------------------- reading

    def _want(self) -> int:
        """How many more bytes this connection may buffer now."""
        if not self.rl_hello_done:
            return (H.ANSWER_BYTES if self.rl_accepted else H.CHALLENGE_BYTES) - len(self.rl_buf)
        return H.LENGTH_PREFIX_BYTES + H.FRAME_BYTES_MAX - len(self.rl_buf)

    def _TcpConnection__tryReadBuffer(self):
        reads = 0
        while reads < READS_PER_EVENT_MAX and self._want() > 0:
            reads += 1
            if not self._read_some(min(self._want(), self._TcpConnection__recvBufferSize)):
                break
            if self.rl_hello_done and len(self.rl_buf) >= H.LENGTH_PREFIX_BYTES:
                try:  # the frame at the head: refused before its body is read
                    H.frame_length(bytes(self.rl_buf[:H.LENGTH_PREFIX_BYTES]))
                except FrameError as e:
                    self._drop("frame_too_large", str(e))
                    return
        self._TcpConnection__lastReadTime = monotonic()

    def _read_some(self, size: int) -> bool:
        sock = self._TcpConnection__socket
        if sock is None:
            return False
        try:
            incoming = sock.recv(size)
        except OSError as e:
            if e.errno not in (errno.EAGAIN, errno.EWOULDBLOCK):
                self.disconnect()
            return False
        if not incoming:
            self.disconnect()
            return False
        self.rl_buf += incoming
        return True

    def _TcpConnection__processParseMessage(self):
        try:
            if not self.rl_hello_done and not self._hello_step():
                return None
            return self._next_message()
        except RaftPortError as e:
            self._drop(type(e).__name__, str(e))
            return None

    def _hello_step(self) -> bool:
        """Consume the hello once it is all buffered; True when it is done."""
        if self._want() > 0:
            return False
        data = bytes(self.rl_buf)
        del self.rl_buf[:]
        if self.rl_accepted:
            self.rl_identity = H.check_answer(self.rl_key, self.rl_nonce, data)
            self.rl_hello_done = True
            if self._rl_on_hello is not None:
                self._rl_on_hello(self)
        else:
            nonce = H.read_challenge(data)
            self.rl_hello_done = True
            pending, self.rl_pending = bytes(self.rl_pending), bytearray()
            self._write(H.answer(self.rl_key, nonce, self.rl_identity) + pending)
        return self.state != CONNECTION_STATE.DISCONNECTED

    def _next_message(self):
        buf = self.rl_buf
        if len(buf) < H.LENGTH_PREFIX_BYTES:
            return None
        length = H.frame_length(bytes(buf[:H.LENGTH_PREFIX_BYTES]))
        end = H.LENGTH_PREFIX_BYTES + length
        if len(buf) < end:
            return None
        data = bytes(buf[H.LENGTH_PREFIX_BYTES:end])
        del buf[:end]
        message, self.recvLastTimestamp = open_frame(
            data, self.encryptor, self.recvLastTimestamp, self.recvRandKey)
        return message


class HardenedServer(TcpServer):
    """pysyncobj's listening socket, admitting connections by :class:`AddressLimits`."""

    def __init__(self, poller, host, port, onNewConnection, *, make_connection,  # noqa: N803
                 limits: H.AddressLimits | None = None, **kw):
        super().__init__(poller, host, port, onNewConnection, **kw)
        self.limits = limits or H.AddressLimits()
        self._make_connection = make_connection

    def _TcpServer__onNewConnection(self, descr, event):
        if event & POLL_EVENT_TYPE.READ:
            try:
                sock, addr = self._TcpServer__socket.accept()
            except OSError as e:
                if e.errno not in (errno.EAGAIN, errno.EWOULDBLOCK):
                    self.unbind()
                return
            address = addr[0]
            refused = self.limits.admit(address)
            if refused is not None:
                _refuse("connection_limit", address, refused)
                sock.close()
                return
            try:
                self._setup(sock)
            except OSError:
                sock.close()
                self.limits.closed(address, authenticated=False)
                return
            conn = self._make_connection(
                sock, address,
                on_hello=lambda c: self.limits.authenticated(address),
                on_close=lambda c: self.limits.closed(address, c.rl_hello_done))
            self._TcpServer__onNewConnectionCallback(conn)
        if event & POLL_EVENT_TYPE.ERROR:
            self.unbind()

    def _setup(self, sock) -> None:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, self._TcpServer__sendBufferSize)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, self._TcpServer__recvBufferSize)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        sock.setblocking(False)


class HardenedTransport(TCPTransport):
    """pysyncobj's TCP transport over :class:`HardenedConnection` and
    :class:`HardenedServer` (the module docstring says what changes)."""

    def __init__(self, syncObj, selfNode, otherNodes):  # noqa: N803
        # addNode (called by the base __init__) needs these
        self.rl_key = H.hello_key(syncObj.conf.password)
        self.rl_identity = H.READONLY_IDENTITY if selfNode is None else selfNode.address
        super().__init__(syncObj, selfNode, otherNodes)

    def _conn_args(self) -> dict:
        conf = self._syncObj.conf
        return {"timeout": conf.connectionTimeout, "sendBufferSize": conf.sendBufferSize,
                "recvBufferSize": conf.recvBufferSize, "keepalive": conf.tcp_keepalive}

    def _createServer(self):
        conf = self._syncObj.conf
        if conf.bindAddress is not None:
            host, port = conf.bindAddress.rsplit(":", 1)
        else:
            host, port = self._selfNode.address.rsplit(":", 1)
            host = "::" if ":" in host else "0.0.0.0"
        if host not in ("0.0.0.0", "::"):
            from pysyncobj.dns_resolver import globalDnsResolver

            host = globalDnsResolver().resolve(host) or host
        self._server = HardenedServer(
            self._syncObj._poller, host, port, onNewConnection=self._onNewIncomingConnection,
            make_connection=self._accepted, sendBufferSize=conf.sendBufferSize,
            recvBufferSize=conf.recvBufferSize, connectionTimeout=conf.connectionTimeout)

    def _accepted(self, sock, address, on_hello, on_close) -> HardenedConnection:
        return HardenedConnection(
            self._syncObj._poller, socket=sock, key=self.rl_key, server=self._selfNode.address,
            peer=address, on_hello=on_hello, on_close=on_close, **self._conn_args())

    def addNode(self, node):
        self._nodes.add(node)
        self._nodeAddrToNode[node.address] = node
        if not self._shouldConnect(node):
            return
        conn = HardenedConnection(self._syncObj._poller, key=self.rl_key, server=node.address,
                                  identity=self.rl_identity, peer=node.address,
                                  **self._conn_args())
        conn.encryptor = self._syncObj.encryptor
        conn.setOnConnectedCallback(functools.partial(self._onOutgoingConnected, conn))
        conn.setOnMessageReceivedCallback(functools.partial(self._onMessageReceived, node))
        conn.setOnDisconnectedCallback(functools.partial(self._onDisconnected, conn))
        self._connections[node] = conn

    def _onIncomingMessageReceived(self, conn, message):
        if self._syncObj.encryptor and not conn.sendRandKey:
            if not (isinstance(message, bytes) and len(message) == 32):
                return self._refuse_incoming(conn, "bad_key_exchange",
                                             "expected the peer's 32-byte random key")
            return super()._onIncomingMessageReceived(conn, message)
        if message != conn.rl_identity:  # also refuses pysyncobj's utility commands
            return self._refuse_incoming(
                conn, "identity_mismatch",
                f"named itself {str(message)[:80]!r} after a hello as {conn.rl_identity!r}")
        if message != H.READONLY_IDENTITY and message not in self._nodeAddrToNode:
            return self._refuse_incoming(conn, "unknown_voter",
                                         f"{str(message)[:80]!r} is not a voter")
        return super()._onIncomingMessageReceived(conn, message)

    def _refuse_incoming(self, conn, reason: str, detail: str) -> None:
        self._unknownConnections.discard(conn)
        conn._drop(reason, detail)

    def send(self, node, message):
        """pysyncobj's send, but not over a connection whose key exchange is still
        under way: pysyncobj sent (pre-)votes there unwrapped, and the peer dropped the
        connection (an ``assert`` before, a FrameError now) -- to be dialled again
        RECONNECT_S later, slowing a rejoin."""
        conn = self._connections.get(node)
        if conn is not None and self._syncObj.encryptor and not conn.sendRandKey:
            return False
        return super().send(node, message)

    def _onTick(self):
        super()._onTick()
        now = monotonic()
        for conn in list(self._unknownConnections):
            if now > conn.rl_deadline:  # no hello, or never named itself
                self._refuse_incoming(conn, "hello_timeout",
                                      f"not identified within {H.HELLO_TIMEOUT_S}s")
        for conn in list(self._connections.values()):
            if isinstance(conn, HardenedConnection) and conn.hello_overdue(now):
                conn._drop("hello_timeout", f"no challenge within {H.HELLO_TIMEOUT_S}s")


__all__ = ["STATS", "HardenedConnection", "HardenedServer", "HardenedTransport",
           "HelloError", "FrameError", "open_frame"]
