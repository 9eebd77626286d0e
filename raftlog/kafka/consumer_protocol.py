"""Kafka's consumer protocol (group protocol type "consumer") <-> raftlog's, so one group
may mix Kafka clients and raftlog clients.

Group members exchange their subscriptions (JoinGroup metadata) and assignments
(SyncGroup) through the coordinator, which treats them as opaque. Kafka clients encode
them as ``ConsumerProtocolSubscription`` / ``ConsumerProtocolAssignment`` bytes;
raftlog's client as maps (client/assignors.py)::

    subscription  {"topics": [str], "owned": [[topic, partition]], "generation": int}
    assignment    {"partitions": [[topic, partition]]}

The coordinator keeps raftlog's form; the Kafka listener converts at its edge, both
ways. Kafka's user data and rack id ride along in the map under ``kafka_user_data`` and
``kafka_rack_id`` (raftlog's client ignores keys it does not know), so a Kafka member
sees its own user data again. Bytes that do not parse are passed through unchanged:
a group of Kafka clients only never depends on this module understanding them.
"""

from __future__ import annotations

from raftlog.kafka.wire import KafkaDecodeError, decode_data, encode_data

SUBSCRIPTION = "ConsumerProtocolSubscription"
ASSIGNMENT = "ConsumerProtocolAssignment"
#: Version written to Kafka clients: 1 has owned partitions (cooperative rebalancing)
#: and is read by every client in use; 2 adds the generation, 3 the rack.
SUBSCRIPTION_VERSION_OUT = 1
ASSIGNMENT_VERSION_OUT = 1


def _pairs(topic_partitions) -> list:
    return [[tp["topic"], p] for tp in topic_partitions or [] for p in tp["partitions"]]


def _by_topic(pairs) -> list:
    topics: dict = {}
    for t, p in pairs:
        topics.setdefault(t, []).append(p)
    return [{"topic": t, "partitions": sorted(ps)} for t, ps in sorted(topics.items())]


def subscription_to_raftlog(metadata):
    """A Kafka member's JoinGroup metadata as raftlog's subscription map (or the bytes
    unchanged when they are not a consumer-protocol subscription)."""
    if not isinstance(metadata, (bytes, bytearray)):
        return metadata
    try:
        _v, s = decode_data(SUBSCRIPTION, bytes(metadata))
    except KafkaDecodeError:
        return bytes(metadata)
    out = {"topics": list(s["topics"]), "owned": _pairs(s["owned_partitions"]),
           "generation": s["generation_id"]}
    if s["user_data"] is not None:
        out["kafka_user_data"] = s["user_data"]
    if s["rack_id"] is not None:
        out["kafka_rack_id"] = s["rack_id"]
    return out


def subscription_to_kafka(sub) -> bytes:
    """A member's subscription (raftlog's map, or bytes kept as they came) as Kafka's
    ConsumerProtocolSubscription bytes."""
    if isinstance(sub, (bytes, bytearray)):
        return bytes(sub)
    if not isinstance(sub, dict):
        return b""
    return encode_data(SUBSCRIPTION, SUBSCRIPTION_VERSION_OUT, {
        "topics": [t for t in sub.get("topics", []) if isinstance(t, str)],
        "user_data": sub.get("kafka_user_data"),
        "owned_partitions": _by_topic(x for x in sub.get("owned", []) if _is_tp(x)),
    })


def assignment_to_raftlog(assignment):
    """A Kafka leader's SyncGroup assignment as raftlog's assignment map (bytes that do
    not parse unchanged)."""
    if not isinstance(assignment, (bytes, bytearray)):
        return assignment
    if not assignment:
        return {"partitions": []}
    try:
        _v, a = decode_data(ASSIGNMENT, bytes(assignment))
    except KafkaDecodeError:
        return bytes(assignment)
    out = {"partitions": sorted(_pairs(a["assigned_partitions"]))}
    if a["user_data"] is not None:
        out["kafka_user_data"] = a["user_data"]
    return out


def assignment_to_kafka(assignment) -> bytes:
    """A member's assignment (raftlog's map, or bytes as they came) as Kafka's
    ConsumerProtocolAssignment bytes."""
    if isinstance(assignment, (bytes, bytearray)):
        return bytes(assignment)
    if not isinstance(assignment, dict):
        return b""
    return encode_data(ASSIGNMENT, ASSIGNMENT_VERSION_OUT, {
        "assigned_partitions": _by_topic(x for x in assignment.get("partitions", [])
                                         if _is_tp(x)),
        "user_data": assignment.get("kafka_user_data"),
    })


def _is_tp(x) -> bool:
    return (isinstance(x, (list, tuple)) and len(x) == 2 and isinstance(x[0], str)
            and type(x[1]) is int)
