"""The node's own end-to-end latency floor: no SDK, no client threads.

    python bench/latency_floor.py [--bootstrap HOST:PORT] [--rate 1000] [--n 8000] [--json]

One process sends one PRODUCE (acks=1, one 100-byte record) at a time on a blocking
socket; another long-polls FETCH on its own socket; both use the sans-IO codec
directly. The difference between this and ``bench/throughput.py``'s latency is what
the SDK adds. Starts its own node unless ``--bootstrap`` is given.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time

from raftlog import records
from raftlog.client import Admin
from raftlog.protocol import Api, ClientConnection

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from throughput import latency_summary, start_node  # noqa: E402  (bench/, beside this file)

VALUE_BYTES = 100


def _connect(bootstrap: str):
    host, port = bootstrap.split(",")[0].rsplit(":", 1)
    s = socket.create_connection((host, int(port)))
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return s, ClientConnection()


def _call(s, c, api, fields, body=b""):
    _, data = c.send_request(api, fields, body)
    s.sendall(data)
    while (frame := c.next_response()) is None:
        chunk = s.recv(1 << 20)
        if not chunk:
            raise SystemExit("the node closed the connection")
        c.receive_data(chunk)
    return frame


def producer(bootstrap: str, topic: str, n: int, rate: int) -> None:
    s, c = _connect(bootstrap)
    pad = b"x" * (VALUE_BYTES - 8)
    start = time.perf_counter()
    for i in range(n):
        ahead = start + i / rate - time.perf_counter()
        if ahead > 0:
            time.sleep(ahead)
        batch = records.encode_batch([time.monotonic_ns().to_bytes(8, "little") + pad], timestamp=0)
        _call(s, c, Api.PRODUCE, {"acks": 1, "timeout_ms": 5000,
                                  "parts": [[topic, 0, len(batch)]]}, batch)


def consumer(bootstrap: str, topic: str, n: int, ready: str) -> dict:
    s, c = _connect(bootstrap)
    open(ready, "w").close()
    offset, lat = 0, []
    deadline = time.monotonic() + n / 100 + 60
    while len(lat) < n and time.monotonic() < deadline:
        frame = _call(s, c, Api.FETCH, {
            "replica_id": -1, "max_wait_ms": 500, "min_bytes": 1, "max_bytes": 1 << 20,
            "parts": [[topic, 0, offset, 1 << 20, -1]]})
        now = time.monotonic_ns()
        if frame.header["parts"][0][5]:
            for r in records.decode_batches(bytes(frame.body), start_offset=offset):
                lat.append((now - int.from_bytes(r.value[:8], "little")) / 1e6)
                offset = r.offset + 1
    return latency_summary(lat)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--bootstrap", help="HOST:PORT of a running node (default: start one)")
    ap.add_argument("--rate", type=int, default=1000)
    ap.add_argument("--n", type=int, default=8000)
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--role", help=argparse.SUPPRESS)
    ap.add_argument("--topic", help=argparse.SUPPRESS)
    ap.add_argument("--ready", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.role == "producer":
        producer(args.bootstrap, args.topic, args.n, args.rate)
        return
    if args.role == "consumer":
        print(json.dumps(consumer(args.bootstrap, args.topic, args.n, args.ready)))
        return
    node, data_dir = None, None
    if args.bootstrap is None:
        node, args.bootstrap, data_dir = start_node()
    try:
        topic = f"floor-{time.time_ns()}"
        with Admin(args.bootstrap) as admin:
            admin.create_topic(topic, partitions=1, replication_factor=1)
        ready = tempfile.mktemp(prefix="raftlog-floor-ready-")
        common = [sys.executable, __file__, "--bootstrap", args.bootstrap, "--topic", topic,
                  "--n", str(args.n), "--rate", str(args.rate)]
        cons = subprocess.Popen([*common, "--role", "consumer", "--ready", ready],
                                stdout=subprocess.PIPE, text=True)
        deadline = time.monotonic() + 30
        while not os.path.exists(ready) and time.monotonic() < deadline:
            time.sleep(0.01)
        subprocess.run([*common, "--role", "producer"], check=True)
        out, _ = cons.communicate(timeout=120)
        os.unlink(ready)
        result = {"rate": args.rate, **json.loads(out)}
    finally:
        if node is not None:
            node.terminate()
            node.wait(30)
            shutil.rmtree(data_dir, ignore_errors=True)
    if args.json:
        print(json.dumps(result))
    else:
        print(f"{result['lat_records']} records at {args.rate}/s: p50 {result['lat_p50_ms']:.3f} ms"
              f"  p99 {result['lat_p99_ms']:.3f}  p99.9 {result['lat_p999_ms']:.3f}"
              f"  max {result['lat_max_ms']:.3f}")


if __name__ == "__main__":
    main()
