"""The node's own end-to-end latency floor: no SDK, no client threads.

    python bench/latency_floor.py [--bootstrap HOST:PORT] [--rate 1000] [--n 8000]
                                  [--relay] [--json]

One process sends one PRODUCE (acks=1, one 100-byte record) at a time on a blocking
socket; another long-polls FETCH on its own socket; both use the sans-IO codec
directly. The difference between this and ``bench/throughput.py``'s latency is what
the SDK adds. Starts its own node unless ``--bootstrap`` is given.

``--relay`` also runs the same clients against ``bench/relay.py`` (a minimal trio relay
of the same frames: stamp, os.write, ack, answer the pending fetch) in the same run,
node first, and reports the ratios: what the node costs above the floor of a Python
broker on this machine (JSON: relay_p50_ms, relay_p99_ms, node_over_relay_p50,
node_over_relay_p99).
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
        if frame.header["parts"][0].length:
            for r in records.decode_batches(bytes(frame.body), start_offset=offset):
                lat.append((now - int.from_bytes(r.value[:8], "little")) / 1e6)
                offset = r.offset + 1
    return latency_summary(lat)


def measure(bootstrap: str, n: int, rate: int, create_topic: bool = True) -> dict:
    """One run of the producer and consumer processes against ``bootstrap``."""
    topic = f"floor-{time.time_ns()}"
    if create_topic:
        with Admin(bootstrap) as admin:
            admin.create_topic(topic, partitions=1, replication_factor=1)
    ready = tempfile.mktemp(prefix="raftlog-floor-ready-")
    common = [sys.executable, __file__, "--bootstrap", bootstrap, "--topic", topic,
              "--n", str(n), "--rate", str(rate)]
    cons = subprocess.Popen([*common, "--role", "consumer", "--ready", ready],
                            stdout=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 30
    while not os.path.exists(ready) and time.monotonic() < deadline:
        time.sleep(0.01)
    subprocess.run([*common, "--role", "producer"], check=True)
    out, _ = cons.communicate(timeout=120)
    os.unlink(ready)
    return json.loads(out)


def start_relay() -> tuple[subprocess.Popen, str]:
    relay = subprocess.Popen([sys.executable, os.path.join(os.path.dirname(__file__), "relay.py")],
                             stdout=subprocess.PIPE, text=True)
    port = relay.stdout.readline().strip()
    if not port:
        relay.kill()
        raise SystemExit("bench/relay.py did not start")
    return relay, f"127.0.0.1:{port}"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--bootstrap", help="HOST:PORT of a running node (default: start one)")
    ap.add_argument("--rate", type=int, default=1000)
    ap.add_argument("--n", type=int, default=8000)
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--relay", action="store_true",
                    help="also measure bench/relay.py in the same run and report the ratios")
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
        result = {"rate": args.rate, **measure(args.bootstrap, args.n, args.rate)}
    finally:
        if node is not None:
            node.terminate()
            node.wait(30)
            shutil.rmtree(data_dir, ignore_errors=True)
    if args.relay:
        relay, relay_addr = start_relay()
        try:
            r = measure(relay_addr, args.n, args.rate, create_topic=False)
        finally:
            relay.terminate()
            relay.wait(30)
        result.update(relay_p50_ms=r["lat_p50_ms"], relay_p99_ms=r["lat_p99_ms"],
                      node_over_relay_p50=result["lat_p50_ms"] / r["lat_p50_ms"],
                      node_over_relay_p99=result["lat_p99_ms"] / r["lat_p99_ms"])
    if args.json:
        print(json.dumps(result))
    else:
        print(f"{result['lat_records']} records at {args.rate}/s: p50 {result['lat_p50_ms']:.3f} ms"
              f"  p99 {result['lat_p99_ms']:.3f}  p99.9 {result['lat_p999_ms']:.3f}"
              f"  max {result['lat_max_ms']:.3f}")
        if args.relay:
            print(f"relay (bench/relay.py), same clients: p50 {result['relay_p50_ms']:.3f} ms"
                  f"  p99 {result['relay_p99_ms']:.3f}   node/relay: p50 "
                  f"{result['node_over_relay_p50']:.2f}x  p99 {result['node_over_relay_p99']:.2f}x")


if __name__ == "__main__":
    main()
