"""Kafka's ACL codes (AclOperation, ResourceType, PatternType, AclPermissionType) as
raftlog's ACL names (raftlog/acl.py), both ways, for the Kafka listener's
CreateAcls / DescribeAcls / DeleteAcls. Pure: no node state.

raftlog bindings have no host: only Kafka's wildcard host ``*`` is accepted, and
every binding is described with it. A code raftlog has no twin for (a
DELEGATION_TOKEN or USER resource, the DESCRIBE_CONFIGS operation, ...) is refused in
a new binding (:class:`KafkaAclError`, answered INVALID_REQUEST) and matches nothing
in a filter.
"""

from __future__ import annotations

from raftlog.acl import AclBinding, PatternType, ResourceType

ANY, MATCH = 1, 2
#: Kafka code -> raftlog name
RESOURCE_TYPES = {2: "topic", 3: "group", 4: "cluster", 5: "transactional_id"}
PATTERN_TYPES = {3: "literal", 4: "prefixed"}
OPERATIONS = {2: "all", 3: "read", 4: "write", 5: "create", 6: "delete", 7: "alter",
              8: "describe", 9: "cluster_action"}
PERMISSIONS = {2: "deny", 3: "allow"}
WILDCARD_HOST = "*"

_BACK = {name: {v: k for k, v in table.items()} for name, table in (
    ("resource_type", RESOURCE_TYPES), ("pattern_type", PATTERN_TYPES),
    ("operation", OPERATIONS), ("permission", PERMISSIONS))}


class KafkaAclError(ValueError):
    """A binding or filter raftlog cannot hold; the message names the field."""


class NoMatch(Exception):
    """A filter naming something raftlog never holds: it matches no binding."""


def _code(table: dict, what: str, code: int) -> str:
    name = table.get(code)
    if name is None:
        raise KafkaAclError(f"{what} code {code} is not supported here "
                            f"(supported: {', '.join(f'{k}={v}' for k, v in table.items())})")
    return name


def binding_tuple(c: dict) -> tuple:
    """A CreateAcls creation as raftlog's binding tuple (principal, resource type,
    name, pattern type, operation, permission)."""
    if c["host"] != WILDCARD_HOST:
        raise KafkaAclError(f"host {c['host']!r}: only the wildcard host '*' is supported")
    return (c["principal"], _code(RESOURCE_TYPES, "resource type", c["resource_type"]),
            c["resource_name"],
            _code(PATTERN_TYPES, "pattern type", c.get("resource_pattern_type", 3)),
            _code(OPERATIONS, "operation", c["operation"]),
            _code(PERMISSIONS, "permission", c["permission_type"]))


def native_filter(f: dict) -> tuple[dict, str | None]:
    """(raftlog's ACL filter fields, the resource name to MATCH or None) of a Kafka
    DescribeAcls filter / DeleteAcls filter. Raises NoMatch when it can match
    nothing here, KafkaAclError when it is malformed (UNKNOWN codes)."""
    out: dict = {"principal": f["principal_filter"], "resource_name": f["resource_name_filter"]}
    for key, kafka_key, table in (
            ("resource_type", "resource_type_filter", RESOURCE_TYPES),
            ("pattern_type", "pattern_type_filter", PATTERN_TYPES),
            ("operation", "operation", OPERATIONS),
            ("permission", "permission_type", PERMISSIONS)):
        code = f.get(kafka_key, 3)
        if code == ANY or (key == "pattern_type" and code == MATCH):
            out[key] = None
        elif code in table:
            out[key] = table[code]
        elif code == 0:
            raise KafkaAclError(f"{kafka_key} is UNKNOWN (0)")
        else:
            raise NoMatch
    if f["host_filter"] not in (None, WILDCARD_HOST):
        raise NoMatch
    match = None
    if f.get("pattern_type_filter", 3) == MATCH and out["resource_name"] is not None:
        match, out["resource_name"] = out["resource_name"], None
    return out, match


def matches_name(b: AclBinding, name: str) -> bool:
    """Kafka's MATCH: the literal name, the literal wildcard, or a prefix of it."""
    return b.matches_resource(b.resource_type, name)


def binding_row(b: AclBinding) -> dict:
    """A raftlog binding in Kafka's codes (the fields of a DeleteAcls matching ACL)."""
    return {"resource_type": _BACK["resource_type"][b.resource_type.value],
            "resource_name": b.resource_name,
            "pattern_type": _BACK["pattern_type"][b.pattern_type.value],
            "principal": b.principal, "host": WILDCARD_HOST,
            "operation": _BACK["operation"][b.operation.value],
            "permission_type": _BACK["permission"][b.permission.value]}


assert set(RESOURCE_TYPES.values()) == {t.value for t in ResourceType}
assert set(PATTERN_TYPES.values()) == {p.value for p in PatternType}
