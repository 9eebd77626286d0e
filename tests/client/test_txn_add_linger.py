"""A transaction's sends to several partitions share one AddPartitionsToTxn
(client/txn.py: the add waits for a flush or commit, or ADD_LINGER_S)."""

from __future__ import annotations

import time

from raftlog.client import Admin, Producer
from raftlog.client.txn import ADD_LINGER_S, TransactionManager


def _manager() -> TransactionManager:
    return TransactionManager("t", 60_000, lambda: [], None, request_timeout_s=5,
                              retry_backoff_s=0.1, max_block_s=5)


def test_an_add_is_due_after_the_linger_or_at_once_on_flush():
    m = _manager()
    assert m.add_due(time.monotonic()) is None  # (nothing noted)
    assert m.want("a", 0)
    t0 = m.pending_since
    assert 0 < m.add_due(t0) <= ADD_LINGER_S + 1e-9
    assert m.want("a", 1) and not m.want("a", 1)
    assert m.pending_since == t0  # (the first noted partition starts the linger)
    assert m.add_due(t0 + ADD_LINGER_S) == 0
    m.flushing()
    assert m.add_due(t0) == 0


def test_a_flush_with_nothing_noted_does_not_hurry_the_next_transaction():
    m = _manager()
    m.flushing()  # (a commit of a transaction with no sends)
    assert m.want("a", 0)
    assert m.add_due(m.pending_since) > 0


def test_three_partitions_sent_back_to_back_take_one_add(node_factory):
    n = node_factory(**{"transaction.state.log.num.partitions": "1"})
    with Admin(n.bootstrap) as a:
        a.create_topic("t", partitions=3, replication_factor=1)
    p = Producer(n.bootstrap, transactional_id="linger")
    try:
        p.init_transactions()
        for _ in range(20):
            p.begin_transaction()
            for part in range(3):
                p.send_many("t", [b"v"] * 30, partition=part)
            p.commit_transaction()
        adds = p._txn.stats["ADD_PARTITIONS_TO_TXN"][0]  # (requests: a retry counts)
        retries = p._txn.stats.get("backoff", [0])[0]  # (of any call)
        assert 20 <= adds <= 20 + retries, p._txn.stats  # (one per transaction)
        # a send awaited on its own (no flush) is added after the linger
        p.begin_transaction()
        assert p.send("t", b"w", partition=0).result(10).offset >= 0
        p.commit_transaction()
    finally:
        p.close()
