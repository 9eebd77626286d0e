"""Reassignment benchmark: move partitions from 3 brokers to 4 under a throttle while a
steady acks=all producer measures what the move costs it (real node processes).

    python bench/reassign.py [--json] [--gb 1.0] [--partitions 30] [--throttle-mb 50]
                             [--rate 1000] [--baseline-s 10] [--floor]

Nodes 1-3 are voters holding a topic of ``--partitions`` partitions, replication factor
3, filled with ``--gb`` GB (1000-byte records, send_many); node 4 (broker-only) starts,
``client/reassign.generate`` balances the topic over 1-4, and the plan runs with
``--throttle-mb`` MB/s. Printed: the bytes the new replicas copy, the time the move took,
``move_over_expected`` (that time over bytes / throttle: the one new broker fetches within
its follower budget, as Kafka's per-broker throttles), and the ack latency of the steady
producer (``--rate`` sends/s, SDK defaults: acks=all, idempotence) before and during.

``--floor`` runs everything the same but, instead of the reassignment, copies the same
bytes from the nodes' segment files at the same rate through a loopback socket into new
files (bench/copy_floor.py: sendfile, recv_into, write, an fsync a second -- no broker
logic): its
``during_over_before_p99`` is what moving those bytes costs the steady producer on this
machine, the floor the reassignment's ratio is up against.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

import copy_floor  # noqa: E402  (bench/, beside this file)
from pacing import precise_timers  # noqa: E402

from raftlog.client import Admin, Producer  # noqa: E402
from raftlog.client.reassign import generate  # noqa: E402
from raftlog.localnode import free_ports, node_command, spawn, wait_listening  # noqa: E402

RECORD = 1000


class Cluster:
    """``n`` local node processes, the first ``voters`` of them voters (the others
    broker-only), each with the node ``settings`` given (also used by bench/scrub.py)."""

    def __init__(self, n: int, voters: int, settings: dict | None = None):
        self.settings = dict(settings or {})
        self.dir = tempfile.mkdtemp(prefix="raftlog-bench-reassign-")
        ports = free_ports(2 * n)
        self.ports = {i: ports[i - 1] for i in range(1, n + 1)}
        self.voters = ",".join(f"{i}@127.0.0.1:{ports[n + i - 1]}" for i in range(1, voters + 1))
        self.n_voters = voters
        self.procs: dict = {}

    def start(self, i: int) -> None:
        extra = {"controller.quorum.voters": self.voters, "raft.password": "bench-password-16",
                 **self.settings}
        if i > self.n_voters:
            extra["process.roles"] = "broker"
        argv = node_command(node_id=i, port=self.ports[i],
                            data_dir=os.path.join(self.dir, f"node-{i}"), overrides=extra)
        self.procs[i] = spawn(argv, os.path.join(self.dir, f"node-{i}.log"))
        if not wait_listening("127.0.0.1", self.ports[i], 30, self.procs[i]):
            raise SystemExit(f"node {i} did not start; see {self.dir}/node-{i}.log")

    def bootstrap(self, ids=None) -> str:
        return ",".join(f"127.0.0.1:{self.ports[i]}" for i in (ids or self.procs))

    def wait_brokers(self, ids) -> None:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                with Admin(self.bootstrap()) as a:
                    live = {b.id for b in a.describe_cluster().brokers if not b.fenced}
                if set(ids) <= live:
                    return
            except Exception:  # noqa: BLE001 -- still starting
                pass
            time.sleep(0.2)
        raise SystemExit(f"brokers {ids} did not register")

    def stop(self) -> None:
        for p in self.procs.values():
            p.terminate()
        for p in self.procs.values():
            p.wait(30)
        shutil.rmtree(self.dir, ignore_errors=True)


class Steady(threading.Thread):
    """One send per 1/rate s (SDK defaults), ack latency recorded by phase."""

    def __init__(self, bootstrap: str, topic: str, rate: int):
        super().__init__(daemon=True)
        self.bootstrap, self.topic, self.rate = bootstrap, topic, rate
        self.phase = "before"
        self.lat: dict = {"before": [], "during": []}
        self.stop = threading.Event()

    def run(self) -> None:
        precise_timers()
        p = Producer(self.bootstrap)
        start, i = time.monotonic(), 0
        while not self.stop.is_set():
            due = start + i / self.rate
            i += 1
            ahead = due - time.monotonic()
            if ahead > 0:
                time.sleep(ahead)
            sent, phase = time.monotonic(), self.phase
            fut = p.send(self.topic, b"s" * 100)
            fut.add_done_callback(
                lambda f, s=sent, ph=phase: self.lat[ph].append((time.monotonic() - s) * 1e3))
        p.close()


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of ``pid`` so far, in seconds (Linux /proc; also
    bench/idle.py's)."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def pct(xs, q):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))] if xs else float("nan")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--gb", type=float, default=1.0)
    ap.add_argument("--partitions", type=int, default=30)
    ap.add_argument("--throttle-mb", type=float, default=50.0)
    ap.add_argument("--rate", type=int, default=1000)
    ap.add_argument("--baseline-s", type=float, default=10.0)
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--floor", action="store_true",
                    help="copy the bytes with bench/copy_floor.py instead of reassigning")
    ap.add_argument("--floor-burst-s", type=float, default=0.1,
                    help="--floor: seconds of throttle budget sent at once (the node's "
                         "reassignment rounds: 0.1)")
    args = ap.parse_args()
    c = Cluster(4, 3)
    try:
        for i in (1, 2, 3):
            c.start(i)
        c.wait_brokers([1, 2, 3])
        with Admin(c.bootstrap()) as a:
            a.create_topic("moved", partitions=args.partitions, replication_factor=3)
            a.create_topic("steady", partitions=1, replication_factor=3)
        total = int(args.gb * 1e9 / RECORD)
        per_part = total // args.partitions
        value = b"v" * RECORD
        t0 = time.monotonic()
        with Producer(c.bootstrap(), acks="all") as p:
            futures = []
            for part in range(args.partitions):
                for _ in range(0, per_part, 1000):
                    f = p.send_many("moved", [value] * 1000, partition=part)
                    futures.extend(f if isinstance(f, list) else [f])
                    if len(futures) > 64:
                        futures.pop(0).result(120)
            for f in futures:
                f.result(120)
        fill_s = time.monotonic() - t0
        # node 4 up and the fill written back before the baseline: the window before
        # holds neither a process start nor a GB of writeback (either inflates its p99)
        c.start(4)
        c.wait_brokers([4])
        os.sync()
        steady = Steady(c.bootstrap([1, 2, 3]), "steady", args.rate)
        steady.start()
        time.sleep(args.baseline_s)
        with Admin(c.bootstrap()) as a:
            current = {("moved", p.partition): tuple(p.replicas)
                       for p in a.describe_topic("moved").partitions}
            plan = generate(current, [1, 2, 3, 4])
            added = sum(len(set(r) - set(current[k])) for k, r in plan.items())
            leaders = {current[k][0] for k in plan}
            moved_bytes = added * (per_part // 1000 * 1000) * RECORD
            throttle = int(args.throttle_mb * 1e6)
            steady.phase = "during"
            cpu0 = {i: cpu_seconds(p.pid) for i, p in c.procs.items()}
            t0 = time.monotonic()
            floor_cpu = None
            if args.floor:
                _, floor_cpu = copy_floor.run(c.dir, os.path.join(c.dir, "floor-copy"),
                                              moved_bytes, throttle, args.floor_burst_s)
            else:
                res = a.alter_partition_reassignments(plan, throttle)
                assert all(r.error == 0 for r in res), res
                while a.list_partition_reassignments(list(plan)):
                    time.sleep(0.2)
            move_s = time.monotonic() - t0
            cpu = {i: round((cpu_seconds(p.pid) - cpu0[i]) / move_s * 100, 1) for i, p in c.procs.items()}
        steady.stop.set()
        steady.join(30)
        expected = moved_bytes / throttle
        out = {
            "mode": "copy floor" if args.floor else "reassignment", "gb": args.gb, "partitions": args.partitions, "fill_s": round(fill_s, 1),
            "replicas_added": added, "moved_bytes": moved_bytes,
            "leaders_sending": len(leaders), "throttle_mb_s": args.throttle_mb,
            "move_s": round(move_s, 2), "expected_s": round(expected, 2),
            "move_over_expected": round(move_s / expected, 2),
            "moved_mb_s": round(moved_bytes / move_s / 1e6, 1),
            "before_p50_ms": round(pct(steady.lat["before"], 0.5), 3),
            "before_p99_ms": round(pct(steady.lat["before"], 0.99), 3),
            "during_p50_ms": round(pct(steady.lat["during"], 0.5), 3),
            "during_p99_ms": round(pct(steady.lat["during"], 0.99), 3),
            "sends_before": len(steady.lat["before"]), "sends_during": len(steady.lat["during"]),
            "node_cpu_pct_during": cpu,
        }
        if floor_cpu is not None:
            out["copy_cpu_pct_during"] = round(floor_cpu / move_s * 100, 1)
        out["during_over_before_p99"] = round(out["during_p99_ms"] / out["before_p99_ms"], 2)
        if args.json:
            print(json.dumps(out))
        else:
            for k, v in out.items():
                print(f"{k:>24}: {v}")
    finally:
        c.stop()


if __name__ == "__main__":
    main()
