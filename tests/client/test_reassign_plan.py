"""Reassignment plans (client/reassign.py) and the byte-rate throttle: pure, no I/O."""

from __future__ import annotations

from collections import Counter

import pytest
from hypothesis import given
from hypothesis import strategies as st

from raftlog.client.reassign import (
    PlanError,
    decommission,
    generate,
    parse_plan,
    plan_json,
    progress,
)
from raftlog.node.throttle import ByteRate


def _cluster(partitions=6, rf=3, brokers=(1, 2, 3)):
    n = len(brokers)
    return {("t", p): tuple(brokers[(p + j) % n] for j in range(rf)) for p in range(partitions)}


def test_plan_json_round_trips_and_bad_plans_say_why():
    plan = {("t", 0): (2, 3), ("u", 1): (1,)}
    assert parse_plan(plan_json(plan)) == plan
    for text, why in [
        ("nope", "not JSON"),
        ("[]", "must be"),
        ('{"version": 2, "partitions": []}', "version"),
        ('{"partitions": []}', "moves no partition"),
        ('{"partitions": [{"topic": "", "partition": 0, "replicas": [1]}]}', "topic"),
        ('{"partitions": [{"topic": "t", "partition": -1, "replicas": [1]}]}', "partition"),
        ('{"partitions": [{"topic": "t", "partition": 0, "replicas": []}]}', "replicas"),
        ('{"partitions": [{"topic": "t", "partition": 0, "replicas": [1, 1]}]}', "twice"),
        ('{"partitions": [{"topic": "t", "partition": 0, "replicas": [1]},'
         ' {"topic": "t", "partition": 0, "replicas": [2]}]}', "appears twice"),
    ]:
        with pytest.raises(PlanError, match=why):
            parse_plan(text)


def test_generate_spreads_onto_a_new_broker_and_moves_little():
    current = _cluster(partitions=8)
    plan = generate(current, [1, 2, 3, 4])
    after = {**current, **plan}
    load = Counter(b for reps in after.values() for b in reps)
    assert set(load) == {1, 2, 3, 4} and max(load.values()) - min(load.values()) <= 1
    assert all(len(set(r)) == 3 for r in after.values())
    moved = sum(len(set(reps) - set(current[k])) for k, reps in plan.items())
    assert moved == load[4]  # only what the new broker takes moves
    assert generate(after, [1, 2, 3, 4]) == {}  # balanced: nothing more to do
    with pytest.raises(PlanError, match="only 2 brokers"):
        generate(current, [1, 2])


def test_decommission_moves_every_replica_off_one_broker():
    current = _cluster(partitions=8, brokers=(1, 2, 3, 4))
    plan = decommission(current, 4, [1, 2, 3, 4])
    assert set(plan) == {k for k, reps in current.items() if 4 in reps}
    for k, reps in plan.items():
        assert 4 not in reps and len(set(reps)) == 3
        assert set(current[k]) - {4} <= set(reps)  # only the replica on 4 moves
    with pytest.raises(PlanError, match="every other broker"):
        decommission(_cluster(brokers=(1, 2, 3)), 3, [1, 2, 3])


@given(st.integers(1, 20), st.integers(1, 3), st.integers(3, 6))
def test_generate_keeps_the_replication_factor_and_the_brokers(parts, rf, n):
    current = _cluster(parts, rf, tuple(range(1, 4)))
    brokers = list(range(1, n + 1))
    after = {**current, **generate(current, brokers)}
    for k, reps in after.items():
        assert len(reps) == len(current[k]) == len(set(reps)) and set(reps) <= set(brokers)


def test_progress_sorts_the_plan():
    plan = {("t", 0): (1, 2), ("t", 1): (2, 3), ("t", 2): (3, 1)}
    current = {("t", 0): (1, 2), ("t", 1): (2, 3, 1), ("t", 2): (1, 2)}
    assert progress(plan, current, {("t", 1)}) == ([("t", 0)], [("t", 1)], [("t", 2)])


def test_byte_rate_allows_a_burst_then_the_rate_and_makes_debts_wait():
    r = ByteRate(burst_s=1.0)
    assert r.allowance(1000, 10.0) == 1000
    r.spend(5000)  # one batch bigger than allowed: a debt
    assert r.allowance(1000, 11.0) == 0
    assert r.allowance(1000, 14.0) == 0
    assert r.allowance(1000, 14.5) == 500
    assert r.allowance(1000, 100.0) == 1000  # bursts stay bounded
    assert r.wait_s(1000, chunk_s=0.01) == 0.0
    r.spend(1100)
    assert abs(r.wait_s(1000, chunk_s=0.01) - 0.11) < 1e-9  # 100 in debt, then 10 more
    small = ByteRate(burst_s=0.1)
    assert small.allowance(1000, 0.0) == 100 and small.allowance(1000, 50.0) == 100


def test_byte_rate_reservations_share_one_allowance_and_settle_what_came():
    r = ByteRate(burst_s=1.0)
    first = r.allowance(1000, 0.0)
    r.spend(first)  # one round reserves the whole burst...
    assert r.allowance(1000, 0.0) == 0  # ...so a round to another leader gets nothing
    r.settle(first, 400)  # 400 came: the rest goes back
    assert r.allowance(1000, 0.0) == 600
    r.spend(600)
    r.settle(600, 900)  # a batch over the reservation: a debt
    assert r.allowance(1000, 0.0) == 0 and r.allowance(1000, 0.3) == 0
    assert r.allowance(1000, 0.5) == 200



def _leaders(assignment) -> Counter:
    return Counter(reps[0] for reps in assignment.values())


def test_generate_balances_preferred_leaders_without_moving_replicas():
    current = {("t", p): (1, 2, 3) for p in range(6)}  # replicas even, every leader on 1
    plan = generate(current, [1, 2, 3])
    after = {**current, **plan}
    assert _leaders(after) == {1: 2, 2: 2, 3: 2}
    assert all(set(reps) == {1, 2, 3} for reps in after.values())  # reordered only
    assert len(plan) == 4  # two stay led by 1: only the leaderships that must move
    assert generate(after, [1, 2, 3]) == {}
    # a new broker gets its share of leaders as well as of replicas
    after = {**_cluster(12), **generate(_cluster(12), [1, 2, 3, 4])}
    assert _leaders(after) == {1: 3, 2: 3, 3: 3, 4: 3}


@st.composite
def _assignments(draw):
    pool = list(range(1, 8))
    rf = draw(st.integers(1, 3))
    parts = draw(st.integers(1, 30))
    current = {("t", p): tuple(draw(st.permutations(pool))[:rf]) for p in range(parts)}
    brokers = draw(st.lists(st.sampled_from(pool), min_size=rf, max_size=7, unique=True))
    return current, brokers


@given(_assignments())
def test_generate_spreads_leaders_and_replicas_within_one_of_even(case):
    current, brokers = case
    after = {**current, **generate(current, brokers)}
    n, parts = len(brokers), len(after)
    leaders = _leaders(after)
    assert set(leaders) <= set(brokers)
    assert all(parts // n <= leaders[b] <= -(-parts // n) for b in brokers), leaders
    replicas = Counter(b for reps in after.values() for b in reps)
    total = sum(replicas.values())
    assert all(total // n <= replicas[b] <= -(-total // n) for b in brokers), replicas
    for k, reps in after.items():
        assert len(reps) == len(current[k]) == len(set(reps)) and set(reps) <= set(brokers)
    assert generate(after, brokers) == {}  # balanced: nothing more to do
