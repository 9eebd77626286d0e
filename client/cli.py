"""The ``raftlog`` command line.

Server commands (``up``, ``node``) start ``python -m raftlog.node`` as a process,
so this module -- part of the client -- never imports the server packages.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys

from raftlog.errors import ErrorCode, RaftlogError

from .cli_up import cmd_up, unready_brokers  # noqa: F401 (unready_brokers: tests)
from .security import DEFAULT_COMMAND_CONFIG

DEFAULT_BOOTSTRAP = "127.0.0.1:9092"
#: The environment variable that replaces DEFAULT_BOOTSTRAP (--bootstrap-server wins).
BOOTSTRAP_ENV = "RAFTLOG_BOOTSTRAP_SERVERS"


def version() -> str:
    """The installed raftlog's version (the package metadata's), or "unknown"."""
    from importlib import metadata

    try:
        return metadata.version("raftlog")
    except metadata.PackageNotFoundError:
        return "unknown (not installed)"


# --------------------------------------------------------------------------- server commands


def cmd_node(args) -> int:
    argv = [sys.executable, "-m", "raftlog.node"] + args.node_args
    os.execv(sys.executable, argv)
    return 0  # not reached


# --------------------------------------------------------------------------- topics


def _admin(args):
    from .cli_common import admin_for

    return admin_for(args)


def _parse_kv(items: list[str], what: str) -> dict:
    out = {}
    for item in items or []:
        k, sep, v = item.partition("=")
        if not sep or not k:
            raise SystemExit(f"raftlog: {what} {item!r} is not key=value")
        out[k] = v
    return out


def cmd_topics(args) -> int:
    from . import cli_configs

    if args.action == "list":
        return cli_configs.cmd_topics_list(args)
    if args.action == "describe":
        return cli_configs.cmd_topics_describe(args)
    if args.action == "alter":
        return cli_configs.cmd_topics_alter(args)
    with _admin(args) as admin:
        if args.action == "create":
            admin.create_topic(
                args.topic,
                1 if args.partitions is None else args.partitions,
                args.replication_factor,
                _parse_kv(args.config, "--config"),
            )
            print(f"created topic {args.topic}")
        elif args.action == "delete":
            admin.delete_topic(args.topic)
            print(f"deleted topic {args.topic}")
    return 0


def cmd_cluster(args) -> int:
    if args.action == "quorum":
        return _quorum(args)
    if args.action == "elect-leaders":
        return _elect_leaders(args)
    if args.action == "decommission":
        from .cli_reassign import cmd_decommission

        return cmd_decommission(args)
    from .cli_ops import cmd_status

    return cmd_status(args)


def _quorum(args) -> int:
    with _admin(args) as admin:
        q = admin.describe_quorum()
    if args.json:
        print(json.dumps({"leader_id": q.leader_id, "leader_epoch": q.leader_epoch,
                          "high_watermark": q.high_watermark, "from_leader": q.from_leader,
                          "voters": [dataclasses.asdict(v) for v in q.voters]}))
        return 0
    print(f"controller {q.leader_id}, term {q.leader_epoch}, commit index {q.high_watermark}"
          + ("" if q.from_leader else " (the controller did not answer: one voter's view)"))
    print(f"{'voter':>5} {'log end':>9} {'lag':>6} {'last heard':>11} {'caught up':>10}")

    def ago(ms: int) -> str:
        return "-" if ms < 0 else f"{ms / 1000:.1f}s ago"
    for v in q.voters:
        role = " (controller)" if v.id == q.leader_id else ""
        print(f"{v.id:>5} {v.log_end_offset:>9} {v.lag if v.lag >= 0 else '-':>6} "
              f"{ago(v.last_heard_ms_ago):>11} {ago(v.last_caught_up_ms_ago):>10}{role}")
    return 0


def _elect_leaders(args) -> int:
    wanted = None
    if args.topic:
        wanted = [(args.topic, p) for p in (args.partition if args.partition else [])] or None
    with _admin(args) as admin:
        if args.topic and wanted is None:
            wanted = [(args.topic, p.partition) for p in admin.describe_topic(args.topic).partitions]
        results = admin.elect_leaders(wanted)
    failed = 0
    for topic, partition, code, message in results:
        ok = code == 0
        failed += not ok
        print(f"{topic}-{partition}: {'ok' if ok else ErrorCode(code).name} {message}".rstrip())
    if not results:
        print("every partition is led by its preferred replica")
    return 1 if failed else 0


# --------------------------------------------------------------------------- groups


def _table(headers: list[str], rows: list[list]) -> str:
    """Left-aligned columns, two spaces apart; None shows as "-"."""
    cells = [headers] + [["-" if c is None else str(c) for c in r] for r in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]
    return "\n".join(
        "  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in cells
    )


def parse_topic_arg(value: str) -> tuple[str, list[int] | None]:
    """``--topic`` of reset-offsets: "TOPIC" or "TOPIC:P,P,..." (only those partitions)."""
    topic, sep, parts = value.partition(":")
    if not topic:
        raise argparse.ArgumentTypeError(f"{value!r} names no topic")
    if not sep:
        return topic, None
    try:
        partitions = sorted({int(p) for p in parts.split(",")})
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"{value!r}: partitions must be integers, as in TOPIC:0,2"
        ) from None
    if any(p < 0 for p in partitions):
        raise argparse.ArgumentTypeError(f"{value!r}: partitions must be >= 0")
    return topic, partitions


def _datetime_arg(value: str):
    from datetime import datetime

    from .admin import to_timestamp_ms

    try:
        to_timestamp_ms(value)
        return datetime.fromisoformat(value.strip())
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def group_to_json(d) -> dict:
    """The ``groups describe --json`` object of a GroupDescription."""
    return {
        "group": d.group_id,
        "state": d.state,
        "protocol_type": d.protocol_type,
        "protocol": d.protocol,
        "generation": d.generation,
        "leader": d.leader,
        "isolation_level": d.isolation_level,
        "members": [
            {
                "member_id": m.member_id,
                "group_instance_id": m.group_instance_id,
                "client_id": m.client_id,
                "client_host": m.client_host,
                "assignment": [[tp.topic, tp.partition] for tp in sorted(m.assignment)],
            }
            for m in d.members
        ],
        "offsets": [
            {
                "topic": tp.topic,
                "partition": tp.partition,
                "committed": o.committed,
                "log_end_offset": o.log_end_offset,
                "lag": o.lag,
            }
            for tp, o in sorted(d.offsets.items())
        ],
    }


def format_group(d) -> str:
    """The ``groups describe`` text of a GroupDescription."""
    protocol = "/".join(x for x in (d.protocol_type, d.protocol) if x) or "-"
    lines = [
        f"Group: {d.group_id}  State: {d.state}  Protocol: {protocol}  "
        f"Generation: {d.generation}  Members: {len(d.members)}  Leader: {d.leader or '-'}",
        "LOG-END-OFFSET and LAG: against the " + (
            "last stable offset (read_committed)" if d.isolation_level == "read_committed"
            else "high watermark (read_uncommitted)"),
        "",
    ]
    owners = d.owners()
    rows = [
        [tp.topic, tp.partition, o.committed, o.log_end_offset, o.lag, owners.get(tp)]
        for tp, o in sorted(d.offsets.items())
    ]
    if rows:
        lines.append(_table(
            ["TOPIC", "PARTITION", "CURRENT-OFFSET", "LOG-END-OFFSET", "LAG", "MEMBER-ID"], rows
        ))
    else:
        lines.append("(no committed offsets and no assigned partitions)")
    if d.members:
        lines.append("")
        lines.append(_table(
            ["MEMBER-ID", "GROUP-INSTANCE-ID", "CLIENT-ID", "HOST", "PARTITIONS"],
            [
                [m.member_id, m.group_instance_id, m.client_id or None, m.client_host or None,
                 ",".join(f"{tp.topic}-{tp.partition}" for tp in sorted(m.assignment)) or None]
                for m in d.members
            ],
        ))
    return "\n".join(lines)


def cmd_groups(args) -> int:
    from .errors import GroupIdNotFoundError

    with _admin(args) as admin:
        if args.action == "list":
            groups = admin.list_groups()
            if args.json:
                print(json.dumps([
                    {"group": g.group_id, "protocol_type": g.protocol_type, "state": g.state}
                    for g in groups
                ]))
            elif groups:
                print(_table(["GROUP", "STATE", "PROTOCOL-TYPE"],
                             [[g.group_id, g.state, g.protocol_type or None] for g in groups]))
        elif args.action == "describe":
            d = admin.describe_group(args.group, isolation_level=args.isolation)
            if not d.exists:
                raise GroupIdNotFoundError(f"group {args.group!r} does not exist")
            print(json.dumps(group_to_json(d)) if args.json else format_group(d))
        elif args.action == "reset-offsets":
            return _reset_offsets(admin, args)
        elif args.action == "delete":
            admin.delete_group(args.group)
            print(f"deleted group {args.group}")
    return 0


def _reset_offsets(admin, args) -> int:
    if args.all_topics:
        topic, partitions = None, None
    else:
        topic, partitions = args.topic
    if args.to_earliest:
        to, shift_by = "earliest", None
    elif args.to_latest:
        to, shift_by = "latest", None
    elif args.to_datetime is not None:
        to, shift_by = args.to_datetime, None
    else:
        to, shift_by = None, args.shift_by
    # Kafka's kafka-consumer-groups: only --execute commits; without it (or with
    # --dry-run) the plan is printed and nothing changes
    dry_run = not args.execute
    before = admin.list_group_offsets(args.group)
    plan = admin.reset_group_offsets(
        args.group, topic, to=to, shift_by=shift_by, partitions=partitions, dry_run=dry_run
    )
    if dry_run and not args.dry_run:
        print("raftlog groups reset-offsets: nothing committed: add --execute to commit "
              "these offsets (as Kafka's kafka-consumer-groups; --dry-run only shows them)",
              file=sys.stderr)
    if args.json:
        print(json.dumps({
            "group": args.group,
            "dry_run": dry_run,
            "offsets": [
                {"topic": tp.topic, "partition": tp.partition, "previous": before.get(tp),
                 "new": off}
                for tp, off in sorted(plan.items())
            ],
        }))
        return 0
    print(_table(
        ["TOPIC", "PARTITION", "CURRENT-OFFSET", "NEW-OFFSET"],
        [[tp.topic, tp.partition, before.get(tp), off] for tp, off in sorted(plan.items())],
    ))
    if dry_run:
        print(f"dry run: nothing committed for group {args.group}")
    else:
        print(f"committed {len(plan)} offset(s) for group {args.group}")
    return 0


# --------------------------------------------------------------------------- parser


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="raftlog", description="raftlog: a replicated commit log.")
    p.add_argument("--version", action="version", version=f"raftlog {version()}")
    sub = p.add_subparsers(dest="command", required=True)

    up = sub.add_parser("up", help="run a local cluster on loopback (Ctrl-C stops it)")
    up.add_argument(
        "--data-dir", default="./raftlog-data", help="data directory (default ./raftlog-data)"
    )
    up.add_argument("--port", type=int, default=9092, help="client port of node 1 (default 9092)")
    up.add_argument("--host", default="127.0.0.1", help="listen address (default 127.0.0.1)")
    up.add_argument("--nodes", type=int, default=1, help="number of nodes (default 1)")
    up.add_argument("--controllers", type=int, default=None,
                    help="how many of the nodes (1..C) vote in the metadata quorum, an odd "
                         "number; the others are broker-only (default: every node)")
    up.add_argument("--wait-timeout", type=float, default=30.0,
                    help="seconds to wait for every node to listen and register before "
                         "giving up (default 30)")
    up.add_argument("--metrics-port", type=int, default=None, metavar="P",
                    help="serve Prometheus metrics: node i on http://HOST:P+i-1/metrics "
                         "(metrics.listener; default: off)")
    up.add_argument("--kafka-port", type=int, default=None,
                    help="also serve Kafka's wire protocol: node i on KAFKA_PORT+i-1 "
                         "(default: off)")
    up.add_argument("--security", action="store_true",
                    help="SASL_SSL on every listener, SCRAM user admin, ACLs: TLS material "
                         "from `raftlog tls init DATA_DIR/tls` (made if missing); writes "
                         "DATA_DIR/client.properties for --command-config")
    up.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                    help="a node config key for every node (repeatable), e.g. --set "
                         "write.caching.default=true; written to each node's "
                         "server.properties")
    up.set_defaults(fn=cmd_up)

    node = sub.add_parser(
        "node",
        help="run one node: raftlog node --config FILE [flags]",
        add_help=False,
        prefix_chars="\0",
    )
    node.add_argument("node_args", nargs=argparse.REMAINDER)
    node.set_defaults(fn=cmd_node)

    bootstrap = os.environ.get(BOOTSTRAP_ENV) or DEFAULT_BOOTSTRAP

    def with_bootstrap(sp):
        sp.add_argument(
            "--bootstrap-server",
            default=bootstrap,
            help=f"host:port[,host:port] (default: ${BOOTSTRAP_ENV}, else {DEFAULT_BOOTSTRAP})",
        )
        sp.add_argument(
            "--command-config", metavar="FILE",
            help="client security settings (security.protocol, ssl.truststore.location, "
                 "sasl.mechanism, sasl.username, sasl.password, ...), as Kafka's tools "
                 f"(default: {DEFAULT_COMMAND_CONFIG} when it exists)",
        )
        return sp

    topics = with_bootstrap(sub.add_parser(
        "topics", help="create, list, describe, alter (add partitions), delete topics"))
    topics.add_argument("action", choices=["create", "list", "describe", "alter", "delete"])
    topics.add_argument("topic", nargs="?")
    topics.add_argument("--partitions", type=int, default=None,
                        help="create: the partition count (default 1); alter: the new, "
                             "larger count")
    topics.add_argument("--replication-factor", type=int, default=1)
    topics.add_argument("--config", action="append", default=[], metavar="KEY=VALUE")
    topics.add_argument("--json", action="store_true",
                        help="list: a JSON list of objects; describe: one object a line")
    topics.set_defaults(fn=cmd_topics)

    from .cli_configs import add_configs_parser

    add_configs_parser(sub, with_bootstrap)

    cluster = with_bootstrap(sub.add_parser("cluster", help="cluster status"))
    cluster.add_argument("action", choices=["status", "quorum", "elect-leaders", "decommission"],
                         help="status: brokers, partitions, under-replicated and offline ones; "
                              "quorum: the metadata quorum (controller, term, each voter's "
                              "log end and lag; kafka-metadata-quorum.sh describe); "
                              "elect-leaders: give partitions back to their preferred replica; "
                              "decommission: move every replica off --node, then unregister it")
    cluster.add_argument("--json", action="store_true")
    cluster.add_argument("--watch", type=float, nargs="?", const=2.0, default=None,
                         metavar="SECONDS", help="status: refresh every SECONDS (default 2) "
                                                 "until Ctrl-C; with --json one line each")
    cluster.add_argument("--count", type=int, default=None,
                         help="status --watch: stop after this many refreshes")
    cluster.add_argument("--topic", help="elect-leaders: only this topic")
    cluster.add_argument("--partition", type=int, action="append",
                         help="elect-leaders: only this partition (repeatable)")
    cluster.add_argument("--node", type=int, help="decommission: the broker to empty")
    cluster.add_argument("--throttle", type=int, default=0, metavar="BYTES_PER_SEC",
                         help="decommission: bound on what leaders send the new replicas")
    cluster.add_argument("--timeout", type=float, default=3600.0,
                         help="decommission: seconds to wait for the moves (default 3600)")
    cluster.set_defaults(fn=cmd_cluster)

    from .cli_reassign import add_parsers as _reassign_parsers

    _reassign_parsers(sub, with_bootstrap)
    from .cli_security import add_parsers as _security_parsers

    _security_parsers(sub, with_bootstrap)

    from .cli_ops import add_parsers as _ops_parsers
    from .cli_tls import add_parsers as _tls_parsers

    _tls_parsers(sub)

    _ops_parsers(sub, with_bootstrap)

    groups = sub.add_parser(
        "groups", help="list, describe, reset the offsets of, delete consumer groups"
    )
    gsub = groups.add_subparsers(dest="action", required=True, metavar="ACTION")
    g_list = with_bootstrap(gsub.add_parser("list", help="every group of the cluster"))
    g_list.add_argument("--json", action="store_true", help="a JSON list")
    g_desc = with_bootstrap(gsub.add_parser(
        "describe", help="state, members, and per partition committed offset, log end and lag"
    ))
    g_desc.add_argument("group", metavar="GROUP")
    g_desc.add_argument("--isolation", choices=["read_committed", "read_uncommitted"],
                        default="read_committed",
                        help="the log end the lag is measured to: the last stable offset "
                             "(read_committed, the default: what the SDK consumer reads) "
                             "or the high watermark (read_uncommitted)")
    g_desc.add_argument("--json", action="store_true", help="one JSON object")
    g_reset = with_bootstrap(gsub.add_parser(
        "reset-offsets",
        help="set the committed offsets of a group without members",
        description="Set the committed offsets of a consumer group. The group must have no "
                    "active members (stop its consumers first). Prints the new offsets; "
                    "commits them only with --execute (as Kafka's kafka-consumer-groups).",
    ))
    g_reset.add_argument("group", metavar="GROUP")
    which = g_reset.add_mutually_exclusive_group(required=True)
    which.add_argument("--topic", type=parse_topic_arg, metavar="TOPIC[:P,P...]",
                       help="every partition of TOPIC, or only the listed ones")
    which.add_argument("--all-topics", action="store_true",
                       help="every topic the group has committed offsets for")
    target = g_reset.add_mutually_exclusive_group(required=True)
    target.add_argument("--to-earliest", action="store_true", help="the log start offset")
    target.add_argument("--to-latest", action="store_true", help="the log end (high watermark)")
    target.add_argument("--to-datetime", type=_datetime_arg, metavar="ISO8601",
                        help="the first offset at or after this time, e.g. "
                             "2024-05-01T12:00:00Z (no zone: local time); the log end "
                             "when no record is that new")
    target.add_argument("--shift-by", type=int, metavar="N",
                        help="move the committed offsets by N (negative: back), "
                             "clamped to [earliest, latest]")
    mode = g_reset.add_mutually_exclusive_group()
    mode.add_argument("--execute", action="store_true",
                      help="commit the new offsets (without it nothing changes)")
    mode.add_argument("--dry-run", action="store_true",
                      help="show the new offsets, commit nothing (the default)")
    g_reset.add_argument("--json", action="store_true", help="one JSON object")
    g_delete = with_bootstrap(gsub.add_parser(
        "delete", help="delete a group without members and its committed offsets"
    ))
    g_delete.add_argument("group", metavar="GROUP")
    groups.set_defaults(fn=cmd_groups)

    from .cli_txn import add_parsers as _txn_parsers

    _txn_parsers(sub, with_bootstrap)
    from .cli_console import add_parsers as _console_parsers

    _console_parsers(sub, with_bootstrap)
    from .cli_perf import add_parser as _perf_parser

    _perf_parser(sub, with_bootstrap)
    return p


#: kafka-configs.sh options a Kafka user types out of habit, and what raftlog takes instead
#: Options of Kafka's tools a Kafka user types by habit: what raftlog takes instead, and
#: where its help is.
KAFKA_TOOL_OPTIONS = {
    "--entity-type": ("--topic NAME or --broker N", "raftlog configs --help"),
    "--entity-name": ("--topic NAME or --broker N", "raftlog configs --help"),
    "--add-config": ("--add KEY=VALUE (repeatable)", "raftlog configs --help"),
    "--delete-config": ("--delete KEY (repeatable)", "raftlog configs --help"),
    "--broker-list": ("--bootstrap-server HOST:PORT", "raftlog produce --help"),
    "--zookeeper": ("--bootstrap-server HOST:PORT (there is no ZooKeeper: a Raft "
                    "quorum of the nodes holds the metadata)", "raftlog --help"),
    "--producer-property": ("--acks, --compression, --partition, --header, or client "
                            "settings in --command-config FILE", "raftlog produce --help"),
    "--consumer-property": ("--group, --isolation-level, --from-beginning, or client "
                            "settings in --command-config FILE", "raftlog consume --help"),
}

#: kafka-console-*'s ``--property NAME=VALUE``: raftlog's flag for each.
KAFKA_CONSOLE_PROPERTIES = {
    "print.key": "--print-key", "print.headers": "--print-headers",
    "print.timestamp": "--print-timestamp", "print.value": "(values are always printed)",
    "key.separator": "--key-separator SEP", "parse.key": "--key-separator SEP",
    "print.partition": "--format '%p %s\\n' (kcat's -f)",
    "print.offset": "--format '%o %s\\n' (kcat's -f)",
}


def _command_options(argv: list[str]) -> set[str]:
    """The option strings the (sub)command ``argv`` names accepts (a Kafka tool's flag
    that a raftlog command takes too, as ``log-dirs describe --broker-list``, is no habit)."""
    parser, opts = build_parser(), set()
    for word in argv:
        sub = next((a for a in parser._actions
                    if isinstance(a, argparse._SubParsersAction)), None)
        if sub is None or word not in sub.choices:
            break
        parser = sub.choices[word]
    for action in parser._actions:
        opts.update(action.option_strings)
    return opts


def _kafka_tool_hint(argv: list[str]) -> str | None:
    """A line saying what to type instead, when ``argv`` uses a Kafka tool's option that
    its command does not take."""
    taken = None
    for i, a in enumerate(argv):
        flag = a.split("=", 1)[0]
        if flag in KAFKA_TOOL_OPTIONS or flag == "--property":
            if taken is None:
                taken = _command_options(argv)
            if flag in taken:
                continue
        if flag in KAFKA_TOOL_OPTIONS:
            instead, where = KAFKA_TOOL_OPTIONS[flag]
            return (f"raftlog: {flag} is an option of Kafka's tools; raftlog takes "
                    f"{instead} (see {where})")
        if flag == "--property":
            value = a.split("=", 1)[1] if "=" in a else (argv[i + 1] if i + 1 < len(argv)
                                                          else "")
            name = value.split("=", 1)[0]
            known = ", ".join(f"{k}: {v}" for k, v in KAFKA_CONSOLE_PROPERTIES.items())
            instead = KAFKA_CONSOLE_PROPERTIES.get(name)
            return ("raftlog: --property is an option of Kafka's console tools; "
                    + (f"for {name} raftlog takes {instead}" if instead else
                       f"raftlog takes flags instead ({known})")
                    + " (see raftlog consume --help, raftlog produce --help)")
    return None


#: Connection options a command takes that a user may also put before the command, as
#: Kafka's tools and rpk take them anywhere (`raftlog --bootstrap-server H topics list`).
LEADING_OPTIONS = ("--bootstrap-server", "--command-config")


def hoist_leading_options(argv: list[str]) -> list[str]:
    """``argv`` with the LEADING_OPTIONS given before the command moved after it (argparse
    takes a subcommand's options only after its name)."""
    moved, i = [], 0
    while i < len(argv) and argv[i].split("=", 1)[0] in LEADING_OPTIONS:
        step = 1 if "=" in argv[i] else 2
        moved += argv[i:i + step]
        i += step
    return argv[i:] + moved if moved and i <= len(argv) else argv


def main(argv: list[str] | None = None) -> int:
    argv = hoist_leading_options(sys.argv[1:] if argv is None else list(argv))
    hint = _kafka_tool_hint(argv)
    if hint is not None:
        print(hint, file=sys.stderr)
        return 2
    args = build_parser().parse_args(argv)
    if args.command in ("produce", "consume"):
        from .cli_console import resolve_topic

        problem = resolve_topic(args)
        if problem is not None:
            print(f"raftlog {args.command}: {problem}", file=sys.stderr)
            return 2
    if (
        args.command == "topics"
        and args.action != "list"
        and not args.topic
        and args.action != "describe"
    ):
        print(f"raftlog topics {args.action}: a topic name is required", file=sys.stderr)
        return 2
    from .cli_common import UsageError

    try:
        return args.fn(args) or 0
    except (RaftlogError, ValueError) as e:
        name = args.command + (f" {args.action}" if args.command in (
            "groups", "topics", "configs", "transactions") else "")
        print(f"raftlog {name}: {e}", file=sys.stderr)
        return 2 if isinstance(e, UsageError) else 1
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:  # stdout's reader went away (| head): nothing to say
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
        return 0


if __name__ == "__main__":
    sys.exit(main())
