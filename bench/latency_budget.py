"""Where a record's latency goes: the median and p99 of every hop of its path.

    python bench/latency_budget.py [--rates 1000,5000] [--rf 1,3] [--secs 10]
                                   [--write-caching default|false|true] [--json]

Per replication factor it starts real node processes on this machine (RF1: one node;
RF3: three) with ``trace.events`` on (raftlog/trace.py) and, per rate, a producer
process (the SDK's defaults: acks=all, idempotence on, linger 0; ``trace=N`` keeps its
``send``/``ack`` stamps) sending 100-byte records at that rate on a fixed schedule to
one partition, and a consumer process (SDK defaults, read_committed, 500 ms long poll)
reading them. Each record carries its ``enqueue`` time (the ``send`` call); the consumer
stamps ``consumer_return``; the nodes' stamps come from ``GET /trace`` on their metrics
listeners. Every process reads the same CLOCK_MONOTONIC, so the hops line up.

Prints, per RF and rate, the records' hops in path order: the p50/p99 time since
``enqueue`` and the p50/p99 step from the hop before (records stamped at both), then
rec/s, MB/s and the end-to-end percentiles. With followers, a line per follower gives
its own steps (fetch after ``leader_append``, then its append, sync and the leader
learning of it; JSON ``replicas``): the table's ``follower_fetch`` is the first
follower's and its ``follower_append`` the last one's, so that step also holds the gap
between the two followers. The first second of each run is left out
(connections and metadata warm up). ``--json`` prints it all as one JSON object.

Tracing costs a little per batch (a tuple appended to a bounded ring), so absolute
figures run slightly above bench/throughput.py's; compare hops with each other, and
runs of this bench with each other.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.request
import uuid

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
sys.path.insert(0, os.path.dirname(__file__))

from pacing import paced, precise_timers  # noqa: E402
from throughput import _wait_full_isr, start_cluster, start_node  # noqa: E402

from raftlog.client import Admin, Consumer, Producer, TopicPartition  # noqa: E402
from raftlog.localnode import free_port  # noqa: E402
from raftlog.trace import budget, hop_times, replica_budget  # noqa: E402

VALUE_BYTES = 100
#: events each node and the producer keep (a 10 s run at 5k rec/s stamps ~10 per batch)
TRACE_EVENTS = 2_000_000
WARMUP_S = 1.0


def producer_role(bootstrap: str, topic: str, rate: int, secs: float) -> None:
    precise_timers()
    p = Producer(bootstrap, trace=TRACE_EVENTS)  # the SDK's defaults otherwise
    pad = b"x" * (VALUE_BYTES - 8)
    for _i, _due in paced(rate, int(rate * secs)):
        p.send(topic, time.monotonic_ns().to_bytes(8, "little") + pad, partition=0)
    p.flush()
    p.close()
    print(json.dumps({"events": p.trace.drain(), "dropped": p.trace.dropped}))


def consumer_role(bootstrap: str, topic: str, total: int, secs: float, ready: str) -> None:
    c = Consumer(bootstrap, auto_offset_reset="latest", fetch_max_wait_ms=500)
    tp = TopicPartition(topic, 0)
    c.assign([tp])
    c.seek_to_end(tp)
    c.poll(timeout_ms=0)
    open(ready, "w").close()
    seen: list = []  # (offset, enqueue ns, return ns)
    deadline = time.monotonic() + secs + 60
    while len(seen) < total and time.monotonic() < deadline:
        recs = c.poll(timeout_ms=1000, max_records=10_000)
        now = time.monotonic_ns()
        seen += [(r.offset, int.from_bytes(r.value[:8], "little"), now) for r in recs]
    c.close()
    print(json.dumps({"records": seen}))


def _role_cmd(role: str, bootstrap: str, topic: str, rate: int, secs: float,
              ready: str = "") -> list:
    return [sys.executable, __file__, "--role", role, "--bootstrap", bootstrap, "--topic",
            topic, "--rates", str(rate), "--secs", str(secs), "--ready", ready]


def drain_node_traces(metrics_ports: list) -> tuple[list, int]:
    """Every node's hop events (GET /trace drains them) and how many they dropped."""
    events, dropped = [], 0
    for port in metrics_ports:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/trace", timeout=30) as r:
            got = json.loads(r.read())
        events += got["events"]
        dropped += got["dropped"]
    return events, dropped


def one_rate(bootstrap: str, metrics_ports: list, rf: int, rate: int, secs: float,
             caching: str) -> dict:
    topic = f"budget-{uuid.uuid4().hex[:8]}"
    with Admin(bootstrap) as admin:
        admin.create_topic(topic, partitions=1, replication_factor=rf,
                           config=None if caching == "default" else {"write.caching": caching})
        _wait_full_isr(admin, topic, rf)
    drain_node_traces(metrics_ports)  # (what the setup stamped)
    d = tempfile.mkdtemp(prefix="raftlog-budget-")
    ready = os.path.join(d, "ready")
    total = int(rate * secs)
    cons = subprocess.Popen(_role_cmd("consumer", bootstrap, topic, rate, secs, ready),
                            stdout=subprocess.PIPE)
    deadline = time.monotonic() + 30
    while not os.path.exists(ready):
        if cons.poll() is not None or time.monotonic() > deadline:
            raise SystemExit("the consumer did not start")
        time.sleep(0.05)
    prod = subprocess.Popen(_role_cmd("producer", bootstrap, topic, rate, secs),
                            stdout=subprocess.PIPE)
    p_out, _ = prod.communicate(timeout=secs + 180)
    c_out, _ = cons.communicate(timeout=secs + 180)
    shutil.rmtree(d, ignore_errors=True)
    if prod.returncode or cons.returncode:
        raise SystemExit(f"producer exited {prod.returncode}, consumer {cons.returncode}")
    produced = json.loads(p_out)
    consumed = json.loads(c_out)["records"]
    node_events, node_dropped = drain_node_traces(metrics_ports)
    if not consumed:
        raise SystemExit("the consumer read nothing")
    start = min(e for _, e, _ in consumed)
    kept = [(o, e, r) for o, e, r in consumed if e - start >= WARMUP_S * 1e9]
    offsets = {o for o, _, _ in kept}
    events = node_events + produced["events"]
    events += [("enqueue", topic, 0, o, o, e) for o, e, _ in kept]
    events += [("consumer_return", topic, 0, o, o, r) for o, _, r in kept]
    times = hop_times(events, topic, 0, offsets)
    span_s = (max(r for _, _, r in kept) - min(e for _, e, _ in kept)) / 1e9 if kept else 0
    return {"rf": rf, "rate": rate, "secs": secs, "write_caching": caching,
            "records": len(kept), "sent": total,
            "rec_per_s": round(len(kept) / span_s) if span_s else 0,
            "mb_per_s": round(len(kept) * VALUE_BYTES / span_s / 1e6, 3) if span_s else 0,
            "dropped_events": node_dropped + produced["dropped"],
            "hops": budget(times),
            "replicas": {str(r): rows for r, rows in replica_budget(times).items()}}


def run_rf(rf: int, rates: list, secs: float, caching: str) -> list:
    extra = {"trace.events": str(TRACE_EVENTS)}
    if rf == 1:
        mport = free_port()
        proc, bootstrap, d = start_node(metrics_port=mport, extra=extra)
        procs, mports = [proc], [mport]
    else:
        mports = [free_port() for _ in range(rf)]
        procs, bootstrap, d = start_cluster(rf, metrics_ports=mports, extra=extra)
    try:
        return [one_rate(bootstrap, mports, rf, rate, secs, caching) for rate in rates]
    finally:
        for p in procs:
            p.terminate()
        for p in procs:
            try:
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                p.kill()
        shutil.rmtree(d, ignore_errors=True)


def _fmt(v) -> str:
    return "-" if v is None else f"{v:.3f}"


def print_table(runs: list) -> None:
    for r in runs:
        e2e = next((h for h in r["hops"] if h["hop"] == "consumer_return"), None)
        print(f"\nRF{r['rf']} at {r['rate']} rec/s, write.caching={r['write_caching']}: "
              f"{r['records']} records, {r['rec_per_s']} rec/s, {r['mb_per_s']} MB/s"
              + (f", end to end p50 {_fmt(e2e['since_enqueue_p50_ms'])} ms, p99 "
                 f"{_fmt(e2e['since_enqueue_p99_ms'])} ms" if e2e else "")
              + (f" ({r['dropped_events']} events dropped)" if r["dropped_events"] else ""))
        print(f"  {'hop':<16} {'records':>8} {'since enqueue p50':>18} {'p99':>8} "
              f"{'step p50':>9} {'p99':>8}  (ms)")
        for h in r["hops"]:
            print(f"  {h['hop']:<16} {h['records']:>8} {_fmt(h['since_enqueue_p50_ms']):>18} "
                  f"{_fmt(h['since_enqueue_p99_ms']):>8} {_fmt(h['step_p50_ms']):>9} "
                  f"{_fmt(h['step_p99_ms']):>8}")
        for replica, rows in r.get("replicas", {}).items():
            print(f"  follower {replica}'s own path, step p50/p99 (ms): " + ", ".join(
                f"{h['hop']} {_fmt(h['step_p50_ms'])}/{_fmt(h['step_p99_ms'])}"
                for h in rows if h["hop"] not in ("enqueue", "leader_append")))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rates", default="1000,5000", help="records/s, a comma list")
    ap.add_argument("--rf", default="1,3", help="replication factors, a comma list (1, 3)")
    ap.add_argument("--secs", type=float, default=10.0)
    ap.add_argument("--write-caching", default="default", choices=("default", "false", "true"),
                    help="the bench topics' write.caching (default: the nodes' default)")
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--role", choices=("producer", "consumer"), help=argparse.SUPPRESS)
    ap.add_argument("--bootstrap", help=argparse.SUPPRESS)
    ap.add_argument("--topic", help=argparse.SUPPRESS)
    ap.add_argument("--ready", help=argparse.SUPPRESS)
    args = ap.parse_args()
    rates = [int(x) for x in args.rates.split(",") if x.strip()]
    if args.role == "producer":
        producer_role(args.bootstrap, args.topic, rates[0], args.secs)
        return
    if args.role == "consumer":
        consumer_role(args.bootstrap, args.topic, int(rates[0] * args.secs), args.secs,
                      args.ready)
        return
    rfs = [int(x) for x in args.rf.split(",") if x.strip()]
    for rf in rfs:
        if rf not in (1, 3):
            raise SystemExit(f"--rf {rf}: 1 (one node) or 3 (three nodes) only")
    runs = []
    for rf in rfs:
        runs += run_rf(rf, rates, args.secs, args.write_caching)
    if args.json:
        print(json.dumps({"runs": runs}, indent=1))
    else:
        print_table(runs)


if __name__ == "__main__":
    main()
