"""raftlog-client: the Python SDK for raftlog (Producer, Consumer, Admin).

Needs only the core dependencies (cbor2, crc32c, lz4, zstandard); it never
imports the server packages.
"""

from raftlog.errors import ApiError, ErrorCode
from raftlog.records import Record

from .admin import (
    Admin,
    BrokerDescription,
    ClusterDescription,
    GroupDescription,
    GroupListing,
    GroupOffset,
    LogDirDescription,
    MemberDescription,
    PartitionDescription,
    QuorumDescription,
    TopicDescription,
    VoterState,
)
from .admin_txn import (
    HangingTransaction,
    ProducerState,
    TransactionDescription,
    TransactionListing,
)
from .consumer import Consumer
from .errors import (
    BrokerNotAvailableError,
    BufferFullError,
    ClientError,
    CommitFailedError,
    DeliveryTimeoutError,
    GroupIdNotFoundError,
    GroupNotEmptyError,
    KafkaStorageError,
    NoOffsetForPartitionError,
    NoOpenTransactionError,
    OffsetOutOfRangeError,
    ProducerClosedError,
    ProducerFencedError,
    TopicAlreadyExistsError,
    TransactionAbortableError,
    TransactionalIdNotFoundError,
    UnknownTopicOrPartitionError,
    UnsupportedFeatureError,
)
from .future import BatchMetadata, RecordMetadata
from .group import ConsumerRebalanceListener
from .producer import Producer
from .types import ConsumerGroupMetadata, OffsetAndTimestamp, TopicPartition

__all__ = [
    "Admin",
    "ApiError",
    "BatchMetadata",
    "BrokerDescription",
    "BrokerNotAvailableError",
    "BufferFullError",
    "ClientError",
    "ClusterDescription",
    "CommitFailedError",
    "Consumer",
    "ConsumerGroupMetadata",
    "ConsumerRebalanceListener",
    "DeliveryTimeoutError",
    "ErrorCode",
    "GroupDescription",
    "GroupIdNotFoundError",
    "GroupListing",
    "GroupNotEmptyError",
    "GroupOffset",
    "HangingTransaction",
    "KafkaStorageError",
    "ProducerFencedError",
    "TransactionAbortableError",
    "LogDirDescription",
    "QuorumDescription",
    "VoterState",
    "MemberDescription",
    "NoOffsetForPartitionError",
    "NoOpenTransactionError",
    "OffsetAndTimestamp",
    "OffsetOutOfRangeError",
    "PartitionDescription",
    "Producer",
    "ProducerClosedError",
    "ProducerState",
    "Record",
    "RecordMetadata",
    "TopicAlreadyExistsError",
    "TopicDescription",
    "TopicPartition",
    "TransactionDescription",
    "TransactionListing",
    "TransactionalIdNotFoundError",
    "UnknownTopicOrPartitionError",
    "UnsupportedFeatureError",
]
