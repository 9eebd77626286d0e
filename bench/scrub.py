"""Scrubber benchmark (issue #22): what background CRC checking costs produce, and how
soon it repairs a flipped bit -- real node processes, 3 nodes, replication factor 3.

    python bench/scrub.py [--json] [--rate-mb 1] [--fill-mb 20] [--n 1000000] [--pairs 4]

``--pairs`` pairs of runs, a fresh cluster each: ``log.scrub.bytes.per.sec`` at
``--rate-mb`` MiB/s and at 0 (off), alternated (on, off, off, on, ...: the first cluster
of a run is slower here whatever it does). Each run fills a topic (1 MiB segments) with
``--fill-mb`` MB, syncs the page cache (so writeback of earlier runs does not land in
the window), then, while the scrubber walks those closed segments, produces ``--n``
100-byte records to another topic (send_many, SDK defaults: acks=all) and reports
rec/s. ``produce_over_off`` is the median with scrubbing over the median without: one
run's rate varies by 20% and more on this shared machine, so one pair proves nothing.
In the first two scrubbing runs it then flips one bit in the last closed segment of a
follower's replica and times the ``scrub_repair`` line: ``predicted_s`` is one walk
over every closed segment of the node at the rate (the longest a scrubber anywhere in
its walk needs to get there).
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

from reassign import Cluster  # noqa: E402

from raftlog.client import Admin, Producer  # noqa: E402
from raftlog.records import HEADER_SIZE, iter_batches  # noqa: E402

VALUE = b"x" * 100


def _produce(bootstrap: str, topic: str, n: int) -> float:
    with Producer(bootstrap) as p:
        t = time.perf_counter()
        futures = [p.send_many(topic, [VALUE] * 2000, partition=0) for _ in range(n // 2000)]
        p.flush()
        secs = time.perf_counter() - t
        for f in futures:
            f.result(60)
    return n / secs


def _closed(node_dir: str, topic: str) -> list[str]:
    return sorted(glob.glob(os.path.join(node_dir, f"{topic}-0", "*.log")))[:-1]


def run(rate: int, fill_mb: float, n: int, repair: bool) -> dict:
    c = Cluster(3, 3, {"log.scrub.bytes.per.sec": rate})
    try:
        for i in (1, 2, 3):
            c.start(i)
        c.wait_brokers([1, 2, 3])
        with Admin(c.bootstrap()) as a:
            a.create_topic("filled", partitions=1, replication_factor=3,
                           config={"segment.bytes": str(1 << 20)})
            a.create_topic("load", partitions=1, replication_factor=3)
            _produce(c.bootstrap(), "filled", int(fill_mb * 1e6 / len(VALUE)) // 2000 * 2000)
            leader = a.describe_topic("filled").partitions[0].leader
        os.sync()
        time.sleep(0.5)
        out = {"rate_bytes_s": rate, "produce_rec_s": _produce(c.bootstrap(), "load", n)}
        if repair:
            follower = next(i for i in (1, 2, 3) if i != leader)
            node_dir = os.path.join(c.dir, f"node-{follower}")
            segs = _closed(node_dir, "filled")
            total = sum(os.path.getsize(s) for s in segs)
            with open(segs[-1], "r+b") as f:
                data = f.read()
                pos, _h = list(iter_batches(data, verify=True))[1]
                f.seek(pos + HEADER_SIZE + 5)
                f.write(bytes([data[pos + HEADER_SIZE + 5] ^ 1]))
            t0 = time.monotonic()
            log = os.path.join(c.dir, f"node-{follower}.log")
            predicted = total / rate
            while time.monotonic() - t0 < 3 * predicted + 30:
                with open(log, encoding="utf-8", errors="replace") as f:
                    if "event=scrub_repair" in f.read():
                        break
                time.sleep(0.2)
            out.update({"closed_bytes": total, "predicted_s": round(predicted, 1),
                        "repair_s": round(time.monotonic() - t0, 1)})
        return out
    finally:
        c.stop()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rate-mb", type=float, default=1.0, help="MiB/s (the default setting: 1)")
    ap.add_argument("--fill-mb", type=float, default=20.0)
    ap.add_argument("--n", type=int, default=1_000_000)
    ap.add_argument("--pairs", type=int, default=4, help="runs with and without (each)")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    rate = int(args.rate_mb * (1 << 20))
    on_runs: list[dict] = []
    off_runs: list[dict] = []
    for i in range(args.pairs):
        for scrub in ((True, False) if i % 2 == 0 else (False, True)):
            if scrub:
                on_runs.append(run(rate, args.fill_mb, args.n, repair=len(on_runs) < 2))
            else:
                off_runs.append(run(0, args.fill_mb, args.n, repair=False))
    on_rates = [r["produce_rec_s"] for r in on_runs]
    off_rates = [r["produce_rec_s"] for r in off_runs]
    repaired = [r for r in on_runs if "repair_s" in r]
    on = {"rate_bytes_s": rate, "produce_rec_s": statistics.median(on_rates),
          "produce_rec_s_runs": on_rates,
          "closed_bytes": repaired[-1]["closed_bytes"] if repaired else None,
          "predicted_s": repaired[-1]["predicted_s"] if repaired else None,
          "repair_s": max((r["repair_s"] for r in repaired), default=None),
          "repair_s_runs": [r["repair_s"] for r in repaired]}
    off = {"rate_bytes_s": 0, "produce_rec_s": statistics.median(off_rates),
           "produce_rec_s_runs": off_rates}
    res = {"scrubbing": on, "off": off,
           "produce_over_off": round(on["produce_rec_s"] / off["produce_rec_s"], 3)}
    if args.json:
        print(json.dumps(res))
    else:
        for k, v in {**{f"on.{k}": v for k, v in on.items()},
                     **{f"off.{k}": v for k, v in off.items()},
                     "produce_over_off": res["produce_over_off"]}.items():
            print(f"{k:>22}: {v}")


if __name__ == "__main__":
    main()
