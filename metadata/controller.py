"""Controller decisions, pure: state (and time, as an input) in, records to propose out.

The active controller (the Raft leader) calls these and proposes the records; the
state machine re-checks every compare-and-set at apply time, so a decision made
by a controller that has just been deposed is rejected rather than applied.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

from . import records as R
from .state import MetadataState


class PlacementError(ValueError):
    """The cluster cannot host the requested topic (e.g. too few live brokers)."""


def live_brokers(state: MetadataState) -> list[int]:
    """Unfenced nodes that serve partitions (controller-only nodes never do)."""
    return sorted(b.broker_id for b in state.brokers.values()
                  if not b.fenced and b.serves_partitions)


def leader_counts(state: MetadataState) -> Counter:
    """{broker id: partitions it leads} (-1: offline partitions)."""
    return Counter(p.leader for t in state.topics.values() for p in t.partitions)


def place_replicas(state: MetadataState, partitions: int, replication_factor: int,
                   leads: Counter | None = None) -> tuple:
    """Round-robin replica assignment over live brokers, leaders spread evenly.

    Partition i's replicas are ``replication_factor`` consecutive live brokers
    starting at offset (start + i); ``start`` is the broker that leads the fewest
    partitions now, so successive topics do not pile leadership on broker 0.
    ``leads`` is :func:`leader_counts` of ``state`` when the caller keeps it.
    """
    brokers = live_brokers(state)
    if partitions < 1:
        raise PlacementError(f"partitions must be at least 1, not {partitions}")
    if not 1 <= replication_factor <= len(brokers):
        raise PlacementError(
            f"replication factor {replication_factor} needs that many live brokers; "
            f"{len(brokers)} are live ({brokers})"
        )
    if leads is None:
        leads = leader_counts(state)
    start = min(range(len(brokers)), key=lambda i: (leads[brokers[i]], i))
    n = len(brokers)
    return tuple(
        tuple(brokers[(start + i + j) % n] for j in range(replication_factor))
        for i in range(partitions)
    )


@dataclass
class BrokerLiveness:
    """Heartbeat bookkeeping of the active controller (in memory, never replicated).

    A new controller starts every registered broker's clock at its own start time,
    so no broker is fenced merely because the controller changed (a grace period
    of one session timeout).

    Two ways to be fenced (issue #38):

    - **session expiry**: no heartbeat for ``session_timeout_ms`` -- the only way for
      a broker that hangs (SIGSTOP) or is cut off by a partition;
    - **a crash, seen at once**: its heartbeat connection closed (:meth:`disconnected`),
      no heartbeat arrived for ``disconnect_grace_ms`` since, and a connection to its
      listener was then *refused* (:meth:`probe_refused`): nothing listens there, the
      process is gone. A hang still accepts connections (the kernel completes the
      handshake), a partition drops them (the probe times out): neither is refused, so
      neither is fenced before its session expires. Any heartbeat clears both marks.
    """

    session_timeout_ms: int
    last_heartbeat_ms: dict = field(default_factory=dict)
    #: how long after a lost heartbeat connection a broker is probed (0: never)
    disconnect_grace_ms: int = 0
    #: {broker: node ms its heartbeat connection closed}, until its next heartbeat
    disconnected_ms: dict = field(default_factory=dict)
    #: brokers whose probe was refused after their disconnection (until a heartbeat)
    refused: set = field(default_factory=set)

    @classmethod
    def on_become_controller(cls, state: MetadataState, now_ms: int, session_timeout_ms: int,
                             disconnect_grace_ms: int = 0, last_seen_ms: dict | None = None):
        """``last_seen_ms``: brokers known to have been alive at an earlier time than
        ``now_ms`` -- the old controller, last heard from over Raft: a hung one is
        fenced one session after that, not one session after the election (it had no
        heartbeats to send to anybody but itself)."""
        clocks = {b: now_ms for b in state.brokers}
        for b, t in (last_seen_ms or {}).items():
            if b in clocks:
                clocks[b] = min(now_ms, t)
        return cls(session_timeout_ms, clocks, disconnect_grace_ms)

    def heartbeat(self, broker_id: int, now_ms: int) -> None:
        self.last_heartbeat_ms[broker_id] = now_ms
        self.disconnected_ms.pop(broker_id, None)
        self.refused.discard(broker_id)

    def disconnected(self, broker_id: int, now_ms: int) -> None:
        """The connection that carried ``broker_id``'s heartbeats closed."""
        if self.disconnect_grace_ms > 0:
            self.disconnected_ms.setdefault(broker_id, now_ms)

    def to_probe(self, now_ms: int) -> list[int]:
        """Brokers disconnected for the grace period with no heartbeat since, whose
        listener should now be tried (a refusal means the process is gone)."""
        return sorted(b for b, t in self.disconnected_ms.items()
                      if now_ms - t >= self.disconnect_grace_ms and b not in self.refused)

    def probe_refused(self, broker_id: int) -> None:
        """A connection to ``broker_id``'s listener was refused after its disconnection."""
        if broker_id in self.disconnected_ms:
            self.refused.add(broker_id)

    def probe_answered(self, broker_id: int) -> None:
        """Its listener accepted the probe: alive (or hung): only the session decides."""
        self.disconnected_ms.pop(broker_id, None)

    def expired(self, now_ms: int) -> list[int]:
        gone = {b for b, t in self.last_heartbeat_ms.items()
                if now_ms - t > self.session_timeout_ms}
        return sorted(gone | self.refused)

    def fence_decisions(self, state: MetadataState, now_ms: int) -> list:
        """FenceBroker records for unfenced brokers whose session expired or whose
        crash was seen (see the class docstring)."""
        out = []
        for b in self.expired(now_ms):
            broker = state.brokers.get(b)
            if broker is not None and not broker.fenced:
                out.append(R.FenceBroker(b, broker.incarnation_id))
        return out


def preferred_leader_changes(state: MetadataState, term: int) -> list:
    """Move leadership back to the first replica where it is live and in the ISR."""
    out = []
    alive = set(live_brokers(state))
    for t in sorted(state.topics.values(), key=lambda t: t.name):
        for p in t.partitions:
            preferred = p.replicas[0]
            if p.leader != preferred and preferred in p.isr and preferred in alive:
                out.append(
                    R.PartitionChange(
                        t.name, p.partition, preferred, p.isr, p.partition_epoch, term
                    )
                )
    return out


def resign_leadership(state: MetadataState, topic: str, partition: int, leader: int,
                      term: int):
    """The PartitionChange by which ``leader``, having found corrupt data in its log,
    hands the partition to the first live in-sync replica other than itself (the ISR
    becomes those: its own copy is no longer trusted) -- or None when there is no such
    replica (the partition then stays unavailable rather than serve corrupt bytes) or
    ``leader`` no longer leads it."""
    t = state.topics.get(topic)
    if t is None or not 0 <= partition < len(t.partitions):
        return None
    p = t.partitions[partition]
    if p.leader != leader:
        return None
    alive = set(live_brokers(state))
    others = tuple(r for r in p.isr if r != leader and r in alive)
    if not others:
        return None
    return R.PartitionChange(topic, partition, others[0], others, p.partition_epoch, term)


def reassignment_completions(state: MetadataState, term: int) -> list:
    """CompleteReassignment for every reassignment whose target replicas are all in
    the ISR (with a live leader: a partition offline waits)."""
    out = []
    for t in state.topics.values():
        for p in t.partitions:
            if p.target and p.leader != -1 and set(p.target) <= set(p.isr):
                out.append(R.CompleteReassignment(t.name, p.partition, p.partition_epoch, term))
    return out


def alter_partition(
    state: MetadataState,
    topic: str,
    partition: int,
    leader: int,
    isr: tuple,
    expected_partition_epoch: int,
    term: int,
) -> R.PartitionChange:
    """Validate a leader's AlterPartition (ISR shrink/expand) into a CAS record.

    Raises ValueError for requests that can never apply (unknown partition, a
    leader that is not the current one); stale epochs are left to the state
    machine's compare-and-set.
    """
    t = state.topics.get(topic)
    if t is None or not 0 <= partition < len(t.partitions):
        raise ValueError(f"unknown partition {topic}-{partition}")
    p = t.partitions[partition]
    if leader != p.leader:
        raise ValueError(
            f"broker {leader} does not lead {topic}-{partition} (leader is {p.leader})"
        )
    if leader not in isr:
        raise ValueError("the leader must stay in the ISR")
    return R.PartitionChange(topic, partition, leader, tuple(isr), expected_partition_epoch, term)
