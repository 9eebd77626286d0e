"""Topic and partition metadata as the node sees it, and the rules for new topics.

:class:`TopicInfo` / :class:`PartitionInfo` are what handlers read. Every node --
a single node too, as the only voter of its own quorum -- derives them from the
replicated metadata state (node/quorum_store.py). A data dir of a single node from
before that kept them in ``__meta/topics.cbor``: node/local_metadata.py migrates it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from raftlog.config import LogConfig
from raftlog.errors import ApiError, ConfigError, ErrorCode

TOPIC_NAME_RE = re.compile(r"^[a-zA-Z0-9._-]{1,249}$")
MAX_PARTITIONS = 10_000


@dataclass(frozen=True, slots=True)
class PartitionInfo:
    partition: int
    leader: int
    leader_epoch: int
    replicas: tuple[int, ...]
    isr: tuple[int, ...]
    partition_epoch: int = 0
    #: replicas on fenced (or unregistered) brokers
    offline_replicas: tuple[int, ...] = ()
    #: a reassignment in progress: the replicas being added, and the leader's
    #: throttle for them (bytes/s, 0 = none)
    adding: tuple[int, ...] = ()
    throttle: int = 0


@dataclass(frozen=True, slots=True)
class TopicInfo:
    name: str
    topic_id: str
    config: dict = field(default_factory=dict)
    partitions: tuple[PartitionInfo, ...] = ()


def validate_topic_name(name: str) -> None:
    """Raise ApiError(INVALID_TOPIC) unless ``name`` is a legal topic name (as Kafka)."""
    if not isinstance(name, str) or not TOPIC_NAME_RE.match(name) or name in (".", ".."):
        raise ApiError(
            ErrorCode.INVALID_TOPIC,
            f"topic name {name!r} is invalid: use 1-249 characters of [a-zA-Z0-9._-]",
        )


def validate_topic_config(config: dict, defaults: dict | None = None) -> LogConfig:
    """The LogConfig of a topic, or ApiError(INVALID_CONFIG) naming the key."""
    merged = dict(defaults or {})
    merged.update({k: v for k, v in config.items() if v is not None})
    try:
        return LogConfig.from_dict(merged)
    except ConfigError as e:
        raise ApiError(ErrorCode.INVALID_CONFIG, str(e)) from None


def create_topic(store, config, events, name: str, partitions: int, replication_factor: int,
                 topic_config: dict, assignments=None) -> TopicInfo:
    """Check a new topic against the rules and propose it to the metadata ``store``
    (CreateTopics, and auto-creation by Metadata and Produce). Blocking: returns once
    the quorum committed it. ``config``: the NodeConfig.

    ``assignments``: each partition's replicas (manual placement, Kafka's
    CreateTopics ``assignments``); ``partitions`` and ``replication_factor`` are then
    theirs (INVALID_REPLICA_ASSIGNMENT when they are not as check_assignments wants).

    Raises:
        ApiError: an illegal name, partition count, replication factor or config, or
            the store's refusal (TOPIC_ALREADY_EXISTS, no quorum).
    """
    validate_topic_name(name)
    if assignments is not None:
        if not assignments:
            raise ApiError(ErrorCode.INVALID_REPLICA_ASSIGNMENT, "no partitions assigned")
        assignments = check_assignments(assignments, [b.node_id for b in store.brokers()],
                                        len(assignments))
        partitions, replication_factor = len(assignments), len(assignments[0])
    if not 1 <= partitions <= MAX_PARTITIONS:
        raise ApiError(ErrorCode.INVALID_PARTITIONS,
                       f"partitions must be 1..{MAX_PARTITIONS}, not {partitions}")
    brokers = len(store.brokers())
    # configured nodes still registering count: the quorum store waits for them
    expected = max(brokers, len(config.controller_quorum_voters or ()))
    if not 1 <= replication_factor <= max(expected, 1):
        raise ApiError(
            ErrorCode.INVALID_REPLICATION_FACTOR,
            f"replication factor {replication_factor} must be between 1 and the "
            f"{brokers} available broker(s)",
        )
    validate_topic_config(topic_config, config.log_defaults)
    info = store.create(name, partitions, topic_config, replication_factor, assignments)
    events.info("topic_created", topic=name, partitions=partitions)
    return info


def check_assignments(assignments, brokers, count: int, replication_factor: int | None = None,
                      what: str = "partition") -> tuple:
    """Manual replica assignments (one list of broker ids per partition) as a tuple of
    tuples, or ApiError(INVALID_REPLICA_ASSIGNMENT) naming what is wrong (Kafka's
    rules): ``count`` lists, each non-empty, distinct, of registered brokers
    (``brokers``: their ids) and all of one length (``replication_factor`` if given)."""
    def bad(msg):
        return ApiError(ErrorCode.INVALID_REPLICA_ASSIGNMENT, msg)

    rows = tuple(tuple(r) for r in assignments)
    if len(rows) != count:
        raise bad(f"{len(rows)} replica assignments given for {count} new {what}(s)")
    known = set(brokers)
    for i, replicas in enumerate(rows):
        if not replicas or len(set(replicas)) != len(replicas):
            raise bad(f"{what} {i}: replicas {list(replicas)} must be non-empty and distinct")
        unknown = [b for b in replicas if b not in known]
        if unknown:
            raise bad(f"{what} {i}: replicas {list(replicas)} name unknown broker(s) {unknown} "
                      f"(registered: {sorted(known)})")
    rf = replication_factor if replication_factor is not None else len(rows[0]) if rows else 0
    if any(len(r) != rf for r in rows):
        raise bad(f"every {what} needs {rf} replicas: {[list(r) for r in rows]}")
    return rows


#: IncrementalAlterConfigs operations (Kafka's AlterConfigOp.OpType, by name)
CONFIG_OPS = ("set", "delete", "append", "subtract")
#: topic configs whose values are comma-separated lists (APPEND/SUBTRACT apply)
LIST_CONFIGS = frozenset({"cleanup.policy"})


def config_changes(current: dict, effective: dict, config: dict, replace: bool = False,
                   ops=()) -> dict:
    """The changes ({key: value, or None to remove}) that turn a topic's own configs
    ``current`` into what an alter asks: ``config`` set (None removes), with
    ``replace`` every other key removed (Kafka's AlterConfigs), then ``ops``
    ([key, op, value], Kafka's IncrementalAlterConfigs; APPEND/SUBTRACT on a list
    config start from its ``effective`` value). ApiError(INVALID_CONFIG) for an
    unknown op or a list op on a config that is no list."""
    out = dict(config)
    if replace:
        out.update({k: None for k in current if k not in config})
    for key, op, value in ops:
        if op not in CONFIG_OPS:
            raise ApiError(ErrorCode.INVALID_CONFIG, f"config operation {op!r} on {key!r} is "
                           f"not one of {', '.join(CONFIG_OPS)}")
        if op == "set":
            out[key] = value
        elif op == "delete":
            out[key] = None
        else:
            if key not in LIST_CONFIGS:
                raise ApiError(ErrorCode.INVALID_CONFIG, f"{op} applies to list configs "
                               f"({', '.join(sorted(LIST_CONFIGS))}), not to {key!r}")
            now = out[key] if key in out else current.get(key, effective.get(key))
            items = [x.strip() for x in (now or "").split(",") if x.strip()]
            given = [x.strip() for x in (value or "").split(",") if x.strip()]
            if op == "append":
                items += [x for x in given if x not in items]
            else:
                items = [x for x in items if x not in given]
            out[key] = ",".join(items)
    return out


def legal_topic_name(name: str) -> bool:
    try:
        validate_topic_name(name)
        return True
    except ApiError:
        return False
