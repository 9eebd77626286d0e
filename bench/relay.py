"""A minimal trio relay speaking raftlog's frames: the floor a Python node stands on.

    python bench/relay.py [--port 0] [--replicas N] [--sync]     # a leader; prints its port
    python bench/relay.py --follow HOST:PORT --replica-id I [--sync]   # one of its followers

It serves PRODUCE and FETCH of the sans-IO codec and nothing else: a produced batch is
stamped with its base offset, ``os.write``n to a file, kept in a list and acknowledged;
a FETCH at the end of the list waits (long-poll) until a batch arrives, then gets every
batch from its offset on. No segments, indexes, validation of batches, replication,
metadata or flushing; the log lives in memory for the run. ``bench/latency_floor.py --relay`` runs it beside the node in one
run, with the same clients, so their ratio is the node's own cost.

Replicated (the floor of raftlog's RF3 path, ``latency_floor.py --replication-factor 3``):
a leader started with ``--replicas N`` has N-1 followers (``--follow``) that long-poll it
with FETCH (``replica_id`` >= 0) and append what they get; the offset a follower fetches
from is what it holds. The leader's high watermark is the least of its own end and its
followers' offsets; an acks=all (-1) produce is answered, and consumers see a record,
once the high watermark passes it. With ``--sync`` (write.caching=false's shape) a
follower fdatasyncs what it appended before it fetches again, and the leader's end
counts only once its own fdatasync (one in flight, in a worker thread, covering all
appended before it started: a group commit) has returned; acks=1 then waits for it too.
"""

from __future__ import annotations

import argparse
import bisect
import os
import sys
import tempfile

import trio

from raftlog import records
from raftlog.errors import CorruptRecordError, RemoteProtocolError
from raftlog.protocol import (
    Api,
    BadRequest,
    ClientConnection,
    FrameDecoder,
    encode_frame,
    encode_frame_head,
    error_response,
    parse_request,
)

RECV_BYTES = 1 << 16
#: Produces of one connection appended and waiting for their answer, at most.
MAX_PIPELINED = 1024


class Relay:
    """The relay's state: one log (every topic and partition share it)."""

    def __init__(self, path: str, replicas: int = 1, sync: bool = False):
        self.fd = os.open(path, os.O_CREAT | os.O_WRONLY | os.O_APPEND, 0o600)
        self.batches: list[bytes] = []
        self.offsets: list[int] = []  # base offset of each batch
        self.next_offset = 0
        self.arrived = trio.Event()
        self.replicas = replicas
        self.sync = sync
        #: replica id -> the offset it last fetched from (what it holds; on disk with sync)
        self.followers: dict[int, int] = {}
        self.flushed = 0  # (with sync) below this, the leader's own log is on disk
        self.hw = 0
        self.hw_moved = trio.Event()
        self._syncing = False
        self.nursery: trio.Nursery | None = None

    def _own_end(self) -> int:
        return self.flushed if self.sync else self.next_offset

    def _advance_hw(self) -> None:
        if len(self.followers) < self.replicas - 1:
            return  # (a follower not yet heard from holds nothing)
        hw = min([self._own_end(), *self.followers.values()])
        if hw > self.hw:
            self.hw = hw
            self.hw_moved.set()
            self.hw_moved = trio.Event()

    async def _sync_loop(self) -> None:
        """Group commit: one fdatasync in flight; each covers all appended before it."""
        try:
            while self.flushed < self.next_offset:
                target = self.next_offset
                await trio.to_thread.run_sync(os.fdatasync, self.fd)
                self.flushed = target
                self._advance_hw()
        finally:
            self._syncing = False

    async def _wait_hw(self, offset: int, until) -> None:
        while until() < offset:
            await self.hw_moved.wait()

    async def acknowledge(self, end: int, acks: int) -> None:
        """Wait until a produce appended below ``end`` may be answered."""
        if acks == -1:
            await self._wait_hw(end, lambda: self.hw)
        elif acks == 1 and self.sync:
            await self._wait_hw(end, lambda: self.flushed)

    def append(self, req) -> dict:
        parts, body, pos = [], req.body, 0
        for topic, partition, n in req.fields["parts"]:
            batch = bytearray(body[pos:pos + n])
            pos += n
            h = records.read_header(batch, 0)
            base = self.next_offset
            records.stamp(batch, 0, base, 0)
            os.write(self.fd, batch)
            self.batches.append(bytes(batch))
            self.offsets.append(base)
            self.next_offset = base + h.last_offset_delta + 1
            parts.append([topic, partition, 0, base, -1, ""])
        self.arrived.set()
        self.arrived = trio.Event()
        if self.sync and not self._syncing:
            self._syncing = True
            self.nursery.start_soon(self._sync_loop)
        self._advance_hw()
        return {"parts": parts}

    async def fetch(self, req) -> tuple[dict, bytes]:
        topic, partition, offset, _max, _epoch = req.fields["parts"][0]
        replica = req.fields["replica_id"]
        if replica >= 0:  # a follower: its offset is what it holds; it reads to the end
            # (--overlap followers fetch before their sync: they say what is on disk)
            flushed = req.fields.get("flushed")
            held = max(f[2] for f in flushed) if flushed else offset
            self.followers[replica] = max(self.followers.get(replica, 0), held)
            self._advance_hw()
            limit = lambda: self.next_offset  # noqa: E731
            moved = lambda: self.arrived  # noqa: E731
        else:  # a consumer reads below the high watermark
            limit = lambda: self.hw  # noqa: E731
            moved = lambda: self.hw_moved  # noqa: E731
        with trio.move_on_after(req.fields["max_wait_ms"] / 1000):
            while offset >= limit():
                await moved().wait()
        end = limit()
        first = max(0, bisect.bisect_right(self.offsets, offset) - 1)  # the batch holding it
        last = bisect.bisect_left(self.offsets, end)  # batches starting below the limit
        body = b"".join(self.batches[first:last]) if offset < end else b""
        return {"parts": [[topic, partition, 0, self.hw, 0, len(body), ""]]}, body

    async def serve(self, stream: trio.SocketStream) -> None:
        """One client; a malformed frame closes its connection, never the relay.

        Produces are appended as they are read and answered in order by a second task
        (up to MAX_PIPELINED waiting), so a client may pipeline acks=all produces as the
        node lets it; a FETCH is answered before the next request is read."""
        lock = trio.Lock()

        async def send(data: bytes) -> None:
            async with lock:
                await stream.send_all(data)

        acks_in, acks_out = trio.open_memory_channel(MAX_PIPELINED)
        try:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(self._answer_produces, acks_out, send)
                await self._serve(stream, acks_in, send)
                nursery.cancel_scope.cancel()  # (the client left: its waiting acks too)
        except* (RemoteProtocolError, trio.BrokenResourceError, CorruptRecordError) as eg:
            print(f"relay: closing a connection: {eg.exceptions[0]}", file=sys.stderr,
                  flush=True)
            await stream.aclose()

    async def _answer_produces(self, queue, send) -> None:
        async for req_id, header, end, acks in queue:
            await self.acknowledge(end, acks)
            header.update(id=req_id, error=0)
            await send(encode_frame(header))

    async def _serve(self, stream: trio.SocketStream, acks, send) -> None:
        decoder = FrameDecoder()
        while True:
            data = await stream.receive_some(RECV_BYTES)
            if not data:
                return
            decoder.receive_data(data)
            while (frame := decoder.next_frame()) is not None:  # garbage: RemoteProtocolError
                try:
                    req = parse_request(frame)
                except BadRequest as e:
                    await send(encode_frame(error_response(e.request_id, e.code, e.message)))
                    continue
                if req.api == Api.PRODUCE:
                    header = self.append(req)
                    await acks.send((req.id, header, self.next_offset, req.fields["acks"]))
                elif req.api == Api.FETCH:
                    header, body = await self.fetch(req)
                    header.update(id=req.id, error=0)
                    await send(encode_frame_head(header, len(body)) + body)
                else:
                    await send(encode_frame(
                        {"id": req.id, "error": 35, "message": f"{req.api.name} not served"}))


async def follow(leader: str, replica_id: int, sync: bool, path: str,
                 overlap: bool = False, wait_ms: int = 500) -> None:
    """A follower: long-poll the leader from its own end, append what comes (and
    fdatasync it with ``sync``) before the next fetch tells the leader it holds it.

    With ``overlap`` (and ``sync``) the next fetch goes out before the fdatasync (data
    that reaches the leader meanwhile is on its way), and once the sync returns a
    report (a FETCH that waits for nothing) tells the leader what is on disk over a
    second connection; each fetch also names the flushed offset (``flushed``)."""
    fd = os.open(path, os.O_CREAT | os.O_WRONLY | os.O_APPEND, 0o600)
    host, port = leader.rsplit(":", 1)
    stream = await trio.open_tcp_stream(host, int(port))  # (TCP_NODELAY: trio's default)
    conn, offset, flushed = ClientConnection(), 0, 0

    def fetch(c: ClientConnection, at: int, wait_ms: int, max_bytes: int = 1 << 20) -> bytes:
        fields = {"replica_id": replica_id, "max_wait_ms": wait_ms, "min_bytes": 1,
                  "max_bytes": max_bytes, "parts": [["relay", 0, at, max_bytes, -1]]}
        if overlap:
            fields["flushed"] = [["relay", 0, flushed]]
        return c.send_request(Api.FETCH, fields)[1]

    async def reports(stream, rconn) -> None:  # (their answers, read and dropped)
        while (chunk := await stream.receive_some(RECV_BYTES)):
            rconn.receive_data(chunk)
            while rconn.next_response() is not None:
                pass

    try:
        async with trio.open_nursery() as nursery:
            report, rconn = None, ClientConnection()
            if overlap:
                report = await trio.open_tcp_stream(host, int(port))
                nursery.start_soon(reports, report, rconn)
            await stream.send_all(fetch(conn, offset, wait_ms))
            while True:
                while (frame := conn.next_response()) is None:
                    chunk = await stream.receive_some(RECV_BYTES)
                    if not chunk:
                        raise SystemExit("relay follower: the leader closed the connection")
                    conn.receive_data(chunk)
                body = bytes(frame.body)
                if body:
                    os.write(fd, body)
                    pos = 0
                    while pos < len(body):
                        h = records.read_header(body, pos)
                        offset = h.base_offset + h.last_offset_delta + 1
                        pos += h.size
                if overlap:
                    await stream.send_all(fetch(conn, offset, wait_ms))
                if body and sync:
                    os.fdatasync(fd)  # (inline: the follower's next fetch waits for it anyway)
                    flushed = offset
                    if overlap:  # (a report: from past any end, waiting for nothing)
                        await report.send_all(fetch(rconn, 1 << 60, 0, max_bytes=0))
                if not overlap:
                    await stream.send_all(fetch(conn, offset, wait_ms))
    finally:
        os.close(fd)
        os.unlink(path)


async def _main(port: int, replicas: int = 1, sync: bool = False,
                task_status=trio.TASK_STATUS_IGNORED) -> None:
    path = tempfile.mktemp(prefix="raftlog-relay-")
    relay = Relay(path, replicas, sync)
    try:
        async with trio.open_nursery() as nursery:
            relay.nursery = nursery
            listeners = await trio.open_tcp_listeners(port, host="127.0.0.1")
            task_status.started(listeners[0].socket.getsockname()[1])
            await trio.serve_listeners(relay.serve, listeners)
    finally:
        os.close(relay.fd)
        os.unlink(path)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--port", type=int, default=0)
    ap.add_argument("--replicas", type=int, default=1,
                    help="as leader: wait for N-1 followers (--follow) before the HW moves")
    ap.add_argument("--sync", action="store_true",
                    help="fdatasync before a record counts (write.caching=false's shape)")
    ap.add_argument("--overlap", action="store_true",
                    help="as a --sync follower: fetch again before the fdatasync and report "
                         "what is on disk once it returns (over a second connection)")
    ap.add_argument("--follow", metavar="HOST:PORT", help="run as a follower of this leader")
    ap.add_argument("--fetch-wait-ms", type=int, default=500,
                    help="as a follower: the long poll of its fetches")
    ap.add_argument("--replica-id", type=int, default=1)
    args = ap.parse_args()
    if args.replicas < 1:
        raise SystemExit("--replicas must be >= 1")

    async def run():
        if args.follow:
            print(0, flush=True)
            await follow(args.follow, args.replica_id, args.sync,
                         tempfile.mktemp(prefix="raftlog-relay-follower-"), args.overlap,
                         args.fetch_wait_ms)
            return
        async with trio.open_nursery() as n:
            port = await n.start(_main, args.port, args.replicas, args.sync)
            print(port, flush=True)

    try:
        trio.run(run)
    except KeyboardInterrupt:
        pass


if __name__ == "__main__":
    main()
