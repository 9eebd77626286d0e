"""Plain non-blocking stdlib sockets driven by trio's readiness waits.

A syscall that succeeds costs no trio checkpoint: trio's SocketStream pays two per
call (~100 us per request round trip measured here), which the server's request loop
and the replica fetchers cannot afford on the replication path. The caller owns the
socket and is its only reader and writer.

The same calls drive a non-blocking ``ssl.SSLSocket`` (TLS listeners and peers):
its "would block" errors say which readiness to wait for (a TLS read may need to
write and a write to read), and OpenSSL's buffered plaintext is read before waiting.
A retried TLS send passes the same unsent bytes first, as OpenSSL requires.
"""

from __future__ import annotations

import errno
import os
import socket
import ssl

import trio


async def recv_into(sock, buf: bytearray) -> tuple[memoryview, bool]:
    """Receive into ``buf``: (view of the bytes, waited). Empty means the peer closed.

    A reused buffer, because recv(256 KiB) mallocs (mmaps) a fresh object per call.
    """
    try:
        return memoryview(buf)[: sock.recv_into(buf)], False
    except (BlockingIOError, ssl.SSLWantReadError):
        pass
    except ssl.SSLWantWriteError:
        await trio.lowlevel.wait_writable(sock)
    while True:
        await trio.lowlevel.wait_readable(sock)
        try:
            return memoryview(buf)[: sock.recv_into(buf)], True
        except (BlockingIOError, ssl.SSLWantReadError):
            continue
        except ssl.SSLWantWriteError:
            await trio.lowlevel.wait_writable(sock)


async def tls_recv_into(sock, buf: bytearray) -> tuple[memoryview, bool]:
    """recv_into for an SSLSocket: one TLS record per call is at most 16 KiB, so also take
    the further records already received (OpenSSL's buffer, then the kernel's), up to
    the buffer's size, until a read would block (fewer turns of the request loop per
    large request)."""
    view, waited = await recv_into(sock, buf)
    n = len(view)
    if not n:
        return view, waited
    whole = memoryview(buf)
    while n < len(buf):
        try:
            got = sock.recv_into(whole[n:])
        except (BlockingIOError, ssl.SSLWantReadError, ssl.SSLWantWriteError):
            break
        if not got:
            break
        n += got
    return whole[:n], waited


async def send_all(sock, data) -> None:
    with memoryview(data) as view:
        total, sent = len(view), 0
        while sent < total:
            try:
                sent += sock.send(view[sent:])
            except (BlockingIOError, ssl.SSLWantWriteError):
                await trio.lowlevel.wait_writable(sock)
            except ssl.SSLWantReadError:
                await trio.lowlevel.wait_readable(sock)


async def tls_handshake(sock: ssl.SSLSocket) -> None:
    """Complete the handshake of a non-blocking SSLSocket (no timeout of its own: wrap
    the call in ``trio.fail_after``). Raises ssl.SSLError / OSError."""
    while True:
        try:
            sock.do_handshake()
            return
        except ssl.SSLWantReadError:
            await trio.lowlevel.wait_readable(sock)
        except ssl.SSLWantWriteError:
            await trio.lowlevel.wait_writable(sock)


async def connect(host: str, port: int) -> socket.socket:
    """A connected non-blocking TCP socket with TCP_NODELAY (no timeout of its own:
    wrap the call in ``trio.fail_after``). Raises OSError."""
    infos = await trio.socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    if not infos:
        raise OSError(f"cannot resolve {host}:{port}")
    family, type_, proto, _, addr = infos[0]
    sock = socket.socket(family, type_, proto)
    try:
        sock.setblocking(False)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        err = sock.connect_ex(addr)
        if err not in (0, errno.EINPROGRESS):
            raise OSError(err, f"connect to {host}:{port}: {errno.errorcode.get(err, err)}")
        if err:
            await trio.lowlevel.wait_writable(sock)
            err = sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
            if err:
                raise OSError(err, f"connect to {host}:{port}: {errno.errorcode.get(err, err)}")
        return sock
    except BaseException:
        close(sock)
        raise


def close(sock) -> None:
    """Close ``sock``, waking any task trio has parked on it first."""
    trio.lowlevel.notify_closing(sock)
    sock.close()


async def accept_loop(listener, handle, events, nursery) -> None:
    """Accept connections on a non-blocking listening socket forever; each one is
    ``handle(sock, peer address)`` in a task of ``nursery``. Running out of file
    descriptors (EMFILE and friends) backs off and keeps serving."""
    while True:
        await trio.lowlevel.wait_readable(listener)
        try:
            conn, peer = listener.accept()
        except (BlockingIOError, ConnectionAbortedError):
            continue
        except OSError as e:
            events.warning("accept_failed", error=e)
            await trio.sleep(0.1)
            continue
        nursery.start_soon(handle, conn, peer)


def listen(host: str, port: int, what: str) -> socket.socket:
    """A non-blocking listening socket on ``host:port``; ``what`` names the listener
    (its config key) in the error.

    Raises:
        OSError: the address cannot be bound, with a message that names it and says
            what to do (the node's start-up error, shown by ``raftlog up``).
    """
    try:
        sock = socket.create_server((host, port), backlog=1024, reuse_port=False)
    except OSError as e:
        hint = {errno.EADDRINUSE: "another process listens there: stop it or choose "
                                  "another port",
                errno.EADDRNOTAVAIL: "no interface of this machine has that address",
                errno.EACCES: "ports below 1024 need privileges: choose a higher one"}
        raise OSError(e.errno, f"cannot listen on {host}:{port} ({what}): {os.strerror(e.errno)}"
                      + (f"; {hint[e.errno]}" if e.errno in hint else "")) from None
    except OverflowError:
        raise OSError(errno.EINVAL, f"cannot listen on {host}:{port} ({what}): the port "
                                    "must be between 0 and 65535") from None
    sock.setblocking(False)
    return sock
