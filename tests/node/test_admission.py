"""Pure parts of connection admission (node/admission.py, raftlog/wire_sniff.py,
node/connection.py's idle watchdog on a virtual clock) and their config keys."""

from __future__ import annotations

import struct

import pytest
import trio
from hypothesis import given
from hypothesis import strategies as st

from raftlog.errors import ConfigError
from raftlog.kafka.wire import encode_request
from raftlog.node.admission import (
    ConnectionQuota,
    LogLimiter,
    kafka_on_native_hint,
    native_on_kafka_hint,
)
from raftlog.node.config import NodeConfig
from raftlog.node.connection import idle_watchdog
from raftlog.protocol import Api, ClientConnection, encode_frame
from raftlog.wire_sniff import KAFKA, NATIVE, SNIFF_BYTES, looks_client_hello, looks_tls, sniff


def test_quota_per_address_with_overrides():
    q = ConnectionQuota(2, {"10.0.0.7": 0, "127.0.0.3": 3})
    assert q.try_acquire("127.0.0.1") and q.try_acquire("127.0.0.1")
    assert not q.try_acquire("127.0.0.1")  # over max.connections.per.ip
    assert q.try_acquire("127.0.0.2")  # another address is not affected
    assert not q.try_acquire("10.0.0.7")  # an override of 0 refuses the address
    assert all(q.try_acquire("127.0.0.3") for _ in range(3))
    assert not q.try_acquire("127.0.0.3")
    assert q.total == 6
    q.release("127.0.0.1")
    assert q.try_acquire("127.0.0.1")
    for ip, n in (("127.0.0.1", 2), ("127.0.0.2", 1), ("127.0.0.3", 3)):
        for _ in range(n):
            q.release(ip)
    assert q.total == 0 and q._open == {}  # addresses are forgotten: bounded memory
    with pytest.raises(KeyError):
        q.release("127.0.0.1")  # a release without acquire is a bug


def test_log_limiter_one_line_per_key_and_interval():
    lim = LogLimiter(interval_s=60, max_keys=2)
    assert lim.allow("a", 0.0)
    assert not lim.allow("a", 1.0) and not lim.allow("a", 59.0)
    assert lim.allow("b", 1.0)  # another key
    assert lim.allow("a", 60.0) and lim.take_suppressed("a") == 2
    assert lim.take_suppressed("a") == 0
    lim.allow("c", 61.0)  # a third key: the oldest is forgotten (bounded)
    assert len(lim._last) == 2


def test_sniff_tells_native_frames_from_kafka_requests():
    native = ClientConnection().send_request(Api.API_VERSIONS, {})[1]
    assert sniff(native[:SNIFF_BYTES]) == NATIVE
    assert sniff(encode_frame({"id": 1, "api": 3, "topics": None})[:SNIFF_BYTES]) == NATIVE
    for key, version, body in ((18, 3, {"client_software_name": "x",
                                        "client_software_version": "1"}),
                               (18, 0, {}), (17, 1, {"mechanism": "PLAIN"}),
                               (3, 1, {"topics": None})):
        assert sniff(encode_request(key, version, 7, body)[:SNIFF_BYTES]) == KAFKA
    assert sniff(b"GET / HTTP/1.1\r\n"[:SNIFF_BYTES]) is None
    assert sniff(b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc") is None  # a TLS ClientHello
    assert sniff(b"\x00" * SNIFF_BYTES) is None


@given(st.dictionaries(st.text(max_size=8), st.integers() | st.text() | st.binary(),
                       max_size=20), st.binary(max_size=600))
def test_sniff_never_calls_a_native_frame_kafka(header, body):
    assert sniff(encode_frame(header, body)[:SNIFF_BYTES]) != KAFKA


def _client_hello() -> bytes:
    """The first bytes a real TLS client sends (Python's ssl, in memory)."""
    import ssl

    ctx = ssl.create_default_context()
    tls = ctx.wrap_bio(ssl.MemoryBIO(), out := ssl.MemoryBIO(), server_hostname="x")
    with pytest.raises(ssl.SSLWantReadError):
        tls.do_handshake()
    return out.read()


def test_a_client_hello_is_told_from_every_native_frame_head():
    """A plaintext listener closes a TLS client's connection at once: a ClientHello is
    recognised, and no native frame is ever taken for one -- not even one whose length's
    low byte is 0x16 (found in CI: `raftlog transactions find-hanging`'s first frame was
    such a one, and the node closed it)."""
    hello = _client_hello()
    assert looks_tls(hello) and looks_client_hello(hello[:SNIFF_BYTES])
    assert looks_client_hello(b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc")
    for length in range(5, 1 << 20):  # every frame length a head can show, the worst header
        if length & 0xFF != 0x16:
            continue
        for hlen in (1, 256, 257, 511, length - 4):
            if 1 <= hlen <= length - 4:
                head = struct.pack("<II", length, hlen) + b"\xa1"
                assert not looks_client_hello(head), (length, hlen)
    assert not looks_client_hello(b"\x16" + b"\x00" * (SNIFF_BYTES - 1))


@given(st.dictionaries(st.text(max_size=8), st.integers() | st.text() | st.binary(),
                       max_size=20), st.binary(max_size=2000))
def test_no_native_frame_is_taken_for_a_client_hello(header, body):
    assert not looks_client_hello(encode_frame(header, body)[:SNIFF_BYTES])


@given(st.integers(0, 3), st.integers(0, 2**31 - 1), st.text(max_size=300))
def test_sniff_never_calls_a_kafka_request_native(version, correlation_id, name):
    body = {"client_software_name": name, "client_software_version": "1"}
    data = encode_request(18, version, correlation_id, body if version >= 3 else {})
    assert sniff(data[:SNIFF_BYTES]) != NATIVE


def test_hints_name_the_right_port():
    assert kafka_on_native_hint("127.0.0.1:9092", "127.0.0.1:19092") == (
        "a Kafka client connected to the native listener 127.0.0.1:9092; Kafka clients "
        "use kafka.listener 127.0.0.1:19092")
    assert "no Kafka listener is configured: set kafka.listener" in kafka_on_native_hint(
        "127.0.0.1:9092", None)
    assert "raftlog clients use the native listener 127.0.0.1:9092" in native_on_kafka_hint(
        "127.0.0.1:19092", "127.0.0.1:9092")


def test_config_keys_and_their_errors():
    c = NodeConfig.from_properties({})
    assert (c.max_connections_per_ip, c.max_connections_per_ip_overrides,
            c.connections_max_idle_ms) == (1000, {}, 600_000)
    c = NodeConfig.from_properties({
        "max.connections.per.ip": "10", "connections.max.idle.ms": "1500",
        "max.connections.per.ip.overrides": "127.0.0.2:50, [::1]:3,10.0.0.7:0"})
    assert c.max_connections_per_ip == 10 and c.connections_max_idle_ms == 1500
    assert c.max_connections_per_ip_overrides == {"127.0.0.2": 50, "::1": 3, "10.0.0.7": 0}
    bad = [({"max.connections.per.ip.overrides": "host.example:5"}, "IP:COUNT"),
           ({"max.connections.per.ip.overrides": "127.0.0.2"}, "IP:COUNT"),
           ({"max.connections.per.ip.overrides": "127.0.0.2:x"}, "max.connections.per.ip"),
           ({"max.connections.per.ip.overrides": "127.0.0.2:1,127.0.0.2:3"}, "listed twice"),
           ({"max.connections.per.ip": "-1"}, "max.connections.per.ip"),
           ({"max.connections.per.ip": "0"}, "refuses every client"),
           ({"connections.max.idle.ms": "0"}, "connections.max.idle.ms")]
    for props, message in bad:
        with pytest.raises(ConfigError, match=message):
            NodeConfig.from_properties(props)
    NodeConfig.from_properties({"max.connections.per.ip": "0",
                                "max.connections.per.ip.overrides": "127.0.0.1:5"})


class _Conn:
    """What the idle watchdog looks at (node/server.py Conn, kafka/server.py _Conn)."""

    def __init__(self, sock):
        self.sock, self.parked, self.in_request = sock, set(), False
        self.last_active = trio.current_time()


async def test_idle_watchdog_spares_busy_connections(autojump_clock):
    import socket

    a, b = socket.socketpair()
    try:
        conn = _Conn(a)
        closed = []
        async with trio.open_nursery() as nursery:
            nursery.start_soon(idle_watchdog, conn, 10.0, closed.append)
            await trio.sleep(9)
            conn.last_active = trio.current_time()  # bytes came: the clock starts over
            await trio.sleep(9)
            conn.parked.add("a parked long-poll fetch")
            await trio.sleep(30)  # parked: not idle, however long
            assert not closed
            conn.parked.clear()
            conn.in_request = True  # a request being handled: not idle either
            await trio.sleep(30)
            assert not closed
            conn.in_request = False  # the request answered (the reader notes the time)
            conn.last_active = trio.current_time()
            started = trio.current_time()
            while not closed:
                await trio.sleep(1)
            assert 10 <= trio.current_time() - started <= 11 and closed == [conn]
    finally:
        a.close()
        b.close()
