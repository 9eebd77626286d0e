"""Node CPU per consumer fetch with and without fetch sessions (KIP-227), one run.

    python bench/fetch_sessions.py [--partitions 1,100,1000] [--clients sdk,kafka-python]
                                   [--secs 20] [--pairs 2] [--json]

Starts one node with its Kafka listener. Per partition count of ``--partitions``: a topic
of that many partitions and a producer (the SDK, defaults, its own process) writing one
100-byte record per partition per second, round robin. Then, alternated ``--pairs``
times, a consumer of each of ``--clients`` assigned every partition reads for ``--secs``
seconds with fetch sessions on and off: ``sdk`` is raftlog's Consumer on the native
listener (``fetch_sessions=True``/``False``), ``kafka-python`` a KafkaConsumer on the
Kafka listener (``enable_incremental_fetch_sessions``), ``confluent`` a confluent-kafka
Consumer on the Kafka listener (librdkafka has no switch: measured once per pair, as it
fetches; its fetches counted from its statistics). With sessions a fetch names only the
partitions whose position moved and the node reads only partitions whose high watermark
moved; without, every fetch names and reads every partition. Per run it prints the node's
CPU (its /proc stat, user + system) per second and per fetch the consumer got answered,
fetches/s, records/s and MB/s consumed; per partition count and client, the medians and
the ratio sessions / full of CPU per fetch. The node's CPU includes the producer's appends
(1 rec/s per partition in every mode); subtracting a producer-only window does not work on
2 cores: the consumer's CPU changes how the producer batches, and so the node's work per
record.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import statistics
import subprocess
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


def _window(poll, pid: int, secs: float, fetched) -> dict:
    """Poll for ``secs`` seconds; the node's CPU and the fetches answered meanwhile."""
    fetches0 = fetched()
    cpu0, t0, n = cpu_seconds(pid), time.monotonic(), 0
    while time.monotonic() - t0 < secs:
        n += poll()
    elapsed = time.monotonic() - t0
    return {"fetches": fetched() - fetches0, "secs": elapsed,
            "node_cpu_s": cpu_seconds(pid) - cpu0, "records": n}


def consume_kafka_python(kafka: str, topic: str, partitions: int, secs: float,
                         sessions: bool, pid: int, **_) -> dict:
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
    run = _window(lambda: sum(len(r) for r in c.poll(timeout_ms=200).values()), pid, secs,
                  lambda: sent[0])
    c.close()
    return run


def consume_sdk(bootstrap: str, topic: str, partitions: int, secs: float, sessions: bool,
                pid: int, **_) -> dict:
    from raftlog.client import Consumer, TopicPartition

    c = Consumer(bootstrap, auto_offset_reset="latest", fetch_sessions=sessions)
    c.assign([TopicPartition(topic, p) for p in range(partitions)])
    c.poll(timeout_ms=500)  # positions, the session's full fetch
    fetcher, sent = c._fetcher, [0]
    handle = fetcher._on_response  # (count the answered fetches)

    def counted(*a, **k):
        sent[0] += 1
        return handle(*a, **k)
    fetcher._on_response = counted
    c.poll(timeout_ms=1000)
    run = _window(lambda: len(c.poll(timeout_ms=200, max_records=100_000)), pid, secs,
                  lambda: sent[0])
    c.close()
    return run


def consume_confluent(kafka: str, topic: str, partitions: int, secs: float, pid: int,
                      **_) -> dict:
    from confluent_kafka import Consumer, TopicPartition

    fetch_reqs = [0]

    def stats(text: str) -> None:
        brokers = json.loads(text).get("brokers", {}).values()
        fetch_reqs[0] = sum(b.get("req", {}).get("Fetch", 0) for b in brokers
                            if b.get("nodeid", -1) >= 0)
    c = Consumer({"bootstrap.servers": kafka, "group.id": f"bench-{uuid.uuid4().hex[:6]}",
                  "auto.offset.reset": "latest", "enable.auto.commit": False,
                  "statistics.interval.ms": 1000, "stats_cb": stats})
    c.assign([TopicPartition(topic, p, -1) for p in range(partitions)])  # (-1: the end)
    t0 = time.monotonic()
    while time.monotonic() - t0 < 2.5:  # positions, the first statistics
        c.poll(0.2)

    def poll() -> int:
        return len(c.consume(num_messages=100_000, timeout=0.2))
    run = _window(poll, pid, secs, lambda: fetch_reqs[0])  # (statistics: each second)
    c.close()
    return run


CONSUMERS = {"sdk": consume_sdk, "kafka-python": consume_kafka_python,
             "confluent": consume_confluent}
#: confluent-kafka (librdkafka) has no fetch-session switch: one run per pair
ONE_MODE = {"confluent"}


def measure(proc, bootstrap: str, kport: int, partitions: int, args) -> list:
    """Every run of one partition count."""
    stop = multiprocessing.Event()
    topic = f"sessions-{partitions}-{uuid.uuid4().hex[:6]}"
    with Admin(bootstrap) as a:
        a.create_topic(topic, partitions=partitions)
    # (its own process: in this one it would share the GIL with the consumer, whose
    # load would then change how the producer batches, and so the node's work)
    t = multiprocessing.Process(target=produce, args=(bootstrap, topic, partitions, stop),
                                daemon=True)
    t.start()
    runs = []
    try:
        time.sleep(SETTLE_S)  # (the topic's creation and first appends)
        for _ in range(args.pairs):
            for client in args.clients:
                for sessions in ((None,) if client in ONE_MODE else (True, False)):
                    run = CONSUMERS[client](bootstrap=bootstrap, kafka=f"127.0.0.1:{kport}",
                                            topic=topic, partitions=partitions,
                                            secs=args.secs, sessions=sessions,
                                            pid=proc.pid)
                    run.update(partitions=partitions, client=client, sessions=sessions)
                    secs = run.pop("secs")
                    run["fetches_per_s"] = round(run["fetches"] / secs, 1)
                    run["rec_per_s"] = round(run["records"] / secs)
                    run["mb_per_s"] = round(run.pop("records") * len(VALUE) / secs / 1e6, 3)
                    run["node_cpu_per_s"] = round(run["node_cpu_s"] / secs, 3)
                    run["node_cpu_ms_per_fetch"] = (
                        round(1000 * run["node_cpu_s"] / run["fetches"], 3)
                        if run["fetches"] else None)
                    runs.append(run)
    finally:
        stop.set()
        t.join(timeout=10)
    return runs


def _median(runs: list, sessions) -> float | None:
    vals = [r["node_cpu_ms_per_fetch"] for r in runs
            if r["sessions"] is sessions and r["node_cpu_ms_per_fetch"] is not None]
    return round(statistics.median(vals), 3) if vals else None


def summarize(runs: list) -> list:
    out = []
    for key in dict.fromkeys((r["partitions"], r["client"]) for r in runs):
        rs = [r for r in runs if (r["partitions"], r["client"]) == key]
        on, off, own = (_median(rs, flag) for flag in (True, False, None))
        row = {"partitions": key[0], "client": key[1]}
        if own is not None:
            row["node_cpu_ms_per_fetch"] = own
        else:
            row.update(node_cpu_ms_per_fetch_sessions=on, node_cpu_ms_per_fetch_full=off,
                       ratio_sessions_over_full=round(on / off, 3) if on and off else None)
        out.append(row)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--partitions", default="1,100,1000",
                    help="partition counts, comma-separated (default 1,100,1000)")
    ap.add_argument("--clients", default="sdk,kafka-python",
                    help=f"consumers, comma-separated, of {', '.join(CONSUMERS)}")
    ap.add_argument("--secs", type=float, default=20.0)
    ap.add_argument("--pairs", type=int, default=2)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    counts = [int(x) for x in args.partitions.split(",")]
    args.clients = [x.strip() for x in args.clients.split(",")]
    unknown = [x for x in args.clients if x not in CONSUMERS]
    if unknown:
        raise SystemExit(f"unknown --clients {unknown}: use {', '.join(CONSUMERS)}")
    kport = free_port()
    proc, bootstrap, _d = start_node(kafka_port=kport)
    runs: list = []
    try:
        for partitions in counts:
            runs += measure(proc, bootstrap, kport, partitions, args)
    finally:
        proc.terminate()
        try:  # (closing 1,100 partitions on a loaded machine can take a while)
            proc.wait(timeout=120)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    result = {"secs": args.secs, "pairs": args.pairs, "runs": runs,
              "summary": summarize(runs)}
    if args.json:
        print(json.dumps(result, indent=1))
        return
    print(f"1 rec/s per partition; {args.secs:g} s per run")
    print(f"{'parts':>6} {'client':>13} {'sessions':>9} {'fetches/s':>10} {'rec/s':>7} "
          f"{'MB/s':>7} {'node CPU/s':>11} {'node CPU ms/fetch':>18}")
    for r in runs:
        print(f"{r['partitions']:>6} {r['client']:>13} {str(r['sessions']):>9} "
              f"{r['fetches_per_s']:>10} {r['rec_per_s']:>7} {r['mb_per_s']:>7} "
              f"{r['node_cpu_per_s']:>11} {r['node_cpu_ms_per_fetch']!s:>18}")
    print("medians of node CPU ms per fetch:")
    for row in result["summary"]:
        if "node_cpu_ms_per_fetch" in row:
            print(f"  {row['partitions']:>5} partitions {row['client']:>13}: "
                  f"{row['node_cpu_ms_per_fetch']} (its own fetches)")
        else:
            print(f"  {row['partitions']:>5} partitions {row['client']:>13}: sessions "
                  f"{row['node_cpu_ms_per_fetch_sessions']}, full "
                  f"{row['node_cpu_ms_per_fetch_full']}, ratio "
                  f"{row['ratio_sessions_over_full']}")


if __name__ == "__main__":
    main()
