"""The Kafka listener's transaction APIs (node/kafka/txn_handlers.py): error codes as
Kafka's broker answers each request version, and only transaction version 1 offered."""

from __future__ import annotations

from raftlog.errors import ErrorCode
from raftlog.kafka.wire import SUPPORTED
from raftlog.node.kafka.txn_handlers import KafkaTxnApis, kafka_code


def test_producer_fenced_reaches_old_clients_as_invalid_producer_epoch():
    # PRODUCER_FENCED (Kafka 90) is new in EndTxn/AddPartitionsToTxn/AddOffsetsToTxn v2
    # and InitProducerId v4; before, Kafka answers INVALID_PRODUCER_EPOCH (47)
    assert kafka_code(ErrorCode.PRODUCER_FENCED, 1, 2) == 47
    assert kafka_code(ErrorCode.PRODUCER_FENCED, 2, 2) == 90
    assert kafka_code(ErrorCode.PRODUCER_FENCED, 3, 4) == 47
    assert kafka_code(ErrorCode.CONCURRENT_TRANSACTIONS, 0, 2) == 51
    assert kafka_code(ErrorCode.INVALID_TXN_STATE, 0, 2) == 48
    assert kafka_code(ErrorCode.NOT_COORDINATOR, 0, 2) == 16
    assert kafka_code(ErrorCode.COORDINATOR_LOAD_IN_PROGRESS, 0, 2) == 14


def test_transaction_apis_served_without_endtxn_v5():
    """EndTxn v5 (KIP-890's transaction version 2: the epoch bumped per transaction and
    returned) is not offered: clients stay on version 1, which the coordinator runs."""
    assert SUPPORTED[26] == (0, 4)
    assert {k: SUPPORTED[k] for k in (24, 25, 28)} == {24: (0, 4), 25: (0, 4), 28: (0, 4)}
    assert set(KafkaTxnApis.handlers(KafkaTxnApis.__new__(KafkaTxnApis))) == {24, 25, 26, 28}
