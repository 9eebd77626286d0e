"""How the node serves each API: one table (Kafka's ``KafkaApis`` switch, as data).

Every API the node serves has one :class:`Route`: its :class:`Mode` and the method
that answers it. ``SERVED_APIS`` (what ApiVersions advertises and ``parse_request``
accepts) is derived from the table, so an API is added in one place.
"""

from __future__ import annotations

import enum
from typing import NamedTuple

from raftlog.protocol import API_VERSIONS, Api

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
    #: A metadata write: ``Broker.<handler>(req)`` in a worker thread in cluster mode (a
    #: Raft commit takes milliseconds, seconds without a quorum); inline on one node.
    QUORUM = "quorum"


class Route(NamedTuple):
    mode: Mode
    handler: str


ROUTES: dict[Api, Route] = {
    Api.API_VERSIONS: Route(Mode.INLINE, "api_versions"),
    Api.PRODUCE: Route(Mode.PARKS, "produce"),
    Api.FETCH: Route(Mode.PARKS, "fetch"),
    Api.LIST_OFFSETS: Route(Mode.INLINE, "list_offsets"),
    Api.METADATA: Route(Mode.INLINE, "metadata"),
    Api.CREATE_TOPICS: Route(Mode.QUORUM, "create_topics"),
    Api.DELETE_TOPICS: Route(Mode.QUORUM, "delete_topics"),
    Api.DESCRIBE_CLUSTER: Route(Mode.INLINE, "describe_cluster"),
    Api.CREATE_PARTITIONS: Route(Mode.QUORUM, "create_partitions"),
    Api.ALTER_CONFIGS: Route(Mode.QUORUM, "alter_configs"),
    Api.BROKER_HEARTBEAT: Route(Mode.INLINE, "broker_heartbeat"),
    Api.OFFSETS_FOR_LEADER_EPOCH: Route(Mode.INLINE, "offsets_for_leader_epoch"),
    Api.ELECT_LEADERS: Route(Mode.QUORUM, "elect_leaders"),
    Api.ALTER_PARTITION_REASSIGNMENTS: Route(Mode.QUORUM, "alter_partition_reassignments"),
    Api.LIST_PARTITION_REASSIGNMENTS: Route(Mode.INLINE, "list_partition_reassignments"),
    Api.UNREGISTER_BROKER: Route(Mode.QUORUM, "unregister_broker"),
    Api.DESCRIBE_LOG_DIRS: Route(Mode.INLINE, "describe_log_dirs"),
    Api.INIT_PRODUCER_ID: Route(Mode.AWAITS, "init_producer_id"),
    **{api: Route(Mode.AWAITS, "group_api") for api in sorted(GROUP_APIS)},
}

#: {api: (min version, max version)} of every API this node serves.
SERVED_APIS: dict[Api, tuple[int, int]] = {api: API_VERSIONS[api] for api in ROUTES}
