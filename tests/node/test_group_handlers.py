"""Group API handlers over the pure coordinator, driven through the real request codec
(no sockets), with a fake __consumer_offsets and trio's virtual clock."""

from __future__ import annotations

import pytest
import trio

from raftlog import records
from raftlog.client.assignors import (
    CooperativeStickyAssignor,
    Subscription,
    assignment_from_wire,
    assignment_to_wire,
)
from raftlog.errors import ApiError, ErrorCode
from raftlog.node.group_handlers import GROUP_APIS, GroupService, encode_offsets_batches
from raftlog.node.groups import GroupConfig, GroupCoordinator
from raftlog.protocol import Api, FrameDecoder, encode_request, parse_request

CFG = GroupConfig(min_session_timeout_ms=100, initial_rebalance_delay_ms=100, offsets_partitions=3)


def parsed(api: Api, **fields) -> dict:
    """Fields as the node sees them after the codec validated the request."""
    dec = FrameDecoder()
    dec.receive_data(encode_request(api, 1, fields))
    return parse_request(dec.next_frame()).fields


class FakeOffsetsTopic:
    def __init__(self):
        self.log = []
        self.fail: ApiError | None = None

    async def persist(self, partition, recs):
        await trio.sleep(0.001)
        if self.fail is not None:
            raise self.fail
        for batch in encode_offsets_batches(recs):  # what the node would append
            for r in records.decode_batch(batch):
                self.log.append((partition, r.key, r.value))


def make_service(deleted_topic=None):
    c = GroupCoordinator(CFG)
    for p in range(CFG.offsets_partitions):
        c.begin_loading(p)
        c.finish_loading(p, 0)
    topic = FakeOffsetsTopic()

    def locate(partition):
        return (partition % 2, "127.0.0.1", 9092 + partition % 2)

    svc = GroupService(c, persist=topic.persist, locate=locate,
                       clock_ms=lambda: int(trio.current_time() * 1000),
                       deleted_topic=deleted_topic)
    return svc, topic


async def consumer_join(svc, results, name, member_id="", owned=(), generation=-1):
    sub = Subscription(("t",), tuple(owned), generation).to_wire()
    results[name] = await svc.handle(Api.JOIN_GROUP, parsed(
        Api.JOIN_GROUP, group="g", member_id=member_id, session_timeout_ms=1000,
        rebalance_timeout_ms=3000, protocols=[["cooperative-sticky", sub]]))


async def sync_all(svc, joined: dict) -> dict:
    """Every member syncs; the leader runs the assignor on 6 partitions."""
    out = {}

    async def one(name, r):
        assignments = []
        if r["members"]:
            subs = {mid: Subscription.from_wire(meta) for mid, _, meta in r["members"]}
            plan = CooperativeStickyAssignor().assign({"t": 6}, subs)
            assignments = [[mid, assignment_to_wire(tps)] for mid, tps in plan.items()]
        resp = await svc.handle(Api.SYNC_GROUP, parsed(
            Api.SYNC_GROUP, group="g", generation=r["generation"], member_id=r["member_id"],
            assignments=assignments))
        out[name] = assignment_from_wire(resp["assignment"])

    async with trio.open_nursery() as n:
        for name, r in joined.items():
            n.start_soon(one, name, r)
    return out


async def test_three_consumers_share_six_partitions_commit_and_describe(autojump_clock):
    svc, topic = make_service()
    async with trio.open_nursery() as n:
        await n.start(svc.run)
        joined = {}
        async with trio.open_nursery() as js:
            for name in "abc":
                js.start_soon(consumer_join, svc, joined, name)
        assert len({r["generation"] for r in joined.values()}) == 1
        assigned = await sync_all(svc, joined)
        assert sorted(len(v) for v in assigned.values()) == [2, 2, 2]
        assert sorted(tp for v in assigned.values() for tp in v) == [("t", p) for p in range(6)]

        a = joined["a"]
        resp = await svc.handle(Api.OFFSET_COMMIT, parsed(
            Api.OFFSET_COMMIT, group="g", generation=a["generation"], member_id=a["member_id"],
            offsets=[[t, p, 42, None] for t, p in assigned["a"]]))
        assert all(code == 0 for _, _, code, _ in resp["parts"])
        fetched = await svc.handle(Api.OFFSET_FETCH, parsed(Api.OFFSET_FETCH, group="g"))
        assert fetched["parts"] == [(t, p, 42, None, -1) for t, p in sorted(assigned["a"])]
        assert any(v is not None for _, _, v in topic.log)

        desc = await svc.handle(Api.DESCRIBE_GROUPS, parsed(Api.DESCRIBE_GROUPS, groups=["g", "x"]))
        g, x = desc["groups"]
        assert g["state"] == "Stable" and len(g["members"]) == 3 and g["error"] == 0
        assert x["state"] == "Dead"
        listed = await svc.handle(Api.LIST_GROUPS, parsed(Api.LIST_GROUPS))
        assert listed["groups"] == [("g", "consumer", "Stable")]

        # heartbeats keep everyone in; stopping them expires the members
        for _ in range(3):
            await trio.sleep(0.5)
            for r in joined.values():
                await svc.handle(Api.HEARTBEAT, parsed(
                    Api.HEARTBEAT, group="g", generation=r["generation"], member_id=r["member_id"]))
        assert len(svc.coordinator.groups["g"].members) == 3
        await trio.sleep(1.5)
        assert svc.coordinator.groups["g"].state.value == "Empty"
        n.cancel_scope.cancel()


async def test_one_consumer_leaves_the_others_take_over_in_two_rounds(autojump_clock):
    svc, _ = make_service()
    async with trio.open_nursery() as n:
        await n.start(svc.run)
        joined = {}
        async with trio.open_nursery() as js:
            for name in "abc":
                js.start_soon(consumer_join, svc, joined, name)
        assigned = await sync_all(svc, joined)
        c = joined.pop("c")
        await svc.handle(Api.LEAVE_GROUP, parsed(Api.LEAVE_GROUP, group="g", member_id=c["member_id"]))
        with pytest.raises(ApiError) as e:
            await svc.handle(Api.HEARTBEAT, parsed(
                Api.HEARTBEAT, group="g", generation=joined["a"]["generation"],
                member_id=joined["a"]["member_id"]))
        assert e.value.code is ErrorCode.REBALANCE_IN_PROGRESS
        rejoined = {}
        async with trio.open_nursery() as js:
            for name, r in joined.items():
                js.start_soon(consumer_join, svc, rejoined, name, r["member_id"],
                              assigned[name], r["generation"])
        again = await sync_all(svc, rejoined)
        assert sorted(tp for v in again.values() for tp in v) == [("t", p) for p in range(6)]
        # a zombie commit from the old generation is fenced
        with pytest.raises(ApiError) as e:
            await svc.handle(Api.HEARTBEAT, parsed(
                Api.HEARTBEAT, group="g", generation=joined["a"]["generation"],
                member_id=joined["a"]["member_id"]))
        assert e.value.code is ErrorCode.ILLEGAL_GENERATION
        n.cancel_scope.cancel()


async def test_failed_append_fails_the_commit_and_hides_the_offsets(autojump_clock):
    svc, topic = make_service()
    topic.fail = ApiError(ErrorCode.NOT_LEADER_OR_FOLLOWER, "moved")
    resp = await svc.handle(Api.OFFSET_COMMIT, parsed(
        Api.OFFSET_COMMIT, group="solo", offsets=[["t", 0, 5, None]]))
    assert resp["parts"] == [("t", 0, int(ErrorCode.NOT_COORDINATOR), "moved")]
    fetched = await svc.handle(Api.OFFSET_FETCH, parsed(Api.OFFSET_FETCH, group="solo",
                                                        parts=[["t", 0]]))
    assert fetched["parts"] == [("t", 0, -1, None, -1)]
    topic.fail = None
    resp = await svc.handle(Api.OFFSET_COMMIT, parsed(
        Api.OFFSET_COMMIT, group="solo", offsets=[["t", 0, 5, None]]))
    assert resp["parts"] == [("t", 0, 0, "")]
    res = await svc.handle(Api.DELETE_GROUPS, parsed(Api.DELETE_GROUPS, groups=["solo", "none"]))
    assert res["results"] == [("solo", 0, ""), ("none", int(ErrorCode.GROUP_ID_NOT_FOUND),
                                                "no group 'none'")]


async def test_commits_for_a_deleted_topic_are_refused_and_the_others_kept(autojump_clock):
    svc, topic = make_service(deleted_topic=lambda name: name == "gone")
    resp = await svc.handle(Api.OFFSET_COMMIT, parsed(
        Api.OFFSET_COMMIT, group="solo", offsets=[["gone", 0, 5, None], ["t", 0, 6, None]]))
    assert resp["parts"] == [("t", 0, 0, ""), ("gone", 0, int(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION),
                                               "topic 'gone' was deleted: its offsets were "
                                               "deleted with it")]
    fetched = await svc.handle(Api.OFFSET_FETCH, parsed(Api.OFFSET_FETCH, group="solo"))
    assert fetched["parts"] == [("t", 0, 6, None, -1)]
    assert {k for _, k, _ in topic.log} and all(b"gone" not in k for _, k, _ in topic.log)


async def test_find_coordinator_and_errors(autojump_clock):
    svc, _ = make_service()
    resp = await svc.handle(Api.FIND_COORDINATOR, parsed(Api.FIND_COORDINATOR, key="g"))
    p = svc.coordinator.partition_for("g")
    assert resp == {"node_id": p % 2, "host": "127.0.0.1", "port": 9092 + p % 2}
    with pytest.raises(ApiError) as e:
        await svc.handle(Api.FIND_COORDINATOR, parsed(Api.FIND_COORDINATOR, key=""))
    assert e.value.code is ErrorCode.INVALID_GROUP_ID
    with pytest.raises(ApiError) as e:
        await svc.handle(Api.SYNC_GROUP, parsed(Api.SYNC_GROUP, group="g", generation=1,
                                                member_id="nobody"))
    assert e.value.code is ErrorCode.UNKNOWN_MEMBER_ID
    with pytest.raises(ApiError) as e:
        await svc.handle(Api.PRODUCE, {})
    assert e.value.code is ErrorCode.UNKNOWN_API
    assert Api.JOIN_GROUP in GROUP_APIS and len(GROUP_APIS) == 11
    assert svc._waiters == {}


def test_group_clock_is_not_moved_by_steps_of_the_wall_clock(monkeypatch):
    """Member sessions and rebalance deadlines run on a SteadyWallClock: a wall clock
    stepped by minutes (the harness's clock nemesis) neither expires every session at
    once nor holds expiry off; it starts at the wall clock (persisted timestamps)."""
    import time

    from raftlog.node.clock import SteadyWallClock

    clock = SteadyWallClock()
    assert abs(clock() - time.time() * 1000) < 50
    real = time.time
    monkeypatch.setattr(time, "time", lambda: real() + 600)  # stepped 10 minutes ahead
    before = clock()
    assert abs(SteadyWallClock()() - before - 600_000) < 50  # a new one sees the step
    assert clock() - before < 50  # the running one does not
