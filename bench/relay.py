"""A minimal trio relay speaking raftlog's frames: the floor a Python node stands on.

    python bench/relay.py [--port 0]      # prints the port it listens on

It serves PRODUCE and FETCH of the sans-IO codec and nothing else: a produced batch is
stamped with its base offset, ``os.write``n to a file, kept in a list and acknowledged;
a FETCH at the end of the list waits (long-poll) until a batch arrives, then gets every
batch from its offset on. No segments, indexes, validation of batches, replication,
metadata or flushing; the log lives in memory for the run. ``bench/latency_floor.py --relay`` runs it beside the node in one
run, with the same clients, so their ratio is the node's own cost.
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
    FrameDecoder,
    encode_frame,
    encode_frame_head,
    error_response,
    parse_request,
)

RECV_BYTES = 1 << 16


class Relay:
    """The relay's state: one log (every topic and partition share it)."""

    def __init__(self, path: str):
        self.fd = os.open(path, os.O_CREAT | os.O_WRONLY | os.O_APPEND, 0o600)
        self.batches: list[bytes] = []
        self.offsets: list[int] = []  # base offset of each batch
        self.next_offset = 0
        self.arrived = trio.Event()

    def produce(self, req) -> dict:
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
        return {"parts": parts}

    async def fetch(self, req) -> tuple[dict, bytes]:
        topic, partition, offset, _max, _epoch = req.fields["parts"][0]
        while offset >= self.next_offset:
            with trio.move_on_after(req.fields["max_wait_ms"] / 1000):
                await self.arrived.wait()
            if offset >= self.next_offset:
                break
        first = max(0, bisect.bisect_right(self.offsets, offset) - 1)  # the batch holding it
        body = b"".join(self.batches[first:])
        return {"parts": [[topic, partition, 0, self.next_offset, 0, len(body), ""]]}, body

    async def serve(self, stream: trio.SocketStream) -> None:
        """One client; a malformed frame closes its connection, never the relay."""
        try:
            await self._serve(stream)
        except (RemoteProtocolError, trio.BrokenResourceError, CorruptRecordError) as e:
            print(f"relay: closing a connection: {e}", file=sys.stderr, flush=True)
            await stream.aclose()

    async def _serve(self, stream: trio.SocketStream) -> None:
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
                    await stream.send_all(encode_frame(error_response(e.request_id, e.code,
                                                                      e.message)))
                    continue
                if req.api == Api.PRODUCE:
                    header = self.produce(req)
                    header.update(id=req.id, error=0)
                    await stream.send_all(encode_frame(header))
                elif req.api == Api.FETCH:
                    header, body = await self.fetch(req)
                    header.update(id=req.id, error=0)
                    await stream.send_all(encode_frame_head(header, len(body)) + body)
                else:
                    await stream.send_all(encode_frame(
                        {"id": req.id, "error": 35, "message": f"{req.api.name} not served"}))


async def _main(port: int, task_status=trio.TASK_STATUS_IGNORED) -> None:
    path = tempfile.mktemp(prefix="raftlog-relay-")
    relay = Relay(path)
    try:
        listeners = await trio.open_tcp_listeners(port, host="127.0.0.1")
        task_status.started(listeners[0].socket.getsockname()[1])
        await trio.serve_listeners(relay.serve, listeners)
    finally:
        os.close(relay.fd)
        os.unlink(path)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--port", type=int, default=0)
    args = ap.parse_args()

    async def run():
        async with trio.open_nursery() as n:
            port = await n.start(_main, args.port)
            print(port, flush=True)

    try:
        trio.run(run)
    except KeyboardInterrupt:
        pass


if __name__ == "__main__":
    main()
