"""The node's own end-to-end latency floor: no SDK, no client threads.

    python bench/latency_floor.py [--bootstrap HOST:PORT] [--rate 1000] [--n 8000]
                                  [--relay] [--json] [--replication-factor 1|3]
                                  [--acks 1|all] [--write-caching false|true|both] [--pairs N]

One process sends one PRODUCE (acks=1, one 100-byte record) at a time on a blocking
socket; another long-polls FETCH on its own socket; both use the sans-IO codec
directly. The difference between this and ``bench/throughput.py``'s latency is what
the SDK adds. Starts its own node unless ``--bootstrap`` is given.

``--relay`` also runs the same clients against ``bench/relay.py`` (a minimal trio relay
of the same frames: stamp, os.write, ack, answer the pending fetch) in the same run,
node first, and reports the ratios: what the node costs above the floor of a Python
broker on this machine (JSON: relay_p50_ms, relay_p99_ms, node_over_relay_p50,
node_over_relay_p99).

``--replication-factor 3`` starts three nodes (an RF3 topic, acks=all by default) and, with
``--relay``, a leader relay with two follower relays (bench/relay.py: followers long-poll
the leader, the high watermark is the least offset all three hold). ``--write-caching``
sets the topic's ``write.caching`` (false, the node's default: acknowledged once on disk)
and makes the relay fdatasync the same way (a follower before it fetches again, the leader
in a worker thread, one sync in flight); ``both`` runs each setting, alternated over
``--pairs`` rounds, and reports medians and the durable / cached ratios of the node and of
the relay: what durability costs a minimal Python broker on this machine, beside what it
costs the node (JSON: modes.{false,true}, durable_over_cached_p50/p99 and
relay_durable_over_cached_p50/p99).
"""

from __future__ import annotations

import argparse
import json
import os
import select
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
from pacing import precise_timers  # noqa: E402  (bench/, beside this file)
from throughput import latency_summary, start_cluster, start_node  # noqa: E402

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


def producer(bootstrap: str, topic: str, n: int, rate: int, acks: int = 1,
             open_loop: bool = False) -> None:
    """One record per request at ``rate``: each waits for its answer (closed loop), or,
    with ``open_loop``, goes out on schedule while earlier ones wait (the SDK's shape:
    bench/throughput.py's paced producer), answers read as they come."""
    precise_timers()
    s, c = _connect(bootstrap)
    pad = b"x" * (VALUE_BYTES - 8)
    start = time.monotonic()
    waiting = 0
    for i in range(n):
        due = start + i / rate
        while True:
            ahead = due - time.monotonic()
            if not open_loop or ahead <= 0:
                break
            waiting -= _answers(s, c, ahead)
        if not open_loop and ahead > 0:
            time.sleep(ahead)
        # open loop: stamped with its scheduled time (a producer behind schedule shows)
        stamp = int(due * 1e9) if open_loop else time.monotonic_ns()
        batch = records.encode_batch([stamp.to_bytes(8, "little") + pad], timestamp=0)
        fields = {"acks": acks, "timeout_ms": 5000, "parts": [[topic, 0, len(batch)]]}
        if not open_loop:
            _check(_call(s, c, Api.PRODUCE, fields, batch))
            continue
        _, data = c.send_request(Api.PRODUCE, fields, batch)
        s.sendall(data)
        waiting += 1
    deadline = time.monotonic() + 60
    while waiting and time.monotonic() < deadline:
        waiting -= _answers(s, c, 1.0)
    if waiting:
        raise SystemExit(f"{waiting} produces unanswered after 60 s")


def _answers(s, c, timeout_s: float) -> int:
    """Read what answers arrive within ``timeout_s``; how many were complete."""
    done = 0
    if select.select([s], [], [], timeout_s)[0]:
        chunk = s.recv(1 << 20)
        if not chunk:
            raise SystemExit("the node closed the connection")
        c.receive_data(chunk)
        while (frame := c.next_response()) is not None:
            _check(frame)
            done += 1
    return done


def _check(frame) -> None:
    part = frame.header["parts"][0]
    if part.error:
        raise SystemExit(f"produce failed: error {part.error} {part.message}")


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


def measure(bootstrap: str, n: int, rate: int, create_topic: bool = True, rf: int = 1,
            acks: int = 1, write_caching: str | None = None, open_loop: bool = False) -> dict:
    """One run of the producer and consumer processes against ``bootstrap``."""
    topic = f"floor-{time.time_ns()}"
    if create_topic:
        with Admin(bootstrap) as admin:
            config = {"write.caching": write_caching} if write_caching else None
            admin.create_topic(topic, partitions=1, replication_factor=rf, config=config)
            leader = _wait_isr(admin, topic, rf)
            bootstrap = next(f"{b.host}:{b.port}" for b in admin.describe_cluster().brokers
                             if b.id == leader)  # (the clients talk to the leader only)
    ready = tempfile.mktemp(prefix="raftlog-floor-ready-")
    common = [sys.executable, __file__, "--bootstrap", bootstrap, "--topic", topic,
              "--n", str(n), "--rate", str(rate), "--acks", str(acks)]
    if open_loop:
        common.append("--open-loop")
    cons = subprocess.Popen([*common, "--role", "consumer", "--ready", ready],
                            stdout=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 30
    while not os.path.exists(ready) and time.monotonic() < deadline:
        time.sleep(0.01)
    subprocess.run([*common, "--role", "producer"], check=True)
    out, _ = cons.communicate(timeout=120)
    os.unlink(ready)
    return json.loads(out)


def _wait_isr(admin, topic: str, rf: int) -> int:
    """Wait for the full ISR; the partition's leader."""
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        parts = admin.describe_topic(topic).partitions
        if parts and all(len(p.isr) == rf and p.leader >= 0 for p in parts):
            return parts[0].leader
        time.sleep(0.05)
    raise SystemExit(f"topic {topic}: the ISR did not reach {rf} replicas in 30 s")


def start_relay(replicas: int = 1, sync: bool = False,
                overlap: bool = False) -> tuple[list, str]:
    """A relay leader (and ``replicas - 1`` follower relays long-polling it; with
    ``overlap`` and ``sync`` they fetch again before their fdatasync)."""
    script = os.path.join(os.path.dirname(__file__), "relay.py")
    flags = ["--sync"] if sync else []
    procs = [subprocess.Popen([sys.executable, script, "--replicas", str(replicas), *flags],
                              stdout=subprocess.PIPE, text=True)]
    port = procs[0].stdout.readline().strip()
    if not port:
        procs[0].kill()
        raise SystemExit("bench/relay.py did not start")
    addr = f"127.0.0.1:{port}"
    for i in range(1, replicas):
        procs.append(subprocess.Popen([sys.executable, script, "--follow", addr,
                                       "--replica-id", str(i), *flags,
                                       *(["--overlap"] if overlap and sync else [])],
                                      stdout=subprocess.PIPE, text=True))
        if not procs[-1].stdout.readline().strip():
            stop(procs)
            raise SystemExit("a follower of bench/relay.py did not start")
    return procs, addr


def stop(procs: list) -> None:
    for p in procs:
        p.terminate()
    for p in procs:
        p.wait(30)


def _median(xs: list[float]) -> float:
    xs = sorted(xs)
    return xs[len(xs) // 2] if len(xs) % 2 else (xs[len(xs) // 2 - 1] + xs[len(xs) // 2]) / 2


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--bootstrap", help="HOST:PORT of a running node (default: start one)")
    ap.add_argument("--rate", type=int, default=1000)
    ap.add_argument("--n", type=int, default=8000)
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--relay", action="store_true",
                    help="also measure bench/relay.py in the same run and report the ratios")
    ap.add_argument("--replication-factor", type=int, default=1, choices=[1, 2, 3, 4, 5],
                    help="start this many nodes (and relays) and an RF N topic")
    ap.add_argument("--acks", choices=["1", "all", "-1"],
                    help="the producer's acks (default: all with replication, else 1)")
    ap.add_argument("--write-caching", choices=["false", "true", "both"], default="false",
                    help="the topic's write.caching (false: the node's default); the relay "
                         "fdatasyncs when false; both: each, alternated")
    ap.add_argument("--open-loop", action="store_true",
                    help="send on schedule without waiting for each answer (as the SDK's "
                         "paced producer in bench/throughput.py does)")
    ap.add_argument("--relay-overlap", action="store_true",
                    help="the relay's durable followers fetch again before their fdatasync "
                         "and report it after (bench/relay.py --overlap)")
    ap.add_argument("--pairs", type=int, default=1,
                    help="rounds of every setting, alternated (medians reported)")
    ap.add_argument("--role", help=argparse.SUPPRESS)
    ap.add_argument("--topic", help=argparse.SUPPRESS)
    ap.add_argument("--ready", help=argparse.SUPPRESS)
    args = ap.parse_args()
    rf = args.replication_factor
    acks = 1 if args.acks is None and rf == 1 else -1 if args.acks in (None, "all", "-1") else 1
    if args.role == "producer":
        producer(args.bootstrap, args.topic, args.n, args.rate, acks, args.open_loop)
        return
    if args.role == "consumer":
        print(json.dumps(consumer(args.bootstrap, args.topic, args.n, args.ready)))
        return
    if args.pairs < 1:
        raise SystemExit("--pairs must be >= 1")
    modes = ["true", "false"] if args.write_caching == "both" else [args.write_caching]
    nodes, data_dir = [], None
    if args.bootstrap is None:
        if rf > 1:
            nodes, args.bootstrap, data_dir = start_cluster(rf)
        else:
            node, args.bootstrap, data_dir = start_node()
            nodes = [node]
    runs: dict = {m: {"node": [], "relay": []} for m in modes}
    try:
        for _ in range(args.pairs):
            for m in modes:
                runs[m]["node"].append(measure(args.bootstrap, args.n, args.rate, rf=rf,
                                               acks=acks, write_caching=m,
                                               open_loop=args.open_loop))
                if args.relay:
                    relay, relay_addr = start_relay(rf, sync=m == "false",
                                                     overlap=args.relay_overlap)
                    try:
                        runs[m]["relay"].append(measure(relay_addr, args.n, args.rate,
                                                        create_topic=False, acks=acks,
                                                        open_loop=args.open_loop))
                    finally:
                        stop(relay)
    finally:
        stop(nodes)
        if data_dir:
            shutil.rmtree(data_dir, ignore_errors=True)
    result = {"rate": args.rate, "replication_factor": rf, "acks": acks, "pairs": args.pairs,
              "open_loop": args.open_loop, "relay_overlap": args.relay_overlap, "modes": {}}
    for m in modes:
        node = {k: _median([r[k] for r in runs[m]["node"]]) for k in runs[m]["node"][0]}
        if args.relay:
            node.update(relay_p50_ms=_median([r["lat_p50_ms"] for r in runs[m]["relay"]]),
                        relay_p99_ms=_median([r["lat_p99_ms"] for r in runs[m]["relay"]]))
            node.update(node_over_relay_p50=node["lat_p50_ms"] / node["relay_p50_ms"],
                        node_over_relay_p99=node["lat_p99_ms"] / node["relay_p99_ms"])
        result["modes"][m] = node
    result.update(result["modes"][modes[-1]])  # (the single setting's figures at the top)
    if len(modes) == 2:
        d, c = result["modes"]["false"], result["modes"]["true"]
        result.update(durable_over_cached_p50=d["lat_p50_ms"] / c["lat_p50_ms"],
                      durable_over_cached_p99=d["lat_p99_ms"] / c["lat_p99_ms"])
        if args.relay:
            result.update(relay_durable_over_cached_p50=d["relay_p50_ms"] / c["relay_p50_ms"],
                          relay_durable_over_cached_p99=d["relay_p99_ms"] / c["relay_p99_ms"])
    if args.json:
        print(json.dumps(result))
        return
    for m in modes:
        r = result["modes"][m]
        print(f"write.caching={m}: {r['lat_records']:.0f} records at {args.rate}/s, RF{rf}, "
              f"acks={acks}: p50 {r['lat_p50_ms']:.3f} ms  p99 {r['lat_p99_ms']:.3f}  "
              f"p99.9 {r['lat_p999_ms']:.3f}  max {r['lat_max_ms']:.3f}")
        if args.relay:
            print(f"  relay (bench/relay.py{(', --sync' + (' --overlap' if args.relay_overlap else '')) if m == 'false' else ''}), same clients: "
                  f"p50 {r['relay_p50_ms']:.3f} ms  p99 {r['relay_p99_ms']:.3f}   node/relay: "
                  f"p50 {r['node_over_relay_p50']:.2f}x  p99 {r['node_over_relay_p99']:.2f}x")
    if len(modes) == 2:
        print(f"durable / cached: node p50 {result['durable_over_cached_p50']:.2f}x  "
              f"p99 {result['durable_over_cached_p99']:.2f}x", end="")
        if args.relay:
            print(f"; relay p50 {result['relay_durable_over_cached_p50']:.2f}x  "
                  f"p99 {result['relay_durable_over_cached_p99']:.2f}x", end="")
        print()


if __name__ == "__main__":
    main()
