"""``raftlog topics alter|list --json|describe`` and ``raftlog configs describe|alter``
(like kafka-topics and kafka-configs).

Topic configs are read with DESCRIBE_CONFIGS and written with ALTER_CONFIGS: the node
checks the whole new config before it writes any of it, so a bad key or value changes
nothing. Broker configs are the node's topic defaults (``log.*`` in its
server.properties): describe-only, since the node reads them once at start.
"""

from __future__ import annotations

import json
import sys

from .cli_common import UsageError

#: What ``configs alter --broker`` answers: broker configs are read at start only.
BROKER_READ_ONLY = ("broker configs are read-only: set log.KEY=VALUE in the node's "
                    "server.properties (or --set log.KEY=VALUE) and restart the node; "
                    "to change one topic, use configs alter --topic T --add KEY=VALUE")


def _admin(args):
    from .cli_common import admin_for

    return admin_for(args)


def parse_additions(items: list[str] | None, flag: str = "--add",
                    example: str = "retention.ms=86400000") -> dict[str, str]:
    """``--add KEY=VALUE`` items (or another ``flag``'s) as a dict (the value may be
    empty or contain ``=``).

    Raises:
        UsageError: an item without ``=`` or without a key, or a key given twice.
    """
    out: dict[str, str] = {}
    for item in items or []:
        key, sep, value = item.partition("=")
        key = key.strip()
        if not sep or not key:
            raise UsageError(f"{flag} {item!r} is not KEY=VALUE "
                             f"(for example {flag} {example})")
        if key in out:
            raise UsageError(f"{flag} names {key!r} twice")
        out[key] = value.strip()
    return out


def config_changes(add: list[str] | None, delete: list[str] | None) -> dict:
    """The ALTER_CONFIGS map of ``--add`` and ``--delete`` (None: back to the default).

    Raises:
        UsageError: malformed items, a key both added and deleted, or nothing to do.
    """
    changes: dict = dict(parse_additions(add))
    for key in delete or []:
        key = key.strip()
        if not key or "=" in key:
            raise UsageError(f"--delete {key!r} is not a config name "
                             "(for example --delete retention.ms)")
        if key in changes:
            raise UsageError(f"{key!r} is both in --add and in --delete")
        changes[key] = None
    if not changes:
        raise UsageError("nothing to change: give --add KEY=VALUE and/or --delete KEY")
    return changes


def non_default(entries) -> dict[str, str]:
    """The configs of DESCRIBE_CONFIGS that are not built-in defaults."""
    return {e.name: e.value for e in entries if e.source != "default"}


# --------------------------------------------------------------------------- topics


def topics_list_json(topics) -> list[dict]:
    """``topics list --json``: one object per topic (TopicDescriptions)."""
    return [{"name": t.name, "partitions": len(t.partitions),
             "replication_factor": max((len(p.replicas) for p in t.partitions), default=0),
             "topic_id": t.topic_id,
             "under_replicated_partitions": sum(p.under_replicated for p in t.partitions),
             "offline_partitions": sum(p.offline for p in t.partitions)}
            for t in topics]


def cmd_topics_list(args) -> int:
    with _admin(args) as admin:
        if args.json:
            print(json.dumps(topics_list_json(admin.describe_topics(include_internal=False))))
        else:
            for name in admin.list_topics():
                print(name)
    return 0


def cmd_topics_alter(args) -> int:
    if args.partitions is None:
        raise UsageError("topics alter needs --partitions N (the new partition count); "
                         "to change configs use: raftlog configs alter --topic T --add K=V")
    with _admin(args) as admin:
        have = len(admin.describe_topic(args.topic).partitions)
        if args.partitions < have:
            print(f"raftlog topics alter: topic {args.topic} has {have} partitions; "
                  f"they cannot be decreased to {args.partitions} (records are kept by "
                  f"partition). Give --partitions larger than {have}, or create a new "
                  "topic.", file=sys.stderr)
            return 1
        if args.partitions == have:
            print(f"topic {args.topic} already has {have} partitions: nothing to do")
            return 0
        admin.create_partitions(args.topic, args.partitions)
    print(f"topic {args.topic}: {have} -> {args.partitions} partitions "
          "(keyed records of new writes may now go to other partitions)")
    return 0


def partition_ends(admin, d) -> dict:
    """{partition: (high watermark, last stable offset)} of a TopicDescription, from
    the leaders (ListOffsets latest, read_uncommitted and read_committed); (None,
    None) for an offline partition."""
    tps = [(d.name, p.partition) for p in d.partitions]
    hws = admin.end_offsets(tps, "read_uncommitted")
    lsos = admin.end_offsets(tps, "read_committed")
    return {tp.partition: (hws.get(tp), lsos.get(tp)) for tp in hws}


def topic_json(d, configs: dict, ends: dict | None = None) -> dict:
    ends = ends or {}
    return {"name": d.name, "topic_id": d.topic_id, "config": d.config, "configs": configs,
            "partitions": [{"partition": p.partition, "leader": p.leader,
                            "replicas": list(p.replicas), "isr": list(p.isr),
                            "leader_epoch": p.leader_epoch,
                            "high_watermark": ends.get(p.partition, (None, None))[0],
                            "last_stable_offset": ends.get(p.partition, (None, None))[1]}
                           for p in d.partitions]}


def format_topic(d, configs: dict, ends: dict | None = None) -> str:
    """kafka-topics --describe's text: a topic line with its non-default configs,
    then one line per partition (and, beyond Kafka's, its high watermark and last
    stable offset: below the HW while a transaction is open)."""
    ends = ends or {}
    rf = max((len(p.replicas) for p in d.partitions), default=0)
    shown = ",".join(f"{k}={v}" for k, v in sorted(configs.items()))
    lines = [f"Topic: {d.name}\tPartitions: {len(d.partitions)}\tReplicationFactor: {rf}"
             f"\tConfigs: {shown}"]
    lines += [f"\tPartition: {p.partition}\tLeader: {p.leader}\tReplicas: {list(p.replicas)}"
              f"\tIsr: {list(p.isr)}\tLeaderEpoch: {p.leader_epoch}"
              + (f"\tHW: {_or_dash(ends[p.partition][0])}\tLSO: {_or_dash(ends[p.partition][1])}"
                 if p.partition in ends else "")
              for p in d.partitions]
    return "\n".join(lines)


def cmd_topics_describe(args) -> int:
    with _admin(args) as admin:
        if args.topic:
            topics = [admin.describe_topic(args.topic)]
        else:
            topics = admin.describe_topics(include_internal=False)
        for d in topics:
            configs = non_default(admin.describe_configs(topic=d.name))
            ends = partition_ends(admin, d)
            print(json.dumps(topic_json(d, configs, ends)) if args.json
                  else format_topic(d, configs, ends))
    return 0


# --------------------------------------------------------------------------- configs


def _target(args) -> tuple[str, object]:
    if (args.topic is None) == (args.broker is None):
        raise UsageError("give exactly one of --topic T and --broker N")
    return ("topic", args.topic) if args.topic is not None else ("broker", args.broker)


def cmd_configs(args) -> int:
    kind, name = _target(args)
    if args.action == "alter":
        if kind == "broker":
            print(f"raftlog configs alter: {BROKER_READ_ONLY}", file=sys.stderr)
            return 1
        changes = config_changes(args.add, args.delete)
        with _admin(args) as admin:
            admin.describe_topic(name)  # (unknown topic: a clear error before the write)
            admin.alter_config(name, changes)
        set_, removed = ([k for k, v in changes.items() if v is not None],
                         [k for k, v in changes.items() if v is None])
        print(f"topic {name}: " + "; ".join(
            x for x in (f"set {', '.join(set_)}" if set_ else "",
                        f"back to default {', '.join(removed)}" if removed else "") if x))
        return 0
    with _admin(args) as admin:
        entries = (admin.describe_configs(topic=name) if kind == "topic"
                   else admin.describe_configs(broker_id=name))
    shown = entries if args.all else [e for e in entries if e.source != "default"]
    if args.json:
        print(json.dumps({"resource_type": kind, "name": name,
                          "read_only": kind == "broker",
                          "configs": [{"name": e.name, "value": e.value, "source": e.source}
                                      for e in shown]}))
        return 0
    what = f"topic {name}" if kind == "topic" else f"broker {name} (read-only: server.properties)"
    if not shown:
        print(f"{what}: every config has its default (--all shows them)")
        return 0
    print(f"Configs of {what}:")
    for e in shown:
        print(f"  {e.name}={e.value}\t({e.source})")
    return 0


def add_configs_parser(sub, with_bootstrap) -> None:
    cp = with_bootstrap(sub.add_parser(
        "configs", help="describe or alter topic configs, describe broker configs "
                        "(like kafka-configs)",
        description="Topic configs can be described and altered; broker configs (a node's "
                    "log.* topic defaults, from its server.properties) are describe-only."))
    cp.add_argument("action", choices=["describe", "alter"])
    cp.add_argument("--topic", metavar="T", help="the topic whose configs to describe or alter")
    cp.add_argument("--broker", type=int, metavar="N",
                    help="the broker (node id) whose configs to describe (read-only)")
    cp.add_argument("--add", action="append", metavar="KEY=VALUE",
                    help="alter: set a config (repeatable)")
    cp.add_argument("--delete", action="append", metavar="KEY",
                    help="alter: remove a topic's setting, back to the default (repeatable)")
    cp.add_argument("--all", action="store_true",
                    help="describe: also the configs that have their default")
    cp.add_argument("--json", action="store_true", help="describe: one JSON object")
    cp.set_defaults(fn=cmd_configs)


def _or_dash(v) -> str:
    return "-" if v is None else str(v)
