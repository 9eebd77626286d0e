"""``raftlog users create|delete|list`` and ``raftlog acls add|remove|list``: SCRAM
credentials and ACLs through the Admin API (written to the metadata quorum)."""

from __future__ import annotations

import getpass
import sys

MECHANISMS = ("SCRAM-SHA-256", "SCRAM-SHA-512")


def _admin(args):
    from .cli_common import admin_for

    return admin_for(args)


def _password(args) -> str:
    """--password-file, else one line of stdin when it is not a terminal, else a prompt."""
    if args.password_file:
        with open(args.password_file, encoding="utf-8") as f:
            return f.readline().rstrip("\r\n")
    if not sys.stdin.isatty():
        return sys.stdin.readline().rstrip("\r\n")
    first = getpass.getpass(f"password for {args.user}: ")
    if getpass.getpass("again: ") != first:
        raise ValueError("the passwords differ")
    return first


def cmd_users(args) -> int:
    with _admin(args) as admin:
        if args.action == "list":
            for user, mechs in sorted(admin.describe_users().items()):
                print(user, " ".join(f"{m}(iterations={i})" for m, i in mechs))
            return 0
        if not args.user:
            raise ValueError(f"users {args.action}: a user name is required")
        mechs = args.mechanism or [MECHANISMS[0]]
        if args.action == "create":
            password = _password(args)
            if not password:
                raise ValueError("the password is empty")
            for m in mechs:
                admin.create_user(args.user, password, m, iterations=args.iterations)
            print(f"user {args.user}: {', '.join(mechs)} credential stored", file=sys.stderr)
        else:
            for m in mechs:
                admin.delete_user(args.user, m)
            print(f"user {args.user}: {', '.join(mechs)} credential deleted", file=sys.stderr)
    return 0


RESOURCE_OPTIONS = "--topic, --group, --cluster, --transactional-id"


def _resource(args) -> tuple:
    """(resource type, name) from --topic / --group / --cluster / --transactional-id (at
    most one), or (list, remove) --resource-type alone: every name of that type."""
    given = [(t, n) for t, n in (("topic", args.topic), ("group", args.group),
                                 ("cluster", "kafka-cluster" if args.cluster else None),
                                 ("transactional_id", args.transactional_id)) if n]
    if len(given) > 1:
        raise ValueError(f"give one of {RESOURCE_OPTIONS}")
    if args.resource_type is not None:
        from raftlog.acl import CLI_OPTIONS, AclError, ResourceType, resource_type

        try:
            rtype = resource_type(args.resource_type).value
        except AclError as e:
            raise ValueError(f"--resource-type: {e}") from None
        if args.action == "add":
            raise ValueError(f"acls add names its resource with one of {RESOURCE_OPTIONS} "
                             "(--resource-type filters list and remove)")
        if given and given[0][0] != rtype:
            raise ValueError(f"--resource-type {rtype} contradicts "
                             f"{CLI_OPTIONS[ResourceType(given[0][0])]}")
        return (rtype, given[0][1]) if given else (rtype, None)
    return given[0] if given else (None, None)


def cmd_acls(args) -> int:
    rtype, name = _resource(args)
    with _admin(args) as admin:
        if args.action == "add":
            if not args.principal or not rtype:
                raise ValueError(f"acls add needs --principal and one of {RESOURCE_OPTIONS}")
            ops = args.operation or ["all"]
            rows = [(args.principal, rtype, name, args.pattern or "literal", op,
                     "deny" if args.deny else "allow") for op in ops]
            from raftlog.acl import binding

            for r in rows:  # validated here: a clear error before anything is written
                binding(*r)
            n = admin.create_acls(rows)
            print(f"{n} ACL binding(s) added", file=sys.stderr)
            return 0
        flt = {k: v for k, v in (
            ("principal", args.principal), ("resource_type", rtype), ("resource_name", name),
            ("pattern_type", args.pattern),
            ("operation", args.operation[0] if args.operation else None),
            ("permission", ("deny" if args.deny else None))) if v is not None}
        if args.action == "remove":
            if not flt:
                raise ValueError("acls remove needs a filter (for example --principal)")
            rows = admin.delete_acls(**flt)
            print(f"{len(rows)} ACL binding(s) removed", file=sys.stderr)
        else:
            rows = admin.describe_acls(**flt)
        for principal, rt, rn, pt, op, perm in rows:
            print(f"{perm:5} {principal} {op} {rt} {pt} {rn}")
    return 0


def add_parsers(sub, with_bootstrap) -> None:
    users = with_bootstrap(sub.add_parser(
        "users", help="SCRAM users (like kafka-configs --alter --add-config SCRAM-SHA-256=...)"))
    users.add_argument("action", choices=["create", "delete", "list"])
    users.add_argument("user", nargs="?")
    users.add_argument("--mechanism", action="append", choices=MECHANISMS,
                       help="repeatable (default SCRAM-SHA-256)")
    users.add_argument("--password-file", help="first line is the password (else stdin/prompt)")
    users.add_argument("--iterations", type=int, default=8192)
    users.set_defaults(fn=cmd_users)

    acls = with_bootstrap(sub.add_parser("acls", help="ACLs (like kafka-acls)"))
    acls.add_argument("action", choices=["add", "remove", "list"])
    acls.add_argument("--principal", help="User:name (User:* for every user)")
    acls.add_argument("--operation", action="append",
                      help="read, write, create, delete, alter, describe, cluster_action, all "
                           "(repeatable; add: default all)")
    acls.add_argument("--topic")
    acls.add_argument("--group")
    acls.add_argument("--cluster", action="store_true")
    acls.add_argument("--transactional-id", metavar="ID",
                      help="a transactional producer's id (operations write, describe, all)")
    acls.add_argument("--resource-type", metavar="TYPE",
                      help="list, remove: only bindings of this type (topic, group, cluster, "
                           "transactional_id)")
    acls.add_argument("--pattern", choices=["literal", "prefixed"],
                      help="resource pattern type (add: default literal)")
    acls.add_argument("--deny", action="store_true", help="a deny binding (default allow)")
    acls.set_defaults(fn=cmd_acls)
