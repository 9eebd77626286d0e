"""Errors raised by the raftlog client SDK."""

from __future__ import annotations

from raftlog.errors import ApiError, ErrorCode, RaftlogError


class ClientError(RaftlogError):
    """Base class of client-side errors."""


class BrokerNotAvailableError(ClientError):
    """No broker could be reached (all bootstrap servers or the leader are down)."""


class LeaderMovedError(BrokerNotAvailableError):
    """A request waited on a node that newer metadata no longer names as its partition's
    leader (a hung or partitioned old leader): the connection was dropped and the
    request goes to the new leader (client/stale.py)."""


class ProducerClosedError(ClientError):
    """send() after close()."""


class BufferFullError(ClientError):
    """The producer's buffer stayed full for longer than max_block_ms."""


class DeliveryTimeoutError(ClientError):
    """A record was not acknowledged within delivery_timeout_ms (retries included).

    ``last_error`` is the last error its retries met (None if it never got an answer
    at all); the message names it too."""

    def __init__(self, message: str, last_error: BaseException | None = None):
        super().__init__(message)
        self.last_error = last_error


class NoOffsetForPartitionError(ClientError):
    """auto_offset_reset='none' and the partition has no position."""


class CommitFailedError(ClientError):
    """An offset commit the group refused: this member's generation is over (the
    group rebalanced without it). Its partitions may belong to another member now."""


class UnsupportedFeatureError(ClientError):
    """A feature this version of raftlog does not provide yet."""


class TopicAlreadyExistsError(ApiError):
    def __init__(self, message: str = ""):
        super().__init__(ErrorCode.TOPIC_ALREADY_EXISTS, message)


class UnknownTopicOrPartitionError(ApiError):
    #: the cluster's topic closest to the unknown one named (a typo), if any (its
    #: message then ends ``; did you mean 'orders'?``)
    suggestion: str | None = None

    def __init__(self, message: str = ""):
        super().__init__(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, message)


class OffsetOutOfRangeError(ApiError):
    def __init__(self, message: str = ""):
        super().__init__(ErrorCode.OFFSET_OUT_OF_RANGE, message)


class GroupNotEmptyError(ApiError):
    """The consumer group has active members: its offsets cannot be changed from
    outside and it cannot be deleted until they stop (NON_EMPTY_GROUP)."""

    def __init__(self, message: str = ""):
        super().__init__(ErrorCode.NON_EMPTY_GROUP, message)


class GroupIdNotFoundError(ApiError):
    def __init__(self, message: str = ""):
        super().__init__(ErrorCode.GROUP_ID_NOT_FOUND, message)


class KafkaStorageError(ApiError):
    """The partition leader could not write to its disk (KAFKA_STORAGE_ERROR): full,
    read-only or failing. ``message`` is the node's own line, shown as is, e.g.
    ``STORAGE_ERROR: no space left on device on node 2 (data dir /var/lib/raftlog)``.
    The producer fails a batch with this after a few quick retries instead of retrying
    until delivery_timeout_ms (see Producer)."""

    def __init__(self, message: str = ""):
        super().__init__(ErrorCode.KAFKA_STORAGE_ERROR, message)
        #: Set by the producer on the error a send fails with: False when every attempt
        #: of its batch was answered by a leader whose append failed (the records are in
        #: no log: the send definitely failed), None when an attempt may have been
        #: written (lost in flight, timed out, or appended with only the flush failing).
        self.written: bool | None = None

    def __str__(self) -> str:
        if self.message.startswith("STORAGE_ERROR"):
            return self.message
        return super().__str__()


class ProducerFencedError(ApiError):
    """Fatal for a transactional producer: a newer instance with the same
    transactional id called init_transactions() (PRODUCER_FENCED, or a batch refused
    with INVALID_PRODUCER_EPOCH). Close this producer."""

    def __init__(self, message: str = ""):
        super().__init__(ErrorCode.PRODUCER_FENCED, message)


class TransactionAbortableError(ApiError):
    """The ongoing transaction cannot commit (a send of it failed, or the
    coordinator aborted it): call abort_transaction(), then retry the transaction."""

    def __init__(self, message: str = ""):
        super().__init__(ErrorCode.TRANSACTION_ABORTABLE, message)


class TransactionalIdNotFoundError(ApiError):
    """No transaction coordinator knows the transactional id (TRANSACTIONAL_ID_NOT_FOUND):
    no producer with it called init_transactions(), or it expired."""

    def __init__(self, message: str = ""):
        super().__init__(ErrorCode.TRANSACTIONAL_ID_NOT_FOUND, message)


class NoOpenTransactionError(ClientError):
    """Admin.abort_transaction: no open transaction of the partition starts at the
    offset given (the message lists the ones that are open)."""


_BY_CODE = {
    ErrorCode.TRANSACTIONAL_ID_NOT_FOUND: TransactionalIdNotFoundError,
    ErrorCode.PRODUCER_FENCED: ProducerFencedError,
    ErrorCode.TRANSACTION_ABORTABLE: TransactionAbortableError,
    ErrorCode.KAFKA_STORAGE_ERROR: KafkaStorageError,
    ErrorCode.TOPIC_ALREADY_EXISTS: TopicAlreadyExistsError,
    ErrorCode.UNKNOWN_TOPIC_OR_PARTITION: UnknownTopicOrPartitionError,
    ErrorCode.OFFSET_OUT_OF_RANGE: OffsetOutOfRangeError,
    ErrorCode.NON_EMPTY_GROUP: GroupNotEmptyError,
    ErrorCode.GROUP_ID_NOT_FOUND: GroupIdNotFoundError,
}


def api_error(code: int, message: str = "") -> ApiError:
    """The most specific ApiError subclass for ``code``."""
    code = ErrorCode(code)
    cls = _BY_CODE.get(code)
    return cls(message) if cls is not None else ApiError(code, message)
