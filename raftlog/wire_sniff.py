"""Which protocol the first bytes of a connection speak: raftlog's native frames or
Kafka's. Pure; the listeners call it once per connection, on its first bytes, so a
client pointed at the wrong port gets one clear hint instead of frame-size errors.

Native frame (raftlog/protocol.py): ``u32le length | u32le header length | CBOR map``.
Kafka request (raftlog/kafka/wire.py): ``i32be size | i16be api_key | i16be version |
i32be correlation id | ...``.

The two are told apart by byte 8: a native frame's header starts with a CBOR map
(major type 5: 0xa0..0xbf) right after its two little-endian lengths, and its header
length is non-zero and fits the frame; a Kafka request has a known api key and a small
version at bytes 4..8.
"""

from __future__ import annotations

import struct

from .kafka.wire import API_NAMES

#: Bytes needed to tell the protocols apart.
SNIFF_BYTES = 9
#: Kafka API versions above this are not seen in practice (sniffing only).
_KAFKA_VERSION_MAX = 64
#: A Kafka client's first request (ApiVersions, or Metadata from old clients) is small;
#: larger sizes are something else (a TLS ClientHello starts 0x16 0x03 ...).
_KAFKA_FIRST_SIZE_MAX = 1 << 24
_CBOR_MAP_FIRST, _CBOR_MAP_LAST = 0xA0, 0xBF

NATIVE, KAFKA = "native", "kafka"
#: The first bytes the Raft port sends (metadata/raft_hello.py's challenge).
RAFT_HELLO_MAGIC = b"RLRAFT"


def looks_native(head: bytes) -> bool:
    """The bytes start a native frame (``head``: at least SNIFF_BYTES bytes)."""
    assert len(head) >= SNIFF_BYTES
    length, hlen = struct.unpack_from("<II", head, 0)
    return (length >= 4 + 1 and 1 <= hlen <= length - 4
            and _CBOR_MAP_FIRST <= head[8] <= _CBOR_MAP_LAST)


def looks_kafka(head: bytes) -> bool:
    """The bytes start a Kafka client's first request."""
    assert len(head) >= SNIFF_BYTES
    size, api_key, version = struct.unpack_from(">ihh", head, 0)
    return (8 <= size < _KAFKA_FIRST_SIZE_MAX and api_key in API_NAMES
            and 0 <= version <= _KAFKA_VERSION_MAX)


def sniff(head: bytes) -> str | None:
    """NATIVE or KAFKA when the bytes can only be that; None when they could be
    neither or both (leave it to the listener's own decoder)."""
    native, kafka = looks_native(head), looks_kafka(head)
    if native != kafka:
        return NATIVE if native else KAFKA
    return None


#: A TLS connection's first byte: a handshake record (ClientHello).
TLS_HANDSHAKE_RECORD = 0x16


def looks_tls(head: bytes) -> bool:
    """The bytes may start a TLS handshake (``head``: at least one byte): what a TLS
    listener checks before its handshake -- loose on purpose, since a TLS client taken
    for plaintext would be refused, while plaintext taken for TLS only fails the
    handshake as it always did."""
    return head[:1] == bytes([TLS_HANDSHAKE_RECORD])


def looks_client_hello(head: bytes) -> bool:
    """The bytes start a TLS ClientHello and nothing else (``head``: SNIFF_BYTES): what a
    plaintext listener checks before closing a connection as a TLS client's -- strict,
    since a native frame whose length's low byte is 0x16 must never be taken for one.
    A record header (0x16, version 3.x, length) then handshake type 1, and not a native
    frame (whose length, header length and CBOR map could match the first bytes)."""
    assert len(head) >= SNIFF_BYTES
    return (head[0] == TLS_HANDSHAKE_RECORD and head[1] == 0x03 and head[2] <= 0x04
            and head[5] == 0x01 and not looks_native(head) and not looks_kafka(head))


def plaintext_on_tls_hint(listener_name: str, protocol: str) -> str:
    """What a client that sent plaintext to a TLS listener is told (and the node logs)."""
    return (f"listener {listener_name} takes TLS ({protocol}) and this client sent "
            f"plaintext: give the client the listener's security settings (SDK: "
            f"security_protocol={protocol!r} with its ssl_*/sasl_* options; CLI: "
            f"--command-config FILE holding security.protocol={protocol})")


def foreign_hint(head: bytes) -> str | None:
    """What a server whose first bytes are no raftlog frame is, as advice for the person
    who pointed a client at it: servers that speak first (the Raft port's challenge, an
    HTTP server's answer to our request); None when it is not recognised."""
    if head.startswith(RAFT_HELLO_MAGIC):
        return ("it is a raftlog Raft port (the metadata quorum's raft.port), not a client "
                "listener: use the node's port (raftlog up: 9092 and up)")
    if head.startswith(b"HTTP/"):
        return "it speaks HTTP (a metrics or web port?), not raftlog's protocol"
    return None  # (a Kafka client on the native port is told by node/server.py's sniff)
