"""Idle cost and topic-creation rate at scale (issue #21) -- real node processes.

    python bench/idle.py [--json] [--nodes 3] [--topics 300] [--partitions 10]
                         [--replication-factor 3] [--settle 20] [--window 20] [--probe 20]

Starts ``--nodes`` voters (bench/reassign.py's Cluster: the same command line as
``raftlog up --nodes N``), then

1. creates ``--probe`` topics of ``--partitions`` partitions on the empty cluster, one
   at a time, and times them (``empty_creates_per_s``; after 5 warm-up topics);
2. creates ``--topics`` topics of ``--partitions`` partitions (``--replication-factor``);
3. waits ``--settle`` s, then reads each node's CPU time (utime + stime from
   /proc/PID/stat) over ``--window`` s with no client traffic: ``idle_pct`` per node,
   percent of one core (the node whose id the quorum reports as controller is marked);
4. creates ``--probe`` more topics and times them (``full_creates_per_s``) and reports
   ``creation_ratio`` = full / empty (work per metadata change proportional to the
   change keeps it near 1).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

from reassign import Cluster, cpu_seconds  # noqa: E402

from raftlog.client import Admin  # noqa: E402

WARMUP_TOPICS = 5


def create_rate(admin: Admin, prefix: str, count: int, partitions: int, rf: int) -> float:
    """Topics created per second, one request at a time (each awaited)."""
    t = time.perf_counter()
    for i in range(count):
        admin.create_topic(f"{prefix}-{i}", partitions=partitions, replication_factor=rf)
    return count / (time.perf_counter() - t)


def idle_pct(pids: dict, window_s: float) -> dict:
    before = {i: cpu_seconds(p) for i, p in pids.items()}
    t = time.monotonic()
    time.sleep(window_s)
    wall = time.monotonic() - t
    return {i: round(100 * (cpu_seconds(p) - before[i]) / wall, 2) for i, p in pids.items()}


def run(args) -> dict:
    c = Cluster(args.nodes, args.nodes)
    try:
        for i in range(1, args.nodes + 1):
            c.start(i)
        c.wait_brokers(list(range(1, args.nodes + 1)))
        rf = args.replication_factor
        with Admin(c.bootstrap(), request_timeout_ms=120_000) as a:
            create_rate(a, "warm", WARMUP_TOPICS, args.partitions, rf)
            empty = create_rate(a, "probe-empty", args.probe, args.partitions, rf)
            t = time.perf_counter()
            create_rate(a, "t", args.topics, args.partitions, rf)
            bulk_s = time.perf_counter() - t
            time.sleep(args.settle)
            pids = {i: p.pid for i, p in c.procs.items()}
            idle = idle_pct(pids, args.window)
            controller = a.describe_cluster().controller_id
            full = create_rate(a, "probe-full", args.probe, args.partitions, rf)
        total = (WARMUP_TOPICS + 2 * args.probe + args.topics) * args.partitions
        return {
            "nodes": args.nodes, "topics": args.topics, "partitions_per_topic": args.partitions,
            "replication_factor": rf,
            "partitions_when_idle": (WARMUP_TOPICS + args.probe + args.topics) * args.partitions,
            "partitions_total": total,
            "replicas_per_node_when_idle":
                (WARMUP_TOPICS + args.probe + args.topics) * args.partitions * rf // args.nodes,
            "bulk_create_s": round(bulk_s, 2),
            "idle_window_s": args.window, "idle_pct": idle, "controller": controller,
            "idle_pct_max": max(idle.values()),
            "empty_creates_per_s": round(empty, 1), "full_creates_per_s": round(full, 1),
            "creation_ratio": round(full / empty, 3),
        }
    finally:
        c.stop()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nodes", type=int, default=3)
    ap.add_argument("--topics", type=int, default=300)
    ap.add_argument("--partitions", type=int, default=10)
    ap.add_argument("--replication-factor", type=int, default=3)
    ap.add_argument("--settle", type=float, default=20.0, help="seconds before the window")
    ap.add_argument("--window", type=float, default=20.0, help="seconds of CPU time measured")
    ap.add_argument("--probe", type=int, default=20, help="topics timed, empty and full")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    res = run(args)
    if args.json:
        print(json.dumps(res))
        return
    for k, v in res.items():
        print(f"{k:>28}: {v}")


if __name__ == "__main__":
    main()
