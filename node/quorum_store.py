"""Topics and brokers from the replicated metadata quorum: every node's metadata.

A node with ``controller.quorum.voters`` is a voter (or a learner) of its cluster's
quorum; a node without is the only voter of its own quorum (``NodeConfig.
metadata_voters``): one metadata path, the same records, state machine and controller
either way. Mutations propose records through the quorum and block until committed
(the server runs them in a worker thread); the node's partitions follow the committed
state through ``ReplicaManager.reconcile``, scheduled on the trio thread by the quorum's
commit callback (and run by the server when a metadata write returns).
"""

from __future__ import annotations

import os
import time
import uuid
from collections import Counter

from raftlog.errors import ApiError, ErrorCode
from raftlog.metadata import records as R
from raftlog.metadata.controller import (
    PlacementError,
    alter_partition,
    leader_counts,
    place_replicas,
    preferred_leader_changes,
)
from raftlog.metadata.errors import NotControllerError, QuorumTimeoutError
from raftlog.metadata.quorum import MetadataQuorum
from raftlog.metadata.state import OK
from raftlog.protocol import BrokerRow, PartitionResult, ReassignmentRow

from .config import NodeConfig
from .metrics import LockedHistogram
from .topics import PartitionInfo, TopicInfo

#: Pause between registration attempts (bounded by broker.registration.timeout.ms).
REGISTER_BACKOFF_S = 0.5
#: CreateTopics waits this long for configured nodes that are still registering
#: (a cluster just started) before refusing a replication factor above the live brokers.
BROKER_WAIT_S = 10.0
BROKER_WAIT_POLL_S = 0.05
PROPOSE_TIMEOUT_S = 5.0


def _topic_info(t, down: frozenset, brokers: dict) -> TopicInfo:
    return TopicInfo(
        t.name, t.topic_id, dict(t.configs),
        tuple(PartitionInfo(p.partition, p.leader, p.leader_epoch, p.replicas, p.isr,
                            p.partition_epoch,
                            tuple(r for r in p.replicas if r in down or r not in brokers),
                            p.adding, p.throttle)
              for p in t.partitions),
    )


def _check_raft_port(host: str, port: int) -> None:
    """Fail the start with a clear error when this voter's Raft port is taken:
    pysyncobj binds it in its own thread and retries forever without a word.

    Raises:
        OSError: naming the address and what to do.
    """
    from .sockio import listen

    listen(host, port, "Raft port of controller.quorum.voters").close()


class QuorumTopicStore:
    def __init__(self, config: NodeConfig, on_commit):
        self.config = config
        self.node_id = config.node_id
        self.incarnation_id = uuid.uuid4().hex
        if config.controller_quorum_voters and config.is_voter:
            _check_raft_port(*((config.raft_host, config.raft_port)
                               if config.raft_port is not None
                               else config.metadata_voters[config.node_id]))
        self.quorum = MetadataQuorum(
            config.node_id,
            config.metadata_voters,
            os.path.join(config.data_dir, "__raft"),
            password=config.raft_password,
            on_commit=on_commit,
            voter=config.is_voter,
            # a node alone: nobody joins its quorum, so it binds no Raft port
            listen=bool(config.controller_quorum_voters),
            bind=(None if config.raft_port is None else (config.raft_host, config.raft_port)),
        )
        #: (state, (fenced ids, registered ids), {name: TopicInfo}) -- see topics
        self._cache: tuple = (None, None, {}, None)
        self._bug_ack_before_commit = "bug-ack-before-commit" in config.test_flags
        #: seconds from proposing a metadata write here to its commit (metrics)
        self.commit_seconds = LockedHistogram()

    @property
    def single_voter(self) -> bool:
        """A quorum of this node alone: it elects itself at once and never waits for
        another node, so it registers before serving (node.py)."""
        return self.quorum.voter and len(self.quorum.voters) == 1

    # ------------------------------------------------------------------ reads

    @property
    def topics(self) -> dict[str, TopicInfo]:
        """{name: TopicInfo} of the applied state. Rebuilt per topic that changed
        (by identity), so a TopicInfo object stays the same while its topic does --
        what lets ``ReplicaManager.reconcile`` touch only changed topics."""
        return self._cached(self.quorum.state)[2]

    def _cached(self, state) -> tuple:
        """(state, brokers key, {name: TopicInfo}, leader counts) of ``state``, derived
        from the previous one for the topics whose object changed."""
        cached = self._cache  # one tuple: read and replaced whole (several threads read)
        before, before_brokers, cache, leads = cached
        if state is before:
            return cached
        down = frozenset(b.broker_id for b in state.brokers.values() if b.fenced)
        brokers = (down, frozenset(state.brokers))
        incremental = before is not None and brokers == before_brokers
        if not incremental:
            old_topics, leads = {}, leader_counts(state)
        else:
            old_topics, leads = before.topics, Counter(leads)
            for name, t in old_topics.items():
                if state.topics.get(name) is not t:
                    leads.subtract(p.leader for p in t.partitions)
        out = {}
        for name, t in state.topics.items():
            info = cache.get(name) if old_topics.get(name) is t else None
            if info is None:
                info = _topic_info(t, down, state.brokers)
                if incremental:
                    leads.update(p.leader for p in t.partitions)
            out[name] = info
        cached = self._cache = (state, brokers, out, leads)
        return cached

    def brokers(self) -> list:
        """The nodes that serve partitions (controller-only nodes register only so
        brokers can reach the controller: clients are not told about them)."""
        rows = []
        for b in sorted(self.quorum.state.brokers.values(), key=lambda b: b.broker_id):
            if not b.serves_partitions:
                continue
            host, port = b.listeners[0][:2] if b.listeners else ("", 0)
            rows.append(BrokerRow(b.broker_id, host, port, b.rack, b.fenced))
        return rows

    @property
    def controller_id(self) -> int:
        leader = self.quorum.leader_id
        return -1 if leader is None else leader

    # ------------------------------------------------------------------ writes (blocking)

    def propose(self, record) -> R:
        """One metadata record through the quorum (blocking); its Result.

        Raises:
            ApiError: NOT_CONTROLLER (no leader here to take it), REQUEST_TIMED_OUT.
        """
        if self._bug_ack_before_commit and isinstance(
                record, (R.CreateTopic, R.DeleteTopic, R.CreatePartitions)):
            # planted bug (safety harness): answer as if committed at once, whether or
            # not the record ever commits (a wait would let most writes commit first and
            # hide the bug from a short run)
            try:
                return self.quorum.propose(record, 0.0)
            except (NotControllerError, QuorumTimeoutError):
                return OK
        started = time.monotonic()
        try:
            result = self.quorum.propose(record, PROPOSE_TIMEOUT_S)
            self.commit_seconds.observe(time.monotonic() - started)
        except NotControllerError as e:
            raise ApiError(ErrorCode.NOT_CONTROLLER, str(e)) from None
        except QuorumTimeoutError as e:
            raise ApiError(ErrorCode.REQUEST_TIMED_OUT, str(e)) from None
        return result

    def advertised_listeners(self) -> tuple:
        """((host, port, listener name), ...), the inter-broker listener first: peers
        connect to the first; clients are told the one they came through."""
        lc = self.config.listener_config
        first = lc.advertised_by_name(lc.inter_broker)
        rest = [x for x in lc.advertised if x.name != lc.inter_broker]
        return tuple((x.host, x.port, x.name) for x in [first, *rest])

    def register(self) -> None:
        """Register this broker (new incarnation) and unfence it; retries while no
        quorum is available. Durable when it returns."""
        records = [R.RegisterBroker(self.node_id, self.incarnation_id, self.advertised_listeners(),
                                    rack=self.config.broker_rack,
                                    roles=self.config.process_roles),
                   R.UnfenceBroker(self.node_id, self.incarnation_id)]
        deadline = time.monotonic() + self.config.broker_registration_timeout_ms / 1000
        last = ""
        for record in records:
            while time.monotonic() < deadline:
                try:
                    if self.propose(record).ok:
                        break
                except ApiError as e:
                    last = e.message
                time.sleep(REGISTER_BACKOFF_S)
            else:
                voters = ",".join(f"{i}@{h}:{p}" for i, (h, p) in
                                  sorted(self.config.metadata_voters.items()))
                raise ApiError(
                    ErrorCode.REQUEST_TIMED_OUT,
                    f"could not register with the metadata quorum in "
                    f"{self.config.broker_registration_timeout_ms / 1000:g}s: no majority of the voters "
                    f"{voters} answered (are they running, reachable, and is raft.password the "
                    f"same on every node?); last error: {last or '-'}; "
                    f"{self.quorum.describe()}")

    def create(self, name: str, partitions: int, config: dict, replication_factor: int = 1,
               assignments=None) -> TopicInfo:
        """``assignments``: each partition's replicas as checked by
        topics.check_assignments (None: placed here)."""
        if name in self.topics:
            raise ApiError(ErrorCode.TOPIC_ALREADY_EXISTS, f"topic {name!r} already exists")
        if assignments is None:
            assignments = self._place(partitions, replication_factor)
        config = dict(config)
        if self.config.unclean_leader_election_enable:
            config.setdefault("unclean.leader.election.enable", "true")
        record = R.CreateTopic(name, uuid.uuid4().hex, assignments, tuple(sorted(config.items())))
        result = self.propose(record)
        if not result.ok:
            raise ApiError(ErrorCode(result.code), result.error)
        return self.topics.get(name)  # (None only under the planted bug-ack-before-commit)

    def delete(self, name: str) -> TopicInfo:
        info = self.topics.get(name)
        if info is None:
            raise ApiError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"topic {name!r} does not exist")
        result = self.propose(R.DeleteTopic(name))
        if not result.ok:
            raise ApiError(ErrorCode(result.code), result.error)
        return info

    def set_config(self, name: str, config: dict) -> TopicInfo:
        for key, value in sorted(config.items()):
            result = self.propose(R.ConfigChange(name, key, value))
            if not result.ok:
                raise ApiError(ErrorCode(result.code), result.error)
        return self.topics[name]

    def allocate_producer_ids(self, count: int) -> int:
        """Reserve a block of producer ids through the quorum (committed, so never
        handed out twice, even across controller failover). Returns the first."""
        result = self.propose(R.AllocateProducerIds(self.node_id, count))
        if not result.ok:
            raise ApiError(ErrorCode.COORDINATOR_NOT_AVAILABLE, result.error)
        return result.value

    def alter_isr(self, topic: str, partition: int, isr: tuple, expected_partition_epoch: int):
        """AlterPartition: this node, as leader, asks the controller to set the ISR.

        A compare-and-set on the partition epoch, checked again when the record is
        applied (the controller epoch too): a leader deposed meanwhile, or a change
        racing another, is rejected. Blocking; returns the applied Result."""
        state = self.quorum.state
        try:
            record = alter_partition(state, topic, partition, self.node_id, tuple(isr),
                                     expected_partition_epoch, self.quorum.term)
        except ValueError as e:
            raise ApiError(ErrorCode.NOT_LEADER_OR_FOLLOWER, str(e)) from None
        return self.propose(record)

    def committed_partition_epoch(self, topic: str, partition: int, timeout_s: float) -> int:
        """The partition's epoch after a linearizable read of the metadata (a NoOp
        committed: every write committed before this call is in it, and an older
        term's write not in the log now never commits). -1: no such partition.
        Blocking. Raises ApiError as :meth:`propose`."""
        try:
            state = self.quorum.read_linearizable(timeout_s)
        except NotControllerError as e:
            raise ApiError(ErrorCode.NOT_CONTROLLER, str(e)) from None
        except QuorumTimeoutError as e:
            raise ApiError(ErrorCode.REQUEST_TIMED_OUT, str(e)) from None
        t = state.topics.get(topic)
        if t is None or not 0 <= partition < len(t.partitions):
            return -1
        return t.partitions[partition].partition_epoch

    def elect_preferred(self, wanted) -> list:
        """Propose preferred-leader changes; ``wanted`` None means every partition."""
        state = self.quorum.state
        changes = {(c.topic, c.partition): c
                   for c in preferred_leader_changes(state, self.quorum.term)}
        if wanted is None:
            wanted = sorted(changes)
        out = []
        for topic, partition in wanted:
            t = state.topics.get(topic)
            if t is None or not 0 <= partition < len(t.partitions):
                out.append(PartitionResult(topic, partition, int(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION),
                                           f"unknown partition {topic}-{partition}"))
                continue
            change = changes.get((topic, partition))
            if change is None:
                p = t.partitions[partition]
                why = ("already led by its preferred replica" if p.leader == p.replicas[0]
                       else f"preferred replica {p.replicas[0]} is not alive and in the ISR")
                out.append(PartitionResult(topic, partition, 0, why))
                continue
            try:
                result = self.propose(change)
                out.append(PartitionResult(
                    topic, partition, 0 if result.ok else int(ErrorCode.POLICY_VIOLATION),
                    "" if result.ok else result.error))
            except ApiError as e:
                out.append(PartitionResult(topic, partition, int(e.code), e.message))
        return out

    def reassign(self, parts, throttle: int) -> list:
        """Propose one ReassignPartition per [topic, partition, target] (target []
        cancels); a PartitionResult each."""
        out = []
        for topic, partition, target in parts:
            try:
                result = self.propose(R.ReassignPartition(topic, partition, tuple(target),
                                                           throttle))
                out.append(PartitionResult(topic, partition, 0 if result.ok else result.code,
                                           "" if result.ok else result.error))
            except ApiError as e:
                out.append(PartitionResult(topic, partition, int(e.code), e.message))
        return out

    def unregister(self, broker_id: int) -> None:
        state = self.quorum.state
        if broker_id not in state.brokers:
            raise ApiError(ErrorCode.BROKER_NOT_AVAILABLE, f"broker {broker_id} is not registered")
        held = sorted(f"{t.name}-{p.partition}" for t in state.topics.values()
                      for p in t.partitions if broker_id in p.replicas)
        if held:
            raise ApiError(
                ErrorCode.POLICY_VIOLATION,
                f"broker {broker_id} still holds replicas of {len(held)} partition(s) "
                f"({', '.join(held[:5])}{', ...' if len(held) > 5 else ''}): move them first "
                f"(raftlog cluster decommission --node {broker_id})")
        result = self.propose(R.UnregisterBroker(broker_id))
        if not result.ok:
            raise ApiError(ErrorCode(result.code or ErrorCode.INVALID_REQUEST), result.error)

    def reassignments(self) -> list:
        """ReassignmentRow of every partition being moved (this node's applied state)."""
        out = []
        for t in sorted(self.quorum.state.topics.values(), key=lambda t: t.name):
            for p in t.partitions:
                if p.target:
                    out.append(ReassignmentRow(
                        t.name, p.partition, p.replicas, p.adding,
                        tuple(b for b in p.previous if b not in p.target),
                        p.isr, p.leader, p.throttle))
        return out

    def _place(self, partitions: int, replication_factor: int):
        """Replica assignments; while configured nodes are still registering (fewer
        live brokers than the replication factor, but enough voters configured), wait
        up to BROKER_WAIT_S for them before refusing (runs off the event loop)."""
        deadline = time.monotonic() + BROKER_WAIT_S
        while True:
            try:
                state = self.quorum.state
                return place_replicas(state, partitions, replication_factor,
                                      self._cached(state)[3])
            except PlacementError as e:
                expected = len(self.config.controller_quorum_voters or ())
                if replication_factor > expected or time.monotonic() >= deadline:
                    raise ApiError(ErrorCode.INVALID_REPLICATION_FACTOR, str(e)) from None
            time.sleep(BROKER_WAIT_POLL_S)

    def add_partitions(self, name: str, count: int, assignments=None) -> TopicInfo:
        """Grow ``name`` to ``count`` partitions; ``assignments``: the new partitions'
        replicas as checked by topics.check_assignments (None: placed here)."""
        info = self.topics.get(name)
        if info is None:
            raise ApiError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"topic {name!r} does not exist")
        have = len(info.partitions)
        rf = len(info.partitions[0].replicas) if info.partitions else 1
        try:
            if assignments is None:
                assignments = place_replicas(self.quorum.state, count - have, rf)
        except PlacementError as e:
            raise ApiError(ErrorCode.INVALID_REPLICATION_FACTOR, str(e)) from None
        result = self.propose(R.CreatePartitions(name, have, assignments))
        if not result.ok:
            raise ApiError(ErrorCode(result.code), result.error)
        return self.topics[name]

    def close(self) -> None:
        self.quorum.close()
