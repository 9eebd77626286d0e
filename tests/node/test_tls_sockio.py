"""sockio and the Outbox over a non-blocking TLS socket: file slices never go out with
sendfile (that would put plaintext on the wire); big sends survive a full socket."""

from __future__ import annotations

import os
import socket
import threading

import pytest
import trio

from raftlog.node import sockio
from raftlog.node.outbox import Outbox
from raftlog.segment import FileSlice
from raftlog.tls import client_context, server_context
from tests.certs import make_certs


class _File:
    def __init__(self, fd):
        self.fd = fd


@pytest.fixture(scope="module")
def certs(tmp_path_factory):
    c = make_certs(str(tmp_path_factory.mktemp("c")))
    c.server = c.issue("s", "s")
    return c


async def test_outbox_sends_file_slices_through_tls(certs, tmp_path):
    data = os.urandom(3 * 1024 * 1024 + 17)
    path = tmp_path / "seg"
    path.write_bytes(data)
    fd = os.open(path, os.O_RDONLY)
    a, b = socket.socketpair()
    a.setblocking(False)
    server = server_context(*certs.server).wrap_socket(a, server_side=True,
                                                       do_handshake_on_connect=False)
    got: list = []

    def client():
        with client_context(certs.cafile).wrap_socket(b, server_hostname="localhost") as c:
            c.settimeout(30)
            want = 6 + len(data) + 4
            buf = b""
            while len(buf) < want:
                chunk = c.recv(1 << 20)
                if not chunk:
                    break
                buf += chunk
            got.append(buf)

    t = threading.Thread(target=client)
    t.start()
    try:
        await sockio.tls_handshake(server)
        out = Outbox()
        out.add(b"head|")
        out.add(b"!")
        out.add_slice(FileSlice(_File(fd), 0, len(data), 0, 1))
        out.add(b"|end")
        await out.flush(server)
        await trio.to_thread.run_sync(t.join, 30)
    finally:
        os.close(fd)
        server.close()
    assert got and got[0] == b"head|!" + data + b"|end"


async def test_recv_into_reads_all_buffered_tls_records(certs):
    a, b = socket.socketpair()
    a.setblocking(False)
    server = server_context(*certs.server).wrap_socket(a, server_side=True,
                                                       do_handshake_on_connect=False)
    payload = os.urandom(200_000)  # many TLS records

    def client():
        with client_context(certs.cafile).wrap_socket(b, server_hostname="localhost") as c:
            c.sendall(payload)
            c.recv(1)

    t = threading.Thread(target=client)
    t.start()
    await sockio.tls_handshake(server)
    buf = bytearray(256 * 1024)
    got = b""
    with trio.fail_after(30):
        while len(got) < len(payload):
            chunk, _ = await sockio.tls_recv_into(server, buf)
            assert chunk
            got += bytes(chunk)
    assert got == payload
    await sockio.send_all(server, b"x")
    await trio.to_thread.run_sync(t.join, 30)
    server.close()
