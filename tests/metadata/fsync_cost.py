"""Measure what our fsyncs cost a metadata write (not a test; run by hand).

    python tests/metadata/fsync_cost.py [--voters 1|3] [--writes N]

Runs sequential blocking ``propose(NoOp)`` with the journal/meta sync patches on,
then (in a child process) with pysyncobj's unsynced originals, and prints ops/s
and p50/p99 latency for both. The figures are quoted in metadata/quorum.py.
"""

from __future__ import annotations

import argparse
import json
import socket
import statistics
import subprocess
import sys
import tempfile
import time


def _ports(n):
    socks = [socket.socket() for _ in range(n)]
    for s in socks:
        s.bind(("127.0.0.1", 0))
    ports = [s.getsockname()[1] for s in socks]
    for s in socks:
        s.close()
    return ports


def run(voters_n: int, writes: int, durable: bool) -> dict:
    from pysyncobj import journal

    from raftlog.metadata import quorum as Q
    from raftlog.metadata import records as R

    Q.harden_pysyncobj()
    if not durable:
        journal.FileJournal.add = Q.ORIGINALS["FileJournal.add"]
        journal.MetaStorer.storeMeta = Q.ORIGINALS["MetaStorer.storeMeta"]
    voters = {i: ("127.0.0.1", p) for i, p in enumerate(_ports(voters_n), 1)}
    with tempfile.TemporaryDirectory(dir=".") as d:
        qs = [Q.MetadataQuorum(i, voters, f"{d}/n{i}", password="pw") for i in voters]
        try:
            while not any(q.is_leader for q in qs):
                time.sleep(0.02)
            leader = next(q for q in qs if q.is_leader)
            lat = []
            start = time.perf_counter()
            for _ in range(writes):
                t = time.perf_counter()
                leader.propose(R.NoOp())
                lat.append(time.perf_counter() - t)
            total = time.perf_counter() - start
        finally:
            for q in qs:
                q.close()
    lat.sort()
    return {
        "durable": durable,
        "voters": voters_n,
        "ops_s": round(writes / total),
        "p50_ms": round(statistics.median(lat) * 1000, 2),
        "p99_ms": round(lat[int(len(lat) * 0.99)] * 1000, 2),
    }


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--voters", type=int, default=1)
    ap.add_argument("--writes", type=int, default=2000)
    ap.add_argument("--child", choices=["on", "off"])
    a = ap.parse_args()
    if a.child:
        print(json.dumps(run(a.voters, a.writes, a.child == "on")))
        return
    for mode in ("off", "on"):
        out = subprocess.run(
            [
                sys.executable,
                __file__,
                "--voters",
                str(a.voters),
                "--writes",
                str(a.writes),
                "--child",
                mode,
            ],
            capture_output=True,
            text=True,
            check=True,
        )
        print(out.stdout.strip().splitlines()[-1])


if __name__ == "__main__":
    main()
