"""Operator commands: ``cluster status`` (tables, ``--watch``), ``log-dirs describe``
(like kafka-log-dirs) and ``dump-log`` (like kafka-dump-log)."""

from __future__ import annotations

import json
import sys
import time

from raftlog.errors import RaftlogError

from . import dumplog
from .status import build_status, format_status, human_bytes, table

#: DescribeLogDirs answer time allowed per node in ``cluster status`` (a paused node
#: must not stall the whole status for the request timeout).
STATUS_LOG_DIRS_TIMEOUT_S = 5.0
CLEAR_SCREEN = "\x1b[H\x1b[2J"


def _admin(args):
    from .cli_common import admin_for

    return admin_for(args)


# --------------------------------------------------------------------------- cluster status


def collect_status(admin) -> dict:
    cluster = admin.describe_cluster()
    topics = admin.describe_topics()
    dirs = admin.describe_log_dirs(timeout_s=STATUS_LOG_DIRS_TIMEOUT_S)
    return build_status(cluster, topics, dirs)


def cmd_status(args) -> int:
    """One status (exit 0), or with ``--watch`` one every N seconds until Ctrl-C or
    ``--count`` refreshes; errors while watching are shown and the watch goes on."""
    if args.watch is None:
        with _admin(args) as admin:
            s = collect_status(admin)
        print(json.dumps(s) if args.json else format_status(s))
        return 0
    if not args.watch > 0:
        print("raftlog cluster status: --watch needs a positive number of seconds",
              file=sys.stderr)
        return 2
    shown = 0
    tty = sys.stdout.isatty() and not args.json
    try:
        with _admin(args) as admin:
            while args.count is None or shown < args.count:
                try:
                    s = collect_status(admin)
                    text = json.dumps(s) if args.json else format_status(s)
                except RaftlogError as e:
                    text = json.dumps({"error": str(e)}) if args.json else f"status failed: {e}"
                stamp = time.strftime("%Y-%m-%d %H:%M:%S")
                if args.json:
                    print(text, flush=True)
                else:
                    print(f"{CLEAR_SCREEN if tty else ''}{stamp}  (every {args.watch:g} s, "
                          f"Ctrl-C stops)\n{text}\n", flush=True)
                shown += 1
                if args.count is None or shown < args.count:
                    time.sleep(args.watch)
    except KeyboardInterrupt:
        pass
    return 0


# --------------------------------------------------------------------------- log-dirs


def _csv(value: str | None, conv=str):
    if not value:
        return None
    try:
        return [conv(x.strip()) for x in value.split(",") if x.strip()]
    except ValueError:
        raise ValueError(f"{value!r} is not a comma-separated list") from None


def log_dirs_json(dirs) -> dict:
    """kafka-log-dirs' JSON shape (brokers -> logDirs -> partitions), plus raftlog's
    extra fields per partition. ``offsetLag``: the leader's log end offset minus this
    replica's (0 for the leader, or when the leader's answer is missing)."""
    leader_leo = {(r.topic, r.partition): r.log_end_offset
                  for d in dirs for r in d.partitions if r.leader == d.node_id}
    brokers = []
    for d in dirs:
        parts = [{"partition": f"{r.topic}-{r.partition}", "size": r.size_bytes,
                  "offsetLag": max(0, leader_leo.get((r.topic, r.partition), r.log_end_offset)
                                   - r.log_end_offset),
                  "isFuture": False, "segments": r.segments,
                  "logStartOffset": r.log_start_offset, "logEndOffset": r.log_end_offset,
                  "highWatermark": r.high_watermark, "leader": r.leader}
                 for r in d.partitions]
        brokers.append({"broker": d.node_id, "host": d.host, "port": d.port,
                        "roles": list(d.roles),
                        "logDirs": [{"logDir": d.log_dir or None, "error": d.error or None,
                                     "totalBytes": d.total_bytes, "usableBytes": d.usable_bytes,
                                     "partitions": parts}]})
    return {"version": 1, "brokers": brokers}


def format_log_dirs(doc: dict) -> str:
    out = []
    for b in doc["brokers"]:
        d = b["logDirs"][0]
        if d["error"]:
            out.append(f"node {b['broker']}  {b['host']}:{b['port']}  error: {d['error']}")
            out.append("")
            continue
        total = sum(p["size"] for p in d["partitions"])
        out.append(f"node {b['broker']}  {b['host']}:{b['port']}  {d['logDir']}  "
                   f"log size {human_bytes(total)} in {len(d['partitions'])} partition(s)  "
                   f"disk free {human_bytes(d['usableBytes'])} of {human_bytes(d['totalBytes'])}")
        if d["partitions"]:
            out.append(table(
                ["PARTITION", "SIZE", "BYTES", "SEGMENTS", "START", "END", "HW", "ROLE", "LAG"],
                [[p["partition"], human_bytes(p["size"]), p["size"], p["segments"],
                  p["logStartOffset"], p["logEndOffset"], p["highWatermark"],
                  "leader" if p["leader"] == b["broker"] else f"follower of {p['leader']}",
                  p["offsetLag"]] for p in d["partitions"]]))
        out.append("")
    return "\n".join(out).rstrip()


def cmd_log_dirs(args) -> int:
    topics = _csv(args.topic_list)
    brokers = _csv(args.broker_list, int)
    with _admin(args) as admin:
        dirs = admin.describe_log_dirs(topics, None if brokers is None else set(brokers))
    if brokers is not None:
        missing = sorted(set(brokers) - {d.node_id for d in dirs})
        if missing:
            print(f"raftlog log-dirs: no broker {', '.join(map(str, missing))} in the cluster",
                  file=sys.stderr)
            return 1
    doc = log_dirs_json(dirs)
    print(json.dumps(doc) if args.json else format_log_dirs(doc))
    return 1 if any(d.error for d in dirs) else 0


# --------------------------------------------------------------------------- dump-log


def _dump_segment(path: str, args, out: dict) -> int:
    bad = 0
    batches, problems = [], []
    if not args.json:
        print(f"Dumping {path}")
        base = dumplog.base_offset_of(path)
        if base is not None:
            print(f"Starting offset: {base}")
    for item in dumplog.scan_segment(path, keep_data=args.print_data_log):
        if isinstance(item, dumplog.Problem):
            bad += 1
            p = {"position": item.position, "message": item.message, "fatal": item.fatal}
            problems.append(p)
            if not args.json:
                print(f"PROBLEM at position {item.position}: {item.message}")
            continue
        bad += not item.crc_ok
        b = dumplog.describe_batch(item)
        recs = dumplog.describe_records(item) if args.print_data_log else []
        if args.json:
            batches.append({**b, **({"records": recs} if args.print_data_log else {})})
            continue
        print(" ".join(f"{k}: {_text(v)}" for k, v in b.items()))
        if args.print_data_log and not item.crc_ok:
            print("| (records not shown: the batch failed its CRC check)")
        for r in recs:
            print("| " + " ".join(f"{k}: {_text(v)}" for k, v in r.items()))
    out.update({"file": path, "kind": "log", "batches": batches, "problems": problems})
    return bad


def _text(v) -> str:
    if isinstance(v, bool):
        return str(v).lower()
    if isinstance(v, list):
        return ",".join(map(str, v)) if v else "[]"
    return str(v)


def _dump_index(path: str, kind: str, args, out: dict) -> int:
    rows, trailing = dumplog.read_index(path)
    key = "timestamp" if kind == "timeindex" else "offset"
    out.update({"file": path, "kind": kind,
                "entries": [{key: k, "position": pos} for k, pos in rows],
                "trailingBytes": trailing})
    if not args.json:
        print(f"Dumping {path}")
        for k, pos in rows:
            print(f"{key}: {k} position: {pos}")
        if trailing:
            print(f"PROBLEM: {trailing} trailing byte(s) are not a whole entry")
    return 1 if trailing else 0


def cmd_dump_log(args) -> int:
    """Exit 0 when every file is intact, 1 when a batch failed its CRC or a file is
    truncated or unreadable."""
    docs, bad = [], 0
    for path in args.files:
        doc: dict = {}
        try:
            kind = dumplog.file_kind(path)
            if kind == "log":
                bad += _dump_segment(path, args, doc)
            else:
                bad += _dump_index(path, kind, args, doc)
        except (OSError, ValueError) as e:
            bad += 1
            doc = {"file": path, "error": str(e)}
            print(f"raftlog dump-log: {path}: {getattr(e, 'strerror', None) or e}",
                  file=sys.stderr)
        docs.append(doc)
    if args.json:
        print(json.dumps(docs[0] if len(docs) == 1 else docs))
    return 1 if bad else 0


# --------------------------------------------------------------------------- parsers


def add_parsers(sub, with_bootstrap) -> None:
    ld = with_bootstrap(sub.add_parser(
        "log-dirs", help="size and offsets of every replica per node (like kafka-log-dirs)"))
    ld.add_argument("action", choices=["describe"])
    ld.add_argument("--topic-list", metavar="T1,T2", help="only these topics")
    ld.add_argument("--broker-list", metavar="1,2", help="only these brokers")
    ld.add_argument("--json", action="store_true",
                    help="kafka-log-dirs' JSON (brokers/logDirs/partitions) plus offsets")
    ld.set_defaults(fn=cmd_log_dirs)

    dump = sub.add_parser(
        "dump-log", help="batches, offsets, timestamps and CRC check of segment files "
                         "(like kafka-dump-log); .index and .timeindex files too")
    dump.add_argument("files", nargs="+", metavar="FILE")
    dump.add_argument("--print-data-log", action="store_true",
                      help="also print every record (offset, timestamp, key, value)")
    dump.add_argument("--json", action="store_true", help="one JSON document")
    dump.set_defaults(fn=cmd_dump_log)
