"""The ``raftlog`` command line.

Server commands (``up``, ``node``) start ``python -m raftlog.node`` as a process,
so this module -- part of the client -- never imports the server packages.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import time

from raftlog import localnode
from raftlog.errors import ErrorCode, RaftlogError

from .security import security_kwargs

DEFAULT_BOOTSTRAP = "127.0.0.1:9092"


# --------------------------------------------------------------------------- server commands


def cmd_up(args) -> int:
    """Run a local cluster of ``--nodes`` nodes on loopback until Ctrl-C / SIGTERM.

    Node i serves clients on PORT+i-1; with more than one node, nodes 1..C (C =
    ``--controllers``, default every node) are also metadata-quorum voters on Raft port
    PORT+100+i-1 (process.roles=controller,broker) and the others are broker-only nodes
    that follow the metadata log without voting; a random Raft password is kept in
    DATA_DIR/raft.password.
    """
    if args.nodes < 1 or args.nodes > 9:
        print("raftlog up: --nodes must be between 1 and 9", file=sys.stderr)
        return 2
    controllers = args.nodes if args.controllers is None else args.controllers
    if not 1 <= controllers <= args.nodes or (args.controllers is not None and controllers % 2 == 0):
        print(f"raftlog up: --controllers must be an odd number between 1 and --nodes "
              f"({args.nodes}), not {controllers}", file=sys.stderr)
        return 2
    if args.metrics_port is not None and not 1 <= args.metrics_port <= 65536 - args.nodes:
        print(f"raftlog up: --metrics-port must leave room for {args.nodes} port(s) below 65536",
              file=sys.stderr)
        return 2
    if not args.wait_timeout >= 0:  # (also NaN)
        print(f"raftlog up: --wait-timeout must be 0 or more seconds, not {args.wait_timeout}",
              file=sys.stderr)
        return 2
    data_dir = os.path.abspath(args.data_dir)
    os.makedirs(data_dir, exist_ok=True)
    overrides: dict = {}
    if args.nodes > 1:
        voters = ",".join(
            f"{i}@{args.host}:{args.port + 100 + i - 1}" for i in range(1, controllers + 1)
        )
        overrides = {"controller.quorum.voters": voters, "raft.password": _password(data_dir)}
    security, client_props = {}, None
    if args.security:  # SASL_SSL, SCRAM admin, ACLs: client/cli_up_security.py
        from .cli_up_security import security_overrides

        security, client_props = security_overrides(data_dir, args.nodes, host=args.host,
                                                    port=args.port, kafka_port=args.kafka_port)
    procs = []
    for i in range(1, args.nodes + 1):
        node_dir = os.path.join(data_dir, f"node-{i}")
        os.makedirs(node_dir, exist_ok=True)
        own = {"process.roles": "broker"} if i > controllers else {}
        if args.metrics_port is not None:
            own["metrics.listener"] = f"{args.host}:{args.metrics_port + i - 1}"
        if args.kafka_port is not None:  # node i: Kafka clients on KAFKA_PORT+i-1
            own["kafka.listener"] = f"{args.host}:{args.kafka_port + i - 1}"
        own.update(security.get(i, {}))
        cmd = localnode.node_command(node_id=i, host=args.host, port=args.port + i - 1,
                                     data_dir=node_dir, overrides={**overrides, **own})
        proc = localnode.spawn(cmd, new_session=True)  # output: this terminal
        with open(os.path.join(node_dir, "node.pid"), "w") as f:
            f.write(f"{proc.pid}\n")
        procs.append(proc)

    stopping = []

    def forward(signum, _frame):
        stopping.append(signum)
        for proc in procs:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)

    signal.signal(signal.SIGTERM, forward)
    signal.signal(signal.SIGINT, forward)
    servers = ",".join(f"{args.host}:{args.port + i}" for i in range(args.nodes))
    deadline = time.monotonic() + args.wait_timeout
    silent = [i + 1 for i, p in enumerate(procs)
              if not localnode.wait_listening(args.host, args.port + i,
                                              max(0.0, deadline - time.monotonic()), p)]
    problem = (f"node(s) {', '.join(map(str, silent))} did not start listening"
               if silent else _wait_registered(servers, args.nodes, deadline,
                                               lambda: bool(stopping), client_props))
    if problem is not None and not stopping:
        print(f"raftlog up: not up after {args.wait_timeout:g} s: {problem} "
              "(their output is above); stopping", file=sys.stderr, flush=True)
        forward(signal.SIGTERM, None)
        for p in procs:
            p.wait()
        return 1
    if not stopping:  # (Ctrl-C during the start-up wait: just stop)
        print(
            f"raftlog is up: bootstrap servers {servers}, data in {data_dir}\n"
            f"  raftlog topics create demo --bootstrap-server {args.host}:{args.port}"
            + (f" --command-config {client_props}\n  client properties (SASL_SSL, user "
               f"admin): {client_props}\n" if client_props else "\n") +
            f'  Producer(bootstrap_servers="{servers}")\n'
            + (f"  metrics: http://{args.host}:{args.metrics_port}/metrics"
               f"{f' .. port {args.metrics_port + args.nodes - 1}' if args.nodes > 1 else ''}\n"
               if args.metrics_port is not None else "")
            + ("Kafka clients: bootstrap.servers="
               + ",".join(f"{args.host}:{args.kafka_port + i}" for i in range(args.nodes)) + "\n"
               if args.kafka_port is not None else "")
            + "Ctrl-C stops it.",
            flush=True,
        )
    rcs = [p.wait() for p in procs]
    bad = [rc for rc in rcs if rc not in (0, -signal.SIGTERM, -signal.SIGINT)]
    return bad[0] if bad else 0


def _password(data_dir: str) -> str:
    """The local cluster's Raft password: created once, readable by the owner only."""
    path = os.path.join(data_dir, "raft.password")
    if not os.path.exists(path):
        import secrets

        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(secrets.token_hex(16))
    with open(path) as f:
        return f.read().strip()


def unready_brokers(expected: int, brokers) -> list[str]:
    """Why a local cluster of node ids 1..expected is not ready yet, one phrase per node
    (empty: every node is registered and unfenced). ``brokers``: describe_cluster()'s."""
    seen = {b.id: b for b in brokers}
    out = []
    for i in range(1, expected + 1):
        b = seen.get(i)
        if b is None:
            out.append(f"node {i} is not registered")
        elif b.fenced:
            out.append(f"node {i} is fenced")
    return out


def _wait_registered(servers: str, expected: int, deadline: float,
                     stopped=lambda: False, command_config: str | None = None) -> str | None:
    """Wait until every node is registered and unfenced in the metadata (so a topic
    with replication factor ``expected`` can be created at once); None when it is,
    else what is missing at the deadline (or when ``stopped()``). ``command_config``:
    the client properties to connect with (``up --security``)."""
    from .admin import Admin
    from .security import load_command_config

    options = load_command_config(command_config) if command_config else {}

    why = ["no node answered DescribeCluster"]
    while True:
        try:
            with Admin(servers, request_timeout_ms=2000, **options) as admin:
                why = unready_brokers(expected, admin.describe_cluster().brokers)
        except Exception as e:  # noqa: BLE001 -- still starting: say what the last try saw
            why = [f"DescribeCluster failed: {e}"]
        if not why:
            return None
        if time.monotonic() >= deadline or stopped():
            return "; ".join(why)
        time.sleep(0.1)


def cmd_node(args) -> int:
    argv = [sys.executable, "-m", "raftlog.node"] + args.node_args
    os.execv(sys.executable, argv)
    return 0  # not reached


# --------------------------------------------------------------------------- topics


def _admin(args):
    from .admin import Admin

    return Admin(args.bootstrap_server, **security_kwargs(args))


def _parse_kv(items: list[str], what: str) -> dict:
    out = {}
    for item in items or []:
        k, sep, v = item.partition("=")
        if not sep or not k:
            raise SystemExit(f"raftlog: {what} {item!r} is not key=value")
        out[k] = v
    return out


def cmd_topics(args) -> int:
    with _admin(args) as admin:
        if args.action == "create":
            admin.create_topic(
                args.topic,
                args.partitions,
                args.replication_factor,
                _parse_kv(args.config, "--config"),
            )
            print(f"created topic {args.topic}")
        elif args.action == "list":
            for name in admin.list_topics():
                print(name)
        elif args.action == "delete":
            admin.delete_topic(args.topic)
            print(f"deleted topic {args.topic}")
        elif args.action == "describe":
            names = [args.topic] if args.topic else admin.list_topics()
            for name in names:
                _print_topic(admin.describe_topic(name), args.json)
    return 0


def _print_topic(d, as_json: bool) -> None:
    if as_json:
        print(
            json.dumps(
                {
                    "name": d.name,
                    "config": d.config,
                    "partitions": [
                        {
                            "partition": p.partition,
                            "leader": p.leader,
                            "replicas": list(p.replicas),
                            "isr": list(p.isr),
                            "leader_epoch": p.leader_epoch,
                        }
                        for p in d.partitions
                    ],
                }
            )
        )
        return
    print(f"Topic: {d.name}\tPartitions: {len(d.partitions)}")
    for p in d.partitions:
        print(
            f"\tPartition: {p.partition}\tLeader: {p.leader}\tReplicas: {list(p.replicas)}"
            f"\tIsr: {list(p.isr)}\tLeaderEpoch: {p.leader_epoch}"
        )


def cmd_cluster(args) -> int:
    if args.action == "elect-leaders":
        return _elect_leaders(args)
    if args.action == "decommission":
        from .cli_reassign import cmd_decommission

        return cmd_decommission(args)
    from .cli_ops import cmd_status

    return cmd_status(args)


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
            d = admin.describe_group(args.group)
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
    before = admin.list_group_offsets(args.group)
    plan = admin.reset_group_offsets(
        args.group, topic, to=to, shift_by=shift_by, partitions=partitions, dry_run=args.dry_run
    )
    if args.json:
        print(json.dumps({
            "group": args.group,
            "dry_run": args.dry_run,
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
    if args.dry_run:
        print(f"dry run: nothing committed for group {args.group}")
    else:
        print(f"committed {len(plan)} offset(s) for group {args.group}")
    return 0


# --------------------------------------------------------------------------- produce / consume


def cmd_produce(args) -> int:
    from .producer import Producer

    sep = args.key_separator.encode() if args.key_separator else None
    n = 0
    with Producer(args.bootstrap_server, acks=args.acks, linger_ms=5,
                  **security_kwargs(args)) as p:
        futures = []
        for line in sys.stdin.buffer:
            line = line.rstrip(b"\r\n")
            key = None
            if sep is not None and sep in line:
                key, line = line.split(sep, 1)
            futures.append(p.send(args.topic, line, key=key, partition=args.partition))
            n += 1
        p.flush()
        for f in futures:
            f.result()
    print(f"produced {n} records to {args.topic}", file=sys.stderr)
    return 0


def cmd_consume(args) -> int:
    from .consumer import Consumer
    from .types import TopicPartition

    c = Consumer(
        args.bootstrap_server, auto_offset_reset="earliest" if args.from_beginning else "latest",
        **security_kwargs(args),
    )
    try:
        parts = (
            [args.partition]
            if args.partition is not None
            else sorted(c.partitions_for_topic(args.topic))
        )
        tps = [TopicPartition(args.topic, p) for p in parts]
        c.assign(tps)
        if args.offset is not None:
            for tp in tps:
                c.seek(tp, args.offset)
        elif args.from_beginning:
            c.seek_to_beginning(*tps)
        else:
            c.seek_to_end(*tps)
        seen = 0
        deadline = time.monotonic() + args.timeout_ms / 1000 if args.timeout_ms else None
        while args.max_messages is None or seen < args.max_messages:
            if deadline is not None and time.monotonic() > deadline:
                break
            want = 10_000 if args.max_messages is None else args.max_messages - seen
            for r in c.poll(timeout_ms=200, max_records=want):
                _print_record(r, args.format)
                seen += 1
        sys.stdout.flush()
    finally:
        c.close()
    return 0


def _print_record(r, fmt: str) -> None:
    if fmt == "json":
        print(
            json.dumps(
                {
                    "topic": r.topic,
                    "partition": r.partition,
                    "offset": r.offset,
                    "timestamp": r.timestamp,
                    "key": r.key.decode("utf-8", "replace") if r.key is not None else None,
                    "value": r.value.decode("utf-8", "replace") if r.value is not None else None,
                    "headers": [
                        [k, v.decode("utf-8", "replace") if v is not None else None]
                        for k, v in r.headers
                    ],
                }
            )
        )
    elif fmt == "raw":
        sys.stdout.buffer.write((r.value or b"") + b"\n")
    else:
        key = r.key.decode("utf-8", "replace") if r.key is not None else ""
        val = r.value.decode("utf-8", "replace") if r.value is not None else "null"
        print(f"{r.partition}:{r.offset}\t{key}\t{val}")


# --------------------------------------------------------------------------- perf


def _percentiles(lat_ms: list[float]) -> dict:
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


def cmd_perf(args) -> int:
    return perf_produce(args) if args.action == "produce" else perf_consume(args)


def perf_produce(args) -> int:
    from .producer import Producer

    value = b"x" * args.record_size
    lat: list[float] = []
    start = time.perf_counter()
    last_report = start
    with Producer(
        args.bootstrap_server, acks=args.acks, linger_ms=args.linger_ms, batch_size=args.batch_size,
        **security_kwargs(args),
    ) as p:
        interval = 1.0 / args.throughput if args.throughput > 0 else 0
        # a callback per record costs ~1 us: sample every record only when rate-capped
        sample_every = 1 if 0 < args.throughput <= 100_000 else 100
        for i in range(args.num_records):
            t0 = time.perf_counter()
            f = p.send(args.topic, value, partition=args.partition)
            if i % sample_every == 0:
                f.add_done_callback(lambda _f, t0=t0: lat.append((time.perf_counter() - t0) * 1000))
            if interval:
                ahead = start + (i + 1) * interval - time.perf_counter()
                if ahead > 0:
                    time.sleep(ahead)
            if t0 - last_report >= 5:
                last_report = t0
                print(
                    f"{i} records sent, {i / (t0 - start):,.0f} rec/s", file=sys.stderr, flush=True
                )
        p.flush()
    secs = time.perf_counter() - start
    summary = {
        "records": args.num_records,
        "secs": secs,
        "rec_s": args.num_records / secs,
        "mb_s": args.num_records * args.record_size / secs / 1e6,
        **_percentiles(lat),
    }
    _print_summary(summary, args.json)
    return 0


def perf_consume(args) -> int:
    from .consumer import Consumer
    from .types import TopicPartition

    c = Consumer(args.bootstrap_server, auto_offset_reset="earliest", **security_kwargs(args))
    try:
        parts = sorted(c.partitions_for_topic(args.topic))
        c.assign([TopicPartition(args.topic, p) for p in parts])
        c.seek_to_beginning()
        n = nbytes = 0
        start = last_report = time.perf_counter()
        idle_deadline = start + args.timeout_ms / 1000
        while n < args.num_records and time.perf_counter() < idle_deadline:
            recs = c.poll(timeout_ms=500, max_records=100_000)
            if recs:
                idle_deadline = time.perf_counter() + args.timeout_ms / 1000
            n += len(recs)
            nbytes += sum(len(r.value or b"") for r in recs)
            now = time.perf_counter()
            if now - last_report >= 5:
                last_report = now
                print(
                    f"{n} records consumed, {n / (now - start):,.0f} rec/s",
                    file=sys.stderr,
                    flush=True,
                )
        secs = time.perf_counter() - start
    finally:
        c.close()
    _print_summary(
        {"records": n, "secs": secs, "rec_s": n / secs, "mb_s": nbytes / secs / 1e6}, args.json
    )
    return 0


def _print_summary(summary: dict, as_json: bool) -> None:
    if as_json:
        print(json.dumps(summary))
        return
    parts = [
        f"{summary['records']} records in {summary['secs']:.2f} s",
        f"{summary['rec_s']:,.0f} rec/s",
        f"{summary['mb_s']:.2f} MB/s",
    ]
    parts += [f"{k.replace('_ms', '')} {v:.2f} ms" for k, v in summary.items() if k.endswith("_ms")]
    print(", ".join(parts))


# --------------------------------------------------------------------------- parser


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="raftlog", description="raftlog: a replicated commit log.")
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
    up.set_defaults(fn=cmd_up)

    node = sub.add_parser(
        "node",
        help="run one node: raftlog node --config FILE [flags]",
        add_help=False,
        prefix_chars="\0",
    )
    node.add_argument("node_args", nargs=argparse.REMAINDER)
    node.set_defaults(fn=cmd_node)

    def with_bootstrap(sp):
        sp.add_argument(
            "--bootstrap-server",
            default=DEFAULT_BOOTSTRAP,
            help=f"host:port (default {DEFAULT_BOOTSTRAP})",
        )
        sp.add_argument(
            "--command-config", metavar="FILE",
            help="client security settings (security.protocol, ssl.truststore.location, "
                 "sasl.mechanism, sasl.username, sasl.password, ...), as Kafka's tools",
        )
        return sp

    topics = with_bootstrap(sub.add_parser("topics", help="create, list, describe, delete topics"))
    topics.add_argument("action", choices=["create", "list", "describe", "delete"])
    topics.add_argument("topic", nargs="?")
    topics.add_argument("--partitions", type=int, default=1)
    topics.add_argument("--replication-factor", type=int, default=1)
    topics.add_argument("--config", action="append", default=[], metavar="KEY=VALUE")
    topics.add_argument("--json", action="store_true")
    topics.set_defaults(fn=cmd_topics)

    cluster = with_bootstrap(sub.add_parser("cluster", help="cluster status"))
    cluster.add_argument("action", choices=["status", "elect-leaders", "decommission"],
                         help="status: brokers, partitions, under-replicated and offline ones; "
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
    g_desc.add_argument("--json", action="store_true", help="one JSON object")
    g_reset = with_bootstrap(gsub.add_parser(
        "reset-offsets",
        help="set the committed offsets of a group without members",
        description="Set the committed offsets of a consumer group. The group must have no "
                    "active members (stop its consumers first). Commits unless --dry-run.",
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
    g_reset.add_argument("--dry-run", action="store_true",
                         help="show the new offsets, commit nothing")
    g_reset.add_argument("--json", action="store_true", help="one JSON object")
    g_delete = with_bootstrap(gsub.add_parser(
        "delete", help="delete a group without members and its committed offsets"
    ))
    g_delete.add_argument("group", metavar="GROUP")
    groups.set_defaults(fn=cmd_groups)

    produce = with_bootstrap(sub.add_parser("produce", help="stdin lines -> records"))
    produce.add_argument("--topic", required=True)
    produce.add_argument("--key-separator", help="split each line into key SEP value")
    produce.add_argument("--partition", type=int)
    produce.add_argument("--acks", default="all")
    produce.set_defaults(fn=cmd_produce)

    consume = with_bootstrap(sub.add_parser("consume", help="records -> stdout"))
    consume.add_argument("--topic", required=True)
    consume.add_argument("--partition", type=int)
    consume.add_argument("--from-beginning", action="store_true")
    consume.add_argument("--offset", type=int)
    consume.add_argument("--max-messages", type=int)
    consume.add_argument(
        "--timeout-ms", type=int, default=0, help="stop after this long (0: never)"
    )
    consume.add_argument("--format", choices=["text", "json", "raw"], default="text")
    consume.set_defaults(fn=cmd_consume)

    perf = with_bootstrap(sub.add_parser("perf", help="load generators like kafka-*-perf-test"))
    perf.add_argument("action", choices=["produce", "consume"])
    perf.add_argument("--topic", required=True)
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
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if (
        args.command == "topics"
        and args.action != "list"
        and not args.topic
        and args.action != "describe"
    ):
        print(f"raftlog topics {args.action}: a topic name is required", file=sys.stderr)
        return 2
    try:
        return args.fn(args) or 0
    except (RaftlogError, ValueError) as e:
        name = args.command + (f" {args.action}" if args.command == "groups" else "")
        print(f"raftlog {name}: {e}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
