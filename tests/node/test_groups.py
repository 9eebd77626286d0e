"""Group coordinator state machine: scenarios, fencing, expiry, records, failover load,
and a hypothesis state machine with invariants."""

from __future__ import annotations

import itertools

import cbor2
import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from raftlog.errors import ApiError, ErrorCode
from raftlog.node.groups import (
    CommittedOffset,
    CorruptGroupRecordError,
    GroupConfig,
    GroupCoordinator,
    GroupState,
    Persist,
    Reply,
    decode_key,
    decode_offset_value,
    group_key,
    offset_key,
    offset_value,
    partition_for,
)

CFG = GroupConfig(min_session_timeout_ms=100, initial_rebalance_delay_ms=10, offsets_partitions=4)
PROTO = [("range", {"topics": ["t"]})]


class Driver:
    """Runs a coordinator like the node would: persists to a list, collects replies."""

    def __init__(self, config=CFG):
        ids = itertools.count(1)
        self.c = GroupCoordinator(config, new_member_id=lambda cid: f"{cid or 'm'}-{next(ids)}")
        for p in range(config.offsets_partitions):
            self.c.begin_loading(p)
            self.c.finish_loading(p, 0)
        self.log: list[tuple[int, bytes, bytes | None]] = []
        self.replies: dict = {}
        self.tokens = itertools.count(1)
        self.now = 0

    def run(self, effects):
        for e in effects:
            if isinstance(e, Persist):
                self.log.extend((e.partition, k, v) for k, v in e.records)
                self.c.persisted(e)
            else:
                assert isinstance(e, Reply)
                assert e.token not in self.replies, "a request answered twice"
                self.replies[e.token] = e

    def do(self, outcome, token=None):
        self.run(outcome.effects)
        if outcome.response is not None:
            return outcome.response
        return self.replies.get(token)

    def join(self, group="g", member_id="", **kw):
        t = next(self.tokens)
        kw.setdefault("protocols", PROTO)
        kw.setdefault("session_timeout_ms", 1000)
        kw.setdefault("rebalance_timeout_ms", 2000)
        out = self.c.join(group, member_id, token=t, now_ms=self.now, **kw)
        self.run(out.effects)
        return t, out.response

    def sync(self, member_id, generation, group="g", assignments=None, **kw):
        t = next(self.tokens)
        out = self.c.sync(group, member_id, generation, token=t, now_ms=self.now,
                          assignments=assignments, **kw)
        self.run(out.effects)
        return t, out.response

    def tick(self, now):
        self.now = now
        self.run(self.c.tick(now))

    def reply(self, token):
        r = self.replies[token]
        assert r.error is ErrorCode.NONE, r
        return r.response


def form_group(d: Driver, n: int, group="g"):
    """n members join, the leader syncs: returns (member ids, generation)."""
    tokens = [d.join(group, client_id=f"c{i}")[0] for i in range(n)]
    d.tick(d.now + 10)  # the initial rebalance delay
    resp = [d.reply(t) for t in tokens]
    gen = resp[0]["generation"]
    leader = resp[0]["leader"]
    ids = [r["member_id"] for r in resp]
    assert all(r["generation"] == gen and r["leader"] == leader for r in resp)
    lead = next(r for r in resp if r["member_id"] == leader)
    assert sorted(m[0] for m in lead["members"]) == sorted(ids)
    for mid in ids:
        if mid != leader:
            d.sync(mid, gen, group)
    d.sync(leader, gen, group, assignments={mid: {"partitions": [i]} for i, mid in enumerate(ids)})
    assert d.c.groups[group].state is GroupState.STABLE
    return ids, gen


def code(fn, *a, **kw):
    with pytest.raises(ApiError) as e:
        fn(*a, **kw)
    return e.value.code


# --------------------------------------------------------------------------- scenarios


def test_three_members_join_sync_and_get_their_assignments():
    d = Driver()
    ids, gen = form_group(d, 3)
    assert gen == 1
    for i, mid in enumerate(ids):
        t, resp = d.sync(mid, gen)
        assert resp["assignment"] == {"partitions": [i]}
    assert d.c.describe("g")["state"] == "Stable"


def test_followers_wait_for_the_leader_sync():
    d = Driver()
    t1, _ = d.join(client_id="a")
    t2, _ = d.join(client_id="b")
    d.tick(10)
    resp1 = d.reply(t1)
    leader = resp1["leader"]
    follower = d.reply(t2)["member_id"] if leader == resp1["member_id"] else resp1["member_id"]
    ft, fresp = d.sync(follower, 1)
    assert fresp is None and ft not in d.replies
    d.sync(leader, 1, assignments={follower: "F", leader: "L"})
    assert d.reply(ft)["assignment"] == "F"
    # group metadata was persisted before the replies
    assert any(k == group_key("g") for _, k, _ in d.log)


def test_heartbeat_reports_rebalance_and_old_generation_is_fenced():
    d = Driver()
    (a,), gen = form_group(d, 1)
    assert d.c.heartbeat("g", a, gen, now_ms=0).response == {}
    t_new, _ = d.join(client_id="new")  # a new member: rebalance pending
    assert code(d.c.heartbeat, "g", a, gen, now_ms=0) is ErrorCode.REBALANCE_IN_PROGRESS
    t_a, _ = d.join(member_id=a)
    r = d.reply(t_a)
    assert r["generation"] == gen + 1
    assert code(d.c.heartbeat, "g", a, gen, now_ms=0) is ErrorCode.ILLEGAL_GENERATION
    assert code(d.c.sync, "g", a, gen, token=99, now_ms=0) is ErrorCode.ILLEGAL_GENERATION
    assert code(d.c.commit_offsets, "g", a, gen, [("t", 0, 5, None)], now_ms=0) \
        is ErrorCode.ILLEGAL_GENERATION
    assert code(d.c.heartbeat, "g", "ghost", gen + 1, now_ms=0) is ErrorCode.UNKNOWN_MEMBER_ID


def test_commit_during_completing_rebalance_is_rejected_then_accepted_when_stable():
    d = Driver()
    t, _ = d.join(client_id="a")
    d.tick(10)
    r = d.reply(t)
    mid, gen = r["member_id"], r["generation"]
    assert code(d.c.commit_offsets, "g", mid, gen, [("t", 0, 1, None)], now_ms=0) \
        is ErrorCode.REBALANCE_IN_PROGRESS
    d.sync(mid, gen, assignments={mid: []})
    resp = d.do(d.c.commit_offsets("g", mid, gen, [("t", 0, 7, "m"), ("t", 1, 3, None)], now_ms=5))
    assert resp == {"parts": [("t", 0, 0, ""), ("t", 1, 0, "")]}
    assert d.c.fetch_offsets("g") == [("t", 0, 7, "m", -1), ("t", 1, 3, None, -1)]
    assert d.c.fetch_offsets("g", [("t", 2)]) == [("t", 2, -1, None, -1)]


def test_offsets_visible_only_after_persisted():
    d = Driver()
    out = d.c.commit_offsets("solo", "", -1, [("t", 0, 10, None)], now_ms=1)
    assert d.c.fetch_offsets("solo") == []
    (p,) = out.effects
    d.c.persisted(p)
    assert d.c.fetch_offsets("solo") == [("t", 0, 10, None, -1)]


def test_committed_leader_epochs_are_stored_and_returned():
    """KIP-320: a commit's leader epoch survives the __consumer_offsets value (a
    replay), and a value written without one (older nodes) reads back as -1."""
    d = Driver()
    out = d.c.commit_offsets("e", "", -1, [("t", 0, 10, "m", 4), ("t", 1, 2, None, -1),
                                          ("t", 2, 3, None)], now_ms=1)
    (p,) = out.effects
    d.c.persisted(p)
    assert d.c.fetch_offsets("e") == [("t", 0, 10, "m", 4), ("t", 1, 2, None, -1),
                                      ("t", 2, 3, None, -1)]
    values = [decode_offset_value(v) for _, v in p.records]
    assert [v.leader_epoch for v in values] == [4, -1, -1]
    old = offset_value(CommittedOffset(5, None, 1))
    assert cbor2.loads(old).keys() == {"v", "offset", "metadata", "commit_timestamp"}
    assert decode_offset_value(old).leader_epoch == -1


def test_simple_commit_rejected_when_group_has_members_and_metadata_limit():
    d = Driver()
    form_group(d, 1)
    assert code(d.c.commit_offsets, "g", "", -1, [("t", 0, 1, None)], now_ms=0) \
        is ErrorCode.UNKNOWN_MEMBER_ID
    assert code(d.c.commit_offsets, "new", "x", 3, [("t", 0, 1, None)], now_ms=0) \
        is ErrorCode.ILLEGAL_GENERATION
    resp = d.do(d.c.commit_offsets("other", "", -1, [("t", 0, 1, "x" * 5000)], now_ms=0))
    assert resp["parts"][0][2] == ErrorCode.OFFSET_METADATA_TOO_LARGE


def test_leave_rebalances_remaining_members():
    d = Driver()
    ids, gen = form_group(d, 3)
    d.do(d.c.leave("g", ids[2], now_ms=0))
    assert d.c.groups["g"].state is GroupState.PREPARING_REBALANCE
    ts = [d.join(member_id=m)[0] for m in ids[:2]]
    assert {d.reply(t)["generation"] for t in ts} == {gen + 1}
    assert code(d.c.leave, "g", ids[2], now_ms=0) is ErrorCode.UNKNOWN_MEMBER_ID


def test_last_member_leaving_empties_the_group_and_it_can_be_deleted():
    d = Driver()
    (a,), gen = form_group(d, 1)
    d.do(d.c.commit_offsets("g", a, gen, [("t", 0, 4, None)], now_ms=0))
    assert code(d.c.delete_group, "g", 0) is ErrorCode.NON_EMPTY_GROUP
    d.do(d.c.leave("g", a, now_ms=0))
    assert d.c.groups["g"].state is GroupState.EMPTY
    assert d.c.groups["g"].generation == gen + 1
    d.do(d.c.delete_group("g", 0))
    assert "g" not in d.c.groups
    assert any(k == offset_key("g", "t", 0) and v is None for _, k, v in d.log)
    assert any(k == group_key("g") and v is None for _, k, v in d.log)
    assert code(d.c.delete_group, "g", 0) is ErrorCode.GROUP_ID_NOT_FOUND
    assert d.c.describe("g")["state"] == "Dead"


def test_session_timeout_expires_a_silent_member():
    d = Driver()
    ids, gen = form_group(d, 2)
    d.tick(900)
    d.c.heartbeat("g", ids[0], gen, now_ms=900)
    d.tick(1010)  # ids[1] silent since 10, session 1000 ms
    g = d.c.groups["g"]
    assert list(g.members) == [ids[0]]
    assert g.state is GroupState.PREPARING_REBALANCE
    assert code(d.c.heartbeat, "g", ids[1], gen, now_ms=1010) is ErrorCode.UNKNOWN_MEMBER_ID
    t, _ = d.join(member_id=ids[0])
    assert d.reply(t)["generation"] == gen + 1


def test_rebalance_timeout_removes_members_that_do_not_rejoin():
    """max.poll.interval: a member stuck in processing does not rejoin in time."""
    d = Driver()
    ids, gen = form_group(d, 2)
    d.now = 10
    t0, _ = d.join(member_id=ids[0], protocols=[("range", {"topics": ["t", "u"]})])
    for now in range(100, 2010, 100):  # ids[1] keeps heartbeating but never rejoins
        assert code(d.c.heartbeat, "g", ids[1], gen, now_ms=now) is ErrorCode.REBALANCE_IN_PROGRESS
        d.tick(now)
    assert t0 not in d.replies
    d.tick(2010)
    r = d.reply(t0)
    assert r["generation"] == gen + 1 and [m[0] for m in r["members"]] == [ids[0]]
    assert ids[1] not in d.c.groups["g"].members


def test_leader_that_never_syncs_is_removed():
    d = Driver()
    ts = [d.join(client_id=c)[0] for c in "ab"]
    d.tick(10)
    rs = [d.reply(t) for t in ts]
    leader = rs[0]["leader"]
    other = next(r["member_id"] for r in rs if r["member_id"] != leader)
    ft, _ = d.sync(other, 1)
    d.tick(2010)  # sync deadline = rebalance timeout
    assert d.replies[ft].error is ErrorCode.REBALANCE_IN_PROGRESS
    assert leader not in d.c.groups["g"].members


def test_initial_rebalance_delay_waits_for_more_members():
    d = Driver(GroupConfig(min_session_timeout_ms=100, initial_rebalance_delay_ms=300,
                           offsets_partitions=1))
    t1, _ = d.join(client_id="a")
    d.tick(200)
    t2, _ = d.join(client_id="b")  # extends the delay to 500
    d.tick(400)
    assert t1 not in d.replies
    d.tick(500)
    assert len(d.reply(t1)["members"]) + len(d.reply(t2)["members"]) == 2


def test_static_member_rejoin_keeps_assignment_without_rebalance_and_fences_old():
    d = Driver()
    t, _ = d.join(client_id="a", group_instance_id="i1")
    t2, _ = d.join(client_id="b")
    d.tick(10)
    r1, r2 = d.reply(t), d.reply(t2)
    old, other = r1["member_id"], r2["member_id"]
    leader = r1["leader"]
    d.sync(other if leader == old else old, 1)
    d.sync(leader, 1, assignments={old: "A", other: "B"})
    _, resp = d.join(group_instance_id="i1", client_id="a")  # restart: new member id
    assert resp is not None and resp["generation"] == 1 and resp["member_id"] != old
    assert d.c.groups["g"].state is GroupState.STABLE
    new = resp["member_id"]
    assert d.sync(new, 1, group_instance_id="i1")[1]["assignment"] == "A"
    assert code(d.c.heartbeat, "g", old, 1, now_ms=0, group_instance_id="i1") \
        is ErrorCode.FENCED_INSTANCE_ID
    assert code(d.c.commit_offsets, "g", old, 1, [("t", 0, 1, None)], now_ms=0,
                group_instance_id="i1") is ErrorCode.FENCED_INSTANCE_ID


def test_static_member_replaced_while_waiting_gets_fenced_reply():
    d = Driver()
    form_group(d, 1)
    t_old, _ = d.join(client_id="s", group_instance_id="i")  # joins: rebalance
    t_new, _ = d.join(client_id="s", group_instance_id="i")  # restarted before it finished
    assert d.replies[t_old].error is ErrorCode.FENCED_INSTANCE_ID


def test_join_validation():
    d = Driver()
    assert code(d.c.join, "", "", token=1, now_ms=0, protocols=PROTO) is ErrorCode.INVALID_GROUP_ID
    assert code(d.c.join, "g", "", token=1, now_ms=0, protocols=PROTO,
                session_timeout_ms=1) is ErrorCode.INVALID_SESSION_TIMEOUT
    assert code(d.c.join, "g", "", token=1, now_ms=0, protocols=[]) \
        is ErrorCode.INCONSISTENT_GROUP_PROTOCOL
    assert code(d.c.join, "g", "nobody", token=1, now_ms=0, protocols=PROTO) \
        is ErrorCode.UNKNOWN_MEMBER_ID
    form_group(d, 1)
    assert code(d.c.join, "g", "", token=1, now_ms=0, protocols=[("other", None)]) \
        is ErrorCode.INCONSISTENT_GROUP_PROTOCOL
    small = Driver(GroupConfig(min_session_timeout_ms=100, initial_rebalance_delay_ms=0,
                               max_size=1, offsets_partitions=1))
    small.join(client_id="a")
    assert code(small.c.join, "g", "", token=9, now_ms=0, protocols=PROTO) \
        is ErrorCode.GROUP_MAX_SIZE_REACHED


def test_protocol_selection_by_vote():
    d = Driver()
    t1, _ = d.join(client_id="a", protocols=[("range", 1), ("roundrobin", 1)])
    t2, _ = d.join(client_id="b", protocols=[("roundrobin", 2), ("range", 2)])
    t3, _ = d.join(client_id="c", protocols=[("roundrobin", 3), ("cooperative-sticky", 3)])
    d.tick(10)
    assert d.reply(t1)["protocol"] == "roundrobin"


def test_not_coordinator_and_loading():
    c = GroupCoordinator(CFG)
    assert code(c.heartbeat, "g", "m", 1, now_ms=0) is ErrorCode.NOT_COORDINATOR
    c.begin_loading(partition_for("g", CFG.offsets_partitions))
    assert code(c.heartbeat, "g", "m", 1, now_ms=0) is ErrorCode.COORDINATOR_LOAD_IN_PROGRESS


def test_unload_answers_waiting_requests_not_coordinator():
    d = Driver()
    t, _ = d.join(client_id="a")
    d.tick(10)
    r = d.reply(t)
    t2, _ = d.join(client_id="b")  # waits in PreparingRebalance
    d.run(d.c.unload(d.c.partition_for("g")))
    assert d.replies[t2].error is ErrorCode.NOT_COORDINATOR
    assert r["member_id"]


def test_offsets_of_empty_groups_expire():
    d = Driver()
    d.do(d.c.commit_offsets("old", "", -1, [("t", 0, 1, None)], now_ms=0))
    d.run(d.c.expire_offsets(CFG.offsets_retention_ms - 1))
    assert "old" in d.c.groups
    d.run(d.c.expire_offsets(CFG.offsets_retention_ms + 1))
    assert "old" not in d.c.groups
    assert any(k == offset_key("old", "t", 0) and v is None for _, k, v in d.log)


def test_deleting_a_topic_deletes_its_committed_offsets_in_every_group():
    d = Driver()
    (a,), gen = form_group(d, 1)
    d.do(d.c.commit_offsets("g", a, gen, [("t", 0, 4, None), ("u", 0, 7, None)], now_ms=0))
    d.do(d.c.commit_offsets("only-t", "", -1, [("t", 0, 2, None), ("t", 1, 3, None)], now_ms=0))
    d.do(d.c.commit_offsets("only-u", "", -1, [("u", 0, 1, None)], now_ms=0))
    mark = len(d.log)
    d.run(d.c.delete_topic_offsets(["t"], now_ms=5))
    # the live group keeps its other topic's offsets and its members
    assert d.c.fetch_offsets("g") == [("u", 0, 7, None, -1)]
    assert d.c.groups["g"].state is GroupState.STABLE
    # an Empty group left without offsets is gone, as Kafka's
    assert "only-t" not in d.c.groups and d.c.describe("only-t")["state"] == "Dead"
    assert d.c.fetch_offsets("only-u") == [("u", 0, 1, None, -1)]
    tombstones = {(k, v) for _, k, v in d.log[mark:]}
    assert tombstones == {(offset_key("g", "t", 0), None), (offset_key("only-t", "t", 0), None),
                          (offset_key("only-t", "t", 1), None), (group_key("only-t"), None)}
    # a new coordinator loading the log does not bring them back
    c2 = failover(d, 10, compact=False)
    assert c2.fetch_offsets("g") == [("u", 0, 7, None, -1)] and "only-t" not in c2.groups
    assert d.c.delete_topic_offsets(["t"], now_ms=6) == []  # nothing left: no records


def test_topic_offsets_deletion_skips_partitions_not_loaded_and_can_be_narrowed():
    d = Driver()
    d.do(d.c.commit_offsets("g1", "", -1, [("t", 0, 1, None)], now_ms=0))
    d.do(d.c.commit_offsets("g2", "", -1, [("t", 0, 1, None)], now_ms=0))
    p1, p2 = d.c.partition_for("g1"), d.c.partition_for("g2")
    assert p1 != p2
    effects = d.c.delete_topic_offsets(["t"], now_ms=1, partition=p1)
    assert [e.partition for e in effects] == [p1]
    d.run(effects)
    assert "g1" not in d.c.groups and d.c.fetch_offsets("g2") == [("t", 0, 1, None, -1)]
    d.c.begin_loading(p2)  # loading: its groups are not touched (the loader applies it)
    assert d.c.delete_topic_offsets(["t"], now_ms=2) == []


def test_next_deadline():
    d = Driver()
    assert d.c.next_deadline_ms() is None
    ids, gen = form_group(d, 1)
    assert d.c.next_deadline_ms() == 1010


# --------------------------------------------------------------------------- records, failover


def test_key_encoding_is_canonical_and_rejects_garbage():
    assert decode_key(offset_key("g", "t", 3)) == (1, "g", "t", 3)
    assert decode_key(group_key("g")) == (2, "g")
    assert offset_key("g", "t", 3) == offset_key("g", "t", 3)
    for bad in (b"\xff\xff", b"\x80", group_key("g")[:-1]):
        with pytest.raises(CorruptGroupRecordError):
            decode_key(bad)


def compacted(log):
    last = {}
    for p, k, v in log:
        last[(p, k)] = v
    return last


def failover(d: Driver, now: int, compact: bool) -> GroupCoordinator:
    c2 = GroupCoordinator(d.c.config)
    records = compacted(d.log).items() if compact else [((p, k), v) for p, k, v in d.log]
    for p in range(d.c.config.offsets_partitions):
        c2.begin_loading(p)
        for (pp, k), v in records:
            if pp == p:
                c2.replay(p, k, v)
        c2.finish_loading(p, now)
    return c2


@pytest.mark.parametrize("compact", [False, True])
def test_new_coordinator_loads_offsets_and_members(compact):
    d = Driver()
    ids, gen = form_group(d, 2)
    d.do(d.c.commit_offsets("g", ids[0], gen, [("t", 0, 11, "a"), ("t", 1, 12, None)], now_ms=3))
    d.do(d.c.commit_offsets("g", ids[0], gen, [("t", 0, 13, None)], now_ms=4))
    d.do(d.c.commit_offsets("gone", "", -1, [("t", 0, 1, None)], now_ms=4))
    d.do(d.c.delete_group("gone", 5))
    c2 = failover(d, 100, compact)
    assert c2.fetch_offsets("g") == [("t", 0, 13, None, -1), ("t", 1, 12, None, -1)]
    assert "gone" not in c2.groups
    g = c2.groups["g"]
    assert g.state is GroupState.STABLE and g.generation == gen and set(g.members) == set(ids)
    # the members carry on with their generation on the new coordinator
    assert c2.heartbeat("g", ids[0], gen, now_ms=150).response == {}
    out = c2.sync("g", ids[1], gen, token=1, now_ms=150)
    assert out.response["assignment"] == {"partitions": [1]}
    # a zombie of an older generation is still fenced
    assert code(c2.commit_offsets, "g", ids[0], gen - 1, [("t", 0, 1, None)], now_ms=150) \
        is ErrorCode.ILLEGAL_GENERATION
    # members that do not come back expire
    c2.heartbeat("g", ids[0], gen, now_ms=1100)
    c2.tick(150 + 1000)
    assert list(c2.groups["g"].members) == [ids[0]]


# --------------------------------------------------------------------------- state machine


class GroupMachine(RuleBasedStateMachine):
    """Random members join, sync, heartbeat, commit, leave and go silent while time
    passes; the coordinator's invariants hold and a reloaded coordinator agrees."""

    def __init__(self):
        super().__init__()
        self.d = Driver(GroupConfig(min_session_timeout_ms=100, initial_rebalance_delay_ms=50,
                                    offsets_partitions=2))
        self.pending: dict = {}  # token -> ("join"|"sync", client)
        self.known: dict[str, tuple[str, int]] = {}  # client -> (member id, generation)
        self.last_generation = 0
        self.commits: dict = {}  # (t, p) -> offset accepted last

    def _collect(self):
        for t in [t for t in self.pending if t in self.d.replies]:
            kind, client = self.pending.pop(t)
            r = self.d.replies[t]
            if r.error is ErrorCode.NONE and kind == "join":
                self.known[client] = (r.response["member_id"], r.response["generation"])

    @rule(client=st.sampled_from("abcd"), static=st.booleans())
    def join(self, client, static):
        mid = self.known.get(client, ("", 0))[0]
        try:
            t, resp = self.d.join(member_id=mid, client_id=client,
                                  group_instance_id=client if static else None)
        except ApiError as e:
            assert e.code in (ErrorCode.UNKNOWN_MEMBER_ID, ErrorCode.FENCED_INSTANCE_ID)
            self.known.pop(client, None)
            return
        if resp is not None:
            self.known[client] = (resp["member_id"], resp["generation"])
        else:
            self.pending[t] = ("join", client)
        self._collect()

    @rule(client=st.sampled_from("abcd"))
    def sync(self, client):
        if client not in self.known:
            return
        mid, gen = self.known[client]
        g = self.d.c.groups.get("g")
        assignments = {m: [m] for m in g.members} if g and g.leader == mid else None
        try:
            t, resp = self.d.sync(mid, gen, assignments=assignments)
        except ApiError as e:
            assert e.code in (ErrorCode.UNKNOWN_MEMBER_ID, ErrorCode.ILLEGAL_GENERATION,
                              ErrorCode.REBALANCE_IN_PROGRESS, ErrorCode.FENCED_INSTANCE_ID)
            return
        if resp is None:
            self.pending[t] = ("sync", client)
        else:
            assert resp["assignment"] in (None, [mid])
        self._collect()

    @rule(client=st.sampled_from("abcd"))
    def heartbeat(self, client):
        if client not in self.known:
            return
        mid, gen = self.known[client]
        try:
            self.d.c.heartbeat("g", mid, gen, now_ms=self.d.now)
        except ApiError as e:
            assert e.code in (ErrorCode.UNKNOWN_MEMBER_ID, ErrorCode.ILLEGAL_GENERATION,
                              ErrorCode.REBALANCE_IN_PROGRESS, ErrorCode.FENCED_INSTANCE_ID)

    @rule(client=st.sampled_from("abcd"), offset=st.integers(0, 100))
    def commit(self, client, offset):
        if client not in self.known:
            return
        mid, gen = self.known[client]
        g = self.d.c.groups.get("g")
        try:
            resp = self.d.do(self.d.c.commit_offsets("g", mid, gen, [("t", 0, offset, None)],
                                                     now_ms=self.d.now))
        except ApiError as e:
            assert e.code in (ErrorCode.UNKNOWN_MEMBER_ID, ErrorCode.ILLEGAL_GENERATION,
                              ErrorCode.REBALANCE_IN_PROGRESS, ErrorCode.FENCED_INSTANCE_ID)
            return
        # accepted only from the current generation of a current member
        assert g.generation == gen and mid in g.members
        assert resp["parts"][0][2] == 0
        self.commits[("t", 0)] = offset

    @rule(client=st.sampled_from("abcd"))
    def leave(self, client):
        if client not in self.known:
            return
        try:
            self.d.do(self.d.c.leave("g", self.known.pop(client)[0], now_ms=self.d.now))
        except ApiError as e:
            assert e.code in (ErrorCode.UNKNOWN_MEMBER_ID, ErrorCode.FENCED_INSTANCE_ID)
        self._collect()

    @rule(ms=st.integers(1, 1500))
    def time_passes(self, ms):
        self.d.tick(self.d.now + ms)
        self._collect()

    @invariant()
    def consistent(self):
        g = self.d.c.groups.get("g")
        if g is None:
            return
        assert g.generation >= self.last_generation
        self.last_generation = g.generation
        for iid, mid in g.static.items():
            assert g.members[mid].group_instance_id == iid
        assert g.leader is None or g.leader in g.members
        if g.state in (GroupState.STABLE, GroupState.COMPLETING_REBALANCE):
            assert g.members and all(m.join_token is None for m in g.members.values())
            assert g.leader in g.members
        if g.state is not GroupState.COMPLETING_REBALANCE:
            assert all(m.sync_token is None for m in g.members.values())
        if g.state is GroupState.EMPTY:
            assert not g.members
        # every waiting request is either still waiting in the group or answered
        waiting = {m.join_token for m in g.members.values()} | {m.sync_token for m in g.members.values()}
        for t in self.pending:
            assert t in waiting or t in self.d.replies

    @invariant()
    def reload_agrees(self):
        g = self.d.c.groups.get("g")
        if g is None or g.state not in (GroupState.STABLE, GroupState.EMPTY):
            return
        c2 = failover(self.d, self.d.now, compact=True)
        assert c2.fetch_offsets("g") == self.d.c.fetch_offsets("g")
        if g.state is GroupState.STABLE:
            g2 = c2.groups["g"]
            assert (g2.generation, g2.leader, set(g2.members)) == (g.generation, g.leader, set(g.members))
            assert {m.member_id: m.assignment for m in g2.members.values()} == {
                m.member_id: m.assignment for m in g.members.values()}


TestGroupMachine = GroupMachine.TestCase
TestGroupMachine.settings = settings(max_examples=150, stateful_step_count=40, deadline=None)
