"""The metadata state machine: ``apply(state, record, term) -> (state, result)``.

Pure and deterministic: every replica that applies the same records in the same
order reaches the same state (and the same snapshot bytes). No I/O, no clocks, no
randomness; the Raft term at apply time is an input, so compare-and-set records
from a deposed controller are rejected here rather than trusted.

Invariants (asserted after every change, see :func:`check_invariants`):

* leader is -1 (offline) or a member of the ISR; ISR is a non-empty subset of replicas;
* leader_epoch grows on every leader change, partition_epoch on every change;
* a fenced broker leads nothing while another ISR member of that partition is unfenced;
* a deleted topic leaves nothing behind.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import cbor2

from raftlog import acl as A
from raftlog import scram as S
from raftlog.errors import ErrorCode

from . import records as R

SNAPSHOT_VERSION = 1
PRODUCER_ID_BLOCK_MAX = 1_000_000
#: Topic config: elect an out-of-sync replica when no ISR member is alive (may lose
#: acknowledged data; off by default, as in Kafka).
UNCLEAN_LEADER_ELECTION = "unclean.leader.election.enable"


@dataclass(frozen=True, slots=True)
class Broker:
    broker_id: int
    incarnation_id: str
    listeners: tuple
    rack: str | None = None
    fenced: bool = True
    roles: tuple = ("broker", "controller")

    @property
    def serves_partitions(self) -> bool:
        return "broker" in self.roles


@dataclass(frozen=True, slots=True)
class Partition:
    partition: int
    replicas: tuple
    isr: tuple
    leader: int
    leader_epoch: int = 0
    partition_epoch: int = 0
    #: A reassignment in progress: the replicas it ends with (() when none), the
    #: replicas it started from, and the leader's throttle for the replicas being
    #: added (bytes/s, 0 = none). ``replicas`` is target + (previous - target).
    target: tuple = ()
    previous: tuple = ()
    throttle: int = 0

    @property
    def adding(self) -> tuple:
        return tuple(r for r in self.target if r not in self.previous)


@dataclass(frozen=True, slots=True)
class Topic:
    name: str
    topic_id: str
    partitions: tuple  # of Partition, index = partition id
    configs: tuple = ()  # sorted ((key, value), ...)

    @property
    def config(self) -> dict:
        return dict(self.configs)


@dataclass(frozen=True, slots=True)
class MetadataState:
    """Immutable; every apply returns a new one (dicts are never mutated in place)."""

    brokers: dict = field(default_factory=dict)  # id -> Broker
    topics: dict = field(default_factory=dict)  # name -> Topic
    next_producer_id: int = 0
    last_term: int = 0
    #: SCRAM credentials: {(user, mechanism): raftlog.scram.ScramCredential}
    scram: dict = field(default_factory=dict)
    #: ACL bindings (raftlog.acl.AclBinding), sorted by their tuple form, no duplicates
    acls: tuple = ()
    #: the cluster's secret (R.SetClusterSecret); b"" until one is written
    cluster_secret: bytes = b""


@dataclass(frozen=True, slots=True)
class Result:
    """What applying a record did. A rejected record says why (``error``) and which
    error code a request that proposed it answers with (``code``, an ErrorCode)."""

    ok: bool
    error: str = ""
    value: object = None
    code: int = 0


OK = Result(True)


def _fail(msg: str, code: ErrorCode = ErrorCode.INVALID_REQUEST) -> Result:
    return Result(False, msg, None, int(code))


def apply(state: MetadataState, record, *, term: int) -> tuple[MetadataState, Result]:
    """Apply one committed record. A rejected record changes nothing but last_term."""
    handler = _HANDLERS.get(type(record))
    if handler is None:
        return state, _fail(f"unknown record {type(record).__name__}")
    if isinstance(record, R.PartitionChange | R.CompleteReassignment) and term < state.last_term:
        return state, _fail(
            f"proposed in term {term} after term {state.last_term} wrote: stale controller",
            ErrorCode.NOT_CONTROLLER)
    if term > state.last_term:
        state = replace(state, last_term=term)
    new, result = handler(state, record, term)
    if result.ok and new is not state:
        check_invariants(new, state)
    return (new if result.ok else state), result


# --------------------------------------------------------------------------- brokers


def _register(s: MetadataState, r: R.RegisterBroker, term: int):
    if r.broker_id < 0 or not r.incarnation_id:
        return s, _fail("broker id must be >= 0 and incarnation id non-empty")
    if not r.roles or not set(r.roles) <= {"broker", "controller"}:
        return s, _fail(f"roles must be broker and/or controller, not {r.roles!r}")
    old = s.brokers.get(r.broker_id)
    brokers = dict(s.brokers)
    brokers[r.broker_id] = Broker(
        r.broker_id, r.incarnation_id, tuple(map(tuple, r.listeners)), r.rack, True,
        tuple(sorted(r.roles)),
    )
    s = replace(s, brokers=brokers)
    if old is not None and not old.fenced:
        s = _move_leadership_away(s, r.broker_id)  # a new incarnation starts fenced
    return s, OK


def _registered(s: MetadataState, broker_id: int, incarnation_id: str):
    """(broker, None) or (None, failure) for a record naming a broker incarnation."""
    b = s.brokers.get(broker_id)
    if b is None:
        return None, _fail(f"broker {broker_id} is not registered")
    if incarnation_id and incarnation_id != b.incarnation_id:
        return None, _fail(f"broker {broker_id} incarnation {incarnation_id} is stale")
    return b, None


def _set_fenced(s: MetadataState, b: Broker, fenced: bool) -> MetadataState:
    brokers = dict(s.brokers)
    brokers[b.broker_id] = replace(b, fenced=fenced)
    return replace(s, brokers=brokers)


def _fence(s: MetadataState, r: R.FenceBroker, term: int):
    b, failure = _registered(s, r.broker_id, r.incarnation_id)
    if failure:
        return s, failure
    return _move_leadership_away(_set_fenced(s, b, True), r.broker_id), OK


def _unfence(s: MetadataState, r: R.UnfenceBroker, term: int):
    b, failure = _registered(s, r.broker_id, r.incarnation_id)
    if failure:
        return s, failure
    return _elect_offline(_set_fenced(s, b, False)), OK


def _unregister(s: MetadataState, r: R.UnregisterBroker, term: int):
    if r.broker_id not in s.brokers:
        return s, _fail(f"broker {r.broker_id} is not registered")
    s, _ = _fence(s, R.FenceBroker(r.broker_id), term)
    brokers = dict(s.brokers)
    del brokers[r.broker_id]
    return replace(s, brokers=brokers), OK


def _alive(s: MetadataState, broker_id: int) -> bool:
    b = s.brokers.get(broker_id)
    return b is not None and not b.fenced


def _move_leadership_away(s: MetadataState, broker_id: int) -> MetadataState:
    """Drop a fenced broker from ISRs (never emptying one) and re-elect its partitions."""
    topics = dict(s.topics)
    for name, t in s.topics.items():
        parts = list(t.partitions)
        changed = False
        for i, p in enumerate(parts):
            if broker_id not in p.isr:
                continue
            isr = tuple(x for x in p.isr if x != broker_id) or p.isr
            leader = p.leader
            if leader == broker_id or leader not in isr:
                leader, isr = _elect(s, t, p.replicas, isr)
            parts[i] = _changed(p, leader, isr)
            changed = True
        if changed:
            topics[name] = replace(t, partitions=tuple(parts))
    return replace(s, topics=topics)


def _elect_offline(s: MetadataState) -> MetadataState:
    """Give offline partitions (leader -1) a leader from their ISR if one is alive."""
    topics = dict(s.topics)
    for name, t in s.topics.items():
        parts = list(t.partitions)
        changed = False
        for i, p in enumerate(parts):
            if p.leader >= 0:
                continue
            leader, isr = _elect(s, t, p.replicas, p.isr)
            if leader >= 0:
                parts[i] = _changed(p, leader, isr)
                changed = True
        if changed:
            topics[name] = replace(t, partitions=tuple(parts))
    return replace(s, topics=topics)


def _unclean_allowed(t: Topic) -> bool:
    return t.config.get(UNCLEAN_LEADER_ELECTION, "false").lower() == "true"


def _elect(s: MetadataState, t: Topic, replicas: tuple, isr: tuple) -> tuple[int, tuple]:
    """(leader, isr): the first live ISR member; else, if the topic allows unclean
    election, the first live replica as the only ISR member; else (-1, isr)."""
    leader = next((x for x in isr if _alive(s, x)), -1)
    if leader == -1 and _unclean_allowed(t):
        leader = next((x for x in replicas if _alive(s, x)), -1)
        if leader >= 0:
            return leader, (leader,)
    return leader, isr


def _changed(p: Partition, leader: int, isr: tuple) -> Partition:
    return replace(
        p,
        leader=leader,
        isr=isr,
        leader_epoch=p.leader_epoch + (1 if leader != p.leader else 0),
        partition_epoch=p.partition_epoch + 1,
    )


# --------------------------------------------------------------------------- topics


def _create_topic(s: MetadataState, r: R.CreateTopic, term: int):
    if r.name in s.topics:
        return s, _fail(f"topic {r.name!r} already exists", ErrorCode.TOPIC_ALREADY_EXISTS)
    if not r.assignments:
        return s, _fail("a topic needs at least one partition", ErrorCode.INVALID_PARTITIONS)
    parts = []
    for i, replicas in enumerate(r.assignments):
        replicas = tuple(replicas)
        if not replicas or len(set(replicas)) != len(replicas):
            return s, _fail(f"partition {i}: replicas {replicas} must be non-empty and distinct")
        if any(b not in s.brokers for b in replicas):
            return s, _fail(f"partition {i}: replicas {replicas} name an unregistered broker")
        leader = next((b for b in replicas if _alive(s, b)), -1)
        parts.append(Partition(i, replicas, replicas, leader))
    topics = dict(s.topics)
    topics[r.name] = Topic(r.name, r.topic_id, tuple(parts), tuple(sorted(map(tuple, r.configs))))
    return replace(s, topics=topics), OK


def _create_partitions(s: MetadataState, r: R.CreatePartitions, term: int):
    t = s.topics.get(r.topic)
    if t is None:
        return s, _fail(f"topic {r.topic!r} does not exist", ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
    if len(t.partitions) != r.expected_count:
        return s, _fail(f"topic {r.topic!r} has {len(t.partitions)} partitions, "
                        f"not the expected {r.expected_count}", ErrorCode.INVALID_PARTITIONS)
    if not r.assignments:
        return s, _fail("no partitions to add", ErrorCode.INVALID_PARTITIONS)
    parts = list(t.partitions)
    for replicas in r.assignments:
        replicas = tuple(replicas)
        i = len(parts)
        if not replicas or len(set(replicas)) != len(replicas):
            return s, _fail(f"partition {i}: replicas {replicas} must be non-empty and distinct")
        if any(b not in s.brokers for b in replicas):
            return s, _fail(f"partition {i}: replicas {replicas} name an unregistered broker")
        leader = next((b for b in replicas if _alive(s, b)), -1)
        parts.append(Partition(i, replicas, replicas, leader))
    topics = dict(s.topics)
    topics[r.topic] = replace(t, partitions=tuple(parts))
    return replace(s, topics=topics), OK


def _delete_topic(s: MetadataState, r: R.DeleteTopic, term: int):
    if r.name not in s.topics:
        return s, _fail(f"topic {r.name!r} does not exist", ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
    topics = dict(s.topics)
    del topics[r.name]
    return replace(s, topics=topics), OK


def _config_change(s: MetadataState, r: R.ConfigChange, term: int):
    t = s.topics.get(r.topic)
    if t is None:
        return s, _fail(f"topic {r.topic!r} does not exist", ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
    cfg = dict(t.configs)
    if r.value is None:
        cfg.pop(r.key, None)
    else:
        cfg[r.key] = r.value
    topics = dict(s.topics)
    topics[r.topic] = replace(t, configs=tuple(sorted(cfg.items())))
    return _elect_offline(replace(s, topics=topics)), OK  # unclean election may now apply


def _checked_partition(s: MetadataState, r, term: int):
    """(topic, partition, None) for a controller's compare-and-set record ``r`` (its
    term current, its partition known, its partition epoch the expected one), else
    (None, None, the failure)."""
    if r.controller_epoch != term:
        return None, None, _fail(
            f"proposed in term {r.controller_epoch}, applied in term {term}: stale controller")
    t = s.topics.get(r.topic)
    if t is None or not 0 <= r.partition < len(t.partitions):
        return None, None, _fail(f"unknown partition {r.topic}-{r.partition}",
                                 ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
    p = t.partitions[r.partition]
    if p.partition_epoch != r.expected_partition_epoch:
        return None, None, _fail(
            f"partition epoch is {p.partition_epoch}, not the expected {r.expected_partition_epoch}")
    return t, p, None


def _partition_change(s: MetadataState, r: R.PartitionChange, term: int):
    t, p, failed = _checked_partition(s, r, term)
    if failed:
        return s, failed
    isr = tuple(r.isr)
    if not isr or not set(isr) <= set(p.replicas) or len(set(isr)) != len(isr):
        return s, _fail(f"ISR {isr} must be a non-empty subset of replicas {p.replicas}")
    if any(not _alive(s, b) for b in set(isr) - set(p.isr)):
        return s, _fail(f"ISR {isr} adds a fenced broker (KIP-841): only live brokers may join")
    if r.leader != -1 and (r.leader not in isr or not _alive(s, r.leader)):
        return s, _fail(f"leader {r.leader} must be an unfenced member of the ISR {isr}")
    if r.leader == -1 and any(_alive(s, b) for b in isr):
        return s, _fail("cannot take a partition offline while an ISR member is alive")
    if r.leader == -1 and _unclean_allowed(t) and any(_alive(s, b) for b in p.replicas):
        return s, _fail(
            "cannot take a partition offline while unclean election can elect a replica"
        )
    parts = list(t.partitions)
    parts[r.partition] = _changed(p, r.leader, isr)
    topics = dict(s.topics)
    topics[r.topic] = replace(t, partitions=tuple(parts))
    return replace(s, topics=topics), OK


def _set_partition(s: MetadataState, t: Topic, p: Partition) -> MetadataState:
    parts = list(t.partitions)
    parts[p.partition] = p
    topics = dict(s.topics)
    topics[t.name] = replace(t, partitions=tuple(parts))
    return replace(s, topics=topics)


def _reassign(s: MetadataState, r: R.ReassignPartition, term: int):
    t = s.topics.get(r.topic)
    if t is None or not 0 <= r.partition < len(t.partitions):
        return s, _fail(f"unknown partition {r.topic}-{r.partition}",
                        ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
    p = t.partitions[r.partition]
    if r.throttle < 0:
        return s, _fail(f"throttle must be 0 (none) or positive bytes/s, not {r.throttle}")
    if not r.target:  # cancel
        if not p.target:
            return s, _fail(f"{r.topic}-{r.partition} has no reassignment in progress",
                            ErrorCode.NO_REASSIGNMENT_IN_PROGRESS)
        isr = tuple(b for b in p.isr if b in p.previous)
        if not isr:
            return s, _fail(f"cannot cancel: no replica of {p.previous} is in sync "
                            f"(ISR {p.isr})")
        leader = p.leader if p.leader in isr else next(
            (b for b in isr if _alive(s, b)), -1)
        back = replace(_changed(p, leader, isr), replicas=p.previous, target=(), previous=(),
                       throttle=0)
        return _set_partition(s, t, back), OK
    target = tuple(r.target)
    if len(set(target)) != len(target):
        return s, _fail(f"target replicas {target} name a broker twice")
    for b in target:
        broker = s.brokers.get(b)
        if broker is None or not broker.serves_partitions:
            return s, _fail(f"target replica {b} is not a registered broker",
                            ErrorCode.INVALID_REPLICATION_FACTOR)
    if p.target:
        return s, _fail(f"{r.topic}-{r.partition} is being reassigned to {p.target}: "
                        "cancel that first", ErrorCode.REASSIGNMENT_IN_PROGRESS)
    if target == p.replicas:
        return s, OK  # nothing to move
    replicas = target + tuple(b for b in p.replicas if b not in target)
    moving = replace(p, replicas=replicas, target=target, previous=p.replicas,
                     throttle=r.throttle, partition_epoch=p.partition_epoch + 1)
    return _set_partition(s, t, moving), OK


def _complete_reassignment(s: MetadataState, r: R.CompleteReassignment, term: int):
    t, p, failed = _checked_partition(s, r, term)
    if failed:
        return s, failed
    if not p.target:
        return s, _fail(f"{r.topic}-{r.partition} has no reassignment in progress",
                        ErrorCode.NO_REASSIGNMENT_IN_PROGRESS)
    if not set(p.target) <= set(p.isr):
        return s, _fail(f"target replicas {p.target} are not all in sync (ISR {p.isr})")
    isr = tuple(b for b in p.isr if b in p.target)
    leader = p.leader if p.leader in isr else next((b for b in isr if _alive(s, b)), -1)
    done = replace(_changed(p, leader, isr), replicas=p.target, target=(), previous=(),
                   throttle=0)
    return _set_partition(s, t, done), OK


def _allocate_producer_ids(s: MetadataState, r: R.AllocateProducerIds, term: int):
    if not 1 <= r.count <= PRODUCER_ID_BLOCK_MAX:
        return s, _fail(f"producer id block size must be 1..{PRODUCER_ID_BLOCK_MAX}")
    first = s.next_producer_id
    if r.first_id >= 0 and r.first_id != first:
        return s, _fail(f"producer id block {r.first_id} is stale: the next free id is {first}")
    return replace(s, next_producer_id=first + r.count), Result(True, value=first)


# --------------------------------------------------------------------------- security


def _upsert_scram(s: MetadataState, r: R.UpsertScramCredential, term: int):
    if not r.user or len(r.user) > S.MAX_USERNAME_CHARS:
        return s, _fail(f"user name must have 1..{S.MAX_USERNAME_CHARS} characters")
    hash_name = S.SCRAM_MECHANISMS.get(r.mechanism)
    if hash_name is None:
        return s, _fail(f"unknown SCRAM mechanism {r.mechanism!r}",
                        ErrorCode.UNSUPPORTED_SASL_MECHANISM)
    if not S.MIN_ITERATIONS <= r.iterations <= S.MAX_ITERATIONS:
        return s, _fail(f"iteration count {r.iterations} is outside "
                        f"{S.MIN_ITERATIONS}..{S.MAX_ITERATIONS}")
    size = {"sha256": 32, "sha512": 64}[hash_name]
    if not 8 <= len(r.salt) <= 256 or len(r.stored_key) != size or len(r.server_key) != size:
        return s, _fail(f"{r.mechanism} credential needs a salt of 8..256 bytes and "
                        f"{size}-byte keys")
    scram = dict(s.scram)
    scram[(r.user, r.mechanism)] = S.ScramCredential(r.mechanism, r.salt, r.iterations,
                                                     r.stored_key, r.server_key)
    return replace(s, scram=scram), OK


def _delete_scram(s: MetadataState, r: R.DeleteScramCredential, term: int):
    if (r.user, r.mechanism) not in s.scram:
        return s, _fail(f"user {r.user!r} has no {r.mechanism} credential",
                        ErrorCode.RESOURCE_NOT_FOUND)
    scram = dict(s.scram)
    del scram[(r.user, r.mechanism)]
    return replace(s, scram=scram), OK


def _bindings(raw) -> list:
    """Validated AclBindings of a record's six-string tuples (raises AclError)."""
    return [A.from_tuple(b) for b in raw]


def _create_acls(s: MetadataState, r: R.CreateAcls, term: int):
    try:
        new = _bindings(r.bindings)
    except A.AclError as e:
        return s, _fail(str(e))
    acls = sorted(set(s.acls) | set(new), key=A.AclBinding.as_tuple)
    return replace(s, acls=tuple(acls)), Result(True, value=len(set(new) - set(s.acls)))


def _delete_acls(s: MetadataState, r: R.DeleteAcls, term: int):
    try:
        gone = set(_bindings(r.bindings))
    except A.AclError as e:
        return s, _fail(str(e))
    kept = tuple(b for b in s.acls if b not in gone)
    return replace(s, acls=kept), Result(True, value=len(s.acls) - len(kept))


#: Length of the cluster secret, bytes.
CLUSTER_SECRET_BYTES_MIN, CLUSTER_SECRET_BYTES_MAX = 16, 64


def _set_cluster_secret(s: MetadataState, r: R.SetClusterSecret, term: int):
    if not CLUSTER_SECRET_BYTES_MIN <= len(r.secret) <= CLUSTER_SECRET_BYTES_MAX:
        return s, _fail(f"cluster secret must have {CLUSTER_SECRET_BYTES_MIN}.."
                        f"{CLUSTER_SECRET_BYTES_MAX} bytes")
    if s.cluster_secret:  # written once: the first one proposed wins on every node
        return s, OK
    return replace(s, cluster_secret=r.secret), OK


def _noop(s: MetadataState, r: R.NoOp, term: int):
    return s, OK


_HANDLERS = {
    R.RegisterBroker: _register,
    R.FenceBroker: _fence,
    R.UnfenceBroker: _unfence,
    R.UnregisterBroker: _unregister,
    R.CreateTopic: _create_topic,
    R.CreatePartitions: _create_partitions,
    R.DeleteTopic: _delete_topic,
    R.ConfigChange: _config_change,
    R.PartitionChange: _partition_change,
    R.ReassignPartition: _reassign,
    R.CompleteReassignment: _complete_reassignment,
    R.AllocateProducerIds: _allocate_producer_ids,
    R.UpsertScramCredential: _upsert_scram,
    R.DeleteScramCredential: _delete_scram,
    R.CreateAcls: _create_acls,
    R.DeleteAcls: _delete_acls,
    R.SetClusterSecret: _set_cluster_secret,
    R.NoOp: _noop,
}


# --------------------------------------------------------------------------- invariants, snapshots


def check_invariants(s: MetadataState, before: MetadataState | None = None) -> None:
    """Assert the module's invariants. With ``before`` (the state ``s`` was derived
    from) and the same brokers, only topics whose object changed are checked: an
    unchanged topic under unchanged brokers was checked when it was made."""
    if before is None or before.brokers is not s.brokers:
        topics = s.topics.values()
    else:
        old = before.topics
        topics = [t for name, t in s.topics.items() if old.get(name) is not t]
    for t in topics:
        for i, p in enumerate(t.partitions):
            assert p.partition == i
            assert p.isr and set(p.isr) <= set(p.replicas), (t.name, p)
            if p.target:
                assert p.replicas == p.target + tuple(
                    b for b in p.previous if b not in p.target), (t.name, p)
            else:
                assert not p.previous and not p.throttle, (t.name, p)
            assert p.leader == -1 or p.leader in p.isr, (t.name, p)
            if p.leader >= 0 and not _alive(s, p.leader):
                assert not any(_alive(s, b) for b in p.isr if b != p.leader), (t.name, p)
            if p.leader == -1:
                assert not any(_alive(s, b) for b in p.isr), (t.name, p)
                if _unclean_allowed(t):
                    assert not any(_alive(s, b) for b in p.replicas), (t.name, p)


def snapshot(s: MetadataState) -> bytes:
    """Canonical CBOR bytes: equal states give equal bytes."""
    body = {
        "v": SNAPSHOT_VERSION,
        "last_term": s.last_term,
        "next_producer_id": s.next_producer_id,
        "brokers": [
            [b.broker_id, b.incarnation_id, [list(x) for x in b.listeners], b.rack, b.fenced,
             list(b.roles)]
            for _, b in sorted(s.brokers.items())
        ],
        "topics": [
            [
                t.name,
                t.topic_id,
                [list(c) for c in t.configs],
                [
                    [list(p.replicas), list(p.isr), p.leader, p.leader_epoch, p.partition_epoch]
                    + ([list(p.target), list(p.previous), p.throttle] if p.target else [])
                    for p in t.partitions
                ],
            ]
            for _, t in sorted(s.topics.items())
        ],
    }
    # (written only when present, so a snapshot without them stays what it was)
    if s.scram:
        body["scram"] = [[user, mech, c.salt, c.iterations, c.stored_key, c.server_key]
                         for (user, mech), c in sorted(s.scram.items())]
    if s.acls:
        body["acls"] = [list(b.as_tuple()) for b in s.acls]
    if s.cluster_secret:
        body["cluster_secret"] = s.cluster_secret
    return cbor2.dumps(body, canonical=True)


def restore(data: bytes) -> MetadataState:
    d = cbor2.loads(data)
    if d.get("v") != SNAPSHOT_VERSION:
        raise R.MetadataRecordError("unknown metadata snapshot version")
    # (a snapshot written before roles existed has five fields: both roles)
    brokers = {b[0]: Broker(b[0], b[1], tuple(map(tuple, b[2])), b[3], b[4],
                            tuple(b[5]) if len(b) > 5 else ("broker", "controller"))
               for b in d["brokers"]}
    topics = {}
    for name, tid, configs, parts in d["topics"]:
        topics[name] = Topic(
            name,
            tid,
            tuple(
                Partition(i, tuple(p[0]), tuple(p[1]), p[2], p[3], p[4],
                          *((tuple(p[5]), tuple(p[6]), p[7]) if len(p) > 5 else ()))
                for i, p in enumerate(parts)
            ),
            tuple(map(tuple, configs)),
        )
    scram = {(u, m): S.ScramCredential(m, salt, i, sk, srv)
             for u, m, salt, i, sk, srv in d.get("scram", ())}
    acls = tuple(sorted({A.from_tuple(b) for b in d.get("acls", ())}, key=A.AclBinding.as_tuple))
    secret = d.get("cluster_secret", b"")
    assert type(secret) is bytes, "cluster_secret in a snapshot must be bytes"
    s = MetadataState(brokers, topics, d["next_producer_id"], d["last_term"], scram, acls,
                      secret)
    check_invariants(s)
    return s
