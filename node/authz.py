"""What each API needs to be allowed (the ``acl`` column of routes.py), checked before it runs.

A requirement is a function ``(fields) -> [(Operation, ResourceType, name), ...]``:
every triple must be allowed, else the request is answered with the resource type's
*_AUTHORIZATION_FAILED code and nothing is done; its message names the
``raftlog acls add`` command that would allow it. Requests that only *read* a set of
resources (METADATA, LIST_GROUPS, OFFSET_FETCH, DESCRIBE_TRANSACTIONS,
LIST_TRANSACTIONS) are filtered instead (see :meth:`AclCheck.filter_response`): what
the principal may not describe looks unknown (or, for a transactional id it named,
TRANSACTIONAL_ID_AUTHORIZATION_FAILED in its row).

Transactional ids (Kafka's KIP-98 rules): WRITE on the id for InitProducerId with it,
AddPartitionsToTxn, AddOffsetsToTxn, EndTxn, TxnOffsetCommit and a Produce carrying a
transactional id (besides what those need on topics and groups); DESCRIBE (which WRITE
implies) for FindCoordinator of key type 1, DescribeTransactions and ListTransactions.
"""

from __future__ import annotations

from raftlog.acl import CLUSTER_NAME, Authorizer, Operation, ResourceType, grant_command
from raftlog.errors import ApiError, ErrorCode
from raftlog.protocol import Api, TopicMetadata, TxnDescriptionRow

READ, WRITE, CREATE = Operation.READ, Operation.WRITE, Operation.CREATE
DELETE, ALTER, DESCRIBE = Operation.DELETE, Operation.ALTER, Operation.DESCRIBE
CLUSTER_ACTION = Operation.CLUSTER_ACTION
TOPIC, GROUP, CLUSTER = ResourceType.TOPIC, ResourceType.GROUP, ResourceType.CLUSTER
TRANSACTIONAL_ID = ResourceType.TRANSACTIONAL_ID

_CODES = {
    TOPIC: ErrorCode.TOPIC_AUTHORIZATION_FAILED,
    GROUP: ErrorCode.GROUP_AUTHORIZATION_FAILED,
    CLUSTER: ErrorCode.CLUSTER_AUTHORIZATION_FAILED,
    TRANSACTIONAL_ID: ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
}
#: The APIs whose answers :meth:`AclCheck.filter_response` filters.
FILTERED_APIS = frozenset({Api.METADATA, Api.LIST_GROUPS, Api.OFFSET_FETCH,
                           Api.DESCRIBE_TRANSACTIONS, Api.LIST_TRANSACTIONS})


def refusal(principal: str, op: Operation, rtype: ResourceType, name: str,
            api: Api | None = None) -> ApiError:
    """The *_AUTHORIZATION_FAILED error of a refused need, its message naming the
    ``raftlog acls add`` command that would allow it."""
    what = "the cluster" if rtype is CLUSTER else f"{rtype.value} {name!r}"
    if rtype is TRANSACTIONAL_ID and op is DESCRIBE:  # (most often a producer's first call)
        hint = (f"`{grant_command(principal, WRITE, rtype, name)}` (a transactional "
                "producer's; --operation describe lets it describe the id only)")
    else:
        hint = f"`{grant_command(principal, op, rtype, name)}`"
    return ApiError(_CODES[rtype], f"{principal} may not {op.value} {what}"
                    f"{f' ({api.name})' if api is not None else ''}: allow it with {hint}")


#: Kafka's AclOperation codes (KIP-430 authorized-operations bit fields: bit n set =
#: operation n allowed) of the operations raftlog's ACLs know.
KAFKA_OPERATION_CODES = {READ: 3, WRITE: 4, CREATE: 5, DELETE: 6, ALTER: 7, DESCRIBE: 8,
                         CLUSTER_ACTION: 9}
#: What each resource type supports (Kafka's, as far as raftlog's operations go).
SUPPORTED_OPERATIONS = {
    TOPIC: (READ, WRITE, CREATE, DELETE, ALTER, DESCRIBE),
    GROUP: (READ, DELETE, DESCRIBE),
    CLUSTER: (CREATE, ALTER, DESCRIBE, CLUSTER_ACTION),
    TRANSACTIONAL_ID: (WRITE, DESCRIBE),
}
#: The authorized-operations field of a response whose request did not ask for it.
NOT_ASKED = -(2**31)


def authorized_operations(acl: AclCheck | None, rtype: ResourceType, name: str) -> int:
    """KIP-430: the bit field of the operations on the resource that the connection's
    principal may perform (ACLs off, ``acl`` None: every operation it supports)."""
    bits = 0
    for op in SUPPORTED_OPERATIONS[rtype]:
        if acl is None or acl.allowed(op, rtype, name):
            bits |= 1 << KAFKA_OPERATION_CODES[op]
    return bits


def nothing(fields) -> list:
    return []


def cluster(op: Operation):
    need = [(op, CLUSTER, CLUSTER_NAME)]
    return lambda fields: need


def topics_of_parts(op: Operation, key: str = "parts"):
    """Topics named first in each row of ``fields[key]`` (produce, fetch, ...)."""
    return lambda fields: [(op, TOPIC, t) for t in {row[0] for row in fields[key] or ()}]


def topic_names(op: Operation, key: str):
    return lambda fields: [(op, TOPIC, t) for t in set(fields[key])]


def topic_field(op: Operation, key: str = "topic"):
    return lambda fields: [(op, TOPIC, fields[key])]


def topic_or_cluster(op: Operation, key: str = "topic"):
    """The topic ``fields[key]``, or the cluster when it is None."""
    return lambda fields: ([(op, CLUSTER, CLUSTER_NAME)] if fields[key] is None
                           else [(op, TOPIC, fields[key])])


def group_field(op: Operation, key: str = "group"):
    return lambda fields: [(op, GROUP, fields[key])]


def group_names(op: Operation, key: str = "groups"):
    return lambda fields: [(op, GROUP, g) for g in set(fields[key])]


def transactional_id(op: Operation, key: str = "transactional_id"):
    """The transactional id ``fields[key]``; none when it is None (a Produce without
    one, an idempotent producer's InitProducerId)."""
    return lambda fields: ([] if fields.get(key) is None
                           else [(op, TRANSACTIONAL_ID, fields[key])])


def coordinator_key(fields) -> list:
    """FIND_COORDINATOR: DESCRIBE on the group, or (key type 1) the transactional id."""
    rtype = TRANSACTIONAL_ID if fields.get("key_type", 0) == 1 else GROUP
    return [(DESCRIBE, rtype, fields["key"])]


def add_partitions_to_txn(fields) -> list:
    """A client's ADD_PARTITIONS_TO_TXN: WRITE on the transactional id, then on each
    topic; a broker's ``verify_only`` one (KIP-890): CLUSTER_ACTION, as Kafka's v4."""
    if fields.get("verify_only"):
        return [(CLUSTER_ACTION, CLUSTER, CLUSTER_NAME)]
    return ([(WRITE, TRANSACTIONAL_ID, fields["transactional_id"])]
            + topics_of_parts(WRITE)(fields))


def both(*fns):
    return lambda fields: [need for fn in fns for need in fn(fields)]


def replica_or(consumer_needs):
    """Follower requests (replica_id >= 0) need CLUSTER_ACTION; others ``consumer_needs``."""
    follower = cluster(CLUSTER_ACTION)
    return lambda fields: (follower(fields) if fields.get("replica_id", -1) >= 0
                           else consumer_needs(fields))


class AclCheck:
    """Checks one connection's requests against the node's current authorizer."""

    __slots__ = ("principal", "authorizer")

    def __init__(self, principal: str, authorizer: Authorizer):
        self.principal = principal
        self.authorizer = authorizer

    def allowed(self, op: Operation, rtype: ResourceType, name: str) -> bool:
        return self.authorizer.authorize(self.principal, op, rtype, name)

    def require(self, api: Api, needs: list) -> None:
        """Raise the *_AUTHORIZATION_FAILED ApiError of the first need not allowed."""
        for op, rtype, name in needs:
            if not self.allowed(op, rtype, name):
                raise refusal(self.principal, op, rtype, name, api)

    def check_route(self, api: Api, acl, fields) -> None:
        """Raise the *_AUTHORIZATION_FAILED ApiError unless the requirement ``acl`` of
        ``api``'s route (routes.py) is met by the native request ``fields``."""
        if isinstance(acl, str):
            getattr(self, acl)(fields)
        else:
            needs = acl(fields)
            if needs:
                self.require(api, needs)

    # ------------------------------------------------------------------ special cases

    def check_create_topics(self, fields) -> None:
        """CREATE on the cluster, or else on each topic (Kafka's rule)."""
        if self.allowed(CREATE, CLUSTER, CLUSTER_NAME):
            return
        self.require(Api.CREATE_TOPICS, [(CREATE, TOPIC, t["name"]) for t in fields["topics"]])

    def check_init_producer_id(self, fields) -> None:
        """A transactional producer needs WRITE on its transactional id; an idempotent
        one (no id) WRITE on some topic (Kafka 3's rules)."""
        if fields.get("transactional_id") is not None:
            self.require(Api.INIT_PRODUCER_ID,
                         [(WRITE, TRANSACTIONAL_ID, fields["transactional_id"])])
        elif not self.authorizer.allowed_on_some(self.principal, WRITE, TOPIC):
            raise ApiError(ErrorCode.CLUSTER_AUTHORIZATION_FAILED,
                           f"{self.principal} may write no topic: no producer id (allow "
                           f"it to write one with `raftlog acls add --principal "
                           f"{self.principal} --operation write --topic NAME`)")

    def metadata_request(self, fields) -> tuple[dict, list]:
        """(fields without the topics the principal may not describe, those topics):
        they are answered as unknown and never auto-created."""
        names = fields["topics"]
        if names is None:
            return fields, []
        hidden = [t for t in names if not self.allowed(DESCRIBE, TOPIC, t)]
        if not hidden:
            return fields, []
        shown = [t for t in names if t not in set(hidden)]
        return {**fields, "topics": shown}, hidden

    def filter_response(self, api: Api, header: dict, hidden: list = ()) -> dict:
        """Remove from a response what the principal may not describe."""
        if api is Api.METADATA:
            rows = [t for t in header.get("topics", ())
                    if self.allowed(DESCRIBE, TOPIC, _topic_name(t))]
            rows += [TopicMetadata(t, int(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION),
                                   f"unknown topic {t!r}").to_wire() for t in hidden]
            header["topics"] = rows
        elif api is Api.LIST_GROUPS and not self.allowed(DESCRIBE, CLUSTER, CLUSTER_NAME):
            header["groups"] = [g for g in header.get("groups", ())
                                if self.allowed(DESCRIBE, GROUP, g[0])]
        elif api is Api.OFFSET_FETCH:
            header["parts"] = [p for p in header.get("parts", ())
                               if self.allowed(DESCRIBE, TOPIC, p[0])]
        elif api is Api.DESCRIBE_TRANSACTIONS:  # (rows in request order, one per id)
            header["transactions"] = [self._described(r) for r in header.get(
                "transactions", ())]
        elif api is Api.LIST_TRANSACTIONS:
            header["transactions"] = [r for r in header.get("transactions", ())
                                      if self.allowed(DESCRIBE, TRANSACTIONAL_ID, r[0])]
        return header

    def _described(self, row):
        """A DESCRIBE_TRANSACTIONS row as the principal may see it: refused without
        DESCRIBE on the id (whatever the coordinator answered), else without the
        partitions of topics it may not describe (Kafka's rules)."""
        row = TxnDescriptionRow(*row)
        tid = row.transactional_id
        if not self.allowed(DESCRIBE, TRANSACTIONAL_ID, tid):
            e = refusal(self.principal, DESCRIBE, TRANSACTIONAL_ID, tid,
                        Api.DESCRIBE_TRANSACTIONS)
            return TxnDescriptionRow(tid, int(e.code), message=e.message)
        if row.partitions:
            row = row._replace(partitions=[tp for tp in row.partitions
                                           if self.allowed(DESCRIBE, TOPIC, tp[0])])
        return row


def _topic_name(row) -> str:
    return row["name"] if isinstance(row, dict) else row[0]
