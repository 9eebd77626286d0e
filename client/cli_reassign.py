"""``raftlog partitions reassign`` and ``raftlog cluster decommission``: plans from
client/reassign.py, executed through the Admin API, with a progress bar."""

from __future__ import annotations

import sys
import time

from raftlog.errors import ErrorCode

from .reassign import PlanError, decommission, generate, parse_plan, plan_json, progress

#: How often a waiting command asks for the reassignments in progress.
POLL_S = 0.5


def _current(admin, topics=None) -> dict:
    names = topics or admin.list_topics(include_internal=True)
    return {(name, p.partition): tuple(p.replicas)
            for name in names for p in admin.describe_topic(name).partitions}


def _brokers(admin) -> list:
    return [b.id for b in admin.describe_cluster().brokers]


def _ids(text: str) -> list:
    try:
        return sorted({int(x) for x in text.split(",") if x.strip()})
    except ValueError:
        raise PlanError(f"--brokers must be comma-separated broker ids, not {text!r}") from None


def _read_plan(path: str) -> dict:
    try:
        with open(path, encoding="utf-8") as f:
            return parse_plan(f.read())
    except OSError as e:
        raise PlanError(f"cannot read the plan {path}: {e.strerror}") from None


def _start(admin, plan: dict, throttle: int) -> int:
    failed = 0
    for r in admin.alter_partition_reassignments(plan, throttle):
        if r.error:
            failed += 1
            print(f"{r.topic}-{r.partition}: {ErrorCode(r.error).name} {r.message}",
                  file=sys.stderr)
    return failed


def _wait(admin, plan: dict, timeout_s: float) -> bool:
    """Progress bar until every partition of ``plan`` is done (True) or the timeout."""
    tty = sys.stdout.isatty()
    deadline = time.monotonic() + timeout_s
    last = None
    while True:
        moving = {(r.topic, r.partition) for r in admin.list_partition_reassignments(list(plan))}
        done, moving_keys, other = progress(plan, _current(admin, sorted({t for t, _ in plan})),
                                            moving)
        n, total = len(done), len(plan)
        width = 30
        bar = "#" * (width * n // total) + "-" * (width - width * n // total)
        line = f"[{bar}] {n}/{total} partitions moved, {len(moving_keys)} moving"
        if other:
            line += f", {len(other)} neither (cancelled or changed)"
        if tty:
            print("\r" + line, end="", flush=True)
        elif line != last:
            print(line, flush=True)
        last = line
        if not moving_keys:
            if tty:
                print()
            return not other
        if time.monotonic() >= deadline:
            if tty:
                print()
            print(f"still moving after {timeout_s:g} s; check with --verify", file=sys.stderr)
            return False
        time.sleep(POLL_S)


def cmd_partitions(args) -> int:
    from .cli_common import admin_for

    try:
        with admin_for(args) as admin:
            if args.generate:
                if not args.brokers:
                    raise PlanError("--generate needs --brokers 1,2,3")
                topics = [t for t in (args.topics or "").split(",") if t] or None
                print(plan_json(generate(_current(admin, topics), _ids(args.brokers))))
                return 0
            if args.cancel and not args.plan:
                plan = {(r.topic, r.partition): None for r in admin.list_partition_reassignments()}
                if not plan:
                    print("no reassignment in progress")
                    return 0
            elif not args.plan:
                raise PlanError("give --plan FILE (or --generate, or --cancel for every move)")
            else:
                plan = _read_plan(args.plan)
            if args.cancel:
                failed = _start(admin, {k: None for k in plan}, 0)
                print(f"cancelled {len(plan) - failed} reassignment(s)")
                return 1 if failed else 0
            if args.verify:
                moving = {(r.topic, r.partition) for r in admin.list_partition_reassignments()}
                done, moving_keys, other = progress(
                    plan, _current(admin, sorted({t for t, _ in plan})), moving)
                for key in done:
                    print(f"{key[0]}-{key[1]}: done")
                for key in moving_keys:
                    print(f"{key[0]}-{key[1]}: in progress")
                for key in other:
                    print(f"{key[0]}-{key[1]}: not as planned (not started, cancelled or changed)")
                return 0 if len(done) == len(plan) else 1
            failed = _start(admin, plan, args.throttle)
            if failed:
                return 1
            print(f"started moving {len(plan)} partition(s)"
                  + (f", throttled to {args.throttle} bytes/s" if args.throttle else ""))
            if args.no_wait:
                return 0
            return 0 if _wait(admin, plan, args.timeout) else 1
    except PlanError as e:
        print(f"raftlog partitions reassign: {e}", file=sys.stderr)
        return 2


def cmd_decommission(args) -> int:
    """Move every replica off ``--node``, wait, then unregister it."""
    from .cli_common import admin_for

    node = args.node
    if node is None:
        print("raftlog cluster decommission: --node N is required", file=sys.stderr)
        return 2
    try:
        with admin_for(args) as admin:
            brokers = _brokers(admin)
            if node not in brokers:
                raise PlanError(f"broker {node} is not registered (brokers: {brokers})")
            plan = decommission(_current(admin), node, brokers)
            if plan:
                if _start(admin, plan, args.throttle):
                    return 1
                print(f"moving {len(plan)} partition(s) off broker {node}")
                if not _wait(admin, plan, args.timeout):
                    return 1
            admin.unregister_broker(node)
            print(f"broker {node} holds no replica and is unregistered: stop its process")
            return 0
    except PlanError as e:
        print(f"raftlog cluster decommission: {e}", file=sys.stderr)
        return 2


def add_parsers(sub, with_bootstrap) -> None:
    parts = with_bootstrap(sub.add_parser(
        "partitions", help="move partitions between brokers (like kafka-reassign-partitions)"))
    parts.add_argument("action", choices=["reassign"])
    parts.add_argument("--plan", metavar="FILE",
                       help='a plan {"version": 1, "partitions": [{"topic", "partition", '
                            '"replicas"}]}: executed (with --verify: checked; --cancel: cancelled)')
    parts.add_argument("--generate", action="store_true",
                       help="print a balanced plan over --brokers (moves as little as it can)")
    parts.add_argument("--brokers", help="--generate: comma-separated broker ids")
    parts.add_argument("--topics", help="--generate: only these comma-separated topics")
    parts.add_argument("--verify", action="store_true", help="is --plan done? (exit 0 if so)")
    parts.add_argument("--cancel", action="store_true",
                       help="cancel the moves of --plan (or every move in progress)")
    parts.add_argument("--throttle", type=int, default=0, metavar="BYTES_PER_SEC",
                       help="bound on what a leader sends the new replicas (0: none)")
    parts.add_argument("--no-wait", action="store_true", help="start the moves and return")
    parts.add_argument("--timeout", type=float, default=3600.0,
                       help="seconds to wait for the moves (default 3600)")
    parts.set_defaults(fn=cmd_partitions)
