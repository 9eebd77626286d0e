"""Hostile and confused clients against a real node process, on real sockets (issue 35:
connection slots, memory and work before login, idle connections; issue 32: a client on
the wrong port): the node bounds what it holds and keeps serving everybody else.

"Another address" is 127.0.0.2 (Linux routes all of 127.0.0.0/8 to loopback).
"""

from __future__ import annotations

import contextlib
import resource
import selectors
import socket
import struct
import threading
import time

import pytest

from raftlog import scram
from raftlog.kafka.wire import FrameDecoder as KafkaFrames
from raftlog.kafka.wire import decode_response, encode_request
from raftlog.protocol import Api, ClientConnection, encode_frame
from tests.conftest import NodeProcess, free_ports

ADMIN_PW = "admin-secret-123"
API_VERSIONS_V3 = {"client_software_name": "t", "client_software_version": "1"}
MiB = 1024 * 1024


def start(tmp, name: str, *, sasl: bool = False, kafka: bool = True,
          extra: dict | None = None) -> NodeProcess:
    """A node whose native listener (and Kafka listener, unless ``kafka`` is False) is
    PLAINTEXT, or SASL_PLAINTEXT (SCRAM-SHA-256, user admin) with ``sasl``."""
    port, kport = free_ports(2)
    proto = "SASL_PLAINTEXT" if sasl else "PLAINTEXT"
    props = {"listeners": f"{proto}://127.0.0.1:{port}"}
    if kafka:
        props["kafka.listener"] = f"{proto}://127.0.0.1:{kport}"
    if sasl:
        props.update({"sasl.enabled.mechanisms": "SCRAM-SHA-256",
                      "inter.broker.sasl.username": "admin",
                      "inter.broker.sasl.password": ADMIN_PW,
                      "connection.failed.authentication.delay.ms": "0"})
    node = NodeProcess(str(tmp / name), port, extra={**props, **(extra or {})}).start()
    node.kport = kport if kafka else None
    if kafka:
        _until(lambda: _accepts(kport), "the Kafka listener accepts connections")
    if sasl:  # a node replaying its metadata answers SASL with BROKER_NOT_AVAILABLE
        _until(lambda: _try_login(node), "the admin can log in")
    return node


def _until(condition, what: str, timeout_s: float = 30.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {timeout_s:g} s: {what}")
        time.sleep(0.05)


def _accepts(port: int) -> bool:
    try:
        socket.create_connection(("127.0.0.1", port), timeout=5).close()
        return True
    except OSError:
        return False


def connect(port: int, src: str = "127.0.0.1", timeout_s: float = 10.0) -> socket.socket:
    s = socket.socket()
    s.settimeout(timeout_s)
    s.bind((src, 0))
    s.connect(("127.0.0.1", port))
    return s


def native_call(s: socket.socket, proto: ClientConnection, api: Api, fields: dict,
                body: bytes = b""):
    """One native request; its response header, or None: the node closed."""
    _, data = proto.send_request(api, fields, body)
    try:
        s.sendall(data)
        while (frame := proto.next_response()) is None:
            chunk = s.recv(65536)
            if not chunk:
                return None
            proto.receive_data(chunk)
    except (ConnectionResetError, BrokenPipeError):
        return None
    return frame.header


def kafka_call(s: socket.socket, key: int, version: int, cid: int, body: dict):
    """One Kafka request; the response body, or None: the node closed."""
    dec = KafkaFrames()
    try:
        s.sendall(encode_request(key, version, cid, body))
        while (frame := dec.next_frame()) is None:
            data = s.recv(65536)
            if not data:
                return None
            dec.receive_data(data)
    except (ConnectionResetError, BrokenPipeError):
        return None
    return decode_response(key, version, frame)[1]


def wait_closed(s: socket.socket, timeout_s: float = 10.0) -> bool:
    """True once the node has closed ``s`` (whatever it sent first); False: still open
    after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    try:
        while (left := deadline - time.monotonic()) > 0:
            s.settimeout(left)
            if not s.recv(65536):
                return True
    except (ConnectionResetError, BrokenPipeError):
        return True
    except TimeoutError:
        pass
    return False


def native_login(s: socket.socket, proto: ClientConnection) -> bool:
    """SCRAM-SHA-256 as admin on the native listener; True when authenticated."""
    h = native_call(s, proto, Api.SASL_HANDSHAKE, {"mechanism": "SCRAM-SHA-256"})
    if h is None or h["error"]:
        return False
    client = scram.ScramClient("SCRAM-SHA-256", "admin", ADMIN_PW)
    h = native_call(s, proto, Api.SASL_AUTHENTICATE, {"auth": client.first()})
    if h is None or h["error"]:
        return False
    h = native_call(s, proto, Api.SASL_AUTHENTICATE, {"auth": client.final(h["auth"])})
    return h is not None and not h["error"]


def kafka_login(s: socket.socket) -> bool:
    body = kafka_call(s, 17, 1, 1, {"mechanism": "SCRAM-SHA-256"})
    if body is None or body["error_code"]:
        return False
    client = scram.ScramClient("SCRAM-SHA-256", "admin", ADMIN_PW)
    body = kafka_call(s, 36, 2, 2, {"auth_bytes": client.first()})
    if body is None or body["error_code"]:
        return False
    body = kafka_call(s, 36, 2, 3, {"auth_bytes": client.final(body["auth_bytes"])})
    return body is not None and body["error_code"] == 0


def logs_in(port: int, src: str, kafka: bool = False) -> bool:
    """The admin's SCRAM login from ``src`` succeeds."""
    try:
        with contextlib.closing(connect(port, src)) as s:
            return kafka_login(s) if kafka else native_login(s, ClientConnection())
    except OSError:
        return False


def _try_login(node) -> bool:
    with contextlib.closing(connect(node.port)) as s:
        return native_login(s, ClientConnection())


def served(port: int, src: str) -> bool:
    """A native API_VERSIONS from ``src`` is answered."""
    try:
        with contextlib.closing(connect(port, src)) as s:
            h = native_call(s, ClientConnection(), Api.API_VERSIONS, {})
            return h is not None and h["error"] == 0
    except OSError:
        return False


def kafka_served(port: int, src: str) -> bool:
    try:
        with contextlib.closing(connect(port, src)) as s:
            body = kafka_call(s, 18, 3, 1, API_VERSIONS_V3)
            return body is not None and body["error_code"] == 0
    except OSError:
        return False


def log_lines(node, *needles: str) -> list[str]:
    return [line for line in node.log_text().splitlines() if all(n in line for n in needles)]


def proc_status(pid: int, field: str) -> int:
    """A /proc/PID/status field in bytes (VmRSS, VmHWM)."""
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1]) * 1024
    raise AssertionError(f"no {field} in /proc/{pid}/status")


@contextlib.contextmanager
def open_files_at_least(n: int):
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft >= n:
        yield
        return
    if hard != resource.RLIM_INFINITY and hard < n:
        pytest.skip(f"needs {n} open files; the hard limit is {hard}")
    resource.setrlimit(resource.RLIMIT_NOFILE, (n, hard))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


# ---------------------------------------------------------------------------- slots


def test_half_open_connections_from_one_address_leave_room_for_others(tmp_path):
    """4,200 connections from 127.0.0.1 that never send a byte (as a client that never
    sends its TLS hello) fill more than a listener's 4,096 slots; the node keeps 1,000
    (max.connections.per.ip, counted at accept, both listeners together), closes the
    rest at once with one log line, and still serves 127.0.0.2 on both listeners."""
    attack, per_ip = 4200, 1000
    with open_files_at_least(attack + 512):
        node = start(tmp_path, "n")
        socks: list[socket.socket] = []
        try:
            for _ in range(attack):
                socks.append(connect(node.port))
            sel = selectors.DefaultSelector()
            for s in socks:
                s.setblocking(False)
                sel.register(s, selectors.EVENT_READ)
            closed, deadline = 0, time.monotonic() + 60
            # (>=: the node may still count a connection of start()'s readiness checks)
            while closed < attack - per_ip and time.monotonic() < deadline:
                for key, _ in sel.select(timeout=1.0):
                    try:
                        data = key.fileobj.recv(1)
                    except ConnectionResetError:
                        data = b""
                    assert data == b"", "the node sent bytes unasked"
                    sel.unregister(key.fileobj)
                    closed += 1
            sel.close()
            assert closed >= attack - per_ip, f"{closed} of {attack} closed by the node"
            # another address is served on both listeners; this one is at its limit
            assert served(node.port, "127.0.0.2")
            assert kafka_served(node.kport, "127.0.0.2")
            assert not served(node.port, "127.0.0.1")
            assert not kafka_served(node.kport, "127.0.0.1")
            refused = log_lines(node, "event=connection_refused", "peer=127.0.0.1")
            assert 1 <= len(refused) <= 2, refused  # not one line per refused connection
            assert "max.connections.per.ip" in refused[0]
        finally:
            for s in socks:
                s.close()
        # the slots come back when the connections close
        _until(lambda: served(node.port, "127.0.0.1"), "127.0.0.1 is served again")
        node.stop()


# ---------------------------------------------------------------------------- before login


def _stream_frame(port: int, head: bytes, frame_bytes: int, results: list) -> None:
    """Claim a frame of ``frame_bytes`` and stream it: ("closed", bytes sent) when the
    node closed the connection on the way, ("sent", closed after) when it took all."""
    try:
        s = connect(port, timeout_s=60)
    except OSError as e:
        results.append(("refused", repr(e)))
        return
    chunk, sent = b"\0" * MiB, 0
    try:
        s.sendall(head)
        while sent < frame_bytes:
            s.sendall(chunk)
            sent += len(chunk)
        results.append(("sent", wait_closed(s, 10)))
    except OSError:
        results.append(("closed", sent))
    finally:
        s.close()


def test_big_frames_before_login_are_refused_and_memory_stays_bounded(tmp_path):
    """8 connections (4 per listener) each announce and stream a 95 MB frame before
    logging in: each is closed at its frame head (64 KiB before SASL login), counted as
    a failed login, and the node's peak RSS grows by less than 100 MB (it grew ~800 MB
    when max.frame.bytes applied before login)."""
    node = start(tmp_path, "n", sasl=True,
                 extra={"connection.failed.authentication.max": "1000"})
    try:
        pid = node.proc.pid
        rss_before = proc_status(pid, "VmRSS")
        frame_bytes = 95 * MiB
        heads = ([(node.port, struct.pack("<II", frame_bytes, 16))] * 4
                 + [(node.kport, struct.pack(">ihhi", frame_bytes, 18, 3, 1))] * 4)
        results: list = []
        threads = [threading.Thread(target=_stream_frame, args=(port, head, frame_bytes,
                                                                results))
                   for port, head in heads]
        for t in threads:
            t.start()
        for t in threads:
            t.join(180)
        grown = proc_status(pid, "VmHWM") - rss_before
        assert grown < 100 * MiB, f"peak RSS grew by {grown / MiB:.0f} MiB"
        assert len(results) == 8 and all(kind == "closed" for kind, _ in results), results
        failed = log_lines(node, "event=authentication_failed", "before SASL authentication")
        assert len(failed) == 8, failed
        assert any("listener=kafka" in line for line in failed)
        assert "65536" in failed[0]
        assert _try_login(node)  # the node serves on
        # after login max.frame.bytes applies: a 1 MB frame is read and answered
        with contextlib.closing(connect(node.port)) as s:
            proto = ClientConnection()
            assert native_login(s, proto)
            h = native_call(s, proto, Api.METADATA, {"topics": ["x" * MiB]})
            assert h is not None  # answered (whatever it thinks of the name), not closed
    finally:
        node.stop()


def test_malformed_requests_before_login_close_and_count(tmp_path):
    """Before login a malformed request (native or Kafka) closes the connection and
    counts as a failed login; four of them block the address, not another one."""
    node = start(tmp_path, "n", sasl=True,
                 extra={"connection.failed.authentication.max.per.address": "4"})
    try:
        cases = [
            (node.port, encode_frame({"id": 1, "api": 9999})),  # no such API
            (node.port, encode_frame({"id": 2, "api": int(Api.SASL_HANDSHAKE),
                                      "mechanism": 7})),  # a field of the wrong type
            (node.port, encode_frame({"id": 3, "api": int(Api.SASL_AUTHENTICATE)},
                                     b"x" * (7 * MiB))),  # 7 MB of it
            (node.kport, struct.pack(">ihhi", 10, 17, 1, 1) + b"\xff\xff"),  # lying lengths
        ]
        for i, (port, data) in enumerate(cases):
            with contextlib.closing(connect(port)) as s:
                try:
                    s.sendall(data)
                except (ConnectionResetError, BrokenPipeError):
                    pass
                assert wait_closed(s), f"case {i}: the connection stayed open"
        failed = log_lines(node, "event=authentication_failed", "before SASL authentication")
        assert len(failed) == 4, failed
        assert log_lines(node, "event=address_blocked", "peer=127.0.0.1")
        # blocked: even the admin's correct login from this address is refused (told
        # why at its SASL step: authn.FailureLimiter.check_login) ...
        assert not logs_in(node.port, "127.0.0.1")
        assert not logs_in(node.kport, "127.0.0.1", kafka=True)
        # ... while another address is served
        assert logs_in(node.port, "127.0.0.2") and logs_in(node.kport, "127.0.0.2", kafka=True)
    finally:
        node.stop()


# ---------------------------------------------------------------------------- idle


def test_idle_and_half_sent_connections_are_closed_after_login(tmp_path):
    """connections.max.idle.ms=1000: a logged-in connection that sends nothing, or half
    a frame, is closed (both listeners); one whose long-poll fetch waits 4 s in the
    purgatory is not idle: it gets its answer and goes on."""
    node = start(tmp_path, "n", sasl=True, extra={"connections.max.idle.ms": "1000"})
    try:
        half = ClientConnection().send_request(Api.METADATA, {"topics": None})[1]
        with contextlib.closing(connect(node.port)) as s:
            assert native_login(s, ClientConnection())
            s.sendall(half[: len(half) // 2])
            assert wait_closed(s, 10), "a half-sent frame kept its connection"
        with contextlib.closing(connect(node.port)) as s:
            assert native_login(s, ClientConnection())
            assert wait_closed(s, 10), "an idle connection stayed open"
        with contextlib.closing(connect(node.kport)) as s:
            assert kafka_login(s)
            s.sendall(encode_request(3, 1, 9, {"topics": None})[:7])
            assert wait_closed(s, 10), "a half-sent Kafka frame kept its connection"
        with contextlib.closing(connect(node.port)) as s:
            proto = ClientConnection()
            assert native_login(s, proto)
            h = native_call(s, proto, Api.CREATE_TOPICS, {"topics": [
                {"name": "t", "partitions": 1, "replication_factor": 1}]})
            assert h is not None and h["error"] == 0
            _until(lambda: native_call(s, proto, Api.METADATA, {"topics": ["t"]})
                   ["topics"][0].error == 0, "topic t has a leader")
            started = time.monotonic()
            h = native_call(s, proto, Api.FETCH, {"max_wait_ms": 4000, "min_bytes": 1,
                                                  "parts": [["t", 0, 0, MiB, -1]]})
            assert h is not None and h["error"] == 0, "the long-poll fetch lost its connection"
            assert time.monotonic() - started >= 3.0  # it waited (not answered at once)
            h = native_call(s, proto, Api.METADATA, {"topics": ["t"]})
            assert h is not None and h["error"] == 0
    finally:
        node.stop()


# ---------------------------------------------------------------------------- wrong port


def test_kafka_client_on_native_port_and_back_get_one_hint(tmp_path):
    """A Kafka client on the native listener and a raftlog client on the Kafka listener
    are closed with one log line naming the right port, however often they retry."""
    pytest.importorskip("confluent_kafka")
    import confluent_kafka
    from confluent_kafka.admin import AdminClient

    from raftlog.client import Admin

    node = start(tmp_path, "n")
    try:
        kafka_at, native_at = f"127.0.0.1:{node.kport}", f"127.0.0.1:{node.port}"
        for cid in range(3):
            with contextlib.closing(connect(node.port)) as s:
                assert kafka_call(s, 18, 3, cid, API_VERSIONS_V3) is None
        admin = AdminClient({"bootstrap.servers": native_at, "log_level": 0})
        with pytest.raises(confluent_kafka.KafkaException):
            admin.list_topics(timeout=3)
        del admin
        hints = log_lines(node, "event=wrong_protocol")
        assert len(hints) == 1, hints
        assert (f"a Kafka client connected to the native listener {native_at}; Kafka clients "
                f"use kafka.listener {kafka_at}") in hints[0]
        assert "exceeds the maximum" not in node.log_text()

        for _ in range(3):
            with contextlib.closing(connect(node.kport)) as s:
                assert native_call(s, ClientConnection(), Api.API_VERSIONS, {}) is None
        with pytest.raises(Exception), Admin(kafka_at, request_timeout_ms=3000) as a:  # noqa: B017
            a.list_topics()
        hints = log_lines(node, "event=wrong_protocol", "listener=kafka")
        assert len(hints) == 1, hints
        assert (f"a raftlog client connected to the Kafka listener {kafka_at}; raftlog "
                f"clients use the native listener {native_at}") in hints[0]
        assert "exceeds the maximum" not in node.log_text()
        assert served(node.port, "127.0.0.1") and kafka_served(node.kport, "127.0.0.1")
    finally:
        node.stop()
    lone = start(tmp_path, "lone", kafka=False)
    try:
        with contextlib.closing(connect(lone.port)) as s:
            assert kafka_call(s, 18, 3, 1, API_VERSIONS_V3) is None
        hints = log_lines(lone, "event=wrong_protocol")
        assert len(hints) == 1 and "no Kafka listener is configured: set kafka.listener" in hints[0]
    finally:
        lone.stop()


def test_tls_clients_on_plaintext_listeners_are_closed_at_once_with_a_hint(tmp_path):
    """A client given TLS settings for a plaintext node (the reverse of forgetting
    them): closed at once -- not left to time out its handshake -- the SDK saying to use
    PLAINTEXT, the node logging one line per listener."""
    from raftlog.client import Admin
    from raftlog.client.errors import BrokerNotAvailableError
    from tests.certs import make_certs

    certs = make_certs(str(tmp_path / "certs"))
    node = start(tmp_path, "n")
    try:
        t0 = time.monotonic()
        with pytest.raises(BrokerNotAvailableError, match="use security_protocol PLAINTEXT"):
            with Admin(f"127.0.0.1:{node.port}", security_protocol="SSL",
                       ssl_cafile=certs.cafile, request_timeout_ms=10_000) as a:
                a.list_topics()
        assert time.monotonic() - t0 < 10  # (the handshake's own timeout is 15 s)
        hint = "a TLS client connected to the plaintext listener 127.0.0.1:{}"
        assert any(hint.format(node.port) in h for h in log_lines(node, "event=wrong_protocol"))
        import ssl

        ctx = ssl.create_default_context(cafile=certs.cafile)
        with contextlib.closing(connect(node.kport)) as s:  # a Kafka client's handshake
            with pytest.raises((ssl.SSLError, OSError)):
                ctx.wrap_socket(s, server_hostname="127.0.0.1")
        assert any(hint.format(node.kport) in h
                   for h in log_lines(node, "event=wrong_protocol", "listener=kafka"))
        # a first native frame whose length's low byte is 0x16 (a TLS record's first
        # byte) is a request like any other, not a TLS client
        for k in range(300):
            fields = {"topics": ["t" * k]}
            data = ClientConnection().send_request(Api.METADATA, fields)[1]
            if (len(data) - 4) & 0xFF == 0x16:
                break
        assert data[0] == 0x16, data[:4]
        with contextlib.closing(connect(node.port)) as s:
            h = native_call(s, ClientConnection(), Api.METADATA, fields)
            assert h is not None and "brokers" in h, h
        assert served(node.port, "127.0.0.1") and kafka_served(node.kport, "127.0.0.1")
    finally:
        node.stop()
