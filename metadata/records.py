"""Metadata records: the entries of the replicated metadata log (KRaft-style).

Each record is a frozen dataclass. On the wire and on disk a record is a CBOR map
``{"v": 1, "t": "<TypeName>", ...fields}``; :func:`decode` accepts only known types
and well-typed fields, raising :class:`MetadataRecordError` otherwise, so the
replicated state machine never sees anything but these records.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import cbor2

from raftlog.errors import RaftlogError

RECORD_VERSION = 1


class MetadataRecordError(RaftlogError):
    """Bytes that are not a valid metadata record."""


@dataclass(frozen=True, slots=True)
class RegisterBroker:
    broker_id: int
    incarnation_id: str
    listeners: tuple  # ((host, port), ...)
    rack: str | None = None
    #: process.roles of the node: ("broker",), ("controller",) or both. A node
    #: without "broker" registers only so brokers find the controller's listener:
    #: it is never given replicas and clients are not told about it.
    roles: tuple = ("broker", "controller")


@dataclass(frozen=True, slots=True)
class ReassignPartition:
    """Start moving a partition to the replicas ``target`` (KIP-455): the replica set
    becomes target + the old replicas not in it; new replicas catch up as followers;
    the controller completes the move (:class:`CompleteReassignment`) once every
    target replica is in sync. ``target`` () cancels a reassignment in progress
    (back to the replicas it started from). ``throttle`` bytes/s bounds what the
    leader sends the replicas being added (0: unthrottled)."""

    topic: str
    partition: int
    target: tuple
    throttle: int = 0


@dataclass(frozen=True, slots=True)
class CompleteReassignment:
    """The controller's compare-and-set ending a reassignment whose target replicas
    are all in sync: replicas = target; replicas not in it leave the ISR (and the
    leadership, to the first in-sync target replica)."""

    topic: str
    partition: int
    expected_partition_epoch: int
    controller_epoch: int


@dataclass(frozen=True, slots=True)
class FenceBroker:
    broker_id: int
    incarnation_id: str = ""  # "" = whatever incarnation is registered


@dataclass(frozen=True, slots=True)
class UnfenceBroker:
    broker_id: int
    incarnation_id: str = ""


@dataclass(frozen=True, slots=True)
class UnregisterBroker:
    broker_id: int


@dataclass(frozen=True, slots=True)
class CreateTopic:
    name: str
    topic_id: str
    assignments: tuple  # one tuple of replica broker ids per partition
    configs: tuple = ()  # ((key, value), ...)


@dataclass(frozen=True, slots=True)
class CreatePartitions:
    """Grow a topic: ``assignments`` holds the replicas of each new partition, which
    are numbered from ``expected_count`` on (a compare-and-set on the current count)."""

    topic: str
    expected_count: int
    assignments: tuple


@dataclass(frozen=True, slots=True)
class DeleteTopic:
    name: str


@dataclass(frozen=True, slots=True)
class PartitionChange:
    """Compare-and-set of a partition's leader and ISR.

    Applied only if the partition's epoch still equals ``expected_partition_epoch``
    and the record was proposed in the Raft term it is applied in
    (``controller_epoch``): a deposed controller's decisions are rejected.
    """

    topic: str
    partition: int
    leader: int
    isr: tuple
    expected_partition_epoch: int
    controller_epoch: int


@dataclass(frozen=True, slots=True)
class ConfigChange:
    topic: str
    key: str
    value: str | None  # None deletes the key


@dataclass(frozen=True, slots=True)
class AllocateProducerIds:
    """Reserve ``count`` producer ids for a broker. ``first_id`` >= 0 makes it a
    compare-and-set (applied only if the next free id is still ``first_id``); -1
    takes whatever block is next. The applied result's ``value`` is the first id."""

    broker_id: int
    count: int
    first_id: int = -1


@dataclass(frozen=True, slots=True)
class UpsertScramCredential:
    """Set a user's SCRAM credential for one mechanism (salted, iterated keys: the
    password is never stored; see raftlog/scram.py)."""

    user: str
    mechanism: str
    salt: bytes
    iterations: int
    stored_key: bytes
    server_key: bytes


@dataclass(frozen=True, slots=True)
class DeleteScramCredential:
    user: str
    mechanism: str


@dataclass(frozen=True, slots=True)
class CreateAcls:
    """Add ACL bindings, each the six-string form of raftlog.acl.AclBinding.as_tuple().
    Bindings that exist already are left as they are."""

    bindings: tuple


@dataclass(frozen=True, slots=True)
class DeleteAcls:
    """Remove exactly these ACL bindings (six-string form); absent ones are ignored."""

    bindings: tuple


@dataclass(frozen=True, slots=True)
class SetClusterSecret:
    """The cluster's secret (random bytes, written once: a second one is ignored).
    Keys what every node must derive alike, such as the fake SCRAM salts of unknown
    users (node/security.py). Kept in the metadata log and snapshot, 0600 files."""

    secret: bytes


@dataclass(frozen=True, slots=True)
class NoOp:
    """Committed before a linearizable read."""

    request_id: str = ""


RECORD_TYPES = {
    cls.__name__: cls
    for cls in (
        RegisterBroker,
        FenceBroker,
        UnfenceBroker,
        UnregisterBroker,
        CreateTopic,
        CreatePartitions,
        DeleteTopic,
        PartitionChange,
        ReassignPartition,
        CompleteReassignment,
        ConfigChange,
        AllocateProducerIds,
        UpsertScramCredential,
        DeleteScramCredential,
        CreateAcls,
        DeleteAcls,
        SetClusterSecret,
        NoOp,
    )
}

# Field type checks: what each annotation accepts after CBOR decoding.
_CHECKS = {
    "int": lambda v: type(v) is int,
    "str": lambda v: type(v) is str,
    "str | None": lambda v: v is None or type(v) is str,
    "tuple": lambda v: isinstance(v, (list, tuple)),
    "bytes": lambda v: type(v) is bytes,
}


def _freeze(v):
    if isinstance(v, list | tuple):
        return tuple(_freeze(x) for x in v)
    return v


def encode(record) -> bytes:
    """Versioned, canonical CBOR bytes of a record."""
    name = type(record).__name__
    if RECORD_TYPES.get(name) is not type(record):
        raise TypeError(f"not a metadata record: {record!r}")
    body = {"v": RECORD_VERSION, "t": name}
    for f in dataclasses.fields(record):
        body[f.name] = getattr(record, f.name)
    return cbor2.dumps(body, canonical=True)


def decode(data: bytes):
    """Parse and validate a record. Raises MetadataRecordError on anything else."""
    try:
        body = cbor2.loads(data)
    except Exception as e:
        raise MetadataRecordError(f"metadata record is not CBOR: {e}") from None
    if not isinstance(body, dict) or body.get("v") != RECORD_VERSION:
        raise MetadataRecordError("metadata record has no known version")
    cls = RECORD_TYPES.get(body.get("t"))
    if cls is None:
        raise MetadataRecordError(f"unknown metadata record type {body.get('t')!r}")
    kwargs = {}
    for f in dataclasses.fields(cls):
        if f.name not in body:
            if f.default is dataclasses.MISSING:
                raise MetadataRecordError(f"{cls.__name__}: field {f.name!r} is missing")
            continue
        value = body[f.name]
        if not _CHECKS[f.type](value):
            raise MetadataRecordError(f"{cls.__name__}: field {f.name!r} has the wrong type")
        kwargs[f.name] = _freeze(value)
    extra = set(body) - {"v", "t"} - {f.name for f in dataclasses.fields(cls)}
    if extra:
        raise MetadataRecordError(f"{cls.__name__}: unknown fields {sorted(extra)}")
    return cls(**kwargs)
