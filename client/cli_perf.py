"""``raftlog perf produce|consume``: load generators like kafka-producer-perf-test and
kafka-consumer-perf-test.

A line of progress goes to stderr every PROGRESS_INTERVAL_S; the summary goes to
stdout. Ctrl-C stops the run and still prints the summary of what went through (exit
130). The consume rate counts from the start to the last record received, not the
idle wait (``--timeout-ms``) that ends the run.
"""

from __future__ import annotations

import json
import sys
import time

from .cli_common import InterruptFlag
from .security import security_kwargs

#: Seconds between two progress lines on stderr.
PROGRESS_INTERVAL_S = 5.0
#: Exit status after Ctrl-C (128 + SIGINT).
EXIT_INTERRUPTED = 130
#: perf produce: how long Ctrl-C waits for the records already sent to be acknowledged.
PRODUCE_INTERRUPT_FLUSH_S = 5.0
#: perf consume: records asked for per poll.
CONSUME_POLL_RECORDS_MAX = 100_000


def percentiles(lat_ms: list[float]) -> dict:
    if not lat_ms:
        return {}
    s = sorted(lat_ms)

    def pct(q: float) -> float:
        return s[min(len(s) - 1, int(q * len(s)))]

    return {
        "avg_ms": sum(s) / len(s),
        "p50_ms": pct(0.5),
        "p95_ms": pct(0.95),
        "p99_ms": pct(0.99),
        "p999_ms": pct(0.999),
        "max_ms": s[-1],
    }


def summary(records: int, secs: float, nbytes: int, interrupted: bool, lat=()) -> dict:
    """The summary of a run; ``secs`` is clamped away from 0 (a run of no record)."""
    secs = max(secs, 1e-9)
    out = {"records": records, "secs": secs, "rec_s": records / secs,
           "mb_s": nbytes / secs / 1e6, **percentiles(list(lat))}
    if interrupted:
        out["interrupted"] = True
    return out


def progress_line(what: str, n: int, total: int | None, elapsed_s: float) -> str:
    of = f" of {total:,}" if total is not None else ""
    return f"{n:,}{of} records {what}, {n / max(elapsed_s, 1e-9):,.0f} rec/s"


def cmd_perf(args) -> int:
    return perf_produce(args) if args.action == "produce" else perf_consume(args)


def perf_produce(args) -> int:
    from .producer import Producer

    lat: list[float] = []
    sent = 0
    interrupted = False
    flushed = True
    start = time.perf_counter()
    p = Producer(args.bootstrap_server, acks=args.acks, linger_ms=args.linger_ms,
                 batch_size=args.batch_size, **security_kwargs(args))
    try:
        interval = 1.0 / args.throughput if args.throughput > 0 else 0
        # a callback per record costs ~1 us: sample every record only when rate-capped
        sample_every = 1 if 0 < args.throughput <= 100_000 else 100
        with InterruptFlag() as flag:
            sent = _send_all(p, args, flag, interval, sample_every, lat, start)
        if flag.interrupted:
            raise KeyboardInterrupt
        p.flush()
    except KeyboardInterrupt:
        interrupted = True
    finally:
        try:  # (interrupted: a short wait for what was sent, so the count is true)
            p.close(timeout=PRODUCE_INTERRUPT_FLUSH_S if interrupted else None)
        except Exception:  # noqa: BLE001 -- TimeoutError: said below
            flushed = False
    secs = time.perf_counter() - start
    if interrupted:
        print(f"\nraftlog perf produce: interrupted after {sent:,} records sent"
              + ("" if flushed else f", not all of them acknowledged within "
                 f"{PRODUCE_INTERRUPT_FLUSH_S:g} s"), file=sys.stderr, flush=True)
    print_summary(summary(sent, secs, sent * args.record_size, interrupted, lat), args.json)
    return EXIT_INTERRUPTED if interrupted else 0


def _send_all(p, args, flag, interval: float, sample_every: int, lat: list,
              start: float) -> int:
    """Send --num-records records (paced by ``interval``) until done or Ctrl-C
    (``flag``); returns how many were sent."""
    sent = 0
    last_report = start
    value = b"x" * args.record_size
    for i in range(args.num_records):
        if flag.interrupted:
            break
        t0 = time.perf_counter()
        f = p.send(args.topic, value, partition=args.partition)
        sent += 1
        if i % sample_every == 0:
            f.add_done_callback(lambda _f, t0=t0: lat.append((time.perf_counter() - t0) * 1000))
        if interval:
            ahead = start + (i + 1) * interval - time.perf_counter()
            if ahead > 0:
                time.sleep(ahead)
        if t0 - last_report >= PROGRESS_INTERVAL_S:
            last_report = t0
            print(progress_line("sent", sent, args.num_records, t0 - start),
                  file=sys.stderr, flush=True)
    return sent


def perf_consume(args) -> int:
    from .consumer import Consumer
    from .types import TopicPartition

    c = Consumer(args.bootstrap_server, auto_offset_reset="earliest", **security_kwargs(args))
    got = {"n": 0, "bytes": 0}
    start = last_record = time.perf_counter()
    try:
        parts = sorted(c.partitions_for_topic(args.topic))
        c.assign([TopicPartition(args.topic, p) for p in parts])
        c.seek_to_beginning()
        start = time.perf_counter()
        with InterruptFlag() as flag:
            last_record = _read_all(c, args, flag, got, start)
        interrupted = flag.interrupted
    except KeyboardInterrupt:  # (while connecting)
        interrupted = True
    finally:
        c.close()
    if interrupted:
        print(f"\nraftlog perf consume: interrupted after {got['n']:,} records",
              file=sys.stderr, flush=True)
    # the rate of what was read: up to the last record, not the idle wait that ended it
    print_summary(summary(got["n"], last_record - start, got["bytes"], interrupted), args.json)
    return EXIT_INTERRUPTED if interrupted else 0


def _read_all(c, args, flag, got: dict, start: float) -> float:
    """Poll until --num-records, --timeout-ms without a record, or Ctrl-C (``flag``),
    counting into ``got``; returns when the last record arrived (``start`` if none)."""
    last_record = last_report = start
    idle_deadline = start + args.timeout_ms / 1000
    while (got["n"] < args.num_records and time.perf_counter() < idle_deadline
           and not flag.interrupted):
        recs = c.poll(timeout_ms=500,
                      max_records=min(CONSUME_POLL_RECORDS_MAX, args.num_records - got["n"]))
        now = time.perf_counter()
        if recs:
            last_record = now
            idle_deadline = now + args.timeout_ms / 1000
        got["n"] += len(recs)
        got["bytes"] += sum(len(r.value or b"") for r in recs)
        if now - last_report >= PROGRESS_INTERVAL_S:
            last_report = now
            print(progress_line("consumed", got["n"], args.num_records, now - start),
                  file=sys.stderr, flush=True)
    return last_record


def print_summary(s: dict, as_json: bool) -> None:
    if as_json:
        print(json.dumps(s), flush=True)
        return
    parts = [
        f"{s['records']} records in {s['secs']:.2f} s",
        f"{s['rec_s']:,.0f} rec/s",
        f"{s['mb_s']:.2f} MB/s",
    ]
    parts += [f"{k.replace('_ms', '')} {v:.2f} ms" for k, v in s.items() if k.endswith("_ms")]
    if s.get("interrupted"):
        parts.append("interrupted")
    print(", ".join(parts), flush=True)


def add_parser(sub, with_bootstrap) -> None:
    perf = with_bootstrap(sub.add_parser("perf", help="load generators like kafka-*-perf-test"))
    perf.add_argument("action", choices=["produce", "consume"])
    perf.add_argument("--topic", required=True, help="the topic to load")
    perf.add_argument("--num-records", type=int, default=100_000)
    perf.add_argument("--record-size", type=int, default=100)
    perf.add_argument("--throughput", type=float, default=-1, help="records/s cap (-1: none)")
    perf.add_argument("--acks", default="1")
    perf.add_argument("--linger-ms", type=float, default=5)
    perf.add_argument("--batch-size", type=int, default=262_144)
    perf.add_argument("--partition", type=int)
    perf.add_argument(
        "--timeout-ms", type=int, default=10_000, help="consume: stop after this long idle"
    )
    perf.add_argument("--json", action="store_true")
    perf.set_defaults(fn=cmd_perf)
