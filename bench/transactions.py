"""Transactions as a user gets them: 3 real node processes, RF3 topics, SDK defaults
(issue #33's targets).

    python bench/transactions.py [--json] [--nodes 3] [--txns 300] [--rate 100] [--secs 10]

Three figures, each from the SDK with its defaults (a transactional producer is
idempotent with acks=all; a consumer reads read_committed unless told):

1. **flood**: one transactional producer runs ``--txns`` transactions of ``--size``
   (100) records spread over ``--partitions`` (3) partitions back to back
   (``send_many`` per partition, then ``commit_transaction``): committed rec/s and MB/s,
   and each ``commit_transaction`` call's latency;
2. **paced**: ``--rate`` transactions/s for ``--secs`` s: commit latency p50/p99/max
   (the call to its return) at a steady rate;
3. **floor** and **chain**: one acks=all record sent and awaited (the cost of one durable
   write here), and what the chain of durable writes a transaction is (CHAIN_WRITES)
   allows at that cost: the least commit latency and the most rec/s of one producer;
4. **read_committed vs read_uncommitted**: a consumer reads a topic of plain
   (non-transactional) records both ways, then a topic where 10% of the transactions
   were aborted (each topic first read once untimed -- the first read of a topic after it
   was written ran ~25% slower -- then ``--read-pairs`` (4) times each way, alternating
   which goes first); rec/s each (the median) and the ratios.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import statistics
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
sys.path.insert(0, os.path.dirname(__file__))

from reassign import cpu_seconds  # noqa: E402
from throughput import _wait_full_isr, latency_summary, start_cluster  # noqa: E402

from raftlog.client import Admin, Consumer, Producer, TopicPartition  # noqa: E402
from raftlog.localnode import free_port  # noqa: E402

VALUE = b"t" * 100


def _pct(xs: list[float]) -> dict:
    s = latency_summary(xs)
    return {"p50_ms": round(s["lat_p50_ms"], 2), "p99_ms": round(s["lat_p99_ms"], 2),
            "max_ms": round(s["lat_max_ms"], 2), "n": s["lat_records"]}


def _txn(p: Producer, topic: str, partitions: int, size: int) -> float:
    """One transaction of ``size`` records over ``partitions``; the commit's seconds."""
    p.begin_transaction()
    per = size // partitions
    for part in range(partitions):
        n = per if part < partitions - 1 else size - per * (partitions - 1)
        p.send_many(topic, [VALUE] * n, partition=part)
    t = time.perf_counter()
    p.commit_transaction()
    return time.perf_counter() - t


def flood(bootstrap: str, topic: str, txns: int, size: int, partitions: int) -> dict:
    p = Producer(bootstrap, transactional_id="bench-flood")
    p.init_transactions()
    commits = []
    start = time.perf_counter()
    for _ in range(txns):
        commits.append(_txn(p, topic, partitions, size) * 1000)
    secs = time.perf_counter() - start
    p.close()
    n = txns * size
    return {"txns": txns, "records": n, "rec_s": round(n / secs),
            "mb_s": round(n * len(VALUE) / secs / 1e6, 2), "commit": _pct(commits)}


def paced(bootstrap: str, topic: str, rate: float, secs: float, size: int,
          partitions: int, pids: tuple = ()) -> dict:
    p = Producer(bootstrap, transactional_id="bench-paced")
    p.init_transactions()
    cpu0 = sum(cpu_seconds(pid) for pid in pids)
    commits, start, i, late = [], time.perf_counter(), 0, 0
    while time.perf_counter() - start < secs:
        due = start + i / rate
        now = time.perf_counter()
        if due > now:
            time.sleep(due - now)
        elif now - due > 1.0 / rate:
            late += 1
        commits.append(_txn(p, topic, partitions, size) * 1000)
        i += 1
    secs_run = time.perf_counter() - start
    cpu = sum(cpu_seconds(pid) for pid in pids) - cpu0
    p.close()
    out = {"rate": rate, "txns": i, "achieved_rate": round(i / secs_run, 1),
           "late_txns": late, "commit": _pct(commits)}
    if pids:  # every node's CPU (user + system) over the run, per transaction
        out["nodes_cpu_ms_per_txn"] = round(cpu * 1000 / max(i, 1), 2)
    return out


def floor(bootstrap: str, topic: str, n: int = 200) -> dict:
    """The floor of a durable write on this cluster: one acks=all (SDK default)
    single-record produce, sent and awaited, ``n`` times; p50/p99."""
    p = Producer(bootstrap)
    p.send(topic, VALUE, partition=0).result(30)  # (producer id, metadata, connection)
    lat = []
    for _ in range(n):
        t = time.perf_counter()
        p.send(topic, VALUE, partition=0).result(30)
        lat.append((time.perf_counter() - t) * 1000)
    p.close()
    return _pct(lat)


#: Durable writes (each acks=all on 3 replicas) one after another in a transaction: its
#: AddPartitionsToTxn (Ongoing), its data, EndTxn's PrepareCommit -- and, back to back, the
#: previous transaction's markers before the next add (written with its CompleteCommit).
#: KIP-890's order: each waits for the one before, so none can overlap.
CHAIN_WRITES = {"commit": 3, "back_to_back": 4}


def chain_bounds(floor_p50_ms: float, size: int) -> dict:
    """What the chain of durable writes allows when each costs ``floor_p50_ms`` (one
    acks=all record sent and awaited, measured in the same run): the least commit
    latency, and the most committed records a second of one producer whose
    transactions of ``size`` records follow each other."""
    if floor_p50_ms <= 0 or size <= 0:
        raise ValueError("chain_bounds needs a positive floor and size")
    return {"commit_floor_ms": round(CHAIN_WRITES["commit"] * floor_p50_ms, 2),
            "back_to_back_ceiling_rec_s": round(
                size * 1000 / (CHAIN_WRITES["back_to_back"] * floor_p50_ms))}


def _scrape(ports: list) -> dict:
    """{api: [requests, seconds]} of raftlog_request_duration_seconds, all nodes."""
    import urllib.request

    out: dict = {}
    for port in ports:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as r:
            text = r.read().decode()
        for line in text.splitlines():
            for kind, i in (("_count{", 0), ("_sum{", 1)):
                if line.startswith("raftlog_request_duration_seconds" + kind):
                    api = line.split('api="', 1)[1].split('"', 1)[0]
                    out.setdefault(api, [0, 0.0])[i] += float(line.rsplit(" ", 1)[1])
    return out


def phases(bootstrap: str, topic: str, txns: int, size: int, partitions: int,
           metrics_ports: list) -> dict:
    """Where a transaction's time goes (``--phases``): the flood's transactions with
    each step timed on its own: begin -> first send returned, the sends, the produce
    acknowledgements (a flush before the commit), the commit (EndTxn: the decision
    durable), the wait until the next transaction's first AddPartitionsToTxn is
    accepted; medians. Round trips per transaction: the SDK's coordinator requests
    and produce requests, and each node's requests by API (its /metrics; WRITE_TXN_
    MARKERS and AddPartitionsToTxn verify_only are the nodes' own calls)."""
    p = Producer(bootstrap, transactional_id="bench-phases")
    p.init_transactions()
    _txn(p, topic, partitions, size)  # (connections, metadata)
    p.flush()
    stats0 = {k: list(v) for k, v in p._txn.stats.items()}
    produce0 = p._io.produce_requests
    nodes0 = _scrape(metrics_ports)
    rows = {k: [] for k in ("first_send", "sends", "acks", "commit", "total")}
    per = size // partitions
    for _ in range(txns):
        t0 = time.perf_counter()
        p.begin_transaction()
        times = []
        for part in range(partitions):
            n = per if part < partitions - 1 else size - per * (partitions - 1)
            p.send_many(topic, [VALUE] * n, partition=part)
            times.append(time.perf_counter())
        p.flush()
        t3 = time.perf_counter()
        p.commit_transaction()
        t4 = time.perf_counter()
        for k, v in (("first_send", times[0] - t0), ("sends", times[-1] - t0),
                     ("acks", t3 - times[-1]), ("commit", t4 - t3), ("total", t4 - t0)):
            rows[k].append(v * 1000)
    nodes1 = _scrape(metrics_ports)
    produce = p._io.produce_requests - produce0
    sdk = {k: (v[0] - stats0.get(k, [0, 0.0])[0], v[1] - stats0.get(k, [0, 0.0])[1])
           for k, v in p._txn.stats.items()}
    p.close()
    out = {"txns": txns,
           "p50_ms": {k: round(sorted(v)[len(v) // 2], 2) for k, v in rows.items()},
           "sdk_per_txn": {k: {"requests": round(n / txns, 2),
                               "ms": round(secs * 1000 / txns, 2)}
                           for k, (n, secs) in sorted(sdk.items()) if n},
           "produce_requests_per_txn": round(produce / txns, 2),
           "node_requests_per_txn": {}}
    for api, (n1, s1) in sorted(nodes1.items()):
        n0, s0 = nodes0.get(api, [0, 0.0])
        if n1 - n0 and api not in ("METADATA", "FETCH", "API_VERSIONS"):
            out["node_requests_per_txn"][api] = {
                "requests": round((n1 - n0) / txns, 2),
                "mean_ms": round((s1 - s0) * 1000 / (n1 - n0), 2)}
    return out


def _fill_plain(bootstrap: str, topic: str, n: int, partitions: int) -> None:
    p = Producer(bootstrap)
    for part in range(partitions):
        for i in range(0, n // partitions, 1000):
            p.send_many(topic, [VALUE] * min(1000, n // partitions - i), partition=part)
    p.flush()
    p.close()


def _fill_txn(bootstrap: str, topic: str, txns: int, size: int, partitions: int,
              abort_share: float, seed: int = 7) -> int:
    """Transactions with ``abort_share`` of them aborted; the committed records."""
    rnd = random.Random(seed)
    p = Producer(bootstrap, transactional_id="bench-mixed")
    p.init_transactions()
    committed = 0
    for _ in range(txns):
        p.begin_transaction()
        per = size // partitions
        for part in range(partitions):
            p.send_many(topic, [VALUE] * per, partition=part)
        if rnd.random() < abort_share:
            p.abort_transaction()
        else:
            p.commit_transaction()
            committed += per * partitions
    p.close()
    return committed


def read_all(bootstrap: str, topic: str, partitions: int, isolation: str, expect: int) -> dict:
    c = Consumer(bootstrap, auto_offset_reset="earliest", isolation_level=isolation,
                 fetch_max_wait_ms=100)
    tps = [TopicPartition(topic, i) for i in range(partitions)]
    c.assign(tps)
    for tp in tps:
        c.seek(tp, 0)
    got, start = 0, time.perf_counter()
    deadline = start + 120
    while got < expect and time.perf_counter() < deadline:
        got += len(c.poll(timeout_ms=1000, max_records=1_000_000))
    secs = time.perf_counter() - start
    c.close()
    if got < expect:
        raise SystemExit(f"{isolation} read {got} of {expect} records of {topic} in 120 s")
    return {"records": got, "rec_s": round(got / secs)}


def _both(bootstrap: str, topic: str, partitions: int, committed: int, total: int,
          pairs: int = 4):
    """read_committed and read_uncommitted rec/s of ``topic`` (the median of ``pairs``
    reads each): one untimed read first, then pairs in alternating order (committed,
    uncommitted, uncommitted, committed, ...), so neither gets the warmer cache. (Without
    the warm-up the first read, a read_committed one, ran ~25% slower: 1.10M rec/s
    against 1.52-1.68M for the next seven; two reads each, harmonic mean, gave ratios
    from 0.80 to 1.03 for the same code, 2026-12-04.)"""
    read_all(bootstrap, topic, partitions, "read_uncommitted", total)  # (warm-up, untimed)
    rows: dict = {"read_committed": [], "read_uncommitted": []}
    for i in range(pairs):
        order = ("read_committed", "read_uncommitted")
        for isolation in (order if i % 2 == 0 else order[::-1]):
            expect = committed if isolation == "read_committed" else total
            rows[isolation].append(read_all(bootstrap, topic, partitions, isolation, expect))

    def rate(rs):
        return {"records": rs[0]["records"],
                "rec_s": round(statistics.median(r["rec_s"] for r in rs)),
                "rec_s_each": [r["rec_s"] for r in rs]}
    return rate(rows["read_committed"]), rate(rows["read_uncommitted"])


def run(args) -> dict:
    mports = [free_port() for _ in range(args.nodes)] if args.phases else None
    extra = ({"write.caching.default": args.write_caching}
             if args.write_caching != "default" else None)
    procs, bootstrap, d = start_cluster(args.nodes, metrics_ports=mports, extra=extra)
    rf = min(3, args.nodes)
    try:
        with Admin(bootstrap) as a:
            for t in ("txn-flood", "txn-paced", "plain", "mixed", "floor"):
                a.create_topic(t, partitions=args.partitions, replication_factor=rf)
                _wait_full_isr(a, t, rf)
        out = {"nodes": args.nodes, "replication_factor": rf, "partitions": args.partitions,
               "txn_size": args.size}
        # (a first transaction creates __transaction_state and finds its coordinator)
        out["flood"] = flood(bootstrap, "txn-flood", args.txns, args.size, args.partitions)
        out["paced"] = paced(bootstrap, "txn-paced", args.rate, args.secs, args.size,
                             args.partitions, tuple(p.pid for p in procs))
        out["floor"] = floor(bootstrap, "floor")
        out["commit_p50_over_floor"] = {
            k: round(out[k]["commit"]["p50_ms"] / out["floor"]["p50_ms"], 2)
            for k in ("flood", "paced")}
        chain = chain_bounds(out["floor"]["p50_ms"], args.size)
        chain["flood_over_ceiling"] = round(
            out["flood"]["rec_s"] / chain["back_to_back_ceiling_rec_s"], 2)
        chain["paced_commit_p50_over_floor"] = round(
            out["paced"]["commit"]["p50_ms"] / chain["commit_floor_ms"], 2)
        out["chain"] = chain
        if args.phases:
            out["phases"] = phases(bootstrap, "txn-flood", args.phases, args.size,
                                   args.partitions, mports)
        if args.skip_read:
            return out
        _fill_plain(bootstrap, "plain", args.read_records, args.partitions)
        plain_n = (args.read_records // args.partitions) * args.partitions
        rc, ru = _both(bootstrap, "plain", args.partitions, plain_n, plain_n,
                       args.read_pairs)
        txns = max(1, args.read_records // args.size)
        committed = _fill_txn(bootstrap, "mixed", txns, args.size, args.partitions, 0.1)
        rc_mixed, ru_mixed = _both(bootstrap, "mixed", args.partitions, committed,
                                   txns * (args.size // args.partitions) * args.partitions,
                                   args.read_pairs)
        out["read"] = {
            "plain_read_committed_rec_s": rc["rec_s"],
            "plain_read_uncommitted_rec_s": ru["rec_s"],
            "plain_ratio": round(rc["rec_s"] / ru["rec_s"], 3),
            "aborted_10pct_read_committed_rec_s": rc_mixed["rec_s"],
            "aborted_10pct_read_uncommitted_rec_s": ru_mixed["rec_s"],
            "aborted_10pct_ratio": round(rc_mixed["rec_s"] / ru_mixed["rec_s"], 3),
            "aborted_10pct_committed_records": committed,
            "each_rec_s": {"plain_read_committed": rc["rec_s_each"],
                           "plain_read_uncommitted": ru["rec_s_each"],
                           "aborted_10pct_read_committed": rc_mixed["rec_s_each"],
                           "aborted_10pct_read_uncommitted": ru_mixed["rec_s_each"]},
        }
        return out
    finally:
        for p in procs:
            p.terminate()
        for p in procs:
            try:
                p.wait(30)
            except Exception:  # noqa: BLE001
                p.kill()
        shutil.rmtree(d, ignore_errors=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--nodes", type=int, default=3)
    ap.add_argument("--partitions", type=int, default=3)
    ap.add_argument("--size", type=int, default=100, help="records per transaction")
    ap.add_argument("--txns", type=int, default=300, help="transactions of the flood")
    ap.add_argument("--rate", type=float, default=100, help="transactions/s of the paced run")
    ap.add_argument("--secs", type=float, default=10, help="length of the paced run")
    ap.add_argument("--read-records", type=int, default=300_000,
                    help="records of each topic the consumers read")
    ap.add_argument("--read-pairs", type=int, default=4,
                    help="timed reads each way of each topic (the median is reported)")
    ap.add_argument("--phases", type=int, default=0, metavar="N",
                    help="also time the steps of N transactions (medians) and count "
                         "their round trips (scrapes each node's /metrics)")
    ap.add_argument("--skip-read", action="store_true",
                    help="leave out the read_committed vs read_uncommitted figures")
    ap.add_argument("--write-caching", choices=("default", "false", "true"), default="default",
                    help="the nodes' write.caching.default (every topic of the run, "
                         "__transaction_state included); default: the node's own (false)")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    out = run(args)
    if args.json:
        print(json.dumps(out))
        return
    f, pc, fl = out["flood"], out["paced"], out["floor"]
    print(f"{out['nodes']} nodes, RF{out['replication_factor']}, transactions of "
          f"{out['txn_size']} records over {out['partitions']} partitions, SDK defaults")
    print(f"flood: {f['txns']} transactions, {f['rec_s']} committed rec/s, {f['mb_s']} MB/s; "
          f"commit p50 {f['commit']['p50_ms']} ms, p99 {f['commit']['p99_ms']} ms")
    print(f"paced {pc['rate']}/s ({pc['achieved_rate']}/s reached): commit p50 "
          f"{pc['commit']['p50_ms']} ms, p99 {pc['commit']['p99_ms']} ms, max "
          f"{pc['commit']['max_ms']} ms")
    print(f"floor (one acks=all record, sent and awaited): p50 {fl['p50_ms']} ms, p99 "
          f"{fl['p99_ms']} ms; commit p50 / floor: flood "
          f"{out['commit_p50_over_floor']['flood']}, paced {out['commit_p50_over_floor']['paced']}")
    ch = out["chain"]
    print(f"chain of durable writes at that floor: commit >= {ch['commit_floor_ms']} ms "
          f"(paced p50 is {ch['paced_commit_p50_over_floor']}x), one producer <= "
          f"{ch['back_to_back_ceiling_rec_s']} rec/s back to back (the flood reached "
          f"{ch['flood_over_ceiling']}x)")
    if "phases" in out:
        ph = out["phases"]
        print(f"phases of {ph['txns']} transactions, p50 ms: " + ", ".join(
            f"{k} {v}" for k, v in ph["p50_ms"].items()))
        print("  SDK coordinator requests per transaction: " + ", ".join(
            f"{k} {v['requests']} ({v['ms']} ms)" for k, v in ph["sdk_per_txn"].items())
            + f"; produce requests {ph['produce_requests_per_txn']}")
        print("  node requests per transaction (all nodes): " + ", ".join(
            f"{k} {v['requests']} (mean {v['mean_ms']} ms)"
            for k, v in ph["node_requests_per_txn"].items()))
    if "read" not in out:
        return
    r = out["read"]
    print(f"plain records: read_committed {r['plain_read_committed_rec_s']} rec/s, "
          f"read_uncommitted {r['plain_read_uncommitted_rec_s']} rec/s "
          f"(ratio {r['plain_ratio']})")
    print(f"10% aborted: read_committed {r['aborted_10pct_read_committed_rec_s']} rec/s, "
          f"read_uncommitted {r['aborted_10pct_read_uncommitted_rec_s']} rec/s "
          f"(ratio {r['aborted_10pct_ratio']})")


if __name__ == "__main__":
    main()
