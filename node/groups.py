"""Group coordinator: Kafka's classic consumer group protocol as a pure state machine.

No I/O and no clock: every operation takes ``now_ms``; the node calls :meth:`tick`
at :meth:`next_deadline_ms` (or periodically). Operations return an
:class:`Outcome` -- the caller's response, or ``None`` when the request waits (a
JoinGroup until the rebalance completes, a follower's SyncGroup until the leader
sends the assignment) -- plus *effects* to carry out, in order (etcd's Ready rule:
persist before replying):

* :class:`Persist` -- records to append to a ``__consumer_offsets`` partition
  (acks=all) before the replies that follow it are sent; after a successful append
  call :meth:`GroupCoordinator.persisted` (offset commits become visible then).
* :class:`Reply` -- complete a waiting request, identified by the opaque ``token``
  the caller passed in.

An error for the calling request raises :class:`ApiError` and leaves the state
unchanged (a heartbeat or commit still counts as liveness where Kafka does so).

States (Kafka's GroupMetadata)::

    Empty ──join──▶ PreparingRebalance ──all joined / rebalance timeout──▶ CompletingRebalance
      ▲                 ▲      │ (no member left)                              │ leader SyncGroup
      └─────────────────┼──────┘                                               ▼
                        └──── join of new / changed member, leave, expiry ── Stable
    any ──delete / unload──▶ Dead

Timeouts: a member that neither heartbeats nor waits in a join or sync for
``session_timeout_ms`` is removed. ``rebalance_timeout_ms`` (the consumer's
``max.poll.interval.ms``) bounds a rebalance: members that have not rejoined by then
are removed, which is how the coordinator enforces max.poll.interval (the client also
leaves by itself when its poll loop stalls, as Kafka's does). The leader has the same
time to send SyncGroup. A new group waits ``initial_rebalance_delay_ms`` for more
members (extended per new member, bounded by the rebalance timeout).

Generations fence zombies: SyncGroup, Heartbeat and OffsetCommit carry the
generation; a member of an older generation gets ILLEGAL_GENERATION, a removed one
UNKNOWN_MEMBER_ID, a replaced static member (KIP-345 ``group_instance_id``)
FENCED_INSTANCE_ID.

``__consumer_offsets`` records (key and value are CBOR; the topic is compacted, so
keys are canonical and one key per group or per group partition)::

    offset commit   key [1, group, topic, partition]   value {"v": 1, offset, metadata, commit_timestamp}
    group metadata  key [2, group]                     value {"v": 1, protocol_type, generation,
                                                             protocol, leader, state_timestamp, members}
    deletion        the key with a null value (tombstone)

A new coordinator replays a partition's records with :meth:`GroupCoordinator.replay`
between :meth:`begin_loading` and :meth:`finish_loading`.
"""

from __future__ import annotations

import enum
import uuid
import zlib
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import cbor2

from raftlog.errors import ApiError, ErrorCode, RaftlogError
from raftlog.protocol import (
    CommittedOffsetRow,
    GroupListing,
    GroupMemberRow,
    JoinMember,
    PartitionResult,
)

OFFSETS_TOPIC = "__consumer_offsets"
OFFSET_KEY_TYPE = 1
GROUP_KEY_TYPE = 2
VALUE_VERSION = 1


class CorruptGroupRecordError(RaftlogError):
    """A ``__consumer_offsets`` record that does not decode."""


class GroupState(enum.Enum):
    EMPTY = "Empty"
    PREPARING_REBALANCE = "PreparingRebalance"
    COMPLETING_REBALANCE = "CompletingRebalance"
    STABLE = "Stable"
    DEAD = "Dead"


_S = GroupState
#: Allowed transitions, as a table: new state -> states it may follow.
VALID_PREVIOUS = {
    _S.EMPTY: {_S.PREPARING_REBALANCE},
    _S.PREPARING_REBALANCE: {_S.EMPTY, _S.STABLE, _S.COMPLETING_REBALANCE},
    _S.COMPLETING_REBALANCE: {_S.PREPARING_REBALANCE},
    _S.STABLE: {_S.COMPLETING_REBALANCE},
    _S.DEAD: set(_S),
}


@dataclass(frozen=True, slots=True)
class GroupConfig:
    """Coordinator settings; Kafka's names: ``group.min.session.timeout.ms`` ..."""

    min_session_timeout_ms: int = 6_000
    max_session_timeout_ms: int = 1_800_000
    initial_rebalance_delay_ms: int = 3_000
    max_size: int = 10_000  # group.max.size
    offset_metadata_max_bytes: int = 4096
    offsets_retention_ms: int = 7 * 24 * 3600 * 1000
    offsets_partitions: int = 50  # offsets.topic.num.partitions


# --------------------------------------------------------------------------- effects


@dataclass(frozen=True, slots=True)
class Reply:
    """Answer the waiting request ``token``: ``response`` when ``error`` is NONE."""

    token: Any
    error: ErrorCode = ErrorCode.NONE
    response: dict | None = None
    message: str = ""


@dataclass(frozen=True, slots=True)
class Persist:
    """Append ``records`` ((key, value or None), ...) to ``__consumer_offsets``-``partition``."""

    partition: int
    records: tuple


@dataclass(frozen=True, slots=True)
class Outcome:
    response: dict | None = None  # None: wait for the Reply carrying your token
    effects: tuple = ()


# --------------------------------------------------------------------------- records


def offset_key(group: str, topic: str, partition: int) -> bytes:
    return cbor2.dumps([OFFSET_KEY_TYPE, group, topic, partition], canonical=True)


def group_key(group: str) -> bytes:
    return cbor2.dumps([GROUP_KEY_TYPE, group], canonical=True)


@dataclass(frozen=True, slots=True)
class CommittedOffset:
    offset: int
    metadata: str | None = None
    commit_timestamp_ms: int = -1
    #: the leader epoch of the last record consumed (KIP-320), -1 unknown
    leader_epoch: int = -1


def offset_value(c: CommittedOffset) -> bytes:
    v = {"v": VALUE_VERSION, "offset": c.offset, "metadata": c.metadata,
         "commit_timestamp": c.commit_timestamp_ms}
    if c.leader_epoch >= 0:  # (absent when unknown: older nodes read the same value)
        v["leader_epoch"] = c.leader_epoch
    return cbor2.dumps(v, canonical=True)


def decode_key(key: bytes) -> tuple:
    """``(1, group, topic, partition)`` or ``(2, group)``. Raises CorruptGroupRecordError."""
    try:
        k = cbor2.loads(key)
    except Exception as e:
        raise CorruptGroupRecordError(f"__consumer_offsets key is not CBOR: {e}") from None
    if isinstance(k, list) and len(k) == 4 and k[0] == OFFSET_KEY_TYPE and type(k[1]) is str \
            and type(k[2]) is str and type(k[3]) is int:
        return tuple(k)
    if isinstance(k, list) and len(k) == 2 and k[0] == GROUP_KEY_TYPE and type(k[1]) is str:
        return tuple(k)
    raise CorruptGroupRecordError(f"unknown __consumer_offsets key {k!r}")


def _load_value(value: bytes) -> dict:
    try:
        v = cbor2.loads(value)
    except Exception as e:
        raise CorruptGroupRecordError(f"__consumer_offsets value is not CBOR: {e}") from None
    if not isinstance(v, dict) or v.get("v") != VALUE_VERSION:
        raise CorruptGroupRecordError("__consumer_offsets value has no known version")
    return v


def decode_offset_value(value: bytes) -> CommittedOffset:
    v = _load_value(value)
    off, meta, ts = v.get("offset"), v.get("metadata"), v.get("commit_timestamp", -1)
    epoch = v.get("leader_epoch", -1)
    if type(off) is not int or not (meta is None or type(meta) is str) or type(ts) is not int \
            or type(epoch) is not int:
        raise CorruptGroupRecordError(f"bad offset commit value {v!r}")
    return CommittedOffset(off, meta, ts, epoch)


# --------------------------------------------------------------------------- model


@dataclass(slots=True)
class Member:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    session_timeout_ms: int
    rebalance_timeout_ms: int
    protocols: list  # [(name, metadata)], in preference order
    assignment: Any = None
    last_heartbeat_ms: int = 0
    join_token: Any = None  # not None: waiting in JoinGroup
    sync_token: Any = None  # not None: waiting in SyncGroup
    pending_sync: bool = False  # got its JoinGroup answer, has not synced yet

    def metadata_for(self, protocol: str | None):
        for name, meta in self.protocols:
            if name == protocol:
                return meta
        return None


@dataclass(slots=True)
class Group:
    group_id: str
    state: GroupState = GroupState.EMPTY
    generation: int = 0
    protocol_type: str | None = None
    protocol: str | None = None
    leader: str | None = None
    members: dict[str, Member] = field(default_factory=dict)
    static: dict[str, str] = field(default_factory=dict)  # instance id -> member id
    offsets: dict[tuple[str, int], CommittedOffset] = field(default_factory=dict)
    state_timestamp_ms: int = -1
    rebalance_deadline_ms: int | None = None
    initial_delay_deadline_ms: int | None = None
    initial_delay_limit_ms: int | None = None
    sync_deadline_ms: int | None = None

    def candidate_protocols(self) -> set[str]:
        sets = [{n for n, _ in m.protocols} for m in self.members.values()]
        return set.intersection(*sets) if sets else set()

    def select_protocol(self) -> str:
        """Each member votes for its most preferred protocol every member supports."""
        candidates = self.candidate_protocols()
        votes: dict[str, int] = {}
        for m in self.members.values():
            choice = next(n for n, _ in m.protocols if n in candidates)
            votes[choice] = votes.get(choice, 0) + 1
        return max(sorted(votes), key=lambda n: votes[n])


def group_value(g: Group) -> bytes:
    members = [
        [m.member_id, m.group_instance_id, m.client_id, m.client_host, m.session_timeout_ms,
         m.rebalance_timeout_ms, [[n, meta] for n, meta in m.protocols], m.assignment]
        for m in g.members.values()
    ]
    return cbor2.dumps(
        {"v": VALUE_VERSION, "protocol_type": g.protocol_type, "generation": g.generation,
         "protocol": g.protocol, "leader": g.leader, "state_timestamp": g.state_timestamp_ms,
         "members": members}
    )


def decode_group_value(group_id: str, value: bytes) -> Group:
    """A Group (state not set) from a group metadata value."""
    v = _load_value(value)
    try:
        g = Group(group_id, generation=_int(v["generation"]), protocol_type=v["protocol_type"],
                  protocol=v["protocol"], leader=v["leader"],
                  state_timestamp_ms=_int(v.get("state_timestamp", -1)))
        for mid, iid, cid, host, st, rt, protocols, assignment in v["members"]:
            g.members[mid] = Member(mid, iid, cid, host, _int(st), _int(rt),
                                    [(n, meta) for n, meta in protocols], assignment)
            if iid is not None:
                g.static[iid] = mid
    except (KeyError, TypeError, ValueError) as e:
        raise CorruptGroupRecordError(f"bad group metadata value for {group_id!r}: {e!r}") from None
    return g


def _int(v) -> int:
    if type(v) is not int:
        raise ValueError(f"{v!r} is not an integer")
    return v


def _new_member_id(client_id: str) -> str:
    return f"{client_id or 'member'}-{uuid.uuid4()}"


def partition_for(group_id: str, partitions: int) -> int:
    """The ``__consumer_offsets`` partition of a group (stable across processes)."""
    return zlib.crc32(group_id.encode()) % partitions


# --------------------------------------------------------------------------- coordinator


class GroupCoordinator:
    """The groups of the ``__consumer_offsets`` partitions this node leads."""

    def __init__(self, config: GroupConfig = GroupConfig(),
                 new_member_id: Callable[[str], str] = _new_member_id):
        self.config = config
        self._new_member_id = new_member_id
        self.groups: dict[str, Group] = {}
        #: owned partition -> True when loaded, False while loading
        self.partitions: dict[int, bool] = {}

    def partition_for(self, group_id: str) -> int:
        return partition_for(group_id, self.config.offsets_partitions)

    # ------------------------------------------------------------------ ownership

    def _check_owned(self, group_id: str) -> None:
        loaded = self.partitions.get(self.partition_for(group_id))
        if loaded is None:
            raise ApiError(ErrorCode.NOT_COORDINATOR, f"this node does not coordinate group {group_id!r}")
        if not loaded:
            raise ApiError(ErrorCode.COORDINATOR_LOAD_IN_PROGRESS, f"group {group_id!r} is loading")

    def begin_loading(self, partition: int) -> list:
        """Become coordinator of ``partition``: replay its records next."""
        effects = self.unload(partition)
        self.partitions[partition] = False
        return effects

    def replay(self, partition: int, key: bytes, value: bytes | None) -> None:
        """Apply one ``__consumer_offsets`` record while loading ``partition``.

        Raises:
            CorruptGroupRecordError: the record does not decode.
        """
        assert self.partitions.get(partition) is False, "replay only while loading"
        k = decode_key(key)
        g = self.groups.get(k[1])
        if k[0] == OFFSET_KEY_TYPE:
            if value is None:
                if g is not None:
                    g.offsets.pop((k[2], k[3]), None)
                return
            c = decode_offset_value(value)
            if g is None:
                g = self.groups[k[1]] = Group(k[1])
            g.offsets[(k[2], k[3])] = c
            return
        if value is None:
            if g is not None:
                self.groups[k[1]] = Group(k[1], offsets=g.offsets)
            return
        loaded = decode_group_value(k[1], value)
        if g is not None:
            loaded.offsets = g.offsets
        self.groups[k[1]] = loaded

    def finish_loading(self, partition: int, now_ms: int) -> None:
        """Loaded groups with members are Stable (members must heartbeat within their
        session timeout); the others are Empty."""
        for gid in [g for g in self.groups if self.partition_for(g) == partition]:
            g = self.groups[gid]
            if not g.members and not g.offsets and g.generation == 0:
                del self.groups[gid]
                continue
            g.state = GroupState.STABLE if g.members else GroupState.EMPTY
            for m in g.members.values():
                m.last_heartbeat_ms = now_ms
            if g.state_timestamp_ms < 0:
                g.state_timestamp_ms = max(
                    (c.commit_timestamp_ms for c in g.offsets.values()), default=now_ms)
        self.partitions[partition] = True

    def unload(self, partition: int) -> list:
        """Stop coordinating ``partition`` (lost its leadership): waiting requests get
        NOT_COORDINATOR, so clients look the coordinator up again."""
        effects = []
        self.partitions.pop(partition, None)
        for gid in [g for g in self.groups if self.partition_for(g) == partition]:
            g = self.groups.pop(gid)
            for m in g.members.values():
                effects += _fail_waiting(m, ErrorCode.NOT_COORDINATOR, "coordinator moved")
            g.state = GroupState.DEAD
        return effects

    # ------------------------------------------------------------------ join

    def join(self, group_id: str, member_id: str, *, token: Any, now_ms: int,
             protocols: Sequence[tuple[str, Any]], session_timeout_ms: int = 10_000,
             rebalance_timeout_ms: int = 300_000, group_instance_id: str | None = None,
             protocol_type: str = "consumer", client_id: str = "",
             client_host: str = "") -> Outcome:
        """JoinGroup. Usually waits: the answer comes as a Reply for ``token``."""
        assert token is not None
        self._check_owned(group_id)
        cfg = self.config
        if not group_id:
            raise ApiError(ErrorCode.INVALID_GROUP_ID, "group id must not be empty")
        if not cfg.min_session_timeout_ms <= session_timeout_ms <= cfg.max_session_timeout_ms:
            raise ApiError(
                ErrorCode.INVALID_SESSION_TIMEOUT,
                f"session timeout {session_timeout_ms} ms is outside "
                f"[{cfg.min_session_timeout_ms}, {cfg.max_session_timeout_ms}]",
            )
        protocols = [(n, meta) for n, meta in protocols]
        g = self.groups.get(group_id)
        if g is None and member_id:
            raise ApiError(ErrorCode.UNKNOWN_MEMBER_ID, f"group {group_id!r} has no member {member_id!r}")
        if g is not None and g.state is GroupState.DEAD:
            raise ApiError(ErrorCode.COORDINATOR_NOT_AVAILABLE, f"group {group_id!r} is being removed")
        if not protocols or (g is not None and g.members and not (
                protocol_type == g.protocol_type and g.candidate_protocols() & {n for n, _ in protocols})):
            raise ApiError(ErrorCode.INCONSISTENT_GROUP_PROTOCOL,
                           f"protocols {[n for n, _ in protocols]} of type {protocol_type!r} "
                           f"match none the group {group_id!r} uses")
        if g is None:
            g = self.groups[group_id] = Group(group_id, state_timestamp_ms=now_ms)
        spec = dict(protocols=protocols, session_timeout_ms=session_timeout_ms,
                    rebalance_timeout_ms=rebalance_timeout_ms)
        if not member_id:
            if group_instance_id is not None and group_instance_id in g.static:
                return self._replace_static(g, group_instance_id, token, now_ms, spec)
            if len(g.members) >= cfg.max_size:
                raise ApiError(ErrorCode.GROUP_MAX_SIZE_REACHED,
                               f"group {group_id!r} has reached group.max.size {cfg.max_size}")
            m = Member(self._new_member_id(client_id), group_instance_id, client_id,
                       client_host, last_heartbeat_ms=now_ms, **spec)
            if not g.members:
                g.protocol_type = protocol_type
            g.members[m.member_id] = m
            if group_instance_id is not None:
                g.static[group_instance_id] = m.member_id
            m.join_token = token
            return Outcome(None, tuple(self._member_changed(g, now_ms)))
        m = self._member(g, member_id, group_instance_id)
        return self._join_known(g, m, token, now_ms, spec)

    def _join_known(self, g: Group, m: Member, token, now_ms: int, spec: dict) -> Outcome:
        m.last_heartbeat_ms = now_ms
        same = spec["protocols"] == m.protocols
        if g.state is GroupState.COMPLETING_REBALANCE and same:
            return Outcome(self._join_response(g, m))  # a retry of the join it already got
        if g.state is GroupState.STABLE and same and m.member_id != g.leader:
            return Outcome(self._join_response(g, m))
        effects = []
        if m.join_token is not None:  # the client gave up on its earlier join
            effects.append(Reply(m.join_token, ErrorCode.REBALANCE_IN_PROGRESS, None,
                                 "superseded by a newer JoinGroup"))
        m.protocols = spec["protocols"]
        m.session_timeout_ms = spec["session_timeout_ms"]
        m.rebalance_timeout_ms = spec["rebalance_timeout_ms"]
        m.join_token = token
        effects += self._member_changed(g, now_ms)
        return Outcome(None, tuple(effects))

    def _replace_static(self, g: Group, instance_id: str, token, now_ms: int, spec: dict) -> Outcome:
        """KIP-345: a static member restarted with a new member id; the old one is fenced."""
        old = g.members.pop(g.static[instance_id])
        effects = _fail_waiting(old, ErrorCode.FENCED_INSTANCE_ID,
                                f"instance {instance_id!r} joined again with a new member id")
        m = Member(self._new_member_id(old.client_id), instance_id, old.client_id,
                   old.client_host, assignment=old.assignment, last_heartbeat_ms=now_ms, **spec)
        g.members[m.member_id] = m
        g.static[instance_id] = m.member_id
        if g.leader == old.member_id:
            g.leader = m.member_id
        if g.state is GroupState.STABLE and g.select_protocol() == g.protocol:
            # No rebalance: it gets its old assignment back in SyncGroup.
            effects.append(self._persist_group(g))
            return Outcome(self._join_response(g, m, with_members=False), tuple(effects))
        m.join_token = token
        effects += self._member_changed(g, now_ms)
        return Outcome(None, tuple(effects))

    def _member_changed(self, g: Group, now_ms: int) -> list:
        """A member joined, rejoined with new protocols, or left: rebalance."""
        effects = []
        if g.state in (GroupState.EMPTY, GroupState.STABLE, GroupState.COMPLETING_REBALANCE):
            effects += self._prepare_rebalance(g, now_ms)
        elif g.initial_delay_deadline_ms is not None:
            g.initial_delay_deadline_ms = min(now_ms + self.config.initial_rebalance_delay_ms,
                                              g.initial_delay_limit_ms)
        effects += self._try_complete_join(g, now_ms)
        return effects

    def _prepare_rebalance(self, g: Group, now_ms: int) -> list:
        effects = []
        if g.state is GroupState.COMPLETING_REBALANCE:
            for m in g.members.values():
                m.assignment = None
                m.pending_sync = False
                if m.sync_token is not None:
                    effects.append(Reply(m.sync_token, ErrorCode.REBALANCE_IN_PROGRESS, None,
                                         "the group is rebalancing again"))
                    m.sync_token = None
            g.sync_deadline_ms = None
        was_empty = g.state is GroupState.EMPTY
        _transition(g, GroupState.PREPARING_REBALANCE, now_ms)
        timeout = max((m.rebalance_timeout_ms for m in g.members.values()), default=0)
        g.rebalance_deadline_ms = now_ms + timeout
        if was_empty and self.config.initial_rebalance_delay_ms > 0:
            g.initial_delay_deadline_ms = now_ms + min(self.config.initial_rebalance_delay_ms, timeout)
            g.initial_delay_limit_ms = now_ms + timeout
        return effects

    def _try_complete_join(self, g: Group, now_ms: int) -> list:
        if g.state is not GroupState.PREPARING_REBALANCE:
            return []
        if g.initial_delay_deadline_ms is not None and now_ms < g.initial_delay_deadline_ms:
            return []
        everyone = all(m.join_token is not None for m in g.members.values())
        if not everyone and now_ms < g.rebalance_deadline_ms:
            return []
        return self._complete_join(g, now_ms)

    def _complete_join(self, g: Group, now_ms: int) -> list:
        g.initial_delay_deadline_ms = g.initial_delay_limit_ms = g.rebalance_deadline_ms = None
        for m in [m for m in g.members.values() if m.join_token is None]:
            self._drop(g, m)  # did not rejoin within the rebalance timeout
        g.generation += 1
        if not g.members:
            g.protocol = g.leader = None
            _transition(g, GroupState.EMPTY, now_ms)
            return [self._persist_group(g)]
        g.protocol = g.select_protocol()
        if g.leader not in g.members:
            g.leader = next(iter(g.members))
        _transition(g, GroupState.COMPLETING_REBALANCE, now_ms)
        g.sync_deadline_ms = now_ms + max(m.rebalance_timeout_ms for m in g.members.values())
        effects = []
        for m in g.members.values():
            effects.append(Reply(m.join_token, ErrorCode.NONE, self._join_response(g, m)))
            m.join_token = None
            m.pending_sync = True
            m.last_heartbeat_ms = now_ms
        return effects

    def _join_response(self, g: Group, m: Member, with_members: bool = True) -> dict:
        members = []
        if with_members and m.member_id == g.leader:
            members = [JoinMember(x.member_id, x.group_instance_id, x.metadata_for(g.protocol))
                       for x in g.members.values()]
        return {"member_id": m.member_id, "generation": g.generation,
                "protocol_type": g.protocol_type, "protocol": g.protocol,
                "leader": g.leader, "members": members}

    # ------------------------------------------------------------------ sync, heartbeat, leave

    def _member(self, g: Group, member_id: str, instance_id: str | None) -> Member:
        """The member, or ApiError UNKNOWN_MEMBER_ID / FENCED_INSTANCE_ID."""
        if instance_id is not None:
            known = g.static.get(instance_id)
            if known is not None and known != member_id:
                raise ApiError(ErrorCode.FENCED_INSTANCE_ID,
                               f"instance {instance_id!r} is now member {known!r}, not {member_id!r}")
        m = g.members.get(member_id)
        if m is None:
            raise ApiError(ErrorCode.UNKNOWN_MEMBER_ID,
                           f"group {g.group_id!r} has no member {member_id!r}")
        if instance_id is not None and m.group_instance_id != instance_id:
            raise ApiError(ErrorCode.FENCED_INSTANCE_ID,
                           f"member {member_id!r} is not instance {instance_id!r}")
        return m

    def _live_group(self, group_id: str) -> Group:
        self._check_owned(group_id)
        g = self.groups.get(group_id)
        if g is None:
            raise ApiError(ErrorCode.UNKNOWN_MEMBER_ID, f"group {group_id!r} has no members")
        if g.state is GroupState.DEAD:
            raise ApiError(ErrorCode.COORDINATOR_NOT_AVAILABLE, f"group {group_id!r} is being removed")
        return g

    def _current(self, g: Group, member_id: str, generation: int, instance_id) -> Member:
        m = self._member(g, member_id, instance_id)
        if generation != g.generation:
            raise ApiError(ErrorCode.ILLEGAL_GENERATION,
                           f"generation {generation} of group {g.group_id!r} is over; "
                           f"the current one is {g.generation}")
        return m

    def sync(self, group_id: str, member_id: str, generation: int, *, token: Any, now_ms: int,
             assignments: Mapping[str, Any] | None = None,
             group_instance_id: str | None = None) -> Outcome:
        """SyncGroup. The leader's assignments complete the rebalance; the others wait."""
        assert token is not None
        g = self._live_group(group_id)
        m = self._current(g, member_id, generation, group_instance_id)
        if g.state is GroupState.PREPARING_REBALANCE:
            raise ApiError(ErrorCode.REBALANCE_IN_PROGRESS, f"group {group_id!r} is rebalancing")
        m.last_heartbeat_ms = now_ms
        m.pending_sync = False
        if g.state is GroupState.STABLE:
            return Outcome(self._sync_response(g, m))
        effects = []
        if m.sync_token is not None:
            effects.append(Reply(m.sync_token, ErrorCode.REBALANCE_IN_PROGRESS, None,
                                 "superseded by a newer SyncGroup"))
        m.sync_token = token
        if member_id == g.leader:
            given = assignments or {}
            for x in g.members.values():
                x.assignment = given.get(x.member_id)
            _transition(g, GroupState.STABLE, now_ms)
            g.sync_deadline_ms = None
            effects.append(self._persist_group(g))
            for x in g.members.values():
                if x.sync_token is not None:
                    effects.append(Reply(x.sync_token, ErrorCode.NONE, self._sync_response(g, x)))
                    x.sync_token = None
        return Outcome(None, tuple(effects))

    def _sync_response(self, g: Group, m: Member) -> dict:
        return {"assignment": m.assignment, "protocol_type": g.protocol_type, "protocol": g.protocol}

    def heartbeat(self, group_id: str, member_id: str, generation: int, *, now_ms: int,
                  group_instance_id: str | None = None) -> Outcome:
        """Heartbeat. Raises REBALANCE_IN_PROGRESS (after counting the heartbeat) while
        the group rebalances: the member must rejoin."""
        g = self._live_group(group_id)
        m = self._current(g, member_id, generation, group_instance_id)
        m.last_heartbeat_ms = now_ms
        if g.state is GroupState.PREPARING_REBALANCE:
            raise ApiError(ErrorCode.REBALANCE_IN_PROGRESS, f"group {group_id!r} is rebalancing; rejoin")
        return Outcome({})

    def leave(self, group_id: str, member_id: str, *, now_ms: int,
              group_instance_id: str | None = None) -> Outcome:
        """LeaveGroup. A static member may be removed by instance id alone (member_id "")."""
        g = self._live_group(group_id)
        if not member_id and group_instance_id is not None:
            member_id = g.static.get(group_instance_id, "")
        m = self._member(g, member_id, group_instance_id)
        return Outcome({}, tuple(self._remove(g, m, now_ms, "left the group")))

    def _drop(self, g: Group, m: Member) -> None:
        del g.members[m.member_id]
        if m.group_instance_id is not None and g.static.get(m.group_instance_id) == m.member_id:
            del g.static[m.group_instance_id]
        if g.leader == m.member_id:
            g.leader = next(iter(g.members), None)

    def _remove(self, g: Group, m: Member, now_ms: int, why: str) -> list:
        return self._remove_all(g, [m], now_ms, why)

    def _remove_all(self, g: Group, members: list, now_ms: int, why: str) -> list:
        """Remove members at once, then rebalance once."""
        effects = []
        for m in members:
            effects += _fail_waiting(m, ErrorCode.UNKNOWN_MEMBER_ID, f"member {m.member_id} {why}")
            self._drop(g, m)
        return effects + self._member_changed(g, now_ms)

    # ------------------------------------------------------------------ time

    def tick(self, now_ms: int) -> list:
        """Expire sessions, end rebalances whose time is up. Returns effects."""
        effects = []
        for gid, g in list(self.groups.items()):
            if not self.partitions.get(self.partition_for(gid)):
                continue
            expired = [
                m for m in g.members.values()
                if m.join_token is None and m.sync_token is None
                and now_ms >= m.last_heartbeat_ms + m.session_timeout_ms
            ]
            if expired:
                effects += self._remove_all(g, expired, now_ms, "missed its session timeout")
            if g.state is GroupState.COMPLETING_REBALANCE and now_ms >= g.sync_deadline_ms:
                late = [m for m in g.members.values() if m.pending_sync]
                effects += self._remove_all(g, late, now_ms, "did not sync in time")
            effects += self._try_complete_join(g, now_ms)
        return effects

    def next_deadline_ms(self) -> int | None:
        """When :meth:`tick` next has something to do (None: nothing pending)."""
        times = []
        for g in self.groups.values():
            for m in g.members.values():
                if m.join_token is None and m.sync_token is None:
                    times.append(m.last_heartbeat_ms + m.session_timeout_ms)
            if g.state is GroupState.PREPARING_REBALANCE:
                times.append(g.rebalance_deadline_ms)
                if g.initial_delay_deadline_ms is not None:
                    times.append(g.initial_delay_deadline_ms)
            if g.state is GroupState.COMPLETING_REBALANCE:
                times.append(g.sync_deadline_ms)
        return min(times, default=None)

    # ------------------------------------------------------------------ offsets

    def commit_offsets(self, group_id: str, member_id: str, generation: int,
                       offsets: Iterable[tuple], *, now_ms: int,
                       group_instance_id: str | None = None,
                       transactional: bool = False) -> Outcome:
        """OffsetCommit: validate, then Persist the records; answer after the append
        succeeded (and call :meth:`persisted`). ``generation`` -1 with member "" is a
        commit from outside group management, allowed only while the group is Empty --
        but for a ``transactional`` one (TxnOffsetCommit v0-v2 carry no member or
        generation; Kafka's coordinator accepts them whatever the group's state).
        ``offsets``: (topic, partition, offset, metadata[, leader epoch]) each.

        Returns ``{"parts": [[topic, partition, error, message], ...]}``.
        """
        self._check_owned(group_id)
        if not group_id:
            raise ApiError(ErrorCode.INVALID_GROUP_ID, "group id must not be empty")
        g = self.groups.get(group_id)
        managed = generation >= 0 or bool(member_id) or group_instance_id is not None
        if g is None:
            if managed:
                raise ApiError(ErrorCode.ILLEGAL_GENERATION,
                               f"group {group_id!r} has no generation {generation}")
            g = self.groups[group_id] = Group(group_id, state_timestamp_ms=now_ms)
        elif g.state is GroupState.DEAD:
            raise ApiError(ErrorCode.COORDINATOR_NOT_AVAILABLE, f"group {group_id!r} is being removed")
        elif managed:
            m = self._current(g, member_id, generation, group_instance_id)
            if g.state is GroupState.COMPLETING_REBALANCE:
                raise ApiError(ErrorCode.REBALANCE_IN_PROGRESS,
                               f"group {group_id!r} is completing a rebalance; sync first")
            m.last_heartbeat_ms = now_ms
        elif g.state is not GroupState.EMPTY and not transactional:
            raise ApiError(ErrorCode.UNKNOWN_MEMBER_ID,
                           f"group {group_id!r} has members: commit with a member id and generation")
        parts, records = [], []
        limit = self.config.offset_metadata_max_bytes
        for o in offsets:
            topic, partition, offset, metadata = o[:4]
            epoch = o[4] if len(o) > 4 and o[4] is not None and o[4] >= 0 else -1
            if metadata is not None and len(metadata.encode()) > limit:
                parts.append(PartitionResult(topic, partition,
                                             int(ErrorCode.OFFSET_METADATA_TOO_LARGE),
                                             f"offset metadata is larger than {limit} bytes"))
                continue
            records.append((offset_key(group_id, topic, partition),
                            offset_value(CommittedOffset(offset, metadata, now_ms, epoch))))
            parts.append(PartitionResult(topic, partition, 0, ""))
        effects = (Persist(self.partition_for(group_id), tuple(records)),) if records else ()
        return Outcome({"parts": parts}, effects)

    def persisted(self, effect: Persist) -> None:
        """The records of ``effect`` are durable: offset commits (and tombstones) become
        what OffsetFetch returns. Group metadata is already in memory."""
        for key, value in effect.records:
            k = decode_key(key)
            if k[0] != OFFSET_KEY_TYPE:
                continue
            g = self.groups.get(k[1])
            if g is None or g.state is GroupState.DEAD:
                continue
            if value is None:
                g.offsets.pop((k[2], k[3]), None)
            else:
                g.offsets[(k[2], k[3])] = decode_offset_value(value)

    def fetch_offsets(self, group_id: str, parts: Sequence[tuple[str, int]] | None = None) -> list:
        """OffsetFetch: ``[[topic, partition, offset (-1: none), metadata], ...]``; all
        committed partitions when ``parts`` is None."""
        self._check_owned(group_id)
        g = self.groups.get(group_id)
        offsets = g.offsets if g is not None else {}
        if parts is None:
            parts = sorted(offsets)
        out = []
        for t, p in parts:
            c = offsets.get((t, p))
            out.append(CommittedOffsetRow(t, p, c.offset, c.metadata, c.leader_epoch) if c
                       else CommittedOffsetRow(t, p, -1, None))
        return out

    def delete_topic_offsets(self, topics: Iterable[str], now_ms: int, *,
                             partition: int | None = None) -> list:
        """Deleted topics: their committed offsets leave every loaded group (of
        ``partition`` only, when given) at once, as Kafka's ``onPartitionsDeleted``; an
        Empty group left without offsets is deleted with them. Returns Persist effects
        with the tombstones, one per ``__consumer_offsets`` partition."""
        gone = set(topics)
        by_partition: dict[int, list] = {}
        for gid, g in list(self.groups.items()):
            p = self.partition_for(gid)
            if partition is not None and p != partition:
                continue
            if not self.partitions.get(p) or g.state is GroupState.DEAD:
                continue  # not ours, or not loaded yet (the loader applies deletions after)
            keys = sorted(k for k in g.offsets if k[0] in gone)
            if not keys:
                continue
            for k in keys:
                del g.offsets[k]
            records = [(offset_key(gid, t, n), None) for t, n in keys]
            if g.state is GroupState.EMPTY and not g.offsets:
                records += self._delete(g, now_ms).records
            by_partition.setdefault(p, []).extend(records)
        return [Persist(n, tuple(recs)) for n, recs in sorted(by_partition.items())]

    def expire_offsets(self, now_ms: int) -> list:
        """Offsets of groups Empty for ``offsets_retention_ms`` expire with the group
        (Kafka's rule for groups without members). Returns Persist effects."""
        effects = []
        for gid, g in list(self.groups.items()):
            if (self.partitions.get(self.partition_for(gid)) and g.state is GroupState.EMPTY
                    and now_ms - g.state_timestamp_ms >= self.config.offsets_retention_ms):
                effects.append(self._delete(g, now_ms))
        return effects

    # ------------------------------------------------------------------ admin

    def list_groups(self) -> list:
        """``[[group, protocol_type, state], ...]`` of loaded partitions."""
        return [
            GroupListing(gid, g.protocol_type or "", g.state.value)
            for gid, g in sorted(self.groups.items())
            if self.partitions.get(self.partition_for(gid))
        ]

    def describe(self, group_id: str) -> dict:
        """DescribeGroups entry; an unknown group is reported as Dead (as Kafka)."""
        self._check_owned(group_id)
        g = self.groups.get(group_id) or Group(group_id, GroupState.DEAD)
        return {
            "group": group_id,
            "state": g.state.value,
            "protocol_type": g.protocol_type or "",
            "protocol": g.protocol or "",
            "generation": g.generation,
            "leader": g.leader,
            "members": [
                GroupMemberRow(m.member_id, m.group_instance_id, m.client_id, m.client_host,
                                  m.metadata_for(g.protocol), m.assignment)
                for m in g.members.values()
            ],
        }

    def delete_group(self, group_id: str, now_ms: int) -> Outcome:
        """DeleteGroups for one group: only an Empty one. Persist tombstones, then answer."""
        self._check_owned(group_id)
        g = self.groups.get(group_id)
        if g is None:
            raise ApiError(ErrorCode.GROUP_ID_NOT_FOUND, f"no group {group_id!r}")
        if g.state is not GroupState.EMPTY:
            raise ApiError(ErrorCode.NON_EMPTY_GROUP,
                           f"group {group_id!r} is {g.state.value} with {len(g.members)} member(s)")
        return Outcome({}, (self._delete(g, now_ms),))

    def delete_offsets(self, group_id: str, parts: Iterable[tuple[str, int]]) -> Outcome:
        """OffsetDelete (Kafka's rules): the group must exist; a partition of a topic
        its members are subscribed to is refused (GROUP_SUBSCRIBED_TO_TOPIC) unless the
        group is Empty; the others' committed offsets are tombstoned (a partition
        without one is answered as deleted too). Returns ``{"parts": [PartitionResult]}``."""
        self._check_owned(group_id)
        g = self.groups.get(group_id)
        if g is None or g.state is GroupState.DEAD:
            raise ApiError(ErrorCode.GROUP_ID_NOT_FOUND, f"no group {group_id!r}")
        subscribed = self._subscribed_topics(g)
        out, records = [], []
        for topic, partition in parts:
            if topic in subscribed:
                out.append(PartitionResult(topic, partition,
                                           int(ErrorCode.GROUP_SUBSCRIBED_TO_TOPIC),
                                           f"group {group_id!r} has members subscribed to "
                                           f"{topic!r}: stop them (or leave the group) first"))
                continue
            if (topic, partition) in g.offsets:
                records.append((offset_key(group_id, topic, partition), None))
            out.append(PartitionResult(topic, partition, 0, ""))
        effects = (Persist(self.partition_for(group_id), tuple(records)),) if records else ()
        return Outcome({"parts": out}, effects)

    @staticmethod
    def _subscribed_topics(g: Group) -> set:
        """Topics the members of ``g`` subscribe to (consumer groups; a group of another
        protocol with members counts as subscribed to everything it committed)."""
        if g.state is GroupState.EMPTY or not g.members:
            return set()
        topics: set = set()
        for m in g.members.values():
            sub = m.metadata_for(g.protocol) if g.protocol else (
                m.protocols[0][1] if m.protocols else None)
            if isinstance(sub, dict) and isinstance(sub.get("topics"), list):
                topics.update(t for t in sub["topics"] if isinstance(t, str))
            else:
                return {t for t, _ in g.offsets}
        return topics

    def _delete(self, g: Group, now_ms: int) -> Persist:
        records = [(offset_key(g.group_id, t, p), None) for t, p in sorted(g.offsets)]
        records.append((group_key(g.group_id), None))
        _transition(g, GroupState.DEAD, now_ms)
        del self.groups[g.group_id]
        return Persist(self.partition_for(g.group_id), tuple(records))

    def _persist_group(self, g: Group) -> Persist:
        return Persist(self.partition_for(g.group_id), ((group_key(g.group_id), group_value(g)),))


def _transition(g: Group, new: GroupState, now_ms: int) -> None:
    assert g.state in VALID_PREVIOUS[new], f"group {g.group_id}: {g.state} -> {new}"
    g.state = new
    g.state_timestamp_ms = now_ms


def _fail_waiting(m: Member, code: ErrorCode, message: str) -> list:
    effects = []
    for attr in ("join_token", "sync_token"):
        token = getattr(m, attr)
        if token is not None:
            effects.append(Reply(token, code, None, message))
            setattr(m, attr, None)
    return effects
