"""Kafka's ACL codes as raftlog's ACL names (raftlog/kafka/acl.py): pure."""

from __future__ import annotations

import pytest

from raftlog import acl as A
from raftlog.kafka import acl as KA


def _filter(**kw) -> dict:
    f = {"resource_type_filter": 1, "resource_name_filter": None, "pattern_type_filter": 1,
         "principal_filter": None, "host_filter": None, "operation": 1, "permission_type": 1}
    return {**f, **kw}


def test_binding_round_trip():
    c = {"resource_type": 2, "resource_name": "t", "resource_pattern_type": 4,
         "principal": "User:a", "host": "*", "operation": 3, "permission_type": 3}
    t = KA.binding_tuple(c)
    assert t == ("User:a", "topic", "t", "prefixed", "read", "allow")
    row = KA.binding_row(A.from_tuple(t))
    assert {k: row[k] for k in ("resource_type", "pattern_type", "operation",
                                "permission_type")} == {"resource_type": 2, "pattern_type": 4,
                                                        "operation": 3, "permission_type": 3}


@pytest.mark.parametrize("field,value,match", [
    ("host", "10.0.0.1", "wildcard host"), ("operation", 11, "operation code 11"),
    ("resource_type", 6, "resource type code 6")])  # (DELEGATION_TOKEN)
def test_bindings_raftlog_cannot_hold_are_refused(field, value, match):
    c = {"resource_type": 2, "resource_name": "t", "resource_pattern_type": 3,
         "principal": "User:a", "host": "*", "operation": 3, "permission_type": 3, field: value}
    with pytest.raises(KA.KafkaAclError, match=match):
        KA.binding_tuple(c)


def test_transactional_id_is_resource_type_5_both_ways():
    c = {"resource_type": 5, "resource_name": "pay-", "resource_pattern_type": 4,
         "principal": "User:a", "host": "*", "operation": 4, "permission_type": 3}
    t = KA.binding_tuple(c)
    assert t == ("User:a", "transactional_id", "pay-", "prefixed", "write", "allow")
    row = KA.binding_row(A.from_tuple(t))
    assert (row["resource_type"], row["pattern_type"], row["operation"]) == (5, 4, 4)
    # Kafka's operations of a transactional id are WRITE, DESCRIBE (and ALL) only
    with pytest.raises(A.AclError, match="does not apply to a transactional_id"):
        A.from_tuple(KA.binding_tuple({**c, "operation": 3}))  # READ


def test_filters():
    assert KA.native_filter(_filter()) == ({"principal": None, "resource_name": None,
                                            "resource_type": None, "pattern_type": None,
                                            "operation": None, "permission": None}, None)
    fields, match = KA.native_filter(_filter(resource_type_filter=2, pattern_type_filter=2,
                                             resource_name_filter="orders"))
    assert fields["resource_type"] == "topic" and fields["resource_name"] is None
    assert match == "orders"
    prefixed = A.binding("User:a", "topic", "ord", "prefixed", "read")
    assert KA.matches_name(prefixed, "orders") and not KA.matches_name(prefixed, "x")
    with pytest.raises(KA.NoMatch):  # a delegation token: raftlog holds none
        KA.native_filter(_filter(resource_type_filter=6))
    fields, _ = KA.native_filter(_filter(resource_type_filter=5, pattern_type_filter=4))
    assert (fields["resource_type"], fields["pattern_type"]) == ("transactional_id", "prefixed")
    with pytest.raises(KA.NoMatch):
        KA.native_filter(_filter(host_filter="10.0.0.1"))
    with pytest.raises(KA.KafkaAclError):
        KA.native_filter(_filter(operation=0))
