"""Access control lists: bindings, validation and a pure ``authorize`` (Kafka's rules).

An :class:`AclBinding` says that a principal (``User:alice``, or ``User:*`` for every
user) may (ALLOW) or may not (DENY) perform an operation on resources of one type
(topic, group, cluster, transactional_id) whose names match a pattern: LITERAL (the
name itself, or ``*`` for every name) or PREFIXED (every name starting with it).

:func:`authorize` decides as Kafka's StandardAuthorizer does:

* a super user may do anything;
* any matching DENY wins over every ALLOW;
* a matching ALLOW of the operation, of ALL, or of an operation that implies it
  (READ, WRITE, DELETE and ALTER imply DESCRIBE) allows;
* otherwise the answer is ``allow_if_no_acls`` when no binding at all names the
  resource, else deny (Kafka's ``allow.everyone.if.no.acl.found``, default false).

:class:`Authorizer` adds a bounded cache of decisions for the node's request path;
it is rebuilt whenever the set of bindings changes.
"""

from __future__ import annotations

import collections
import enum
import shlex
from collections.abc import Iterable
from dataclasses import dataclass

from raftlog.errors import RaftlogError

#: The one resource name of the cluster resource (Kafka's).
CLUSTER_NAME = "kafka-cluster"
WILDCARD = "*"
MAX_NAME_CHARS = 1024
#: Decisions remembered by an Authorizer (principal, operation, resource) at most.
DECISION_CACHE_MAX = 65_536


class AclError(RaftlogError):
    """An ACL binding or filter that is not valid; the message names the field."""


class ResourceType(enum.Enum):
    TOPIC = "topic"
    GROUP = "group"
    CLUSTER = "cluster"
    #: A transactional producer's id (Kafka's TRANSACTIONAL_ID, KIP-98): WRITE to use
    #: it (InitProducerId, AddPartitionsToTxn, AddOffsetsToTxn, EndTxn,
    #: TxnOffsetCommit, a transactional Produce), DESCRIBE to find its coordinator,
    #: describe and list it.
    TRANSACTIONAL_ID = "transactional_id"


class PatternType(enum.Enum):
    LITERAL = "literal"
    PREFIXED = "prefixed"


class Operation(enum.Enum):
    ALL = "all"
    READ = "read"
    WRITE = "write"
    CREATE = "create"
    DELETE = "delete"
    ALTER = "alter"
    DESCRIBE = "describe"
    #: Broker-to-broker requests (follower fetch, heartbeat, ISR changes): Kafka's
    #: ClusterAction, normally held by the brokers' own principal (a super user).
    CLUSTER_ACTION = "cluster_action"


class Permission(enum.Enum):
    ALLOW = "allow"
    DENY = "deny"


#: An ALLOW of the key also allows the operations of the value (Kafka's implications).
_IMPLIES = {
    Operation.READ: frozenset({Operation.DESCRIBE}),
    Operation.WRITE: frozenset({Operation.DESCRIBE}),
    Operation.DELETE: frozenset({Operation.DESCRIBE}),
    Operation.ALTER: frozenset({Operation.DESCRIBE}),
}
#: Which ALLOWed operations grant the key.
_GRANTED_BY = {
    op: frozenset({op, Operation.ALL} | {o for o, implied in _IMPLIES.items() if op in implied})
    for op in Operation
}

#: Operations that make sense per resource type (validation of bindings).
VALID_OPERATIONS = {
    ResourceType.TOPIC: frozenset({Operation.ALL, Operation.READ, Operation.WRITE,
                                   Operation.CREATE, Operation.DELETE, Operation.ALTER,
                                   Operation.DESCRIBE}),
    ResourceType.GROUP: frozenset({Operation.ALL, Operation.READ, Operation.DELETE,
                                   Operation.DESCRIBE}),
    ResourceType.CLUSTER: frozenset({Operation.ALL, Operation.CREATE, Operation.ALTER,
                                     Operation.DESCRIBE, Operation.CLUSTER_ACTION}),
    ResourceType.TRANSACTIONAL_ID: frozenset({Operation.ALL, Operation.WRITE,
                                              Operation.DESCRIBE}),
}


def _enum(cls, what: str, value):
    if isinstance(value, cls):
        return value
    try:  # ("transactional-id", "Transactional_Id", "CLUSTER-ACTION" are accepted)
        return cls(str(value).strip().lower().replace("-", "_"))
    except ValueError:
        known = ", ".join(m.value for m in cls)
        raise AclError(f"{what}: {value!r} is not one of {known}") from None


def resource_type(value) -> ResourceType:
    """A resource type from its name (any case, '-' for '_'). Raises AclError naming
    the valid ones."""
    return _enum(ResourceType, "resource type", value)


#: The ``raftlog acls`` option naming a resource of each type.
CLI_OPTIONS = {ResourceType.TOPIC: "--topic", ResourceType.GROUP: "--group",
               ResourceType.CLUSTER: "--cluster",
               ResourceType.TRANSACTIONAL_ID: "--transactional-id"}


def grant_command(principal: str, operation: Operation, rtype: ResourceType,
                  name: str) -> str:
    """The ``raftlog acls add`` command that allows ``principal`` to ``operation`` the
    resource (what a refusal tells the user to run)."""
    resource = CLI_OPTIONS[rtype] if rtype is ResourceType.CLUSTER else (
        f"{CLI_OPTIONS[rtype]} {shlex.quote(name)}")
    return (f"raftlog acls add --principal {shlex.quote(principal)} "
            f"--operation {operation.value} {resource}")


def check_principal(principal: str) -> str:
    """'User:alice' (or 'User:*'): a type, a colon, a non-empty name."""
    if type(principal) is not str:
        raise AclError(f"principal: {principal!r} is not a string")
    kind, sep, name = principal.partition(":")
    if not sep or not kind or not name or len(principal) > MAX_NAME_CHARS:
        raise AclError(f"principal: {principal!r} is not Type:name (for example User:alice)")
    return principal


@dataclass(frozen=True, slots=True)
class AclBinding:
    """One ACL. Build with :func:`binding` to validate and normalise the fields."""

    principal: str
    resource_type: ResourceType
    resource_name: str
    pattern_type: PatternType
    operation: Operation
    permission: Permission

    def matches_resource(self, resource_type: ResourceType, name: str) -> bool:
        if resource_type is not self.resource_type:
            return False
        if self.pattern_type is PatternType.PREFIXED:
            return name.startswith(self.resource_name)
        return self.resource_name == WILDCARD or self.resource_name == name

    def as_tuple(self) -> tuple:
        """The wire/record form: six strings."""
        return (self.principal, self.resource_type.value, self.resource_name,
                self.pattern_type.value, self.operation.value, self.permission.value)

    def __str__(self) -> str:
        return (f"{self.permission.value} {self.principal} {self.operation.value} on "
                f"{self.resource_type.value} {self.pattern_type.value} {self.resource_name!r}")


def binding(principal: str, resource_type, resource_name: str, pattern_type="literal",
            operation="all", permission="allow") -> AclBinding:
    """A validated binding. Enum fields take their names in any case ("Topic", "READ").

    Raises:
        AclError: naming the bad field.
    """
    check_principal(principal)
    rtype = _enum(ResourceType, "resource type", resource_type)
    ptype = _enum(PatternType, "pattern type", pattern_type)
    op = _enum(Operation, "operation", operation)
    perm = _enum(Permission, "permission", permission)
    if type(resource_name) is not str or not resource_name or len(resource_name) > MAX_NAME_CHARS:
        raise AclError(f"resource name: {resource_name!r} must be 1..{MAX_NAME_CHARS} characters")
    if rtype is ResourceType.CLUSTER and (resource_name != CLUSTER_NAME
                                          or ptype is not PatternType.LITERAL):
        raise AclError(f"the cluster resource is literal {CLUSTER_NAME!r}, not "
                       f"{ptype.value} {resource_name!r}")
    if ptype is PatternType.PREFIXED and resource_name == WILDCARD:
        raise AclError("a prefixed pattern of '*' matches nothing: use literal '*' for all")
    if op not in VALID_OPERATIONS[rtype]:
        ok = ", ".join(sorted(o.value for o in VALID_OPERATIONS[rtype]))
        raise AclError(f"operation {op.value} does not apply to a {rtype.value} (valid: {ok})")
    return AclBinding(principal, rtype, resource_name, ptype, op, perm)


def from_tuple(t) -> AclBinding:
    """The inverse of :meth:`AclBinding.as_tuple`, validated. Raises AclError."""
    if not isinstance(t, (list, tuple)) or len(t) != 6:
        raise AclError(f"an ACL binding is six fields, not {t!r}")
    return binding(*t)


def _principal_matches(binding_principal: str, principal: str) -> bool:
    if binding_principal == principal:
        return True
    kind, _, name = binding_principal.partition(":")
    return name == WILDCARD and principal.partition(":")[0] == kind


def authorize(bindings: Iterable[AclBinding], principal: str, operation: Operation,
              resource_type: ResourceType, resource_name: str, *,
              super_users: frozenset = frozenset(), allow_if_no_acls: bool = False) -> bool:
    """Whether ``principal`` may perform ``operation`` on the resource (rules above)."""
    if principal in super_users:
        return True
    granting = _GRANTED_BY[operation]
    allowed = False
    any_for_resource = False
    for b in bindings:
        if not b.matches_resource(resource_type, resource_name):
            continue
        any_for_resource = True
        if not _principal_matches(b.principal, principal):
            continue
        if b.permission is Permission.DENY:
            if b.operation is operation or b.operation is Operation.ALL:
                return False
        elif b.operation in granting:
            allowed = True
    if not any_for_resource:
        return allow_if_no_acls
    return allowed


def allowed_on_some(bindings: Iterable[AclBinding], principal: str, operation: Operation,
                    resource_type: ResourceType, *, super_users: frozenset = frozenset()) -> bool:
    """Whether some resource of the type may be ``operation``-ed by the principal: an
    ALLOW exists that no DENY of every name (literal '*') cancels. (Kafka uses this for
    InitProducerId: idempotent writes need WRITE on any topic.)"""
    if principal in super_users:
        return True
    granting = _GRANTED_BY[operation]
    allow = deny_all = False
    for b in bindings:
        if b.resource_type is not resource_type or not _principal_matches(b.principal, principal):
            continue
        if b.permission is Permission.DENY:
            if (b.operation in (operation, Operation.ALL) and b.resource_name == WILDCARD
                    and b.pattern_type is PatternType.LITERAL):
                deny_all = True
        elif b.operation in granting:
            allow = True
    return allow and not deny_all


def parse_super_users(value: str) -> frozenset:
    """Kafka's ``super.users``: 'User:admin;User:broker' -> frozenset. Raises AclError."""
    return frozenset(check_principal(p.strip()) for p in str(value).split(";") if p.strip())


class Authorizer:
    """``authorize`` over a fixed set of bindings, with a bounded decision cache.

    Replace the whole object when the bindings change (they are immutable here)."""

    def __init__(self, bindings: Iterable[AclBinding] = (), *, super_users: frozenset = frozenset(),
                 allow_if_no_acls: bool = False):
        self.bindings = tuple(bindings)
        self.super_users = frozenset(super_users)
        self.allow_if_no_acls = allow_if_no_acls
        self._by_type: dict[ResourceType, tuple] = {
            t: tuple(b for b in self.bindings if b.resource_type is t) for t in ResourceType}
        self._cache: collections.OrderedDict = collections.OrderedDict()

    def authorize(self, principal: str, operation: Operation, resource_type: ResourceType,
                  resource_name: str) -> bool:
        key = (principal, operation, resource_type, resource_name)
        cache = self._cache
        hit = cache.get(key)
        if hit is not None:
            return hit
        ok = authorize(self._by_type[resource_type], principal, operation, resource_type,
                       resource_name, super_users=self.super_users,
                       allow_if_no_acls=self.allow_if_no_acls)
        cache[key] = ok
        if len(cache) > DECISION_CACHE_MAX:
            cache.popitem(last=False)
        return ok

    def allowed_on_some(self, principal: str, operation: Operation,
                        resource_type: ResourceType) -> bool:
        return allowed_on_some(self._by_type[resource_type], principal, operation,
                               resource_type, super_users=self.super_users)


def matches_filter(b: AclBinding, *, principal: str | None = None, resource_type=None,
                   resource_name: str | None = None, pattern_type=None, operation=None,
                   permission=None) -> bool:
    """Whether a binding matches a filter: every given field equal (None = any)."""
    return ((principal is None or b.principal == principal)
            and (resource_type is None or b.resource_type is _enum(
                ResourceType, "resource type", resource_type))
            and (resource_name is None or b.resource_name == resource_name)
            and (pattern_type is None or b.pattern_type is _enum(
                PatternType, "pattern type", pattern_type))
            and (operation is None or b.operation is _enum(Operation, "operation", operation))
            and (permission is None or b.permission is _enum(
                Permission, "permission", permission)))
