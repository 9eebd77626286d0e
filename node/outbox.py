"""A connection's responses waiting to be sent, in request order.

Pieces are bytes (coalesced into one ``send``), file slices (``os.sendfile``) and
Deferred places: the answer of a request parked in the purgatory (a long-poll fetch,
an acks=all produce). Answers after a Deferred wait behind it, so responses leave in
request order while later requests are already handled -- Kafka's pipelining rule.
"""

from __future__ import annotations

import errno
import os
import ssl

import trio

from .sockio import send_all as _send_all

#: Ready bytes sent at once by try_send_now (more goes through an async flush).
SEND_NOW_MAX_BYTES = 256 * 1024
#: Ready bytes pieces smaller than this are joined into one send with their
#: neighbours; larger ones (a fetch's records) are sent as they are, never copied.
JOIN_MAX_BYTES = 32 * 1024
#: sendfile cannot cross TLS: a file slice goes out read + sent in chunks of this size
#: (the per-connection bound on what the fallback holds in memory).
TLS_SLICE_CHUNK_BYTES = 256 * 1024


class Deferred:
    """The place of a response that is not ready yet; filled once with its pieces."""

    __slots__ = ("pieces",)

    def __init__(self) -> None:
        self.pieces: list | None = None


def _piece_size(p) -> int:
    return len(p) if isinstance(p, (bytes, bytearray, memoryview)) else p.length


class Outbox:
    """One flush at a time: the connection's reader, or whoever fills a Deferred while
    the reader is blocked in recv. A flush whose sends all succeed at once never yields
    (no lock, no checkpoint: a trio.Lock costs a trip through the scheduler per
    response); only a flush that finds the socket full parks, and another flusher
    arriving meanwhile waits for it to finish."""

    __slots__ = ("pieces", "size", "deferred", "places", "room", "flushing", "idle")

    def __init__(self) -> None:
        self.pieces: list = []
        self.size = 0
        self.deferred = 0  # Deferred places not yet filled
        self.places = 0  # Deferred places in pieces, filled or not
        self.room = trio.Event()  # set when a Deferred is filled (reader waits for room)
        self.flushing = False  # a flush is under way (parked on a full socket)
        self.idle: trio.Event | None = None  # set when that flush ends, if anyone waits

    def add(self, data: bytes) -> None:
        self.pieces.append(data)
        self.size += len(data)

    def add_pieces(self, pieces: list) -> None:
        """One response as pieces (bytes-like and file slices), in order."""
        self.pieces.extend(pieces)
        self.size += sum(_piece_size(p) for p in pieces)

    def add_slice(self, sl) -> None:
        self.pieces.append(sl)
        self.size += sl.length

    def add_deferred(self) -> Deferred:
        d = Deferred()
        self.pieces.append(d)
        self.deferred += 1
        self.places += 1
        return d

    def fill(self, d: Deferred, pieces: list) -> None:
        assert d.pieces is None, "a deferred answer is filled once"
        d.pieces = pieces
        self.size += sum(_piece_size(p) for p in pieces)
        self.deferred -= 1
        self.room.set()
        self.room = trio.Event()

    def _take_ready(self) -> list:
        """Remove and return the pieces up to the first unfilled Deferred."""
        pieces = self.pieces
        if not self.places:
            self.pieces = []
            return pieces
        ready: list = []
        for i, p in enumerate(pieces):
            if type(p) is Deferred:
                if p.pieces is None:
                    self.pieces = pieces[i:]
                    return ready
                ready.extend(p.pieces)
                self.places -= 1
            else:
                ready.append(p)
        self.pieces = []
        return ready

    def try_send_now(self, sock) -> bool:
        """Send what is ready without waiting: True when nothing ready is left unsent.

        False (the rest stays first in line) when a flush is under way, the socket is
        full, or a file slice or more than SEND_NOW_MAX_BYTES is ready: then the caller
        runs :meth:`flush` in a task. Raises OSError as send does."""
        if self.flushing:
            return False
        pieces = self.pieces
        if not pieces or type(pieces[0]) is Deferred and pieces[0].pieces is None:
            return True
        ready = self._take_ready()
        size = 0
        for p in ready:
            if not isinstance(p, (bytes, bytearray, memoryview)):
                size = -1
                break
            size += len(p)
        if size < 0 or size > SEND_NOW_MAX_BYTES:
            self.pieces[:0] = ready
            return False
        data = ready[0] if len(ready) == 1 else b"".join(ready)
        try:
            n = sock.send(data)
        except (BlockingIOError, ssl.SSLWantWriteError, ssl.SSLWantReadError):
            n = 0
        self.size -= n
        if n < size:
            self.pieces.insert(0, memoryview(data)[n:])
            return False
        return True

    async def flush(self, sock) -> None:
        """Send every piece up to the first Deferred still unfilled."""
        while self.flushing:
            if self.idle is None:
                self.idle = trio.Event()
            await self.idle.wait()
        self.flushing = True
        try:
            await self._flush_pieces(sock)
        finally:
            self.flushing = False
            idle, self.idle = self.idle, None
            if idle is not None:
                idle.set()

    async def _flush_pieces(self, sock) -> None:
        run: list = []
        for p in self._take_ready():
            if isinstance(p, (bytes, bytearray, memoryview)):
                if len(p) < JOIN_MAX_BYTES:
                    run.append(p)
                    continue
            if run:
                data = run[0] if len(run) == 1 else b"".join(run)
                run = []
                await _send_all(sock, data)
                self.size -= len(data)
            if isinstance(p, (bytes, bytearray, memoryview)):  # large: sent as it is
                await _send_all(sock, p)
                self.size -= len(p)
                continue
            await _sendfile(sock, p)
            self.size -= p.length
        if run:
            data = run[0] if len(run) == 1 else b"".join(run)
            await _send_all(sock, data)
            self.size -= len(data)


async def _sendfile(sock, sl) -> None:
    """Send a file slice with os.sendfile, waiting for writability (non-blocking socket)."""
    offset, remaining = sl.position, sl.length
    if isinstance(sock, ssl.SSLSocket):  # never sendfile past TLS: plaintext on the wire
        while remaining:
            chunk = os.pread(sl.fileno, min(remaining, TLS_SLICE_CHUNK_BYTES), offset)
            if not chunk:
                raise BrokenPipeError("file slice shrank during send")
            await _send_all(sock, chunk)
            offset += len(chunk)
            remaining -= len(chunk)
        return
    fd = sock.fileno()
    while remaining:
        try:
            n = os.sendfile(fd, sl.fileno, offset, remaining)
        except BlockingIOError:
            await trio.lowlevel.wait_writable(sock)
            continue
        except OSError as e:
            if e.errno in (errno.EINVAL, errno.ENOSYS):  # e.g. TLS or exotic fs: fall back
                await _send_all(sock, os.pread(sl.fileno, remaining, offset))
                return
            raise
        if n == 0:
            # The file shrank under us (truncation): the frame length is already sent, so the
            # stream is unusable. Close the connection; the client retries.
            raise BrokenPipeError("file slice shrank during sendfile")
        offset += n
        remaining -= n
