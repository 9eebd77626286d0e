"""The Raft port's rules before trust, without I/O: the hello that proves a peer knows
``raft.password`` before anything it sends is buffered, the bound on a message frame,
and the per-address connection limits. metadata/raft_port.py drives them from
pysyncobj's sockets; tests drive them with bytes.

The hello (one round trip, fixed sizes, before any length-prefixed message)::

    server -> client   CHALLENGE   MAGIC (8) | nonce (32)                     = 40 bytes
    client -> server   ANSWER      MAGIC (8) | identity length (u16 big-endian)
                                   | identity, zero-padded (IDENTITY_FIELD_BYTES)
                                   | mac (32)                                = 330 bytes

``mac = HMAC-SHA256(hello_key(password), MAC_LABEL | nonce | u16 len(identity) |
identity)``: ``identity`` is the client's own voter address, or ``readonly`` for a
learner -- the name pysyncobj sends right after (raft_port.py holds it to that). The
address the client dialled is not signed: a voter may be dialled through a proxy or a
translated address (the safety harness routes Raft links through proxies). The nonce
is fresh per connection, so an answer seen on the wire cannot be replayed; the server
reads exactly ANSWER_BYTES before it decides, so a peer without the password costs it
330 bytes and one HMAC.

After the hello, pysyncobj's frames follow: a 4-byte native ``int`` length, then the
(Fernet-encrypted, zlib-compressed, pickled) message. A length outside
``0..FRAME_BYTES_MAX`` closes the connection before its body is read.
"""

from __future__ import annotations

import functools
import hashlib
import hmac
import struct
from collections import Counter

from .errors import FrameError, HelloError

MAGIC = b"RLRAFT\x00\x01"
MAGIC_BYTES = len(MAGIC)
NONCE_BYTES = 32
MAC_BYTES = 32
#: Longest identity (``host:port`` or ``readonly``): a 253-byte DNS name, ``:65535``,
#: and room for brackets around an IPv6 literal.
IDENTITY_FIELD_BYTES = 288
NONCE_OFFSET = MAGIC_BYTES
CHALLENGE_BYTES = NONCE_OFFSET + NONCE_BYTES
IDENTITY_LENGTH_OFFSET = MAGIC_BYTES
IDENTITY_OFFSET = IDENTITY_LENGTH_OFFSET + 2
MAC_OFFSET = IDENTITY_OFFSET + IDENTITY_FIELD_BYTES
ANSWER_BYTES = MAC_OFFSET + MAC_BYTES
MAC_LABEL = b"raftlog raft hello v1"
KEY_SALT = b"raftlog raft hello key v1"
KEY_ITERATIONS = 100_000
READONLY_IDENTITY = "readonly"

#: Bytes of the length prefix of every message after the hello (pysyncobj's ``i``).
LENGTH_PREFIX_BYTES = 4
#: Largest message frame on the wire (after Fernet). What our nodes send: an
#: AppendEntries batch of up to 64 KiB of entries plus one entry of at most
#: quorum.ENVELOPE_BYTES_MAX (1 MiB), snapshot and large-entry chunks of 64 KiB, one
#: forwarded command -- pickled, compressed, then Fernet's base64 (x4/3): < 1.5 MiB.
FRAME_BYTES_MAX = 4 * 1024 * 1024
#: Largest message once decompressed (a frame must not inflate beyond this).
MESSAGE_BYTES_MAX = 4 * 1024 * 1024
#: A connection that has not finished the hello (and, on the accepting side, named
#: itself to pysyncobj) within this long is closed.
HELLO_TIMEOUT_S = 3.0
#: Connections one address may hold open on the Raft port at once (each node holds
#: at most one to each voter; every node of a host shares its address).
CONNECTIONS_PER_ADDRESS_MAX = 32
#: Connections one address may hold that have not finished the hello.
HELLOS_PER_ADDRESS_MAX = 8
#: Connections from all addresses that have not finished the hello.
HELLOS_MAX = 64

assert CHALLENGE_BYTES == 40 and ANSWER_BYTES == 330
assert HELLOS_PER_ADDRESS_MAX <= CONNECTIONS_PER_ADDRESS_MAX


@functools.lru_cache(maxsize=8)
def hello_key(password: str | bytes | None) -> bytes:
    """The HMAC key of the hello, derived from the password (PBKDF2, once per process
    and password: an eavesdropper's offline guess costs as much as Fernet's)."""
    secret = (password or "").encode() if not isinstance(password, bytes) else password
    return hashlib.pbkdf2_hmac("sha256", secret, KEY_SALT, KEY_ITERATIONS)


def challenge(nonce: bytes) -> bytes:
    """The server's first bytes on a new connection."""
    assert len(nonce) == NONCE_BYTES
    return MAGIC + nonce


def read_challenge(data: bytes) -> bytes:
    """The nonce of a server's CHALLENGE_BYTES. Raises HelloError if it is not one."""
    if len(data) != CHALLENGE_BYTES or data[:MAGIC_BYTES] != MAGIC:
        raise HelloError("the Raft peer did not open with a raftlog hello (another "
                         "program on that port, or a raftlog of another version)")
    return bytes(data[NONCE_OFFSET:])


def _mac(key: bytes, nonce: bytes, identity: bytes) -> bytes:
    msg = b"".join((MAC_LABEL, nonce, struct.pack(">H", len(identity)), identity))
    return hmac.new(key, msg, hashlib.sha256).digest()


def answer(key: bytes, nonce: bytes, identity: str) -> bytes:
    """The client's ANSWER_BYTES to a challenge, from the client named ``identity``."""
    name = identity.encode()
    if not 0 < len(name) <= IDENTITY_FIELD_BYTES:
        raise HelloError(f"Raft identity {identity!r} is empty or longer than "
                         f"{IDENTITY_FIELD_BYTES} bytes: use a shorter host name")
    out = b"".join((MAGIC, struct.pack(">H", len(name)), name.ljust(IDENTITY_FIELD_BYTES, b"\0"),
                    _mac(key, nonce, name)))
    assert len(out) == ANSWER_BYTES
    return out


def check_answer(key: bytes, nonce: bytes, data: bytes) -> str:
    """The identity a correct ANSWER_BYTES names. Raises HelloError (with the reason)
    when it is malformed or its MAC is not that of the password over this nonce."""
    if len(data) != ANSWER_BYTES or data[:MAGIC_BYTES] != MAGIC:
        raise HelloError("not a raftlog Raft hello")
    (size,) = struct.unpack_from(">H", data, IDENTITY_LENGTH_OFFSET)
    field = bytes(data[IDENTITY_OFFSET:MAC_OFFSET])
    if not 0 < size <= IDENTITY_FIELD_BYTES or any(field[size:]):
        raise HelloError("malformed identity in the Raft hello")
    name = field[:size]
    if not hmac.compare_digest(_mac(key, nonce, name), data[MAC_OFFSET:]):
        raise HelloError("wrong Raft hello MAC (is raft.password the same on every node?)")
    try:
        return name.decode()
    except UnicodeDecodeError:
        raise HelloError("malformed identity in the Raft hello") from None


def frame_length(prefix: bytes) -> int:
    """The body length a message's LENGTH_PREFIX_BYTES announce. Raises FrameError for
    a negative length or one above FRAME_BYTES_MAX."""
    assert len(prefix) == LENGTH_PREFIX_BYTES
    (length,) = struct.unpack("i", prefix)
    if not 0 <= length <= FRAME_BYTES_MAX:
        raise FrameError(f"Raft message frame of {length} bytes (at most {FRAME_BYTES_MAX})")
    return length


class AddressLimits:
    """Who may open another connection on the Raft port: per address at most
    CONNECTIONS_PER_ADDRESS_MAX open and HELLOS_PER_ADDRESS_MAX still in their hello,
    HELLOS_MAX in their hello from everyone. ``admit`` before accepting work,
    ``authenticated`` once the hello succeeded, ``closed`` exactly once per admitted
    connection."""

    def __init__(self, per_address_max: int = CONNECTIONS_PER_ADDRESS_MAX,
                 hellos_per_address_max: int = HELLOS_PER_ADDRESS_MAX,
                 hellos_max: int = HELLOS_MAX):
        self.per_address_max = per_address_max
        self.hellos_per_address_max = hellos_per_address_max
        self.hellos_max = hellos_max
        self.open: Counter = Counter()
        self.hellos: Counter = Counter()

    def admit(self, address: str) -> str | None:
        """Count a new connection from ``address`` and return None, or return why it
        is refused (and count nothing)."""
        if self.open[address] >= self.per_address_max:
            return f"{self.per_address_max} Raft connections already open from {address}"
        if self.hellos[address] >= self.hellos_per_address_max:
            return f"{self.hellos_per_address_max} Raft hellos already pending from {address}"
        if sum(self.hellos.values()) >= self.hellos_max:
            return f"{self.hellos_max} Raft hellos already pending"
        self.open[address] += 1
        self.hellos[address] += 1
        return None

    def authenticated(self, address: str) -> None:
        assert self.hellos[address] > 0, address
        self._drop(self.hellos, address)

    def closed(self, address: str, authenticated: bool) -> None:
        assert self.open[address] > 0, address
        self._drop(self.open, address)
        if not authenticated:
            self._drop(self.hellos, address)

    @staticmethod
    def _drop(counter: Counter, address: str) -> None:
        assert counter[address] > 0, address
        counter[address] -= 1
        if not counter[address]:
            del counter[address]
