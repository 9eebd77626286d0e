"""A transaction coordinator's write that is in its log but not replicated in time
(issue #33; the harness's `committed-offset-repeat`, seed 33): the coordinator must not
take it back. Before the fix it answered the EndTxn with an error and went back to
Ongoing in memory while its PrepareCommit stayed in the log and later committed; a new
instance's InitProducerId then appended a PrepareAbort of the same transaction behind
it -- two contrary decisions in one log, and a coordinator replaying only the first
(a power loss of the second) sends commit markers where abort markers already went.

Real node processes: the two followers of the coordinator's ``__transaction_state``
partition are stopped (SIGSTOP) with the ISR kept (long lag time and session), so the
leader's append waits past its ``request.timeout.ms`` and is in doubt."""

from __future__ import annotations

import signal
import threading

import pytest

from raftlog.client import Producer
from raftlog.node.transactions import (
    TRANSACTION_STATE_TOPIC,
    TxnState,
    decode_txn_key,
    decode_txn_value,
    partition_for,
)

from .cluster import LocalCluster, until
from .test_transactions_cluster import _coordinator_of, _read

pytestmark = pytest.mark.slow

PARTITIONS = 3


def _tid_coordinated_by(cluster, node_id: int) -> str:
    """A transactional id whose coordinator is ``node_id``."""
    def find():
        for i in range(30):
            if _coordinator_of(cluster, f"doubt-{i}") == node_id:
                return f"doubt-{i}"
        return None
    return until(find, timeout_s=60)


def test_a_decision_in_the_log_but_not_replicated_is_never_reversed(tmp_path):
    # node 1 is the only voter (stopping the others keeps the metadata quorum) and the
    # coordinator; the others stay in the ISR while stopped (no lag or session expiry)
    cluster = LocalCluster(tmp_path, 3, voters=1, request_timeout_ms=1000,
                           replica_lag_time_max_ms=120_000, broker_session_timeout_ms=120_000,
                           transaction_state_log_num_partitions=PARTITIONS,
                           offsets_topic_num_partitions=2).start()
    others = [cluster.node(2), cluster.node(3)]
    stopped = False
    try:
        tid = _tid_coordinated_by(cluster, 1)
        p = partition_for(tid, PARTITIONS)
        until(lambda: len(cluster.partition(TRANSACTION_STATE_TOPIC, p).isr) == 3, timeout_s=30)
        with cluster.admin() as a:  # the data on node 1 only: its markers need no follower
            a.create_topic("doubt", assignments=[[1]])
        old = Producer(cluster.bootstrap, transactional_id=tid)
        old.init_transactions()
        old.begin_transaction()
        old.send("doubt", b"decided", partition=0)
        old.flush()

        for n in others:
            n.proc.send_signal(signal.SIGSTOP)
        stopped = True
        outcome: list = []

        def commit():
            try:
                old.commit_transaction()
                outcome.append("committed")
            except Exception as e:  # noqa: BLE001 (the outcome is what is checked)
                outcome.append(e)

        committer = threading.Thread(target=commit, daemon=True)
        committer.start()
        until(lambda: "txn_write_in_doubt" in cluster.node(1).log_text(), timeout_s=30)
        # a new instance while the decision is in doubt: it may not fence (abort) the
        # transaction the log may already have decided; it is told to retry meanwhile
        new = Producer(cluster.bootstrap, transactional_id=tid, max_block_ms=3000)
        with pytest.raises(Exception, match="CONCURRENT_TRANSACTIONS|retry|time"):
            new.init_transactions()
        new.close()

        for n in others:
            n.proc.send_signal(signal.SIGCONT)
        stopped = False
        committer.join(60)
        assert outcome == ["committed"]  # the SDK's retries met the settled decision
        assert "txn_write_settled" in cluster.node(1).log_text()
        assert _read(cluster.bootstrap, "doubt", 1, "read_committed", 1) == [b"decided"]
        after = Producer(cluster.bootstrap, transactional_id=tid)
        after.init_transactions()  # the transaction is complete: no fence needed
        after.close()
        old.close()
    finally:
        if stopped:
            for n in others:
                n.proc.send_signal(signal.SIGCONT)
        cluster.stop()

    decisions: dict = {}
    for _offset, key, value in cluster.read_replica(1, TRANSACTION_STATE_TOPIC, p):
        if value is None or decode_txn_key(key) != tid:
            continue
        m = decode_txn_value(tid, value)
        if m.state in (TxnState.PREPARE_COMMIT, TxnState.PREPARE_ABORT):
            decisions.setdefault((m.marker_producer_id, m.marker_epoch), set()).add(m.state)
    assert decisions, "no decision of the transaction in the log"
    assert all(len(s) == 1 for s in decisions.values()), decisions
