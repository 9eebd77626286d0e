"""Admin API and CLI for consumer groups.

Unit tests (pure offset-reset planning, timestamps, wire decoding, argument
parsing, output formats, coordinator retries against a scripted fake node) run
always; the ``slow`` ones run the Admin and the ``raftlog groups`` CLI against a
real node process.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from datetime import UTC, datetime, timedelta, timezone

import pytest

from raftlog.client import admin as admin_mod
from raftlog.client import cli
from raftlog.client.admin import (
    Admin,
    GroupDescription,
    GroupListing,
    GroupOffset,
    MemberDescription,
    group_description_from_wire,
    merge_group_listings,
    plan_offset_reset,
    to_timestamp_ms,
)
from raftlog.client.errors import (
    BrokerNotAvailableError,
    GroupIdNotFoundError,
    GroupNotEmptyError,
    UnknownTopicOrPartitionError,
)
from raftlog.errors import ApiError, ErrorCode
from raftlog.protocol import Api, parse_response

from ..conftest import free_port
from .fake_node import ScriptedNode
from .test_groups_e2e import GROUP_NODE, _until

TP = admin_mod.TopicPartition
A0, A1, B0 = TP("a", 0), TP("a", 1), TP("b", 0)


# --------------------------------------------------------------------------- plan_offset_reset

EARLIEST = {A0: 10, A1: 0, B0: 5}
LATEST = {A0: 100, A1: 50, B0: 5}


def test_plan_to_earliest_and_latest():
    assert plan_offset_reset([A1, A0], earliest=EARLIEST, latest=LATEST, to="earliest") == {
        A0: 10, A1: 0}
    assert plan_offset_reset([A0, A1, B0], earliest=EARLIEST, latest=LATEST, to="latest") == {
        A0: 100, A1: 50, B0: 5}


def test_plan_shift_by_moves_committed_and_clamps_into_the_log():
    committed = {A0: 20, A1: 48, B0: 5}
    assert plan_offset_reset([A0, A1], earliest=EARLIEST, latest=LATEST, committed=committed,
                             shift_by=5) == {A0: 25, A1: 50}  # 53 clamped to the log end
    assert plan_offset_reset([A0, A1], earliest=EARLIEST, latest=LATEST, committed=committed,
                             shift_by=-15) == {A0: 10, A1: 33}  # 5 clamped to the log start
    assert plan_offset_reset([A0], earliest=EARLIEST, latest=LATEST, committed=committed,
                             shift_by=0) == {A0: 20}
    # a committed offset below the log start (retention deleted it) comes back into range
    assert plan_offset_reset([A0], earliest=EARLIEST, latest=LATEST, committed={A0: 3},
                             shift_by=1) == {A0: 10}


def test_plan_shift_by_without_a_committed_offset_is_an_error():
    with pytest.raises(ValueError, match="a-1.*no committed offset"):
        plan_offset_reset([A0, A1], earliest=EARLIEST, latest=LATEST, committed={A0: 20},
                          shift_by=1)


def test_plan_to_a_timestamp_uses_the_lookup_and_falls_back_to_latest():
    by_time = {A0: 42, A1: -1}  # A1: no record that new; B0: not in the answer at all
    assert plan_offset_reset([A0, A1, B0], earliest=EARLIEST, latest=LATEST, to=1_700_000_000_000,
                             by_time=by_time) == {A0: 42, A1: 50, B0: 5}
    assert plan_offset_reset([A0], earliest=EARLIEST, latest=LATEST,
                             to=datetime(2024, 1, 1, tzinfo=UTC), by_time={A0: None}) == {A0: 100}
    with pytest.raises(ValueError, match="by_time"):
        plan_offset_reset([A0], earliest=EARLIEST, latest=LATEST, to=5)


@pytest.mark.parametrize("kw", [{}, {"to": "earliest", "shift_by": 1}, {"shift_by": True},
                                {"shift_by": 1.5}])
def test_plan_rejects_bad_arguments(kw):
    with pytest.raises(ValueError):
        plan_offset_reset([A0], earliest=EARLIEST, latest=LATEST, committed={A0: 20}, **kw)


def test_plan_needs_earliest_and_latest_of_every_partition():
    with pytest.raises(ValueError, match="b-0"):
        plan_offset_reset([B0], earliest={}, latest=LATEST, to="latest")


def test_plan_of_no_partitions_is_empty():
    assert plan_offset_reset([], earliest={}, latest={}, to="earliest") == {}


# --------------------------------------------------------------------------- timestamps


def test_to_timestamp_ms():
    assert to_timestamp_ms(1234) == 1234
    assert to_timestamp_ms(datetime(1970, 1, 1, 0, 0, 1, 5000, tzinfo=UTC)) == 1005
    assert to_timestamp_ms("2024-05-01T12:00:00Z") == 1714564800000
    assert to_timestamp_ms("2024-05-01T14:00:00+02:00") == 1714564800000
    assert to_timestamp_ms("2024-05-01T12:00:00.123Z") == 1714564800123
    tz = timezone(timedelta(hours=-5))
    assert to_timestamp_ms(datetime(2024, 5, 1, 7, tzinfo=tz)) == 1714564800000
    naive = datetime(2024, 5, 1, 12, 0, 0)  # local time
    assert to_timestamp_ms(naive) == round(naive.timestamp() * 1000)
    for bad in ("yesterday", "2024-13-01", -1):
        with pytest.raises(ValueError):
            to_timestamp_ms(bad)
    with pytest.raises(TypeError):
        to_timestamp_ms(True)


# --------------------------------------------------------------------------- wire decoding


def test_merge_group_listings_sorts_and_dedupes():
    merged = merge_group_listings([
        [["b", "consumer", "Stable"], ["a", "", "Empty"]],
        [],
        [["c", "consumer", "PreparingRebalance"], ["b", "consumer", "Empty"]],
    ])
    assert merged == [GroupListing("a", "", "Empty"), GroupListing("b", "consumer", "Stable"),
                      GroupListing("c", "consumer", "PreparingRebalance")]


def _entry(**kw):
    """A DESCRIBE_GROUPS entry as the client reads it off the wire (parts typed)."""
    e = {"group": "g", "error": 0, "message": "", "state": "Stable", "protocol_type": "consumer",
         "protocol": "range", "generation": 3, "leader": "m1", "members": []}
    e.update(kw)
    return parse_response(Api.DESCRIBE_GROUPS, {"groups": [e]})["groups"][0]


def test_group_description_decodes_consumer_assignments():
    d = group_description_from_wire(_entry(members=[
        ["m1", None, "c1", "/127.0.0.1", {"topics": ["a"]},
         {"partitions": [["a", 1], ["a", 0]]}],
        ["m2", "inst-2", "c2", "/127.0.0.1", {"topics": ["a"]}, None],
        ["m3", None, "c3", "h", None, {"partitions": "garbage"}],
    ]))
    assert (d.group_id, d.state, d.protocol_type, d.protocol, d.generation, d.leader) == (
        "g", "Stable", "consumer", "range", 3, "m1")
    assert [m.member_id for m in d.members] == ["m1", "m2", "m3"]
    assert d.members[0] == MemberDescription("m1", None, "c1", "/127.0.0.1", {A0, A1})
    assert isinstance(d.members[0].assignment, set)
    assert d.members[1].group_instance_id == "inst-2" and d.members[1].assignment == set()
    assert d.members[2].assignment == set()  # undecodable: empty rather than a failure
    assert d.owners() == {A0: "m1", A1: "m1"}
    assert d.exists and d.offsets == {}


def test_group_description_of_other_protocol_types_keeps_assignments_opaque():
    d = group_description_from_wire(_entry(protocol_type="connect", members=[
        ["m1", None, "c1", "h", b"x", {"partitions": [["a", 0]]}]]))
    assert d.members[0].assignment == set()


def test_unknown_group_is_dead_and_does_not_exist():
    d = group_description_from_wire(_entry(state="Dead", protocol_type="", protocol="",
                                           generation=0, leader=None))
    assert not d.exists


# --------------------------------------------------------------------------- CLI parsing, output


def _parse(*argv):
    return cli.build_parser().parse_args(list(argv))


def test_cli_parses_group_commands():
    a = _parse("groups", "list", "--bootstrap-server", "h:1", "--json")
    assert (a.command, a.action, a.bootstrap_server, a.json) == ("groups", "list", "h:1", True)
    a = _parse("groups", "describe", "billing")
    assert (a.action, a.group, a.json, a.bootstrap_server) == (
        "describe", "billing", False, cli.DEFAULT_BOOTSTRAP)
    a = _parse("groups", "delete", "billing", "--bootstrap-server", "h:2")
    assert (a.action, a.group, a.bootstrap_server) == ("delete", "billing", "h:2")
    a = _parse("groups", "reset-offsets", "g", "--topic", "events", "--to-earliest", "--dry-run")
    assert (a.group, a.topic, a.to_earliest, a.dry_run, a.all_topics) == (
        "g", ("events", None), True, True, False)
    a = _parse("groups", "reset-offsets", "g", "--topic", "events:2,0", "--shift-by", "-5")
    assert a.topic == ("events", [0, 2]) and a.shift_by == -5 and not a.dry_run
    a = _parse("groups", "reset-offsets", "g", "--all-topics", "--to-latest")
    assert a.all_topics and a.to_latest and a.topic is None
    a = _parse("groups", "reset-offsets", "g", "--topic", "t", "--to-datetime",
               "2024-05-01T12:00:00Z")
    assert a.to_datetime == datetime(2024, 5, 1, 12, tzinfo=UTC)


@pytest.mark.parametrize("argv", [
    ["groups"],
    ["groups", "describe"],
    ["groups", "frobnicate"],
    ["groups", "reset-offsets", "g", "--topic", "t"],  # no target
    ["groups", "reset-offsets", "g", "--to-earliest"],  # no topic
    ["groups", "reset-offsets", "g", "--topic", "t", "--to-earliest", "--to-latest"],
    ["groups", "reset-offsets", "g", "--topic", "t", "--all-topics", "--to-latest"],
    ["groups", "reset-offsets", "g", "--topic", "t", "--to-datetime", "last tuesday"],
    ["groups", "reset-offsets", "g", "--topic", "t:x", "--to-latest"],
    ["groups", "reset-offsets", "g", "--topic", "t", "--shift-by", "two"],
    ["groups", "reset-offsets", "g", "--topic", "t", "--to-latest", "--execute", "--dry-run"],
])
def test_cli_rejects_bad_group_arguments(argv, capsys):
    with pytest.raises(SystemExit) as e:
        cli.main(argv)
    assert e.value.code == 2
    assert "usage: raftlog groups" in capsys.readouterr().err


@pytest.mark.parametrize("argv", [["groups"], ["groups", "list"], ["groups", "describe"],
                                  ["groups", "reset-offsets"], ["groups", "delete"]])
def test_cli_help_works_for_every_group_command(argv, capsys):
    with pytest.raises(SystemExit) as e:
        cli.main(argv + ["--help"])
    assert e.value.code == 0
    out = capsys.readouterr().out
    assert out.startswith("usage: raftlog " + " ".join(argv))


def _described() -> GroupDescription:
    return GroupDescription(
        "g", "Stable", "consumer", "range", 4, "m1",
        [MemberDescription("m1", None, "c1", "/10.0.0.1", {A0, A1}),
         MemberDescription("m2", "i2", "c2", "/10.0.0.2", set())],
        {A0: GroupOffset(5, 9, 4), A1: GroupOffset(None, 7, None), B0: GroupOffset(3, None, None)},
    )


def test_group_json_has_the_documented_shape():
    j = cli.group_to_json(_described())
    assert json.loads(json.dumps(j)) == j
    assert {"group", "state", "protocol", "generation", "members", "offsets"} <= set(j)
    assert (j["group"], j["state"], j["protocol"], j["generation"]) == ("g", "Stable", "range", 4)
    assert j["members"][0] == {"member_id": "m1", "group_instance_id": None, "client_id": "c1",
                               "client_host": "/10.0.0.1", "assignment": [["a", 0], ["a", 1]]}
    assert j["members"][1]["assignment"] == [] and j["members"][1]["group_instance_id"] == "i2"
    assert j["offsets"] == [
        {"topic": "a", "partition": 0, "committed": 5, "log_end_offset": 9, "lag": 4},
        {"topic": "a", "partition": 1, "committed": None, "log_end_offset": 7, "lag": None},
        {"topic": "b", "partition": 0, "committed": 3, "log_end_offset": None, "lag": None},
    ]


def test_group_text_has_the_offsets_table_and_members():
    text = cli.format_group(_described())
    lines = text.splitlines()
    assert lines[0].startswith("Group: g  State: Stable  Protocol: consumer/range  Generation: 4")
    header = next(line for line in lines if line.startswith("TOPIC"))
    assert header.split() == ["TOPIC", "PARTITION", "CURRENT-OFFSET", "LOG-END-OFFSET", "LAG",
                              "MEMBER-ID"]
    rows = [line.split() for line in lines[lines.index(header) + 1:lines.index(header) + 4]]
    assert rows == [["a", "0", "5", "9", "4", "m1"], ["a", "1", "-", "7", "-", "m1"],
                    ["b", "0", "3", "-", "-", "-"]]
    assert any(line.split()[:2] == ["m2", "i2"] for line in lines)
    empty = GroupDescription("e", "Empty", "", "", 0, None, [], {})
    assert "no committed offsets" in cli.format_group(empty)


def test_cli_error_is_one_line_and_exit_status_1(capsys):
    port = free_port()  # nothing listens there
    rc = cli.main(["groups", "list", "--bootstrap-server", f"127.0.0.1:{port}"])
    err = capsys.readouterr().err
    assert rc == 1
    assert err.count("\n") == 1 and err.startswith("raftlog groups list: ")


# --------------------------------------------------------------------------- coordinator retries


@pytest.fixture
def scripted():
    nodes: list[ScriptedNode] = []

    def make(handler) -> ScriptedNode:
        nodes.append(ScriptedNode(handler))
        return nodes[-1]

    yield make
    for n in nodes:
        n.close()


def _err(code: ErrorCode, message: str = "") -> dict:
    return {"error": int(code), "message": message}


def test_coordinator_lookup_retries_loading_and_follows_not_coordinator(scripted):
    b = scripted(lambda api, fields: {"parts": [["a", 0, 7, None], ["a", 1, -1, None]]})
    finds = []

    def first(api, fields):
        if api == Api.FIND_COORDINATOR:
            finds.append(fields["key"])
            if len(finds) == 1:
                return _err(ErrorCode.COORDINATOR_LOAD_IN_PROGRESS, "loading")
            port = a.port if len(finds) == 2 else b.port  # then the group moves to b
            return {"node_id": len(finds) - 1, "host": "127.0.0.1", "port": port}
        assert api == Api.OFFSET_FETCH
        return _err(ErrorCode.NOT_COORDINATOR, "moved")

    a = scripted(first)
    with Admin(a.bootstrap) as admin:
        assert admin.list_group_offsets("g") == {A0: 7}
    assert finds == ["g", "g", "g"]
    assert [api for api, _ in a.requests].count(Api.OFFSET_FETCH) == 1
    assert b.requests == [(Api.OFFSET_FETCH, {"group": "g", "parts": None})]


def test_no_coordinator_within_the_wait_is_a_clear_error(scripted, monkeypatch):
    monkeypatch.setattr(admin_mod, "COORDINATOR_WAIT_S", 0.3)
    n = scripted(lambda api, fields: _err(ErrorCode.COORDINATOR_NOT_AVAILABLE, "creating"))
    t0 = time.monotonic()
    with Admin(n.bootstrap) as admin, pytest.raises(ApiError) as e:
        admin.describe_group("g")
    assert time.monotonic() - t0 < 3
    assert e.value.code == ErrorCode.COORDINATOR_NOT_AVAILABLE
    assert "no coordinator of group 'g'" in str(e.value)
    assert len(n.requests) >= 2  # it did retry


def test_a_non_retriable_lookup_error_is_raised_at_once(scripted):
    n = scripted(lambda api, fields: _err(ErrorCode.INVALID_GROUP_ID, "empty"))
    with Admin(n.bootstrap) as admin, pytest.raises(ApiError) as e:
        admin.delete_group("g")
    assert e.value.code == ErrorCode.INVALID_GROUP_ID and len(n.requests) == 1


def test_list_groups_asks_every_broker_and_merges(scripted):
    b = scripted(lambda api, fields: {"groups": [["g2", "consumer", "Stable"],
                                                 ["g1", "consumer", "Stable"]]})
    dead_port = free_port()

    def first(api, fields):
        if api == Api.DESCRIBE_CLUSTER:
            return {"cluster_id": "c", "controller_id": 1, "brokers": [
                [1, "127.0.0.1", a.port, None, False],
                [2, "127.0.0.1", b.port, None, False],
                [3, "127.0.0.1", dead_port, None, True],  # fenced and gone: skipped
            ]}
        assert api == Api.LIST_GROUPS
        return {"groups": [["g1", "", "Empty"], ["g0", "consumer", "Empty"]]}

    a = scripted(first)
    with Admin(a.bootstrap) as admin:
        assert admin.list_groups() == [GroupListing("g0", "consumer", "Empty"),
                                       GroupListing("g1", "", "Empty"),
                                       GroupListing("g2", "consumer", "Stable")]


def test_list_groups_fails_when_an_active_broker_is_unreachable(scripted, monkeypatch):
    monkeypatch.setattr(admin_mod, "COORDINATOR_WAIT_S", 0.2)
    dead_port = free_port()
    n = scripted(lambda api, fields: (
        {"cluster_id": "c", "controller_id": 1,
         "brokers": [[1, "127.0.0.1", n.port, None, False],
                     [2, "127.0.0.1", dead_port, None, False]]}
        if api == Api.DESCRIBE_CLUSTER else {"groups": []}))
    with Admin(n.bootstrap) as admin, pytest.raises(BrokerNotAvailableError,
                                                    match="broker 2 .*incomplete"):
        admin.list_groups()


def test_admin_commit_refused_for_members_is_group_not_empty(scripted):
    def handler(api, fields):
        if api == Api.FIND_COORDINATOR:
            return {"node_id": 1, "host": "127.0.0.1", "port": n.port}
        assert api == Api.OFFSET_COMMIT
        assert (fields["generation"], fields["member_id"]) == (-1, "")
        return _err(ErrorCode.UNKNOWN_MEMBER_ID, "group 'g' has members")

    n = scripted(handler)
    with Admin(n.bootstrap) as admin, pytest.raises(GroupNotEmptyError, match="active members"):
        admin.alter_group_offsets("g", {A0: 1})
    with Admin(n.bootstrap) as admin, pytest.raises(ValueError):
        admin.alter_group_offsets("g", {A0: -1})


def test_commit_part_errors_are_raised(scripted):
    def handler(api, fields):
        if api == Api.FIND_COORDINATOR:
            return {"node_id": 1, "host": "127.0.0.1", "port": n.port}
        return {"parts": [["a", 0, 0, ""], ["a", 1, int(ErrorCode.OFFSET_METADATA_TOO_LARGE),
                                            "too big"]]}

    n = scripted(handler)
    with Admin(n.bootstrap) as admin, pytest.raises(ApiError, match="a-1") as e:
        admin.alter_group_offsets("g", {A0: 1, ("a", 1): 2})
    assert e.value.code == ErrorCode.OFFSET_METADATA_TOO_LARGE


# --------------------------------------------------------------------------- real node



def _produce(node, topic, per_partition, partitions, timestamp_ms=None):
    from raftlog.client import Producer

    with Producer(node.bootstrap, acks="all") as p:
        for part in range(partitions):
            for i in range(per_partition):
                ts = None if timestamp_ms is None else timestamp_ms + i
                p.send(topic, b"v%d" % i, partition=part, timestamp_ms=ts)
        p.flush()


def _member(node, group, topics, records):
    """A consumer of ``group`` that has received ``records`` records (commits nothing)."""
    from raftlog.client import Consumer

    c = Consumer(node.bootstrap, group_id=group, auto_offset_reset="earliest",
                 enable_auto_commit=False, session_timeout_ms=3000)
    c.subscribe(topics)
    got, deadline = 0, time.monotonic() + 30
    while got < records and time.monotonic() < deadline:
        got += len(c.poll(timeout_ms=100))
    assert got == records
    return c


@pytest.mark.slow
def test_admin_group_lifecycle(node_factory):
    node = node_factory(**GROUP_NODE)
    admin = Admin(node.bootstrap)
    assert admin.list_groups() == []
    admin.create_topic("t", partitions=2)
    _produce(node, "t", 10, 2)
    t0, t1 = TP("t", 0), TP("t", 1)

    c = _member(node, "g", ["t"], 20)
    c.commit()
    _until(lambda: admin.list_group_offsets("g") == {t0: 10, t1: 10}, what="commit visible")
    _produce(node, "t", 5, 1)  # partition 0 gains 5: lag 5

    assert admin.list_groups() == [GroupListing("g", "consumer", "Stable")]
    d = admin.describe_group("g")
    assert (d.group_id, d.state, d.protocol_type, d.exists) == ("g", "Stable", "consumer", True)
    assert d.protocol == c.partition_assignment_strategy and d.generation >= 1
    assert len(d.members) == 1 and d.leader == d.members[0].member_id
    assert d.members[0].assignment == {t0, t1}
    assert d.offsets == {t0: GroupOffset(10, 15, 5), t1: GroupOffset(10, 10, 0)}

    with pytest.raises(GroupNotEmptyError, match="Stable with 1 member"):
        admin.reset_group_offsets("g", "t", to="earliest")
    with pytest.raises(GroupNotEmptyError):
        admin.reset_group_offsets("g", "t", to="earliest", dry_run=True)
    with pytest.raises(GroupNotEmptyError):
        admin.alter_group_offsets("g", {t0: 0})
    with pytest.raises(GroupNotEmptyError):
        admin.delete_group("g")

    c.close()
    _until(lambda: admin.describe_group("g").state == "Empty", what="group empty")
    d = admin.describe_group("g")
    assert d.members == [] and d.offsets[t0] == GroupOffset(10, 15, 5)

    assert admin.reset_group_offsets("g", "t", to="earliest", dry_run=True) == {t0: 0, t1: 0}
    assert admin.list_group_offsets("g") == {t0: 10, t1: 10}  # dry run: nothing committed
    assert admin.reset_group_offsets("g", "t", to="earliest") == {t0: 0, t1: 0}
    assert admin.list_group_offsets("g") == {t0: 0, t1: 0}
    assert admin.reset_group_offsets("g", "t", shift_by=3) == {t0: 3, t1: 3}
    assert admin.reset_group_offsets("g", "t", shift_by=-100) == {t0: 0, t1: 0}
    assert admin.reset_group_offsets("g", shift_by=1000) == {t0: 15, t1: 10}  # all topics
    assert admin.reset_group_offsets("g", "t", to="earliest", partitions=[1]) == {t1: 0}
    assert admin.list_group_offsets("g") == {t0: 15, t1: 0}
    assert admin.reset_group_offsets("g", "t", to="latest") == {t0: 15, t1: 10}
    with pytest.raises(UnknownTopicOrPartitionError):
        admin.reset_group_offsets("g", "t", to="latest", partitions=[7])
    with pytest.raises(UnknownTopicOrPartitionError):
        admin.reset_group_offsets("g", "nope", to="latest")

    admin.alter_group_offsets("g", {t0: 4, ("t", 1): 6})
    assert admin.list_group_offsets("g") == {t0: 4, t1: 6}
    assert admin.describe_group("g").offsets == {t0: GroupOffset(4, 15, 11),
                                                 t1: GroupOffset(6, 10, 4)}

    admin.delete_group("g")
    assert admin.list_groups() == []
    d = admin.describe_group("g")
    assert d.state == "Dead" and not d.exists and d.offsets == {}
    assert admin.list_group_offsets("g") == {}
    with pytest.raises(GroupIdNotFoundError):
        admin.delete_group("g")
    with pytest.raises(ValueError, match="no committed offsets"):
        admin.reset_group_offsets("g", to="earliest")
    admin.close()


@pytest.mark.slow
def test_admin_reset_to_a_datetime(node_factory):
    node = node_factory(**GROUP_NODE)
    admin = Admin(node.bootstrap)
    admin.create_topic("ts", partitions=1)
    base = 1_700_000_000_000
    _produce(node, "ts", 10, 1, timestamp_ms=base)  # record i at base + i
    tp = TP("ts", 0)
    when = datetime.fromtimestamp((base + 4) / 1000, tz=UTC)
    assert admin.reset_group_offsets("tg", "ts", to=when) == {tp: 4}
    assert admin.list_group_offsets("tg") == {tp: 4}
    assert admin.reset_group_offsets("tg", "ts", to=base + 7) == {tp: 7}
    assert admin.reset_group_offsets("tg", "ts", to=0) == {tp: 0}
    # no record is that new: the log end
    assert admin.reset_group_offsets("tg", "ts", to="2999-01-01T00:00:00Z") == {tp: 10}
    assert admin.list_groups() == [GroupListing("tg", "", "Empty")]
    admin.close()


def _run(capsys, *argv) -> tuple[int, str, str]:
    rc = cli.main(list(argv))
    out, err = capsys.readouterr()
    return rc, out, err


@pytest.mark.slow
def test_cli_groups(node_factory, capsys):
    node = node_factory(**GROUP_NODE)
    bs = ("--bootstrap-server", node.bootstrap)
    admin = Admin(node.bootstrap)
    admin.create_topic("t", partitions=2)
    _produce(node, "t", 10, 2)

    rc, out, err = _run(capsys, "groups", "list", *bs)
    assert (rc, out, err) == (0, "", "")
    rc, out, err = _run(capsys, "groups", "describe", "nope", *bs)
    assert rc == 1 and out == "" and err.count("\n") == 1
    assert err.startswith("raftlog groups describe: GROUP_ID_NOT_FOUND") and "'nope'" in err

    c = _member(node, "cg", ["t"], 20)
    c.commit({TP("t", 0): 6, TP("t", 1): 10})
    _until(lambda: admin.list_group_offsets("cg"), what="commit visible")

    rc, out, _ = _run(capsys, "groups", "list", *bs)
    assert rc == 0 and out.split() == ["GROUP", "STATE", "PROTOCOL-TYPE", "cg", "Stable",
                                       "consumer"]
    rc, out, _ = _run(capsys, "groups", "list", "--json", *bs)
    assert json.loads(out) == [{"group": "cg", "protocol_type": "consumer", "state": "Stable"}]

    rc, out, _ = _run(capsys, "groups", "describe", "cg", "--json", *bs)
    j = json.loads(out)
    member = j["members"][0]["member_id"]
    assert (j["group"], j["state"], j["generation"] >= 1) == ("cg", "Stable", True)
    assert j["members"][0]["assignment"] == [["t", 0], ["t", 1]]
    assert j["offsets"] == [
        {"topic": "t", "partition": 0, "committed": 6, "log_end_offset": 10, "lag": 4},
        {"topic": "t", "partition": 1, "committed": 10, "log_end_offset": 10, "lag": 0},
    ]
    rc, out, _ = _run(capsys, "groups", "describe", "cg", *bs)
    assert rc == 0 and "State: Stable" in out
    assert ["t", "0", "6", "10", "4", member] in [line.split() for line in out.splitlines()]

    rc, out, err = _run(capsys, "groups", "reset-offsets", "cg", "--topic", "t", "--to-earliest",
                        *bs)
    assert rc == 1 and out == "" and err.count("\n") == 1
    assert err.startswith("raftlog groups reset-offsets: NON_EMPTY_GROUP")
    rc, _, err = _run(capsys, "groups", "delete", "cg", *bs)
    assert rc == 1 and "NON_EMPTY_GROUP" in err and err.count("\n") == 1
    c.close()
    _until(lambda: admin.describe_group("cg").state == "Empty", what="group empty")

    rc, out, _ = _run(capsys, "groups", "reset-offsets", "cg", "--topic", "t", "--to-earliest",
                      "--dry-run", *bs)
    assert rc == 0 and "dry run" in out
    assert ["t", "0", "6", "0"] in [line.split() for line in out.splitlines()]
    assert admin.list_group_offsets("cg") == {TP("t", 0): 6, TP("t", 1): 10}
    # a Kafka operator's habit: no --execute, so nothing is committed, and stderr says so
    rc, out, err = _run(capsys, "groups", "reset-offsets", "cg", "--topic", "t", "--to-earliest",
                        *bs)
    assert rc == 0 and "dry run: nothing committed" in out
    assert ["t", "0", "6", "0"] in [line.split() for line in out.splitlines()]
    assert "add --execute to commit" in err and err.count("\n") == 1
    assert admin.list_group_offsets("cg") == {TP("t", 0): 6, TP("t", 1): 10}
    rc, out, _ = _run(capsys, "groups", "reset-offsets", "cg", "--topic", "t:0", "--shift-by",
                      "-2", "--json", *bs)
    assert rc == 0 and json.loads(out)["dry_run"] is True
    assert admin.list_group_offsets("cg") == {TP("t", 0): 6, TP("t", 1): 10}
    rc, out, _ = _run(capsys, "groups", "reset-offsets", "cg", "--topic", "t:0", "--shift-by",
                      "-2", "--json", "--execute", *bs)
    assert rc == 0 and json.loads(out) == {"group": "cg", "dry_run": False, "offsets": [
        {"topic": "t", "partition": 0, "previous": 6, "new": 4}]}
    assert admin.list_group_offsets("cg") == {TP("t", 0): 4, TP("t", 1): 10}
    rc, out, err = _run(capsys, "groups", "reset-offsets", "cg", "--all-topics", "--to-datetime",
                        "2999-01-01T00:00:00Z", "--execute", *bs)
    assert rc == 0 and "committed 2 offset(s)" in out and err == ""
    assert admin.list_group_offsets("cg") == {TP("t", 0): 10, TP("t", 1): 10}

    rc, out, _ = _run(capsys, "groups", "delete", "cg", *bs)
    assert (rc, out) == (0, "deleted group cg\n")
    rc, _, err = _run(capsys, "groups", "delete", "cg", *bs)
    assert rc == 1 and err.startswith("raftlog groups delete: GROUP_ID_NOT_FOUND")
    admin.close()


@pytest.mark.slow
def test_cli_entry_point_in_a_subprocess(node):
    r = subprocess.run([sys.executable, "-m", "raftlog.client.cli", "groups", "list", "--json",
                        "--bootstrap-server", node.bootstrap],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout) == []
