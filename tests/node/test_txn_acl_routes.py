"""The route table's ACL needs of the transaction APIs (node/routes.py, node/authz.py),
checked without sockets: WRITE on the transactional id (TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
the message naming the ``raftlog acls add`` command), DESCRIBE for FindCoordinator key
type 1, and the filters of DescribeTransactions and ListTransactions."""

from __future__ import annotations

import pytest

from raftlog.acl import Authorizer, binding
from raftlog.errors import ApiError, ErrorCode
from raftlog.node.authz import AclCheck
from raftlog.node.routes import ROUTES
from raftlog.protocol import Api, TxnDescriptionRow, TxnListingRow

TXN_DENIED = ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
ALICE = "User:alice"
ACLS = [binding(ALICE, "transactional_id", "pay-", "prefixed", "write"),
        binding(ALICE, "transactional_id", "audit", "literal", "describe"),
        binding(ALICE, "topic", "orders", "literal", "write"),
        binding(ALICE, "topic", "in", "literal", "read"),
        binding(ALICE, "group", "g", "literal", "read")]


def check(api: Api, fields: dict, acls=ACLS, principal=ALICE) -> ErrorCode:
    """The code the route's check answers (NONE: allowed)."""
    try:
        AclCheck(principal, Authorizer(acls)).check_route(api, ROUTES[api].acl, fields)
    except ApiError as e:
        return e.code
    return ErrorCode.NONE


def ids(tid: str) -> dict:
    return {"transactional_id": tid, "producer_id": 7, "producer_epoch": 0}


@pytest.mark.parametrize("api,extra", [
    (Api.INIT_PRODUCER_ID, {"transaction_timeout_ms": 60_000}),
    (Api.ADD_PARTITIONS_TO_TXN, {"parts": [["orders", 0]], "verify_only": False}),
    (Api.ADD_OFFSETS_TO_TXN, {"group": "g"}),
    (Api.END_TXN, {"commit": True}),
    (Api.TXN_OFFSET_COMMIT, {"group": "g", "offsets": [["in", 0, 5, None]]}),
    (Api.PRODUCE, {"acks": -1, "parts": [["orders", 0, 10]]}),
])
def test_write_on_the_transactional_id_is_needed(api, extra):
    assert check(api, {**ids("pay-1"), **extra}) is ErrorCode.NONE  # prefixed allow
    assert check(api, {**ids("other"), **extra}) is TXN_DENIED
    assert check(api, {**ids("audit"), **extra}) is TXN_DENIED  # DESCRIBE is not WRITE
    assert check(api, {**ids("other"), **extra}, principal="User:bob") is TXN_DENIED


def test_the_topic_and_group_needs_still_apply_after_the_id():
    assert check(Api.ADD_PARTITIONS_TO_TXN, {**ids("pay-1"), "parts": [["in", 0]]}) is \
        ErrorCode.TOPIC_AUTHORIZATION_FAILED
    assert check(Api.ADD_OFFSETS_TO_TXN, {**ids("pay-1"), "group": "h"}) is \
        ErrorCode.GROUP_AUTHORIZATION_FAILED
    assert check(Api.TXN_OFFSET_COMMIT, {**ids("pay-1"), "group": "h", "offsets": []}) is \
        ErrorCode.GROUP_AUTHORIZATION_FAILED
    assert check(Api.TXN_OFFSET_COMMIT, {**ids("pay-1"), "group": "g",
                                         "offsets": [["orders", 0, 1, None]]}) is \
        ErrorCode.TOPIC_AUTHORIZATION_FAILED
    # the id is checked first, as Kafka (its refusal is the one answered)
    assert check(Api.PRODUCE, {**ids("x"), "acks": 1, "parts": [["in", 0, 1]]}) is TXN_DENIED
    assert check(Api.PRODUCE, {**ids("pay-1"), "acks": 1, "parts": [["in", 0, 1]]}) is \
        ErrorCode.TOPIC_AUTHORIZATION_FAILED


def test_without_a_transactional_id_the_older_rules_apply():
    produce = {"transactional_id": None, "acks": 1, "parts": [["orders", 0, 1]]}
    assert check(Api.PRODUCE, produce) is ErrorCode.NONE
    # an idempotent producer: WRITE on some topic
    assert check(Api.INIT_PRODUCER_ID, {"transactional_id": None}) is ErrorCode.NONE
    assert check(Api.INIT_PRODUCER_ID, {}, principal="User:bob") is \
        ErrorCode.CLUSTER_AUTHORIZATION_FAILED


def test_find_coordinator_of_a_transactional_id_needs_describe_on_it():
    assert check(Api.FIND_COORDINATOR, {"key": "audit", "key_type": 1}) is ErrorCode.NONE
    assert check(Api.FIND_COORDINATOR, {"key": "pay-9", "key_type": 1}) is ErrorCode.NONE
    assert check(Api.FIND_COORDINATOR, {"key": "g", "key_type": 1}) is TXN_DENIED
    # a group key stays a group's
    assert check(Api.FIND_COORDINATOR, {"key": "g", "key_type": 0}) is ErrorCode.NONE
    assert check(Api.FIND_COORDINATOR, {"key": "audit"}) is \
        ErrorCode.GROUP_AUTHORIZATION_FAILED


def test_the_refusal_says_which_acl_to_add():
    with pytest.raises(ApiError) as e:
        AclCheck(ALICE, Authorizer(ACLS)).check_route(
            Api.END_TXN, ROUTES[Api.END_TXN].acl, {**ids("payments"), "commit": True})
    assert e.value.code is TXN_DENIED
    assert ("User:alice may not write transactional_id 'payments' (END_TXN): allow it with "
            "`raftlog acls add --principal User:alice --operation write "
            "--transactional-id payments`") == e.value.message
    with pytest.raises(ApiError) as e:
        AclCheck(ALICE, Authorizer(ACLS)).check_route(
            Api.FIND_COORDINATOR, ROUTES[Api.FIND_COORDINATOR].acl,
            {"key": "payments", "key_type": 1})
    assert e.value.message.startswith("User:alice may not describe transactional_id "
                                      "'payments' (FIND_COORDINATOR)")
    assert ("`raftlog acls add --principal User:alice --operation write --transactional-id "
            "payments` (a transactional producer's; --operation describe") in e.value.message


def test_describe_and_list_transactions_are_filtered():
    acl = AclCheck(ALICE, Authorizer(ACLS))
    assert check(Api.DESCRIBE_TRANSACTIONS, {"transactional_ids": ["x"]}) is ErrorCode.NONE
    head = {"transactions": [
        TxnDescriptionRow("pay-1", 0, "Ongoing", 7, 0, 60_000, 1,
                          [["orders", 0], ["secret", 1]]),
        TxnDescriptionRow("hidden", 0, "Ongoing", 8, 0, 60_000, 1, [["orders", 1]]),
        TxnDescriptionRow("gone", int(ErrorCode.NOT_COORDINATOR), message="elsewhere"),
        TxnDescriptionRow("audit", int(ErrorCode.TRANSACTIONAL_ID_NOT_FOUND))]}
    rows = acl.filter_response(Api.DESCRIBE_TRANSACTIONS, head)["transactions"]
    assert [(r.transactional_id, r.error) for r in rows] == [
        ("pay-1", 0), ("hidden", TXN_DENIED), ("gone", TXN_DENIED),
        ("audit", ErrorCode.TRANSACTIONAL_ID_NOT_FOUND)]  # one per id, in request order
    assert rows[0].partitions == [["orders", 0]]  # a topic it may not describe: left out
    assert rows[1].producer_id == -1 and rows[1].partitions == []  # nothing leaks
    assert "may not describe transactional_id 'hidden'" in rows[1].message
    listed = [TxnListingRow("pay-1", 7, "Ongoing"), TxnListingRow("hidden", 8, "Ongoing"),
              TxnListingRow("audit", 9, "Empty")]
    rows = acl.filter_response(Api.LIST_TRANSACTIONS, {"transactions": listed})["transactions"]
    assert [r.transactional_id for r in rows] == ["pay-1", "audit"]
    everything = AclCheck("User:root", Authorizer(ACLS, super_users=frozenset({"User:root"})))
    assert everything.filter_response(Api.LIST_TRANSACTIONS, {"transactions": listed})[
        "transactions"] == listed


def test_a_brokers_verify_only_add_partitions_needs_cluster_action_only():
    verify = {**ids("other"), "parts": [["in", 0]], "verify_only": True}
    assert check(Api.ADD_PARTITIONS_TO_TXN, verify) is ErrorCode.CLUSTER_AUTHORIZATION_FAILED
    broker = ACLS + [binding("User:broker", "cluster", "kafka-cluster",
                             operation="cluster_action")]
    assert check(Api.ADD_PARTITIONS_TO_TXN, verify, broker, "User:broker") is ErrorCode.NONE
    # (the broker may not add partitions of a client's transaction)
    assert check(Api.ADD_PARTITIONS_TO_TXN, {**verify, "verify_only": False}, broker,
                 "User:broker") is TXN_DENIED
