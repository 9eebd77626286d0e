"""Partition reassignment plans: pure functions, no I/O.

A plan is what ``kafka-reassign-partitions`` reads and writes::

    {"version": 1, "partitions": [{"topic": "t", "partition": 0, "replicas": [2, 3, 4]}]}

:func:`generate` proposes a balanced plan over a set of brokers that moves as little as
it can (a replica already on an allowed broker stays, unless that broker carries more
than its share); :func:`decommission` moves every replica off one broker;
:func:`parse_plan` validates a plan with a clear message per mistake;
:func:`progress` summarises a move for ``--verify`` and the progress bar.
"""

from __future__ import annotations

import json
from collections import Counter

PLAN_VERSION = 1


class PlanError(ValueError):
    """A reassignment plan (or the request to make one) is not usable."""


def plan_json(assignments: dict) -> str:
    """{(topic, partition): replicas} -> the plan's JSON text (sorted, stable)."""
    return json.dumps({"version": PLAN_VERSION, "partitions": [
        {"topic": t, "partition": p, "replicas": list(r)}
        for (t, p), r in sorted(assignments.items())]}, indent=1)


def parse_plan(text: str) -> dict:
    """The plan's JSON text -> {(topic, partition): replicas tuple}."""
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as e:
        raise PlanError(f"the plan is not JSON: {e}") from None
    if not isinstance(doc, dict) or not isinstance(doc.get("partitions"), list):
        raise PlanError('the plan must be {"version": 1, "partitions": [...]}')
    if doc.get("version", PLAN_VERSION) != PLAN_VERSION:
        raise PlanError(f"unknown plan version {doc.get('version')!r} (expected 1)")
    out: dict = {}
    for i, e in enumerate(doc["partitions"]):
        where = f"partitions[{i}]"
        if not isinstance(e, dict):
            raise PlanError(f"{where} must be an object with topic, partition, replicas")
        topic, part, reps = e.get("topic"), e.get("partition"), e.get("replicas")
        if not isinstance(topic, str) or not topic:
            raise PlanError(f"{where}: topic must be a non-empty string")
        if type(part) is not int or part < 0:
            raise PlanError(f"{where}: partition must be an integer >= 0")
        if (not isinstance(reps, list) or not reps
                or any(type(b) is not int or b < 0 for b in reps)):
            raise PlanError(f"{where}: replicas must be a non-empty list of broker ids")
        if len(set(reps)) != len(reps):
            raise PlanError(f"{where}: replicas {reps} name a broker twice")
        if (topic, part) in out:
            raise PlanError(f"{where}: {topic}-{part} appears twice")
        out[(topic, part)] = tuple(reps)
    if not out:
        raise PlanError("the plan moves no partition")
    return out


def generate(current: dict, brokers: list) -> dict:
    """A balanced assignment of every partition of ``current`` ({(topic, partition):
    replicas}) over ``brokers``, keeping each partition's replication factor.

    Replicas on allowed brokers stay; replicas on other brokers go to the least
    loaded allowed brokers; then, while one broker holds two replicas more than
    another, one of its replicas (a follower where it can) moves to that other
    broker. Last, preferred leaders (the first replica of each list) are spread
    within one of even by reordering replica lists (no data moves for that: see
    :func:`balance_leaders`). Returns only the partitions whose replicas change
    (in set or in order)."""
    brokers = sorted(set(brokers))
    if not brokers:
        raise PlanError("no brokers to assign to")
    for (t, p), reps in current.items():
        if len(reps) > len(brokers):
            raise PlanError(f"{t}-{p} has {len(reps)} replicas but only {len(brokers)} "
                            f"brokers were given ({brokers})")
    after = {k: [b for b in reps if b in brokers] for k, reps in current.items()}
    load: Counter = Counter({b: 0 for b in brokers})
    load.update(b for reps in after.values() for b in reps)
    for key in sorted(current):
        reps = after[key]
        for i, b in enumerate(current[key]):
            if b not in brokers:  # replaced in place: a new leader where the old one was
                new = min((x for x in brokers if x not in reps), key=lambda x: (load[x], x))
                reps.insert(min(i, len(reps)), new)
                load[new] += 1
    keys = sorted(after)
    for _ in range(sum(load.values())):  # each round moves one replica: bounded
        hi = max(brokers, key=lambda b: (load[b], -b))
        lo = min(brokers, key=lambda b: (load[b], b))
        if load[hi] - load[lo] <= 1:
            break
        key = _movable(after, keys, hi, lo)
        if key is None:
            break
        reps = after[key]
        reps[reps.index(hi)] = lo
        load[hi] -= 1
        load[lo] += 1
    balance_leaders(after, brokers)
    return {k: tuple(reps) for k, reps in after.items() if tuple(reps) != tuple(current[k])}


def _movable(after: dict, keys: list, hi: int, lo: int):
    """The first partition (in ``keys`` order) with a replica on ``hi`` and none on
    ``lo`` where ``hi`` is a follower; else the first where it leads; None if none."""
    led = None
    for k in keys:
        reps = after[k]
        if hi in reps and lo not in reps:
            if reps[0] != hi:
                return k
            if led is None:
                led = k
    return led


def balance_leaders(assignment: dict, brokers: list) -> None:
    """Reorder the replica lists of ``assignment`` ({key: list of broker ids}, changed
    in place) so preferred leaders spread as evenly as their replica sets allow.

    A broker leading two more partitions than another hands one leadership down a
    chain: it makes a partition it leads prefer a replica on broker b, b gives one of
    its own to c, ... until a broker with at least two fewer gets one (the brokers in
    between keep their count). When no such chain is left, no reordering of these
    replica sets is better balanced (an optimal semi-matching); when the replicas
    are within one of even (as :func:`generate` leaves them), so are the leaders.
    Only preferred leaders that must move do: a balanced assignment is unchanged."""
    count: Counter = Counter({b: 0 for b in brokers})
    count.update(reps[0] for reps in assignment.values())
    _hand_down_directly(assignment, count)  # the one-step chains, in one cheap pass
    # each chain lowers the sum of squared counts by at least 2: bounded
    for _ in range(sum(c * c for c in count.values()) // 2 + 1):
        chain = _leader_chain(assignment, count)
        if chain is None:
            return
        for key, b, _old in chain:
            reps = assignment[key]
            i = reps.index(b)
            reps[0], reps[i] = reps[i], reps[0]
        count[chain[-1][1]] += 1
        count[chain[0][2]] -= 1
    raise AssertionError("leader balancing did not converge")


def _hand_down_directly(assignment: dict, count: Counter) -> None:
    """Each partition whose preferred leader leads two more than another of its
    replicas prefers that one instead (the chains of one step, without a search)."""
    for key in sorted(assignment):
        reps = assignment[key]
        i = min(range(len(reps)), key=lambda j: (count[reps[j]], j))
        if count[reps[0]] - count[reps[i]] >= 2:
            count[reps[0]] -= 1
            count[reps[i]] += 1
            reps[0], reps[i] = reps[i], reps[0]


def _leader_chain(assignment: dict, count: Counter) -> list | None:
    """[(key, new preferred leader, old one), ...]: a chain of leaderships from a
    broker to one leading at least two fewer (breadth first: the shortest); None
    when there is none."""
    led: dict = {}
    for key in sorted(assignment):
        led.setdefault(assignment[key][0], []).append(key)
    low = min(count.values(), default=0)
    for src in sorted(count, key=lambda b: (-count[b], b)):
        if count[src] - low < 2:
            return None
        parent: dict = {src: None}
        frontier = [src]
        while frontier:
            following = []
            for u in frontier:
                for key in led.get(u, ()):
                    for v in assignment[key][1:]:
                        if v in parent:
                            continue
                        parent[v] = (u, key)
                        if count[v] <= count[src] - 2:
                            chain = []
                            while parent[v] is not None:
                                u, key = parent[v]
                                chain.append((key, v, u))
                                v = u
                            return chain[::-1]
                        following.append(v)
            frontier = following
    return None


def decommission(current: dict, node: int, brokers: list) -> dict:
    """Move every replica off ``node`` to the least loaded other broker of ``brokers``
    not already a replica (the replication factor stays). Partitions without ``node``
    are untouched."""
    others = sorted(set(brokers) - {node})
    load = Counter(b for reps in current.values() for b in reps if b != node)
    out = {}
    for key in sorted(current):
        reps = current[key]
        if node not in reps:
            continue
        free = [b for b in others if b not in reps]
        if not free:
            t, p = key
            raise PlanError(f"cannot move {t}-{p} off broker {node}: its replicas {list(reps)} "
                            f"already use every other broker ({others})")
        b = min(free, key=lambda b: (load[b], b))
        load[b] += 1
        new = [x for x in reps if x != node]
        new.insert(reps.index(node), b)  # the new replica takes its place (and leadership)
        out[key] = tuple(new)
    return out


def progress(plan: dict, current: dict, in_progress: set) -> tuple[list, list, list]:
    """(done, moving, other) partition keys of ``plan``: done when the replicas equal
    the plan's and no move is in progress; moving when a reassignment is in progress;
    other when neither (not started, cancelled, or changed since)."""
    done, moving, other = [], [], []
    for key, reps in sorted(plan.items()):
        if key in in_progress:
            moving.append(key)
        elif tuple(current.get(key, ())) == tuple(reps):
            done.append(key)
        else:
            other.append(key)
    return done, moving, other
