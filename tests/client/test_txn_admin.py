"""Transactions admin (issue #33): find-hanging's rule, the CLI's usage errors and its
duration text without a node; a truly hanging transaction found and aborted on one node.
The calls against 3 nodes and the Kafka listener: tests/cluster/test_transactions_admin_cluster.py."""

from __future__ import annotations

import json
import time

import pytest

from raftlog.client import Admin, TopicPartition, cli
from raftlog.client.admin_txn import ProducerState, TransactionDescription, hanging
from raftlog.client.cli_txn import duration_text

from ..conftest import free_port

A0, A1 = TopicPartition("a", 0), TopicPartition("a", 1)


def _open(pid: int, start: int) -> ProducerState:
    return ProducerState(pid, 3, 7, 1000, 2, start)


def _txn(pid: int, state: str, *tps) -> TransactionDescription:
    return TransactionDescription(f"t{pid}", 1, state, pid, 3, 60_000, 5, 10, tuple(tps))


def test_a_transaction_hangs_when_its_coordinator_does_not_hold_it():
    candidates = {A0: [_open(1, 10), _open(2, 11), _open(3, 12), _open(4, 13)]}
    known = {2: _txn(2, "CompleteCommit"), 3: _txn(3, "Ongoing", A1),
             4: _txn(4, "Ongoing", A0, A1)}
    got = {h.producer_id: h for h in hanging(candidates, known)}
    assert sorted(got) == [1, 2, 3]  # 4's coordinator has it open, with this partition
    assert got[1].reason.startswith("unknown producer")
    assert "is CompleteCommit" in got[2].reason
    assert "does not hold a-0" in got[3].reason
    assert (got[1].topic, got[1].partition, got[1].start_offset) == ("a", 0, 10)
    assert hanging({}, known) == []


def test_duration_text():
    assert [duration_text(x) for x in (None, 850, 12_340, 245_000, 7_380_000)] == [
        None, "850ms", "12.3s", "4m05s", "2h03m"]


@pytest.mark.parametrize("argv, says", [
    (["transactions", "describe"], "--transactional-id ID"),
    (["transactions", "describe", "a", "--transactional-id", "b"], "once"),
    (["transactions", "abort", "--topic", "t", "--partition", "0"], "--start-offset O"),
    (["transactions", "abort", "--start-offset", "3"], "needs --topic T --partition P"),
    (["transactions", "describe-producers", "--topic", "t"], "needs --topic T --partition P"),
    (["transactions", "find-hanging"], "--broker-id N"),
])
def test_cli_usage_mistakes_say_what_to_give(capsys, argv, says):
    assert cli.main(argv + ["--bootstrap-server", f"127.0.0.1:{free_port()}"]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"raftlog transactions {argv[1]}: ") and says in err


def test_cli_state_filter_is_one_of_kafkas_names(capsys):
    with pytest.raises(SystemExit):
        cli.main(["transactions", "list", "--state", "ongoing"])
    assert "invalid choice: 'ongoing'" in capsys.readouterr().err


def test_admin_refuses_an_unknown_state_before_asking_anyone():
    with Admin(f"127.0.0.1:{free_port()}") as a, pytest.raises(ValueError, match="Ongoing"):
        a.list_transactions(states=["Running"])


def test_a_hanging_transaction_is_found_and_aborted(node_factory, capsys):
    """A transactional batch no coordinator knows (let in by the planted bug
    bug-skip-txn-verification: without it the leader refuses it) hangs: it holds the
    LSO back for good. find-hanging reports it, abort by its start offset ends it."""
    from raftlog import records
    from raftlog.client.conn import BrokerConnection
    from raftlog.protocol import Api

    n = node_factory(**{"transaction.state.log.num.partitions": "1",
                        "test.flags": "bug-skip-txn-verification"})
    bs = ["--bootstrap-server", n.bootstrap]
    tp = TopicPartition("t", 0)
    with Admin(n.bootstrap) as a:
        a.create_topic("t", partitions=1, replication_factor=1)
        data = records.encode_batch([b"ghost"], producer_id=424242, producer_epoch=0,
                                    base_sequence=0, transactional=True,
                                    timestamp=int(time.time() * 1000))
        conn = BrokerConnection(n.host, n.port, 10)
        try:
            h = conn.request(Api.PRODUCE, {"transactional_id": "ghost", "acks": -1,
                                           "parts": [["t", 0, len(data)]]}, data).header
        finally:
            conn.close()
        assert h["parts"][0].error == 0
        assert (a.end_offsets([tp]), a.end_offsets([tp], "read_committed")) == ({tp: 1}, {tp: 0})

        assert a.find_hanging_transactions(1) == []  # its last write is not 15 min old
        assert cli.main(["transactions", "find-hanging", "--broker-id", "1",
                         "--max-transaction-timeout", "0", "--json", *bs]) == 0
        (found,) = json.loads(capsys.readouterr().out)
        assert (found["topic"], found["partition"], found["producer_id"],
                found["start_offset"]) == ("t", 0, 424242, 0)
        assert found["reason"].startswith("unknown producer")

        assert cli.main(["transactions", "abort", "--topic", "t", "--partition", "0",
                         "--start-offset", "0", *bs]) == 0
        assert "aborted the transaction of producer 424242" in capsys.readouterr().out
        assert a.end_offsets([tp], "read_committed") == a.end_offsets([tp]) == {tp: 2}
        assert a.find_hanging_transactions(1, max_transaction_timeout_ms=0) == []
