"""Transactions admin without a cluster (issue #33): find-hanging's rule, the CLI's
usage errors and its duration text. The calls themselves run against 3 nodes in
tests/cluster/test_transactions_admin_cluster.py."""

from __future__ import annotations

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
