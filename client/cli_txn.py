"""``raftlog transactions list|describe|describe-producers|abort|find-hanging`` (like
Kafka's kafka-transactions.sh), over the Admin calls of client/admin_txn.py."""

from __future__ import annotations

import json

from .cli_common import UsageError


def _admin(args):
    from .cli_common import admin_for

    return admin_for(args)


def _table(headers: list[str], rows: list[list]) -> str:
    from .cli import _table as table

    return table(headers, rows)


def duration_text(ms: int | None) -> str | None:
    """A duration as people read it: 850ms, 12.3s, 4m05s, 2h03m (None stays None)."""
    if ms is None:
        return None
    if ms < 1000:
        return f"{ms}ms"
    s = ms / 1000
    if s < 60:
        return f"{s:.1f}s"
    m, s = divmod(int(s), 60)
    if m < 60:
        return f"{m}m{s:02d}s"
    h, m = divmod(m, 60)
    return f"{h}h{m:02d}m"


def _tps(partitions) -> list:
    return [[tp.topic, tp.partition] for tp in partitions]


def description_json(d) -> dict:
    return {"transactional_id": d.transactional_id, "coordinator": d.coordinator,
            "state": d.state, "producer_id": d.producer_id,
            "producer_epoch": d.producer_epoch, "timeout_ms": d.timeout_ms,
            "start_ms": d.start_ms, "duration_ms": d.duration_ms,
            "partitions": _tps(d.partitions)}


def producer_json(p) -> dict:
    return {"producer_id": p.producer_id, "producer_epoch": p.producer_epoch,
            "last_sequence": p.last_sequence, "last_timestamp": p.last_timestamp,
            "coordinator_epoch": p.coordinator_epoch,
            "current_transaction_start_offset": p.current_txn_start_offset}


def cmd_transactions(args) -> int:
    action = args.action
    if action == "describe":
        tid = args.transactional_id_opt or args.transactional_id
        if not tid:
            raise UsageError("describe needs a transactional id: raftlog transactions "
                             "describe --transactional-id ID (raftlog transactions list "
                             "shows them)")
        if args.transactional_id_opt and args.transactional_id and (
                args.transactional_id_opt != args.transactional_id):
            raise UsageError("give the transactional id once (positionally or with "
                             "--transactional-id)")
    if action in ("describe-producers", "abort") and (args.topic is None
                                                      or args.partition is None):
        raise UsageError(f"{action} needs --topic T --partition P"
                         + (" --start-offset O" if action == "abort" else ""))
    if action == "abort" and args.start_offset is None:
        raise UsageError("abort needs --start-offset O: the first offset of the open "
                         "transaction (raftlog transactions describe-producers --topic "
                         f"{args.topic} --partition {args.partition} shows them)")
    if action == "find-hanging" and args.broker_id is None:
        raise UsageError("find-hanging needs --broker-id N: the partitions that broker "
                         "leads are searched")
    with _admin(args) as admin:
        if action == "list":
            return _list(admin, args)
        if action == "describe":
            return _describe(admin, tid, args)
        if action == "describe-producers":
            return _describe_producers(admin, args)
        if action == "abort":
            return _abort(admin, args)
        return _find_hanging(admin, args)


def _list(admin, args) -> int:
    rows = admin.list_transactions(states=args.state, producer_ids=args.producer_id)
    if args.json:
        print(json.dumps([{"transactional_id": t.transactional_id,
                           "coordinator": t.coordinator, "producer_id": t.producer_id,
                           "state": t.state, "duration_ms": t.duration_ms} for t in rows]))
    elif rows:
        print(_table(["TRANSACTIONAL-ID", "COORDINATOR", "PRODUCER-ID", "STATE", "DURATION"],
                     [[t.transactional_id, t.coordinator, t.producer_id, t.state,
                       duration_text(t.duration_ms)] for t in rows]))
    else:
        print("no transactional ids known to any coordinator"
              + (" with those filters" if args.state or args.producer_id else ""))
    return 0


def _describe(admin, tid: str, args) -> int:
    d = admin.describe_transaction(tid)
    if args.json:
        print(json.dumps(description_json(d)))
        return 0
    print(_table(["COORDINATOR", "TRANSACTIONAL-ID", "PRODUCER-ID", "PRODUCER-EPOCH",
                  "STATE", "TIMEOUT-MS", "START-MS", "DURATION", "TOPIC-PARTITIONS"],
                 [[d.coordinator, d.transactional_id, d.producer_id, d.producer_epoch,
                   d.state, d.timeout_ms, d.start_ms, duration_text(d.duration_ms),
                   ",".join(f"{tp.topic}-{tp.partition}" for tp in d.partitions) or None]]))
    return 0


def _describe_producers(admin, args) -> int:
    from .types import TopicPartition

    tp = TopicPartition(args.topic, args.partition)
    producers = admin.describe_producers([tp])[tp]
    if args.json:
        print(json.dumps({"topic": tp.topic, "partition": tp.partition,
                          "producers": [producer_json(p) for p in producers]}))
    elif producers:
        print(_table(["PRODUCER-ID", "PRODUCER-EPOCH", "LAST-SEQUENCE", "LAST-TIMESTAMP",
                      "COORDINATOR-EPOCH", "CURRENT-TRANSACTION-START-OFFSET"],
                     [[p.producer_id, p.producer_epoch, p.last_sequence, p.last_timestamp,
                       p.coordinator_epoch, p.current_txn_start_offset] for p in producers]))
    else:
        print(f"{tp.topic}-{tp.partition}: no producers (no idempotent or transactional "
              "writes it remembers)")
    return 0


def _abort(admin, args) -> int:
    p = admin.abort_transaction(args.topic, args.partition, args.start_offset)
    if args.json:
        print(json.dumps({"topic": args.topic, "partition": args.partition,
                          "start_offset": args.start_offset, "aborted": producer_json(p)}))
    else:
        print(f"aborted the transaction of producer {p.producer_id} (epoch "
              f"{p.producer_epoch}) on {args.topic}-{args.partition} starting at offset "
              f"{args.start_offset}")
    return 0


def _find_hanging(admin, args) -> int:
    found = admin.find_hanging_transactions(
        args.broker_id, max_transaction_timeout_ms=args.max_transaction_timeout)
    if args.json:
        print(json.dumps([{"topic": h.topic, "partition": h.partition,
                           "producer_id": h.producer_id, "producer_epoch": h.producer_epoch,
                           "start_offset": h.start_offset, "last_timestamp": h.last_timestamp,
                           "reason": h.reason} for h in found]))
    elif found:
        print(_table(["TOPIC", "PARTITION", "PRODUCER-ID", "PRODUCER-EPOCH", "START-OFFSET",
                      "LAST-TIMESTAMP", "REASON"],
                     [[h.topic, h.partition, h.producer_id, h.producer_epoch, h.start_offset,
                       h.last_timestamp, h.reason] for h in found]))
        print("abort each with: raftlog transactions abort --topic T --partition P "
              "--start-offset O")
    else:
        print(f"no hanging transactions in the partitions broker {args.broker_id} leads")
    return 0


def add_parsers(sub, with_bootstrap) -> None:
    from .admin_txn import MAX_TRANSACTION_TIMEOUT_MS, TXN_STATES

    t = sub.add_parser(
        "transactions", help="list, describe, abort transactions (like kafka-transactions.sh)")
    tsub = t.add_subparsers(dest="action", required=True, metavar="ACTION")
    ls = with_bootstrap(tsub.add_parser(
        "list", help="every transactional id the coordinators know, its state and how long "
                     "its open transaction has been open"))
    ls.add_argument("--state", action="append", choices=TXN_STATES, metavar="STATE",
                    help=f"only this state (repeatable): {', '.join(TXN_STATES)}")
    ls.add_argument("--producer-id", action="append", type=int, metavar="PID",
                    help="only this producer id (repeatable)")
    ls.add_argument("--json", action="store_true", help="a JSON list")
    d = with_bootstrap(tsub.add_parser(
        "describe", help="one transactional id: state, producer, timeout, start, partitions"))
    d.add_argument("transactional_id", nargs="?", metavar="ID")
    d.add_argument("--transactional-id", dest="transactional_id_opt", metavar="ID")
    d.add_argument("--json", action="store_true", help="one JSON object")
    dp = with_bootstrap(tsub.add_parser(
        "describe-producers", help="the producers of a partition and where their open "
                                   "transactions start (its leader's view)"))
    ab = with_bootstrap(tsub.add_parser(
        "abort", help="abort a hanging transaction of a partition by its start offset"))
    for sp in (dp, ab):
        sp.add_argument("--topic", metavar="T")
        sp.add_argument("--partition", type=int, metavar="P")
        sp.add_argument("--json", action="store_true", help="one JSON object")
    ab.add_argument("--start-offset", type=int, metavar="O",
                    help="the first offset of the open transaction to abort "
                         "(see describe-producers)")
    fh = with_bootstrap(tsub.add_parser(
        "find-hanging", help="open transactions of a broker's partitions that their "
                             "coordinator does not know"))
    fh.add_argument("--broker-id", type=int, metavar="N",
                    help="search the partitions this broker leads")
    fh.add_argument("--max-transaction-timeout", type=int, default=MAX_TRANSACTION_TIMEOUT_MS,
                    metavar="MS", help="the nodes' transaction.max.timeout.ms: only "
                                       "transactions idle longer are looked at "
                                       f"(default {MAX_TRANSACTION_TIMEOUT_MS})")
    fh.add_argument("--json", action="store_true", help="a JSON list")
    t.set_defaults(fn=cmd_transactions)
