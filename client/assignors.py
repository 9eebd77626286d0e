"""Partition assignors of consumer groups: range, roundrobin, cooperative-sticky. Pure.

The group leader (a consumer) runs one of these on the members' subscriptions and
sends the result in SyncGroup; the coordinator only relays it (Kafka's design).
Partitions are plain ``(topic, partition)`` tuples here so this module needs no
other client module; the Consumer converts to and from ``TopicPartition``.

* ``range``: per topic, the members subscribed to it (sorted by member id) get
  contiguous ranges; the first ``n % m`` members get one partition more.
* ``roundrobin``: every partition of every subscribed topic, sorted, dealt to the
  sorted members in turn, skipping members not subscribed to the topic.
* ``cooperative-sticky`` (KIP-429 with KIP-54 stickiness): computes a balanced
  assignment that keeps as many partitions with their previous owners as balance
  allows, then holds back every partition whose owner would change: the old owner
  gets an assignment without it (so it revokes only that partition and keeps
  consuming the rest) and rejoins; the next rebalance gives the now unowned
  partition to its new owner. A partition therefore never moves directly from one
  member to another within one generation.

Subscriptions and assignments travel in JoinGroup/SyncGroup as CBOR maps built by
:meth:`Subscription.to_wire` and :func:`assignment_to_wire`.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

TP = tuple[str, int]
Assignment = dict[str, list[TP]]

#: Bound on the balancing passes of the sticky assignor (each pass moves at least
#: one partition and strictly lowers the sum of squared member loads).
_BALANCE_PASSES_MAX = 1_000_000


@dataclass(frozen=True, slots=True)
class Subscription:
    """What a member sends in JoinGroup: its topics and what it owns now."""

    topics: tuple[str, ...]
    owned_partitions: tuple[TP, ...] = ()
    #: Generation in which ``owned_partitions`` were assigned (-1: unknown). A
    #: higher generation wins when two members claim the same partition.
    generation: int = -1

    def to_wire(self) -> dict:
        return {
            "topics": list(self.topics),
            "owned": [[t, p] for t, p in self.owned_partitions],
            "generation": self.generation,
        }

    @classmethod
    def from_wire(cls, d) -> Subscription:
        """Parse a member's subscription. Raises ValueError on a malformed one."""
        if not isinstance(d, dict):
            raise ValueError("subscription must be a map")
        topics, owned, gen = d.get("topics", []), d.get("owned", []), d.get("generation", -1)
        if not isinstance(topics, list) or not all(type(t) is str for t in topics):
            raise ValueError("subscription topics must be a list of strings")
        if not isinstance(owned, list) or not all(_is_tp(x) for x in owned):
            raise ValueError("subscription owned partitions must be [topic, partition] pairs")
        if type(gen) is not int:
            raise ValueError("subscription generation must be an integer")
        return cls(tuple(topics), tuple((t, p) for t, p in owned), gen)


def _is_tp(x) -> bool:
    return isinstance(x, list | tuple) and len(x) == 2 and type(x[0]) is str and type(x[1]) is int


def assignment_to_wire(partitions: Sequence[TP]) -> dict:
    return {"partitions": [[t, p] for t, p in sorted(partitions)]}


def assignment_from_wire(d) -> list[TP]:
    """Parse an assignment from SyncGroup. Raises ValueError on a malformed one."""
    if not isinstance(d, dict) or not isinstance(d.get("partitions", []), list):
        raise ValueError("assignment must be a map with a partitions list")
    parts = d.get("partitions", [])
    if not all(_is_tp(x) for x in parts):
        raise ValueError("assignment partitions must be [topic, partition] pairs")
    return [(t, p) for t, p in parts]


def _all_partitions(partitions_per_topic: Mapping[str, int], subs: Mapping[str, Subscription]):
    """Sorted partitions of topics someone subscribes to, and their eligible members."""
    eligible: dict[TP, list[str]] = {}
    for topic in sorted({t for s in subs.values() for t in s.topics}):
        members = sorted(m for m, s in subs.items() if topic in s.topics)
        for p in range(partitions_per_topic.get(topic, 0)):
            eligible[(topic, p)] = members
    return eligible


# --------------------------------------------------------------------------- range


class RangeAssignor:
    name = "range"

    def assign(self, partitions_per_topic: Mapping[str, int],
               subscriptions: Mapping[str, Subscription]) -> Assignment:
        out: Assignment = {m: [] for m in subscriptions}
        topics = sorted({t for s in subscriptions.values() for t in s.topics})
        for topic in topics:
            members = sorted(m for m, s in subscriptions.items() if topic in s.topics)
            n = partitions_per_topic.get(topic, 0)
            per, extra = divmod(n, len(members))
            start = 0
            for i, m in enumerate(members):
                size = per + (1 if i < extra else 0)
                out[m].extend((topic, p) for p in range(start, start + size))
                start += size
        return out


# --------------------------------------------------------------------------- roundrobin


class RoundRobinAssignor:
    name = "roundrobin"

    def assign(self, partitions_per_topic: Mapping[str, int],
               subscriptions: Mapping[str, Subscription]) -> Assignment:
        out: Assignment = {m: [] for m in subscriptions}
        members = sorted(subscriptions)
        if not members:
            return out
        i = 0
        for tp, eligible in _all_partitions(partitions_per_topic, subscriptions).items():
            allowed = set(eligible)
            # the next member in the circle that subscribes to this topic
            while members[i % len(members)] not in allowed:
                i += 1
            out[members[i % len(members)]].append(tp)
            i += 1
        return out


# --------------------------------------------------------------------------- sticky


def previous_owners(partitions: Mapping[TP, list[str]],
                    subscriptions: Mapping[str, Subscription],
                    require_subscribed: bool = True) -> dict[TP, str]:
    """The previous owner of each partition that still exists; of two claims the higher
    generation wins (ties: lower member id). With ``require_subscribed`` an owner that
    no longer subscribes to the topic does not count (it cannot keep the partition)."""
    owners: dict[TP, tuple[int, str]] = {}
    for m in sorted(subscriptions):
        s = subscriptions[m]
        for tp in s.owned_partitions:
            if tp not in partitions or (require_subscribed and tp[0] not in s.topics):
                continue
            best = owners.get(tp)
            if best is None or s.generation > best[0]:
                owners[tp] = (s.generation, m)
    return {tp: m for tp, (_, m) in owners.items()}


def sticky_assign(partitions_per_topic: Mapping[str, int],
                  subscriptions: Mapping[str, Subscription]) -> Assignment:
    """A balanced assignment keeping as many previous owners as balance allows.

    Balanced: no partition could move from a member to another member subscribed to
    its topic that has at least two partitions fewer (with equal subscriptions:
    every member holds floor or ceil of partitions / members).
    """
    eligible = _all_partitions(partitions_per_topic, subscriptions)
    owners = previous_owners(eligible, subscriptions)
    kept: dict[str, list[TP]] = {m: [] for m in subscriptions}
    extra: dict[str, list[TP]] = {m: [] for m in subscriptions}  # not previously owned
    for tp, m in sorted(owners.items()):
        kept[m].append(tp)
    load = {m: len(v) for m, v in kept.items()}
    # Unowned partitions, most constrained first, each to the least loaded candidate; of
    # equally loaded ones, the member able to take the fewest partitions (a member with
    # wider subscriptions is kept free to balance the topics only it shares).
    free = sorted((tp for tp in eligible if tp not in owners), key=lambda tp: (len(eligible[tp]), tp))
    reach = Counter(m for cands in eligible.values() for m in cands)
    for tp in free:
        m = min(eligible[tp], key=lambda c: (load[c], reach[c], c))
        extra[m].append(tp)
        load[m] += 1
    _balance(eligible, kept, extra, load)
    return {m: sorted(kept[m] + extra[m]) for m in subscriptions}


def _balance(eligible, kept, extra, load) -> None:
    """Move partitions from heavy to light members until no move helps. Moves give up
    partitions that were not previously owned first, so stickiness suffers least."""
    st = _KeptGaps(eligible, kept, load)
    for _ in range(_BALANCE_PASSES_MAX):
        if not _move_one(eligible, kept, extra, load, st):
            return
    raise AssertionError("sticky balancing did not converge")


def _move_one(eligible, kept, extra, load, st) -> bool:
    """One move, the least sticky-costly first: a partition not previously owned that
    lowers the imbalance; else partitions not previously owned shifted along a chain
    without raising it, lowering the imbalance kept partitions face (so a kept
    partition need not move; this is what lets cooperative rebalancing settle in two
    rounds); else a kept partition."""
    order = sorted(load, key=lambda m: (-load[m], m))
    if _improving_move(order, extra, eligible, extra, load):
        return True
    if _shift_toward_kept_gaps(eligible, extra, load, st):
        return True
    moved = _improving_move(order, kept, eligible, extra, load)
    if moved:
        st.forget(*moved)
    return moved is not None


def _improving_move(order, pools, eligible, extra, load):
    """Move one partition of ``pools[a]`` (heaviest ``a`` first) to its least loaded
    candidate when that is at least two lighter: (a, partition) moved, or None."""
    floor = min(load.values(), default=0)
    for a in order:  # heaviest first: once none is two above the lightest, none moves
        if load[a] <= floor + 1:
            break
        pool = pools[a]
        for tp in pool:
            b = min(eligible[tp], key=lambda c: (load[c], c))
            if load[a] > load[b] + 1:
                _move(tp, pool, a, extra, b, load)
                return a, tp
    return None


def _move(tp, pool, a, extra, b, load) -> None:
    pool.remove(tp)
    extra[b].append(tp)
    load[a] -= 1
    load[b] += 1


class _KeptGaps:
    """How far kept partitions are from balanced: over every kept partition of a and
    every other member c eligible for it, max(0, load[a] - load[c] - 1). Zero: no
    kept partition has to move for balance. Kept as pair weights (kept partitions of a
    that c could take) so a change of two members' loads is rated in O(members)."""

    #: Work units (chain edges looked at, members per rating) of the chain search per
    #: balancing: a bound on the assignor's time, not on correctness (past it a kept
    #: partition moves instead, which may cost one more rebalance).
    SEARCH_UNITS_MAX = 100_000

    def __init__(self, eligible, kept, load):
        self.eligible = eligible
        self.load = load
        self.out: dict = {m: Counter() for m in load}  # a -> {c: n}
        self.into: dict = {m: Counter() for m in load}  # c -> {a: n}
        self.budget = self.SEARCH_UNITS_MAX
        for a, tps in kept.items():
            for tp in tps:
                self._count(a, tp, 1)

    def _count(self, a, tp, n: int) -> None:
        for c in self.eligible[tp]:
            if c != a:
                self.out[a][c] += n
                self.into[c][a] += n

    def forget(self, a, tp) -> None:
        """``tp`` is no longer kept by ``a`` (it moved)."""
        self._count(a, tp, -1)

    def _gap(self, a, c) -> int:
        return max(0, self.load[a] - self.load[c] - 1)

    def total(self) -> int:
        self.budget -= sum(map(len, self.out.values()))
        return sum(n * self._gap(a, c) for a, row in self.out.items() for c, n in row.items())

    def touching(self, x, y) -> int:
        """The part of the total that involves x or y."""
        pairs = {(x, c) for c in self.out[x]} | {(y, c) for c in self.out[y]}
        pairs |= {(a, x) for a in self.into[x]} | {(a, y) for a in self.into[y]}
        self.budget -= len(pairs)
        return sum(self.out[a][c] * self._gap(a, c) for a, c in pairs)

    def lowered_by(self, x, c) -> bool:
        """Would one partition less on x and one more on c lower the total?"""
        load = self.load
        before = self.touching(x, c)
        load[x] -= 1
        load[c] += 1
        after = self.touching(x, c)
        load[x] += 1
        load[c] -= 1
        return after < before


def _shift_toward_kept_gaps(eligible, extra, load, st: _KeptGaps) -> bool:
    """Move partitions not previously owned along a chain x0 -> x1 -> ... -> xk (each
    hands one to the next, so only x0 loses and only xk gains one) when x0 is at least
    one heavier than xk and the kept gaps shrink."""
    if st.budget <= 0 or not st.total():
        return False
    for x0 in sorted(load, key=lambda m: (-load[m], m)):
        parent: dict = {x0: None}  # member -> (previous member, partition it gets)
        frontier = [x0]
        while frontier:
            nxt = []
            for x in frontier:
                for tp in extra[x]:
                    st.budget -= len(eligible[tp])
                    if st.budget <= 0:
                        return False
                    for c in eligible[tp]:
                        if c in parent:
                            continue
                        parent[c] = (x, tp)
                        nxt.append(c)
                        if load[x0] < load[c] + 1:
                            continue
                        if st.lowered_by(x0, c):
                            _shift_chain(parent, c, extra, load)
                            return True
            frontier = nxt
    return False


def _shift_chain(parent, end, extra, load) -> None:
    hops = []
    m = end
    while parent[m] is not None:
        prev, tp = parent[m]
        hops.append((prev, tp, m))
        m = prev
    for prev, tp, to in reversed(hops):
        _move(tp, extra[prev], prev, extra, to, load)

class CooperativeStickyAssignor:
    name = "cooperative-sticky"

    def assign(self, partitions_per_topic: Mapping[str, int],
               subscriptions: Mapping[str, Subscription]) -> Assignment:
        target = sticky_assign(partitions_per_topic, subscriptions)
        # Hold back partitions another member still owns (even of a topic it no longer
        # subscribes to: it may still be consuming it): it revokes them first.
        owners = previous_owners(_all_partitions(partitions_per_topic, subscriptions),
                                 subscriptions, require_subscribed=False)
        return {
            m: [tp for tp in tps if owners.get(tp, m) == m] for m, tps in target.items()
        }


ASSIGNORS = {a.name: a for a in (RangeAssignor(), RoundRobinAssignor(), CooperativeStickyAssignor())}


def get_assignor(name: str):
    """The assignor called ``name``. Raises ValueError for an unknown one."""
    try:
        return ASSIGNORS[name]
    except KeyError:
        raise ValueError(
            f"unknown partition assignment strategy {name!r}; choose from {sorted(ASSIGNORS)}"
        ) from None
