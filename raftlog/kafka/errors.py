"""raftlog error codes as Kafka's error codes of the same meaning (Errors.java).

raftlog's numbering follows Kafka's names, not its numbers; every raftlog code has
exactly one Kafka code here (a test checks the table is total). Two raftlog codes
have no Kafka twin and take the closest one Kafka clients handle the same way:
UNKNOWN_API answers as UNSUPPORTED_VERSION, and DUPLICATE_SEQUENCE keeps Kafka's
DUPLICATE_SEQUENCE_NUMBER (a producer treats it as success of an earlier send).
"""

from __future__ import annotations

from raftlog.errors import ErrorCode

#: Kafka's numbers of the codes raftlog uses, by Kafka's name.
KAFKA = {
    "UNKNOWN_SERVER_ERROR": -1, "NONE": 0, "OFFSET_OUT_OF_RANGE": 1, "CORRUPT_MESSAGE": 2,
    "UNKNOWN_TOPIC_OR_PARTITION": 3, "LEADER_NOT_AVAILABLE": 5, "NOT_LEADER_OR_FOLLOWER": 6,
    "REQUEST_TIMED_OUT": 7, "BROKER_NOT_AVAILABLE": 8, "MESSAGE_TOO_LARGE": 10,
    "OFFSET_METADATA_TOO_LARGE": 12, "COORDINATOR_LOAD_IN_PROGRESS": 14,
    "COORDINATOR_NOT_AVAILABLE": 15, "NOT_COORDINATOR": 16, "INVALID_TOPIC_EXCEPTION": 17,
    "NOT_ENOUGH_REPLICAS": 19, "NOT_ENOUGH_REPLICAS_AFTER_APPEND": 20,
    "INVALID_REQUIRED_ACKS": 21, "ILLEGAL_GENERATION": 22, "INCONSISTENT_GROUP_PROTOCOL": 23,
    "INVALID_GROUP_ID": 24, "UNKNOWN_MEMBER_ID": 25, "INVALID_SESSION_TIMEOUT": 26,
    "REBALANCE_IN_PROGRESS": 27, "CLUSTER_AUTHORIZATION_FAILED": 31, "INVALID_TIMESTAMP": 32,
    "UNSUPPORTED_VERSION": 35, "TOPIC_ALREADY_EXISTS": 36, "INVALID_PARTITIONS": 37,
    "INVALID_REPLICATION_FACTOR": 38, "INVALID_CONFIG": 40, "NOT_CONTROLLER": 41,
    "INVALID_REQUEST": 42, "POLICY_VIOLATION": 44, "OUT_OF_ORDER_SEQUENCE_NUMBER": 45,
    "DUPLICATE_SEQUENCE_NUMBER": 46, "INVALID_PRODUCER_EPOCH": 47, "KAFKA_STORAGE_ERROR": 56,
    "UNKNOWN_PRODUCER_ID": 59, "REASSIGNMENT_IN_PROGRESS": 60, "NON_EMPTY_GROUP": 68,
    "GROUP_ID_NOT_FOUND": 69, "FENCED_LEADER_EPOCH": 74, "UNKNOWN_LEADER_EPOCH": 75,
    "UNSUPPORTED_COMPRESSION_TYPE": 76, "MEMBER_ID_REQUIRED": 79, "GROUP_MAX_SIZE_REACHED": 81,
    "FENCED_INSTANCE_ID": 82, "NO_REASSIGNMENT_IN_PROGRESS": 85, "INVALID_RECORD": 87,
    "UNSTABLE_OFFSET_COMMIT": 88,
    # security (#19)
    "TOPIC_AUTHORIZATION_FAILED": 29, "GROUP_AUTHORIZATION_FAILED": 30,
    "UNSUPPORTED_SASL_MECHANISM": 33, "ILLEGAL_SASL_STATE": 34,
    "SASL_AUTHENTICATION_FAILED": 58, "RESOURCE_NOT_FOUND": 91,
    # admin APIs (#37)
    "INVALID_REPLICA_ASSIGNMENT": 39, "GROUP_SUBSCRIBED_TO_TOPIC": 86,
    "DUPLICATE_RESOURCE": 92, "UNACCEPTABLE_CREDENTIAL": 93,
    # transactions (#33)
    "INVALID_TXN_STATE": 48, "INVALID_PRODUCER_ID_MAPPING": 49,
    "INVALID_TRANSACTION_TIMEOUT": 50, "CONCURRENT_TRANSACTIONS": 51,
    "TRANSACTION_COORDINATOR_FENCED": 52, "TRANSACTIONAL_ID_AUTHORIZATION_FAILED": 53,
    "PRODUCER_FENCED": 90,
    "TRANSACTIONAL_ID_NOT_FOUND": 105, "TRANSACTION_ABORTABLE": 120,
    # fetch sessions (KIP-227)
    "FETCH_SESSION_ID_NOT_FOUND": 70, "INVALID_FETCH_SESSION_EPOCH": 71,
}

#: raftlog names whose Kafka name differs.
_RENAMED = {
    "INVALID_TOPIC": "INVALID_TOPIC_EXCEPTION",
    "OUT_OF_ORDER_SEQUENCE": "OUT_OF_ORDER_SEQUENCE_NUMBER",
    "DUPLICATE_SEQUENCE": "DUPLICATE_SEQUENCE_NUMBER",
    "UNKNOWN_API": "UNSUPPORTED_VERSION",
}

#: {raftlog ErrorCode: Kafka error code}
TO_KAFKA: dict[ErrorCode, int] = {
    code: KAFKA[_RENAMED.get(code.name, code.name)] for code in ErrorCode
}

#: {Kafka error code: raftlog ErrorCode} (the reverse; UNKNOWN_API folds into
#: UNSUPPORTED_VERSION)
FROM_KAFKA: dict[int, ErrorCode] = {
    k: code for code, k in TO_KAFKA.items() if code is not ErrorCode.UNKNOWN_API
}


def to_kafka(code: int) -> int:
    """Kafka's code for a raftlog code (an int from a raftlog response or an ErrorCode).
    A number raftlog does not know answers as UNKNOWN_SERVER_ERROR."""
    try:
        return TO_KAFKA[ErrorCode(code)]
    except ValueError:
        return KAFKA["UNKNOWN_SERVER_ERROR"]


def from_kafka(code: int) -> ErrorCode:
    """raftlog's code for a Kafka code; UNKNOWN_SERVER_ERROR for one without a twin."""
    return FROM_KAFKA.get(code, ErrorCode.UNKNOWN_SERVER_ERROR)
