"""How the node serves each API: one table (Kafka's ``KafkaApis`` switch, as data).

Every API the node serves has one :class:`Route`: its :class:`Mode` and the method
that answers it. ``SERVED_APIS`` (what ApiVersions advertises and ``parse_request``
accepts) is derived from the table, so an API is added in one place.
"""

from __future__ import annotations

import enum
from typing import NamedTuple

from raftlog.protocol import API_VERSIONS, Api

from . import authz as Z
from .group_handlers import GROUP_APIS


class Mode(enum.Enum):
    #: ``Broker.<handler>(req) -> (header, pieces)`` on the event loop, at once.
    INLINE = "inline"
    #: ``Server.<handler>(req, conn) -> (header, pieces)``, or None when the request was
    #: parked in the purgatory (answered when its partitions move or it expires) or
    #: wants no answer (acks=0).
    PARKS = "parks"
    #: ``await Server.<handler>(req) -> (header, pieces)``: it may wait (a rebalance, a
    #: quorum write); the connection's earlier answers are sent first.
    AWAITS = "awaits"
    #: A metadata write: ``Broker.<handler>(req)`` in a worker thread (a Raft commit
    #: takes milliseconds, seconds without a quorum), then ``ReplicaManager.reconcile``.
    QUORUM = "quorum"


class Route(NamedTuple):
    mode: Mode
    handler: str  # a method name; "security.x" is a method of Broker.security
    #: What the API needs allowed when ACLs are on (node/authz.py): a function of the
    #: request fields giving (operation, resource type, name) triples, or the name of
    #: an AclCheck method for the special cases. The answers of authz.FILTERED_APIS
    #: are also filtered (what may not be described looks unknown).
    acl: object = Z.nothing


_GROUP_ACL = {
    Api.FIND_COORDINATOR: Z.coordinator_key,  # (key type 1: a transactional id)
    Api.JOIN_GROUP: Z.group_field(Z.READ),
    Api.SYNC_GROUP: Z.group_field(Z.READ),
    Api.HEARTBEAT: Z.group_field(Z.READ),
    Api.LEAVE_GROUP: Z.group_field(Z.READ),
    Api.OFFSET_COMMIT: Z.both(Z.group_field(Z.READ), Z.topics_of_parts(Z.READ, "offsets")),
    Api.OFFSET_FETCH: Z.group_field(Z.DESCRIBE),
    Api.LIST_GROUPS: Z.nothing,
    Api.DESCRIBE_GROUPS: Z.group_names(Z.DESCRIBE),
    Api.DELETE_GROUPS: Z.group_names(Z.DELETE),
    Api.OFFSET_DELETE: Z.both(Z.group_field(Z.DELETE), Z.topics_of_parts(Z.READ)),
}

ROUTES: dict[Api, Route] = {
    Api.API_VERSIONS: Route(Mode.INLINE, "api_versions"),
    # (a transactional produce: WRITE on its transactional id first, as Kafka)
    Api.PRODUCE: Route(Mode.PARKS, "produce", Z.both(Z.transactional_id(Z.WRITE),
                                                     Z.topics_of_parts(Z.WRITE))),
    Api.FETCH: Route(Mode.PARKS, "fetch", Z.replica_or(Z.topics_of_parts(Z.READ))),
    Api.LIST_OFFSETS: Route(Mode.INLINE, "list_offsets", Z.topics_of_parts(Z.DESCRIBE)),
    Api.DELETE_RECORDS: Route(Mode.INLINE, "delete_records", Z.topics_of_parts(Z.DELETE)),
    Api.METADATA: Route(Mode.AWAITS, "metadata"),  # (auto-creation: a quorum write)
    Api.CREATE_TOPICS: Route(Mode.QUORUM, "create_topics", "check_create_topics"),
    Api.DELETE_TOPICS: Route(Mode.QUORUM, "delete_topics", Z.topic_names(Z.DELETE, "names")),
    Api.DESCRIBE_CLUSTER: Route(Mode.INLINE, "describe_cluster"),
    Api.CREATE_PARTITIONS: Route(Mode.QUORUM, "create_partitions", Z.topic_field(Z.ALTER)),
    Api.ALTER_CONFIGS: Route(Mode.QUORUM, "alter_configs", Z.topic_field(Z.ALTER)),
    Api.DESCRIBE_CONFIGS: Route(Mode.INLINE, "describe_configs",
                                Z.topic_or_cluster(Z.DESCRIBE)),
    Api.BROKER_HEARTBEAT: Route(Mode.INLINE, "broker_heartbeat", Z.cluster(Z.CLUSTER_ACTION)),
    Api.OFFSETS_FOR_LEADER_EPOCH: Route(Mode.INLINE, "offsets_for_leader_epoch",
                                        Z.replica_or(Z.topics_of_parts(Z.DESCRIBE))),
    Api.ELECT_LEADERS: Route(Mode.QUORUM, "elect_leaders", Z.cluster(Z.ALTER)),
    Api.ALTER_PARTITION_REASSIGNMENTS: Route(Mode.QUORUM, "alter_partition_reassignments",
                                             Z.cluster(Z.ALTER)),
    Api.LIST_PARTITION_REASSIGNMENTS: Route(Mode.INLINE, "list_partition_reassignments",
                                            Z.cluster(Z.DESCRIBE)),
    Api.UNREGISTER_BROKER: Route(Mode.QUORUM, "unregister_broker", Z.cluster(Z.ALTER)),
    Api.INIT_PRODUCER_ID: Route(Mode.AWAITS, "init_producer_id", "check_init_producer_id"),
    **{api: Route(Mode.AWAITS, "group_api", _GROUP_ACL[api]) for api in sorted(GROUP_APIS)},
    # Transactions (node/txn_host.py): WRITE on the transactional id first (its
    # refusal is TRANSACTIONAL_ID_AUTHORIZATION_FAILED), then Kafka's topic and group
    # needs. INIT_PRODUCER_ID with a transactional id: WRITE on it (check_init_producer_id).
    Api.ADD_PARTITIONS_TO_TXN: Route(Mode.AWAITS, "txn_api", Z.add_partitions_to_txn),
    Api.ADD_OFFSETS_TO_TXN: Route(Mode.AWAITS, "txn_api",
                                  Z.both(Z.transactional_id(Z.WRITE), Z.group_field(Z.READ))),
    Api.END_TXN: Route(Mode.AWAITS, "txn_api", Z.transactional_id(Z.WRITE)),
    Api.TXN_OFFSET_COMMIT: Route(Mode.AWAITS, "txn_offset_commit",
                                 Z.both(Z.transactional_id(Z.WRITE), Z.group_field(Z.READ),
                                        Z.topics_of_parts(Z.READ, "offsets"))),
    Api.WRITE_TXN_MARKERS: Route(Mode.AWAITS, "txn_api", Z.cluster(Z.CLUSTER_ACTION)),
    # Operating transactions (KIP-664): filtered (authz.FILTERED_APIS) -- an id the
    # principal may not DESCRIBE is refused in its row (DESCRIBE_TRANSACTIONS) or left
    # out (LIST_TRANSACTIONS), as Kafka. DescribeProducers: READ on the topic, as Kafka.
    Api.DESCRIBE_TRANSACTIONS: Route(Mode.AWAITS, "txn_api"),
    Api.LIST_TRANSACTIONS: Route(Mode.AWAITS, "txn_api"),
    Api.DESCRIBE_PRODUCERS: Route(Mode.INLINE, "describe_producers", Z.topics_of_parts(Z.READ)),
    Api.DESCRIBE_LOG_DIRS: Route(Mode.INLINE, "describe_log_dirs", Z.cluster(Z.DESCRIBE)),
    Api.DESCRIBE_QUORUM: Route(Mode.INLINE, "describe_quorum", Z.cluster(Z.DESCRIBE)),
    # SASL is handled by the server itself (node/authn.py) before any route is used.
    Api.SASL_HANDSHAKE: Route(Mode.INLINE, "sasl"),
    Api.SASL_AUTHENTICATE: Route(Mode.INLINE, "sasl"),
    Api.DESCRIBE_USER_SCRAM_CREDENTIALS: Route(Mode.INLINE, "security.describe_users",
                                               Z.cluster(Z.DESCRIBE)),
    Api.ALTER_USER_SCRAM_CREDENTIALS: Route(Mode.QUORUM, "security.alter_users",
                                            Z.cluster(Z.ALTER)),
    Api.DESCRIBE_ACLS: Route(Mode.INLINE, "security.describe_acls", Z.cluster(Z.DESCRIBE)),
    Api.CREATE_ACLS: Route(Mode.QUORUM, "security.create_acls", Z.cluster(Z.ALTER)),
    Api.DELETE_ACLS: Route(Mode.QUORUM, "security.delete_acls", Z.cluster(Z.ALTER)),
}

#: {api: (min version, max version)} of every API this node serves.
SERVED_APIS: dict[Api, tuple[int, int]] = {api: API_VERSIONS[api] for api in ROUTES}
