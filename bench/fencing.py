"""No false fencing under load: a live broker is never fenced because the machine is busy
(3 real node processes, an RF3 topic, SDK defaults).

    python bench/fencing.py [--json] [--secs 600] [--hogs 2] [--partitions 6] [--set K=V]

For ``--secs`` seconds a flood producer (``send_many`` of 100-byte records, SDK defaults:
acks=all, idempotence) and a consumer keep the nodes busy, ``--hogs`` processes spin
on the CPU beside them, and a paced producer (``--rate`` rec/s) stamps each
acknowledgement for the latency figures. No node is killed or paused, so every
FenceBroker decision the controller logs is a *false* fencing: a live broker whose
heartbeats were late (issue #38's target: 0 in 10 minutes at full load, the evidence
a shorter ``broker.session.timeout.ms`` needs). Prints the fencings, the controller
elections, the flood's rec/s and MB/s, the paced producer's ack latency percentiles,
and the longest gap between two acknowledgements of the paced producer; ``--json``.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import threading
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
sys.path.insert(0, os.path.dirname(__file__))

from failover import TOPIC, Cluster, Stamps, _settle  # noqa: E402

from raftlog.client import Admin, Consumer, Producer, TopicPartition  # noqa: E402

RECORD = b"r" * 100
BATCH = 500


class Flood:
    """A producer thread sending ``send_many`` batches as fast as acks come back
    (bounded: at most ``in_flight`` batches outstanding), and a consumer thread."""

    def __init__(self, bootstrap: str, partitions: int, in_flight: int = 8):
        self.sent = 0
        self.consumed = 0
        self.errors = 0
        self._stop = threading.Event()
        self._threads = [
            threading.Thread(target=self._produce, args=(bootstrap, partitions, in_flight),
                             daemon=True),
            threading.Thread(target=self._consume, args=(bootstrap, partitions), daemon=True)]
        for t in self._threads:
            t.start()

    def _produce(self, bootstrap: str, partitions: int, in_flight: int) -> None:
        with Producer(bootstrap) as p:
            futs, i = [], 0
            while not self._stop.is_set():
                futs.append(p.send_many(FLOOD_TOPIC, [RECORD] * BATCH, partition=i % partitions))
                i += 1
                while len(futs) >= in_flight:
                    f = futs.pop(0)
                    try:
                        f.result(60)
                        self.sent += BATCH
                    except Exception:  # noqa: BLE001 -- counted; the figure is the fencing
                        self.errors += 1

    def _consume(self, bootstrap: str, partitions: int) -> None:
        c = Consumer(bootstrap, auto_offset_reset="earliest")
        c.assign([TopicPartition(FLOOD_TOPIC, p) for p in range(partitions)])
        try:
            while not self._stop.is_set():
                self.consumed += len(c.poll(timeout_ms=200))
        finally:
            c.close()

    def stop(self) -> None:
        self._stop.set()
        for t in self._threads:
            t.join(60)


FLOOD_TOPIC = "fencing-flood"


def _hog() -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", "while True: pass"])


def _count(c: Cluster, needle: str) -> int:
    n = 0
    for i in c.ports:
        with open(os.path.join(c.dir, f"node-{i}.log"), errors="replace") as f:
            n += sum(needle in line for line in f)
    return n


def _fencings(c: Cluster) -> list[str]:
    out = []
    for i in c.ports:
        with open(os.path.join(c.dir, f"node-{i}.log"), errors="replace") as f:
            out += [line.strip() for line in f if "record=FenceBroker" in line]
    return out


def _pct(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))] if xs else float("nan")


def bench(secs: float, hogs: int, partitions: int, rate: int, extra: dict) -> dict:
    c = Cluster(extra=extra)
    hog_procs: list[subprocess.Popen] = []
    try:
        with Admin(c.bootstrap) as admin:
            deadline = time.monotonic() + 30
            while len(admin.describe_cluster().brokers) < 3 and time.monotonic() < deadline:
                time.sleep(0.1)
            admin.create_topic(TOPIC, partitions=1, replication_factor=3)
            admin.create_topic(FLOOD_TOPIC, partitions=partitions, replication_factor=3)
        _settle(c)
        elections_before = _count(c, "became_controller")
        stamps = Stamps(c.bootstrap, rate)
        stamps.first_ack_after(time.monotonic())
        flood = Flood(c.bootstrap, partitions)
        hog_procs = [_hog() for _ in range(hogs)]
        start = time.monotonic()
        first = len(stamps.acks)
        while time.monotonic() - start < secs:
            time.sleep(1.0)
            if any(p.poll() is not None for p in c.procs.values()):
                raise SystemExit("a node exited during the run; see its log in " + c.dir)
        elapsed = time.monotonic() - start
        flood.stop()
        stamps.stop()
        acks = stamps.acks[first:]
        lat_ms = [(a - s) * 1000 for s, a in acks]
        times = sorted(a for _, a in acks)
        gap = max((b - a for a, b in zip(times, times[1:])), default=float("nan"))
        fencings = _fencings(c)
        return {
            "secs": round(elapsed, 1), "hogs": hogs, "partitions": partitions,
            "config": extra, "false_fencings": len(fencings), "fencing_lines": fencings[:10],
            "controller_elections": _count(c, "became_controller") - elections_before,
            "flood_rec_per_s": round(flood.sent / elapsed),
            "flood_mb_per_s": round(flood.sent * len(RECORD) / elapsed / 1e6, 2),
            "flood_errors": flood.errors, "consumed": flood.consumed,
            "paced_rate": rate, "paced_acks": len(acks), "paced_errors": stamps.errors,
            "paced_p50_ms": round(_pct(lat_ms, 0.50), 2),
            "paced_p99_ms": round(_pct(lat_ms, 0.99), 2),
            "paced_max_ms": round(max(lat_ms, default=float("nan")), 2),
            "paced_longest_gap_s": round(gap, 3),
        }
    except SystemExit:
        c.dir_keep = True
        print(f"fencing: node logs kept in {c.dir}", file=sys.stderr)
        raise
    finally:
        for p in hog_procs:
            p.kill()
            p.wait()
        c.stop()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--secs", type=float, default=600)
    ap.add_argument("--hogs", type=int, default=2, help="CPU-spinning processes beside the nodes")
    ap.add_argument("--partitions", type=int, default=6)
    ap.add_argument("--rate", type=int, default=500, help="the paced producer's rec/s")
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                    help="a node config key for every node, e.g. broker.session.timeout.ms=3000")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    extra = dict(kv.split("=", 1) for kv in args.set)
    out = bench(args.secs, args.hogs, args.partitions, args.rate, extra)
    if args.json:
        print(json.dumps(out))
        return
    print(f"{out['secs']} s, {args.hogs} CPU hogs, config {extra or 'defaults'}")
    print(f"false fencings: {out['false_fencings']}, controller elections: "
          f"{out['controller_elections']}")
    for line in out["fencing_lines"]:
        print("  " + line)
    print(f"flood: {out['flood_rec_per_s']} rec/s, {out['flood_mb_per_s']} MB/s "
          f"({out['flood_errors']} failed batches), consumed {out['consumed']}")
    print(f"paced {args.rate} rec/s: p50 {out['paced_p50_ms']} ms, p99 {out['paced_p99_ms']} ms, "
          f"max {out['paced_max_ms']} ms, longest gap {out['paced_longest_gap_s']} s, "
          f"{out['paced_errors']} failed")


if __name__ == "__main__":
    main()
