"""ACL bindings and the pure authorize: deny wins, implications, patterns, super users."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from raftlog.acl import (
    AclError,
    Authorizer,
    Operation,
    ResourceType,
    allowed_on_some,
    authorize,
    binding,
    from_tuple,
    matches_filter,
    parse_super_users,
)

T, G, C = ResourceType.TOPIC, ResourceType.GROUP, ResourceType.CLUSTER
R, W, D = Operation.READ, Operation.WRITE, Operation.DESCRIBE


def ok(acls, principal, op, rtype, name, **kw):
    return authorize(acls, principal, op, rtype, name, **kw)


def test_no_acls_denies_by_default_and_allows_when_configured():
    assert not ok([], "User:a", R, T, "t")
    assert ok([], "User:a", R, T, "t", allow_if_no_acls=True)
    other = [binding("User:b", "topic", "t", operation="read")]
    assert not ok(other, "User:a", R, T, "t", allow_if_no_acls=True)  # t has ACLs now


def test_literal_allow_and_implied_describe():
    acls = [binding("User:a", "topic", "t", operation="read")]
    assert ok(acls, "User:a", R, T, "t")
    assert ok(acls, "User:a", D, T, "t")  # READ implies DESCRIBE
    assert not ok(acls, "User:a", W, T, "t")
    assert not ok(acls, "User:a", R, T, "t2")
    assert not ok(acls, "User:b", R, T, "t")
    for op in ("write", "delete", "alter"):
        assert ok([binding("User:a", "topic", "t", operation=op)], "User:a", D, T, "t")
    # DESCRIBE does not imply READ; CREATE does not imply DESCRIBE
    assert not ok([binding("User:a", "topic", "t", operation="describe")], "User:a", R, T, "t")
    assert not ok([binding("User:a", "topic", "t", operation="create")], "User:a", D, T, "t")


def test_deny_wins_over_allow():
    acls = [binding("User:a", "topic", "*", operation="all"),
            binding("User:a", "topic", "secret", operation="read", permission="deny")]
    assert ok(acls, "User:a", R, T, "public")
    assert not ok(acls, "User:a", R, T, "secret")
    assert ok(acls, "User:a", W, T, "secret")  # deny READ denies only READ
    # a deny of READ does not deny the DESCRIBE a WRITE allow implies
    assert ok(acls, "User:a", D, T, "secret")
    deny_all = acls + [binding("User:*", "topic", "sec", "prefixed", "all", "deny")]
    assert not ok(deny_all, "User:a", W, T, "secret")
    assert ok(deny_all, "User:a", W, T, "public")


def test_prefixed_patterns_and_wildcards():
    acls = [binding("User:*", "topic", "logs-", "prefixed", "read"),
            binding("User:a", "group", "*", operation="read")]
    assert ok(acls, "User:x", R, T, "logs-web")
    assert ok(acls, "User:x", R, T, "logs-")
    assert not ok(acls, "User:x", R, T, "log")
    assert not ok(acls, "Group:x", R, T, "logs-web")  # User:* is users only
    assert ok(acls, "User:a", R, G, "any-group")
    assert not ok(acls, "User:b", R, G, "any-group")


def test_super_users_may_do_anything():
    acls = [binding("User:root", "topic", "*", operation="all", permission="deny")]
    assert ok(acls, "User:root", W, T, "t", super_users=frozenset({"User:root"}))
    assert ok([], "User:root", Operation.CLUSTER_ACTION, C, "kafka-cluster",
              super_users=parse_super_users("User:root; User:broker"))


def test_validation_errors_are_clear():
    with pytest.raises(AclError, match="principal"):
        binding("alice", "topic", "t")
    with pytest.raises(AclError, match="resource type"):
        binding("User:a", "table", "t")
    with pytest.raises(AclError, match="operation"):
        binding("User:a", "topic", "t", operation="fly")
    with pytest.raises(AclError, match="does not apply to a group"):
        binding("User:a", "group", "g", operation="write")
    with pytest.raises(AclError, match="cluster resource"):
        binding("User:a", "cluster", "c", operation="alter")
    with pytest.raises(AclError, match="permission"):
        binding("User:a", "topic", "t", permission="maybe")
    with pytest.raises(AclError, match="resource name"):
        binding("User:a", "topic", "")
    with pytest.raises(AclError, match="prefixed pattern"):
        binding("User:a", "topic", "*", "prefixed")
    with pytest.raises(AclError, match="six fields"):
        from_tuple(("User:a", "topic"))
    with pytest.raises(AclError, match="principal"):
        parse_super_users("User:a;nobody")


def test_tuple_round_trip_and_filters():
    b = binding("User:a", "TOPIC", "t", "PREFIXED", "Write", "DENY")
    assert from_tuple(b.as_tuple()) == b
    assert matches_filter(b, principal="User:a", resource_type="topic")
    assert not matches_filter(b, operation="read")
    assert matches_filter(b)


def test_allowed_on_some():
    acls = [binding("User:a", "topic", "p-", "prefixed", "write")]
    assert allowed_on_some(acls, "User:a", W, T)
    assert not allowed_on_some(acls, "User:b", W, T)
    acls.append(binding("User:a", "topic", "*", operation="write", permission="deny"))
    assert not allowed_on_some(acls, "User:a", W, T)


@st.composite
def acl_lists(draw):
    out = []
    for _ in range(draw(st.integers(0, 6))):
        pattern = draw(st.sampled_from(["literal", "prefixed"]))
        name = draw(st.sampled_from(["t", "tx", "u"] + (["*"] if pattern == "literal" else [])))
        out.append(binding(draw(st.sampled_from(["User:a", "User:b", "User:*"])), "topic", name,
                           pattern, draw(st.sampled_from(["all", "read", "write", "describe"])),
                           draw(st.sampled_from(["allow", "deny"]))))
    return out


@settings(max_examples=300, deadline=None)
@given(acl_lists(), st.sampled_from([R, W, D]), st.sampled_from(["t", "tx", "u", "v"]))
def test_properties(acls, op, name):
    decided = ok(acls, "User:a", op, T, name)
    # adding a matching deny never allows more; adding an allow never denies more
    deny = binding("User:a", "topic", name, operation=op.value, permission="deny")
    assert not ok(acls + [deny], "User:a", op, T, name)
    allow = binding("User:a", "topic", name, operation=op.value)
    assert ok(acls + [allow], "User:a", op, T, name) or not decided
    # order does not matter; the cached authorizer agrees
    assert ok(list(reversed(acls)), "User:a", op, T, name) == decided
    cached = Authorizer(acls)
    assert cached.authorize("User:a", op, T, name) == decided
    assert cached.authorize("User:a", op, T, name) == decided


# ---------------------------------------------------------------- transactional ids

X = ResourceType.TRANSACTIONAL_ID


def test_transactional_id_write_implies_describe_not_the_reverse():
    acls = [binding("User:a", "transactional_id", "payments", operation="write"),
            binding("User:b", "transactional_id", "payments", operation="describe")]
    assert ok(acls, "User:a", W, X, "payments") and ok(acls, "User:a", D, X, "payments")
    assert ok(acls, "User:b", D, X, "payments") and not ok(acls, "User:b", W, X, "payments")
    assert not ok(acls, "User:a", W, X, "payments-2")  # literal: that name only
    # a topic of the same name is another resource
    assert not ok(acls, "User:a", W, T, "payments")
    assert not ok([binding("User:a", "topic", "payments", operation="all")],
                  "User:a", W, X, "payments")


def test_transactional_id_patterns_wildcard_and_deny():
    acls = [binding("User:a", "transactional_id", "pay-", "prefixed", "write"),
            binding("User:a", "transactional_id", "pay-secret", "literal", "write", "deny"),
            binding("User:*", "transactional_id", "*", "literal", "describe")]
    assert ok(acls, "User:a", W, X, "pay-1") and ok(acls, "User:a", W, X, "pay-")
    assert not ok(acls, "User:a", W, X, "pay-secret")  # the deny wins
    assert ok(acls, "User:a", D, X, "pay-secret")  # (a WRITE deny leaves DESCRIBE)
    assert not ok(acls, "User:a", W, X, "other")
    assert ok(acls, "User:c", D, X, "anything") and not ok(acls, "User:c", W, X, "anything")
    assert ok([binding("User:a", "Transactional-Id", "t", operation="ALL")],
              "User:a", W, X, "t")  # ALL grants everything; names in any spelling


def test_transactional_id_validation():
    for op in ("read", "create", "delete", "alter", "cluster_action"):
        with pytest.raises(AclError, match=f"operation {op} does not apply to a "
                                           r"transactional_id \(valid: all, describe, write\)"):
            binding("User:a", "transactional_id", "t", operation=op)
    with pytest.raises(AclError, match="prefixed pattern of '\\*'"):
        binding("User:a", "transactional_id", "*", "prefixed", "write")
    b = binding("User:a", "transactional_id", "t", "prefixed", "write")
    assert from_tuple(b.as_tuple()) == b
    assert b.as_tuple()[1] == "transactional_id"
    assert matches_filter(b, resource_type="transactional_id")
    assert not matches_filter(b, resource_type="topic")
    with pytest.raises(AclError, match="resource type: 'txn' is not one of topic, group, "
                                       "cluster, transactional_id"):
        binding("User:a", "txn", "t", operation="write")


def test_grant_command_names_the_cli_option_of_each_type():
    from raftlog.acl import grant_command

    assert grant_command("User:alice", W, X, "payments") == (
        "raftlog acls add --principal User:alice --operation write "
        "--transactional-id payments")
    assert grant_command("User:alice", R, T, "a b") == (
        "raftlog acls add --principal User:alice --operation read --topic 'a b'")
    assert grant_command("User:a", Operation.ALTER, C, "kafka-cluster").endswith(
        "--operation alter --cluster")
    assert grant_command("User:a", R, G, "g").endswith("--group g")
