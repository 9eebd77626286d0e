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
    TopicDescription,
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
    OffsetOutOfRangeError,
    ProducerClosedError,
    ProducerFencedError,
    TopicAlreadyExistsError,
    TransactionAbortableError,
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
    "KafkaStorageError",
    "ProducerFencedError",
    "TransactionAbortableError",
    "LogDirDescription",
    "MemberDescription",
    "NoOffsetForPartitionError",
    "OffsetAndTimestamp",
    "OffsetOutOfRangeError",
    "PartitionDescription",
    "Producer",
    "ProducerClosedError",
    "Record",
    "RecordMetadata",
    "TopicAlreadyExistsError",
    "TopicDescription",
    "TopicPartition",
    "UnknownTopicOrPartitionError",
    "UnsupportedFeatureError",
]
