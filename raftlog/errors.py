"""Errors of the raftlog core, and the named error codes shared by node and client.

Two kinds of failure live here, kept apart on purpose (TigerBeetle style):

* Operating errors -- corrupt bytes, a stale epoch, a dead peer -- are typed
  exceptions, subclasses of :class:`RaftlogError`, and are handled.
* Programmer errors are ``assert`` statements and are never caught.

Every error that crosses the wire has a stable :class:`ErrorCode` with a name, a
number and a *retriable* flag, so a client can decide to retry without parsing
messages.
"""

from __future__ import annotations

import difflib
import enum


class RaftlogError(Exception):
    """Base class of every error raftlog raises on purpose."""


class CorruptRecordError(RaftlogError):
    """Bytes that claim to be a record batch are not one.

    Raised for a short buffer, a bad magic byte, a length field that lies, a
    CRC32C mismatch or a records region that does not parse. Decoding untrusted
    bytes raises this and nothing else.
    """


class StorageError(RaftlogError):
    """The log could not complete an operation on disk (full disk, I/O error).

    ``errno`` is the operating system's error number when there was one (``ENOSPC``,
    ``EFBIG``, ``EIO`` ...), so a node can say *why* in one line without parsing.
    """

    def __init__(self, message: str, errno: int | None = None):
        super().__init__(message)
        self.errno = errno


#: Ends the message of a KAFKA_STORAGE_ERROR answer whose records *were* appended (only
#: their flush failed, flush.messages / flush.ms): such a send is not known to have
#: failed. Without it, the answer means the append failed and the log is unchanged.
STORAGE_ERROR_APPENDED = "(appended; the flush failed)"


class OffsetOutOfRangeError(RaftlogError):
    """An offset below the log start offset or above the log end offset."""

    def __init__(self, offset: int, log_start_offset: int, log_end_offset: int):
        super().__init__(
            f"offset {offset} is out of range "
            f"[{log_start_offset}, {log_end_offset}] of this partition"
        )
        self.offset = offset
        self.log_start_offset = log_start_offset
        self.log_end_offset = log_end_offset


class CorruptSnapshotError(RaftlogError):
    """A state snapshot (for example producer state) fails its CRC or does not parse."""


class ConfigError(RaftlogError):
    """A configuration key is unknown or its value is invalid."""


def did_you_mean(word: str, choices) -> str:
    """`` (did you mean 'x'?)`` naming the valid choice nearest to a misspelt ``word``
    (difflib's ratio at least 0.6), or "" when none is near."""
    near = difflib.get_close_matches(word, sorted(choices), n=1)
    return f" (did you mean {near[0]!r}?)" if near else ""


class ProtocolError(RaftlogError):
    """Bytes on the wire do not follow the raftlog protocol."""


class LocalProtocolError(ProtocolError):
    """We were about to send something the protocol forbids (our bug or our caller's)."""


class RemoteProtocolError(ProtocolError):
    """The peer sent something the protocol forbids."""


class ErrorCode(enum.IntEnum):
    """Named error codes carried in responses. Values are stable on the wire."""

    NONE = 0
    UNKNOWN_SERVER_ERROR = 1
    CORRUPT_MESSAGE = 2
    INVALID_REQUEST = 3
    UNSUPPORTED_VERSION = 4
    UNKNOWN_API = 5
    MESSAGE_TOO_LARGE = 6
    UNKNOWN_TOPIC_OR_PARTITION = 7
    TOPIC_ALREADY_EXISTS = 8
    INVALID_TOPIC = 9
    INVALID_PARTITIONS = 10
    INVALID_REPLICATION_FACTOR = 11
    INVALID_CONFIG = 12
    OFFSET_OUT_OF_RANGE = 13
    NOT_LEADER_OR_FOLLOWER = 14
    LEADER_NOT_AVAILABLE = 15
    NOT_ENOUGH_REPLICAS = 16
    NOT_ENOUGH_REPLICAS_AFTER_APPEND = 17
    REQUEST_TIMED_OUT = 18
    FENCED_LEADER_EPOCH = 19
    UNKNOWN_LEADER_EPOCH = 20
    NOT_CONTROLLER = 21
    OUT_OF_ORDER_SEQUENCE = 22
    DUPLICATE_SEQUENCE = 23
    INVALID_PRODUCER_EPOCH = 24
    UNKNOWN_PRODUCER_ID = 25
    KAFKA_STORAGE_ERROR = 26
    POLICY_VIOLATION = 27
    INVALID_REQUIRED_ACKS = 28
    INVALID_TIMESTAMP = 29
    COORDINATOR_NOT_AVAILABLE = 30
    NOT_COORDINATOR = 31
    COORDINATOR_LOAD_IN_PROGRESS = 32
    ILLEGAL_GENERATION = 33
    UNKNOWN_MEMBER_ID = 34
    REBALANCE_IN_PROGRESS = 35
    INVALID_GROUP_ID = 36
    GROUP_ID_NOT_FOUND = 37
    NON_EMPTY_GROUP = 38
    BROKER_NOT_AVAILABLE = 39
    INVALID_SESSION_TIMEOUT = 40
    FENCED_INSTANCE_ID = 41
    CLUSTER_AUTHORIZATION_FAILED = 42
    UNSTABLE_OFFSET_COMMIT = 43
    INCONSISTENT_GROUP_PROTOCOL = 44
    OFFSET_METADATA_TOO_LARGE = 45
    GROUP_MAX_SIZE_REACHED = 46
    # Transactions (issue 33)
    INVALID_TXN_STATE = 48
    INVALID_PRODUCER_ID_MAPPING = 49
    INVALID_TRANSACTION_TIMEOUT = 50
    CONCURRENT_TRANSACTIONS = 51
    TRANSACTION_COORDINATOR_FENCED = 52
    TRANSACTIONAL_ID_AUTHORIZATION_FAILED = 53  # (ACLs on transactional ids)
    SASL_AUTHENTICATION_FAILED = 58  # (Kafka's number)
    REASSIGNMENT_IN_PROGRESS = 60  # (Kafka's numbers)
    NO_REASSIGNMENT_IN_PROGRESS = 85
    # Security (issue 19). Kafka's numbers for these collide with ours above.
    TOPIC_AUTHORIZATION_FAILED = 90
    GROUP_AUTHORIZATION_FAILED = 91
    UNSUPPORTED_SASL_MECHANISM = 92
    ILLEGAL_SASL_STATE = 93
    RESOURCE_NOT_FOUND = 94
    # Kafka admin APIs (issue 37)
    INVALID_REPLICA_ASSIGNMENT = 95
    GROUP_SUBSCRIBED_TO_TOPIC = 96
    UNACCEPTABLE_CREDENTIAL = 97
    DUPLICATE_RESOURCE = 98
    PRODUCER_FENCED = 99  # (transactions, issue 33: Kafka's 90, 105 and 120)
    TRANSACTIONAL_ID_NOT_FOUND = 100
    TRANSACTION_ABORTABLE = 101
    # Consumers' fetch sessions on the native listener (KIP-227's; Kafka's numbers)
    FETCH_SESSION_ID_NOT_FOUND = 70
    INVALID_FETCH_SESSION_EPOCH = 71

    @property
    def retriable(self) -> bool:
        return self in _RETRIABLE


_RETRIABLE = frozenset(
    {
        ErrorCode.CORRUPT_MESSAGE,
        ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
        ErrorCode.NOT_LEADER_OR_FOLLOWER,
        ErrorCode.LEADER_NOT_AVAILABLE,
        ErrorCode.NOT_ENOUGH_REPLICAS,
        ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND,
        ErrorCode.REQUEST_TIMED_OUT,
        ErrorCode.FENCED_LEADER_EPOCH,
        ErrorCode.UNKNOWN_LEADER_EPOCH,
        ErrorCode.NOT_CONTROLLER,
        ErrorCode.KAFKA_STORAGE_ERROR,
        ErrorCode.COORDINATOR_NOT_AVAILABLE,
        ErrorCode.NOT_COORDINATOR,
        ErrorCode.COORDINATOR_LOAD_IN_PROGRESS,
        ErrorCode.REBALANCE_IN_PROGRESS,
        ErrorCode.BROKER_NOT_AVAILABLE,
        ErrorCode.UNSTABLE_OFFSET_COMMIT,
        ErrorCode.CONCURRENT_TRANSACTIONS,
    }
)


class ApiError(RaftlogError):
    """An error code received in (or destined for) a response, with a message.

    ``ApiError(ErrorCode.NOT_LEADER_OR_FOLLOWER, "node 2 leads events-0")``.
    """

    def __init__(self, code: ErrorCode, message: str = ""):
        code = ErrorCode(code)
        super().__init__(f"{code.name}: {message}" if message else code.name)
        self.code = code
        self.message = message

    @property
    def retriable(self) -> bool:
        return self.code.retriable
