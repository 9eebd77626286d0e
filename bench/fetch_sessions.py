"""Node CPU per consumer fetch with and without fetch sessions (KIP-227), one run.

    python bench/fetch_sessions.py [--partitions 1000] [--secs 20] [--pairs 2] [--json]

Starts one node with its Kafka listener, a topic of ``--partitions`` partitions, and a
producer (the SDK, defaults) writing one 100-byte record per partition per second,
round robin. Then, alternated ``--pairs`` times, a kafka-python consumer assigned every
partition reads for ``--secs`` seconds with ``enable_incremental_fetch_sessions`` on
(its fetches name only partitions whose position moved; the node reads only partitions
whose high watermark moved) and off (every fetch names and reads every partition). Per
mode it prints the node's CPU (its /proc stat, user + system) per second and per fetch
the consumer got answered, fetches/s, records/s and MB/s consumed, and the ratio sessions /
full of CPU per fetch. The node's CPU includes the producer's appends (1 rec/s per partition
in both modes); subtracting a producer-only window does not work on 2 cores: the consumer's
CPU changes how the producer batches, and so the node's work per record.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import statistics
import sys
import time
import uuid

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
sys.path.insert(0, os.path.dirname(__file__))

from throughput import start_node  # noqa: E402

from raftlog.client import Admin, Producer  # noqa: E402
from raftlog.localnode import free_port  # noqa: E402

VALUE = b"x" * 100
#: seconds after the topic's creation before measuring
SETTLE_S = 5.0


def cpu_seconds(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def produce(bootstrap: str, topic: str, partitions: int, stop) -> None:
    """One record per partition per second, round robin, on a fixed schedule."""
    with Producer(bootstrap) as p:
        start, i = time.monotonic(), 0
        while not stop.is_set():
            due = start + i / partitions
            ahead = due - time.monotonic()
            if ahead > 0:
                time.sleep(ahead)
            p.send(topic, VALUE, partition=i % partitions)
            i += 1


def consume(kafka: str, topic: str, partitions: int, secs: float, sessions: bool,
            pid: int) -> dict:
    from kafka import KafkaConsumer, TopicPartition

    c = KafkaConsumer(bootstrap_servers=kafka, enable_incremental_fetch_sessions=sessions,
                      auto_offset_reset="latest")
    c.assign([TopicPartition(topic, p) for p in range(partitions)])
    sent = [0]
    handle = c._fetcher._handle_fetch_response  # (count the answered fetches)

    def counted(*a, **k):
        sent[0] += 1
        return handle(*a, **k)
    c._fetcher._handle_fetch_response = counted
    c.poll(timeout_ms=2000)  # positions, the session's full fetch
    fetches0 = sent[0]
    cpu0, t0, n = cpu_seconds(pid), time.monotonic(), 0
    while time.monotonic() - t0 < secs:
        for recs in c.poll(timeout_ms=200).values():
            n += len(recs)
    elapsed = time.monotonic() - t0
    cpu = cpu_seconds(pid) - cpu0
    fetches = sent[0] - fetches0
    c.close()
    return {"sessions": sessions, "fetches": fetches, "fetches_per_s": round(fetches / elapsed, 1),
            "secs": elapsed, "node_cpu_s": cpu,
            "rec_per_s": round(n / elapsed), "mb_per_s": round(n * len(VALUE) / elapsed / 1e6, 3)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--partitions", type=int, default=1000)
    ap.add_argument("--secs", type=float, default=20.0)
    ap.add_argument("--pairs", type=int, default=2)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    kport = free_port()
    proc, bootstrap, _d = start_node(kafka_port=kport)
    stop = multiprocessing.Event()
    t = None
    try:
        topic = f"sessions-{uuid.uuid4().hex[:6]}"
        with Admin(bootstrap) as a:
            a.create_topic(topic, partitions=args.partitions)
        # (its own process: in this one it would share the GIL with the consumer, whose
        # load would then change how the producer batches, and so the node's work)
        t = multiprocessing.Process(target=produce, args=(bootstrap, topic, args.partitions,
                                                          stop), daemon=True)
        t.start()
        time.sleep(SETTLE_S)  # (the topic's creation and first appends)
        runs = []
        for _ in range(args.pairs):
            for sessions in (True, False):
                run = consume(f"127.0.0.1:{kport}", topic, args.partitions, args.secs,
                              sessions, proc.pid)
                run["node_cpu_per_s"] = round(run["node_cpu_s"] / run["secs"], 3)
                run["node_cpu_ms_per_fetch"] = (round(1000 * run["node_cpu_s"] / run["fetches"], 3)
                                                if run["fetches"] else None)
                runs.append(run)
    finally:
        stop.set()
        if t is not None:
            t.join(timeout=10)
        proc.terminate()
        proc.wait(timeout=30)

    def med(flag: bool, key: str):
        vals = [r[key] for r in runs if r["sessions"] is flag and r[key] is not None]
        return statistics.median(vals) if vals else None

    on, off = med(True, "node_cpu_ms_per_fetch"), med(False, "node_cpu_ms_per_fetch")
    result = {"partitions": args.partitions, "secs": args.secs, "runs": runs,
              "node_cpu_ms_per_fetch_sessions": on, "node_cpu_ms_per_fetch_full": off,
              "ratio_sessions_over_full": round(on / off, 3) if on and off else None}
    if args.json:
        print(json.dumps(result, indent=1))
        return
    print(f"{args.partitions} partitions, 1 rec/s each; kafka-python consumer, {args.secs:g} s "
          f"per run")
    print(f"{'sessions':>9} {'fetches/s':>10} {'rec/s':>7} {'MB/s':>7} {'node CPU/s':>11} "
          f"{'node CPU ms/fetch':>18}")
    for r in runs:
        print(f"{str(r['sessions']):>9} {r['fetches_per_s']:>10} {r['rec_per_s']:>7} "
              f"{r['mb_per_s']:>7} {r['node_cpu_per_s']:>11} {r['node_cpu_ms_per_fetch']!s:>18}")
    print(f"median node CPU per fetch: sessions {on} ms, full {off} ms, ratio "
          f"{result['ratio_sessions_over_full']}")


if __name__ == "__main__":
    main()
