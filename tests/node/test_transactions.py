"""Transaction coordinator state machine (node/transactions.py): pure, no sockets."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
)

from raftlog.errors import ApiError, ErrorCode
from raftlog.node.groups import OFFSETS_TOPIC
from raftlog.node.groups import partition_for as group_partition_for
from raftlog.node.transactions import (
    CorruptTxnRecordError,
    SendMarkers,
    TransactionCoordinator,
    TxnConfig,
    TxnMetadata,
    TxnState,
    decode_txn_key,
    decode_txn_value,
    txn_key,
    txn_value,
)
from raftlog.txn_markers import ControlType

S = TxnState
T0 = 1_000_000
TP = [("a", 0), ("a", 1), ("b", 0)]


class Harness:
    """A coordinator over an in-memory ``__transaction_state`` (key -> value: compacted)."""

    def __init__(self, config=None, epoch=1):
        self.config = config = config or TxnConfig(partitions=3)
        self.ids = itertools.count(100)
        self.log: list = []  # (partition, key, value), every durable record in order
        self.epoch = epoch
        self.c = self._new(epoch)
        for p in range(config.partitions):
            self.c.begin_loading(p, epoch)
            self.c.finish_loading(p)

    def _new(self, epoch):
        return TransactionCoordinator(self.config, lambda: next(self.ids))

    def run(self, outcome):
        """Carry out a write (append, then persisted): the response or error, effects."""
        if outcome.write is None:
            return outcome
        w = outcome.write
        self.log.append((w.partition, w.key, w.value))
        return self.c.persisted(w)

    def failover(self):
        """A new coordinator (next epoch) replays the log; the markers it resumes."""
        self.epoch += 1
        self.c = self._new(self.epoch)
        resumed = []
        for p in range(self.config.partitions):
            self.c.begin_loading(p, self.epoch)
            for part, k, v in self.log:
                if part == p:
                    self.c.replay(p, k, v)
            resumed += self.c.finish_loading(p)
        return resumed

    def finish(self, markers: SendMarkers, now=T0):
        """The markers are all written: complete the transaction."""
        return self.run(self.c.complete(markers.transactional_id, markers.coordinator_epoch, now))


def _code(fn, *a, **kw):
    with pytest.raises(ApiError) as e:
        fn(*a, **kw)
    return e.value.code


def _init(h, tid="t", timeout=60_000, now=T0):
    o = h.run(h.c.init_producer_id(tid, timeout, now))
    assert o.error is ErrorCode.NONE, o
    return o.response["producer_id"], o.response["producer_epoch"]


def test_a_transaction_commits_with_the_epoch_bumped_and_markers_for_each_partition():
    h = Harness()
    pid, epoch = _init(h)
    assert (pid, epoch) == (100, 0)
    assert h.run(h.c.add_partitions("t", pid, epoch, TP[:2], T0)).response == {}
    assert h.c.add_partitions("t", pid, epoch, TP[:1], T0).write is None  # nothing new
    o = h.run(h.c.add_offsets("t", pid, epoch, "g", T0))
    gtp = (OFFSETS_TOPIC, group_partition_for("g", 50))
    assert h.c.txns["t"].partitions == {*TP[:2], gtp} and h.c.txns["t"].state is S.ONGOING
    o = h.run(h.c.end_txn("t", pid, epoch, True, T0 + 5))
    assert o.response == {"producer_id": pid, "producer_epoch": 1}  # KIP-890: bumped
    [m] = o.effects
    assert m == SendMarkers("t", pid, 1, ControlType.COMMIT, 1, tuple(sorted([*TP[:2], gtp])))
    assert h.c.txns["t"].state is S.PREPARE_COMMIT
    # the old epoch can no longer do anything; the retry answers as the first
    assert _code(h.c.add_partitions, "t", pid, 0, TP, T0) is ErrorCode.PRODUCER_FENCED
    assert _code(h.c.end_txn, "t", pid, 0, True, T0) is ErrorCode.CONCURRENT_TRANSACTIONS
    h.finish(m)
    assert h.c.txns["t"].state is S.COMPLETE_COMMIT and not h.c.txns["t"].partitions
    assert h.c.end_txn("t", pid, 0, True, T0).response == {"producer_id": pid,
                                                          "producer_epoch": 1}
    assert _code(h.c.end_txn, "t", pid, 0, False, T0) is ErrorCode.INVALID_TXN_STATE
    # the next transaction runs at epoch 1
    h.run(h.c.add_partitions("t", pid, 1, TP[2:], T0))
    assert h.c.verify_partitions("t", pid, 1, TP) == {
        TP[0]: ErrorCode.INVALID_TXN_STATE, TP[1]: ErrorCode.INVALID_TXN_STATE,
        TP[2]: ErrorCode.NONE}
    assert h.c.verify_partitions("t", pid, 0, TP[2:]) == {TP[2]: ErrorCode.INVALID_TXN_STATE}


def test_bad_requests_get_kafkas_errors_and_write_nothing():
    h = Harness()
    assert _code(h.c.add_partitions, "t", 1, 0, TP, T0) is ErrorCode.INVALID_PRODUCER_ID_MAPPING
    assert _code(h.c.end_txn, "t", 1, 0, True, T0) is ErrorCode.INVALID_PRODUCER_ID_MAPPING
    assert _code(h.c.describe, "t") is ErrorCode.TRANSACTIONAL_ID_NOT_FOUND
    assert _code(h.c.init_producer_id, "t", 0, T0) is ErrorCode.INVALID_TRANSACTION_TIMEOUT
    assert _code(h.c.init_producer_id, "t", 900_001, T0) is ErrorCode.INVALID_TRANSACTION_TIMEOUT
    assert _code(h.c.init_producer_id, "", 1000, T0) is ErrorCode.INVALID_REQUEST
    pid, epoch = _init(h)
    # EndTxn without a transaction
    assert _code(h.c.end_txn, "t", pid, epoch, True, T0) is ErrorCode.INVALID_TXN_STATE
    assert _code(h.c.end_txn, "t", pid + 1, epoch, True, T0) is ErrorCode.INVALID_PRODUCER_ID_MAPPING
    assert _code(h.c.add_partitions, "t", pid, epoch, [], T0) is ErrorCode.INVALID_REQUEST
    assert _code(h.c.add_partitions, "t", pid, epoch, [("a", -1)], T0) is ErrorCode.INVALID_REQUEST
    assert _code(h.c.complete, "t", 1, T0) is ErrorCode.INVALID_TXN_STATE
    assert len(h.log) == 1 and not h.c.pending
    # a second request while a write is in flight
    o = h.c.add_partitions("t", pid, epoch, TP, T0)
    assert _code(h.c.end_txn, "t", pid, epoch, True, T0) is ErrorCode.CONCURRENT_TRANSACTIONS
    assert h.c.write_failed(o.write).error is ErrorCode.NOT_COORDINATOR
    assert h.c.txns["t"].state is S.EMPTY and not h.c.pending
    # not this node's, or still loading
    h.c.unload(h.c.partition_for("t"))
    assert _code(h.c.init_producer_id, "t", 1000, T0) is ErrorCode.NOT_COORDINATOR
    h.c.begin_loading(h.c.partition_for("t"), 2)
    assert _code(h.c.init_producer_id, "t", 1000, T0) is ErrorCode.COORDINATOR_LOAD_IN_PROGRESS


def test_a_new_instance_fences_the_zombie_and_aborts_its_transaction():
    h = Harness()
    pid, e0 = _init(h)
    h.run(h.c.add_partitions("t", pid, e0, TP, T0))
    o = h.run(h.c.init_producer_id("t", 60_000, T0 + 1))  # the new instance
    assert o.error is ErrorCode.CONCURRENT_TRANSACTIONS  # retry once aborted
    [m] = o.effects
    assert (m.result, m.producer_epoch) == (ControlType.ABORT, e0 + 1)
    assert _code(h.c.init_producer_id, "t", 60_000, T0) is ErrorCode.CONCURRENT_TRANSACTIONS
    h.finish(m)
    pid2, e2 = _init(h)
    assert (pid2, e2) == (pid, e0 + 2)
    # the zombie: fenced everywhere, its EndTxn "retry" too
    assert _code(h.c.add_partitions, "t", pid, e0, TP, T0) is ErrorCode.PRODUCER_FENCED
    assert _code(h.c.end_txn, "t", pid, e0, False, T0) is ErrorCode.PRODUCER_FENCED
    assert _code(h.c.init_producer_id, "t", 1000, T0, producer_id=pid,
                 producer_epoch=e0) is ErrorCode.PRODUCER_FENCED


def test_zombie_abort_retry_is_fenced_even_before_the_new_instance_retries():
    h = Harness()
    pid, e0 = _init(h)
    h.run(h.c.add_partitions("t", pid, e0, TP, T0))
    [m] = h.run(h.c.init_producer_id("t", 60_000, T0)).effects
    h.finish(m)
    assert _code(h.c.end_txn, "t", pid, e0, False, T0) is ErrorCode.PRODUCER_FENCED


def test_timeout_aborts_with_the_epoch_bumped_and_the_producer_may_abort_and_go_on():
    h = Harness()
    pid, e0 = _init(h, timeout=1000)
    h.run(h.c.add_partitions("t", pid, e0, TP, T0))
    assert h.c.next_deadline_ms() == T0 + 1001
    assert h.c.tick(T0 + 1000) == []
    [w] = h.c.tick(T0 + 1001)
    assert w.kind == "timeout" and h.c.tick(T0 + 2000) == []  # (one write in flight)
    o = h.c.persisted(w)
    h.log.append((w.partition, w.key, w.value))
    [m] = o.effects
    assert (m.result, m.producer_epoch) == (ControlType.ABORT, e0 + 1)
    assert _code(h.c.add_partitions, "t", pid, e0, TP, T0) is ErrorCode.PRODUCER_FENCED
    assert _code(h.c.end_txn, "t", pid, e0, True, T0) is ErrorCode.INVALID_TXN_STATE
    h.finish(m)
    # the producer's abort (old epoch) is answered with the epoch to continue with
    assert h.c.end_txn("t", pid, e0, False, T0).response == {"producer_id": pid,
                                                            "producer_epoch": e0 + 1}
    h.run(h.c.add_partitions("t", pid, e0 + 1, TP[:1], T0))


@pytest.mark.parametrize("version", [1, 2])
def test_the_next_add_is_written_with_the_last_transactions_completion(version):
    h = Harness()
    pid, e0 = _init(h)
    h.run(h.c.add_partitions("t", pid, e0, TP[:2], T0, transaction_version=version))
    o = h.run(h.c.end_txn("t", pid, e0, True, T0, transaction_version=version))
    [m] = o.effects
    e1 = o.response["producer_epoch"]
    assert e1 == (e0 + 1 if version == 2 else e0)
    # the next transaction's add meets the markers in flight (CONCURRENT_TRANSACTIONS)
    assert _code(h.c.add_partitions, "t", pid, e1, TP[2:], T0,
                 transaction_version=version) is ErrorCode.CONCURRENT_TRANSACTIONS
    # every marker written: one record from PrepareCommit to the next Ongoing
    n = len(h.log)
    out = h.c.complete_and_add("t", m.coordinator_epoch, T0 + 5, pid, e1, TP[2:],
                               transaction_version=version)
    assert out.write.kind == "complete_add"
    assert _code(h.c.add_partitions, "t", pid, e1, TP[2:], T0,
                 transaction_version=version) is ErrorCode.CONCURRENT_TRANSACTIONS
    h.run(out)
    assert len(h.log) == n + 1
    live = h.c.txns["t"]
    assert (live.state, live.partitions, live.producer_epoch) == (
        TxnState.ONGOING, frozenset(TP[2:]), e1)
    assert (live.start_ms, live.marker_producer_id) == (T0 + 5, -1)
    # the add asked again finds its partition added: no write
    assert h.c.add_partitions("t", pid, e1, TP[2:], T0, transaction_version=version).write is None
    assert h.c.verify_partitions("t", pid, e1, TP) == {
        TP[0]: ErrorCode.INVALID_TXN_STATE, TP[1]: ErrorCode.INVALID_TXN_STATE,
        TP[2]: ErrorCode.NONE}
    # a new coordinator replays the open transaction; nothing of the old one to finish
    assert h.failover() == []
    assert h.c.txns["t"] == live
    [m2] = h.run(h.c.end_txn("t", pid, e1, False, T0, transaction_version=version)).effects
    assert (m2.result, m2.partitions) == (ControlType.ABORT, tuple(TP[2:]))


def test_complete_and_add_of_another_producer_or_a_fenced_transaction_only_completes():
    h = Harness()
    pid, e0 = _init(h)
    h.run(h.c.add_partitions("t", pid, e0, TP[:1], T0))
    [m] = h.run(h.c.end_txn("t", pid, e0, True, T0)).effects
    # a zombie's add (the epoch before the bump), or bad partitions: Complete* alone
    for args in [(pid, e0, TP[1:2]), (pid + 1, e0 + 1, TP[1:2]), (pid, e0 + 1, [])]:
        out = h.c.complete_and_add("t", m.coordinator_epoch, T0, *args)
        assert out.write.kind == "complete"
        h.c.write_failed(out.write)
    h.run(h.c.complete_and_add("t", m.coordinator_epoch, T0, pid, e0, TP[1:2]))
    assert h.c.txns["t"].state is TxnState.COMPLETE_COMMIT
    # a fence's abort: the new instance's InitProducerId is no add
    e1 = e0 + 1
    h.run(h.c.add_partitions("t", pid, e1, TP[:1], T0))
    [m] = h.run(h.c.init_producer_id("t", 60_000, T0)).effects
    out = h.c.complete_and_add("t", m.coordinator_epoch, T0, pid, e1 + 1, TP[1:2])
    assert out.write.kind == "complete"
    assert _code(h.c.complete_and_add, "t", m.coordinator_epoch + 1, T0, pid, e1 + 1,
                 TP) is ErrorCode.NOT_COORDINATOR


def test_a_refused_timeout_abort_waits_its_hold_before_the_timer_tries_again():
    h = Harness()
    pid, e0 = _init(h, timeout=1000)
    h.run(h.c.add_partitions("t", pid, e0, TP, T0))
    [w] = h.c.tick(T0 + 1001)
    h.c.write_failed(w)  # (e.g. its partition has too few in-sync replicas)
    h.c.hold_timer("t", T0 + 2001)
    assert h.c.next_deadline_ms() == T0 + 2001  # the timer sleeps until then
    assert h.c.tick(T0 + 1002) == [] and h.c.tick(T0 + 2000) == []
    [w] = h.c.tick(T0 + 2001)
    assert w.kind == "timeout" and "t" not in h.c.timer_held
    h.c.persisted(w)
    assert h.c.txns["t"].state is TxnState.PREPARE_ABORT


def test_idle_transactional_ids_expire_as_tombstones():
    h = Harness(TxnConfig(partitions=3, id_expiration_ms=10_000))
    _init(h)
    assert h.c.tick(T0 + 10_000) == []
    [w] = h.c.tick(T0 + 10_001)
    assert w.kind == "expire" and w.value is None
    h.c.persisted(w)
    h.log.append((w.partition, w.key, w.value))
    assert "t" not in h.c.txns
    h.failover()
    assert "t" not in h.c.txns
    assert _init(h)[0] == 101  # a new producer id


def test_epoch_overflow_moves_the_producer_to_a_new_producer_id():
    h = Harness(TxnConfig(partitions=3, max_producer_epoch=3))
    pid, e = _init(h)
    seen = [(pid, e)]
    for _ in range(4):
        h.run(h.c.add_partitions("t", pid, e, TP[:1], T0))
        o = h.run(h.c.end_txn("t", pid, e, True, T0))
        [m] = o.effects
        assert m.producer_id == pid and m.producer_epoch == e + 1 <= 3
        pid, e = o.response["producer_id"], o.response["producer_epoch"]
        h.finish(m)
        assert (h.c.txns["t"].producer_id, h.c.txns["t"].producer_epoch) == (pid, e)
        seen.append((pid, e))
        # the retry of that EndTxn (old producer id and epoch) answers the same
        assert h.c.end_txn("t", m.producer_id, m.producer_epoch - 1, True, T0).response == {
            "producer_id": pid, "producer_epoch": e}
    assert seen == sorted(seen) and len(set(seen)) == len(seen)
    assert seen[-1][0] > seen[0][0]  # overflowed at least once


@pytest.mark.parametrize("crash_at", ["prepare_written", "prepare_applied", "markers_written",
                                      "complete_written"])
@pytest.mark.parametrize("commit", [True, False])
def test_recovery_from_a_crash_at_every_step_of_end_txn(crash_at, commit):
    h = Harness()
    pid, e = _init(h)
    h.run(h.c.add_partitions("t", pid, e, TP, T0))
    o = h.c.end_txn("t", pid, e, commit, T0)
    h.log.append((o.write.partition, o.write.key, o.write.value))  # durable ...
    result = ControlType.COMMIT if commit else ControlType.ABORT
    if crash_at != "prepare_written":  # ... and applied
        [m] = h.c.persisted(o.write).effects
        if crash_at == "complete_written":
            w = h.c.complete("t", m.coordinator_epoch, T0).write
            h.log.append((w.partition, w.key, w.value))
    resumed = h.failover()
    if crash_at == "complete_written":
        assert resumed == []
    else:  # the new coordinator finishes the decided transaction with the same markers
        [m2] = resumed
        assert (m2.producer_id, m2.producer_epoch, m2.result, m2.partitions) == (
            pid, e + 1, result, tuple(sorted(TP)))
        assert m2.coordinator_epoch == 2
        h.finish(m2)
    assert h.c.txns["t"].state is (S.COMPLETE_COMMIT if commit else S.COMPLETE_ABORT)
    # the client's retry of its EndTxn (it never saw the answer) succeeds
    assert h.c.end_txn("t", pid, e, commit, T0).response == {"producer_id": pid,
                                                            "producer_epoch": e + 1}


def test_markers_of_an_old_coordinator_epoch_do_not_complete():
    h = Harness()
    pid, e = _init(h)
    h.run(h.c.add_partitions("t", pid, e, TP, T0))
    [m] = h.run(h.c.end_txn("t", pid, e, True, T0)).effects
    [m2] = h.failover()
    assert _code(h.c.complete, "t", m.coordinator_epoch, T0) is ErrorCode.NOT_COORDINATOR
    h.finish(m2)


def test_a_write_applied_after_unload_is_not_applied():
    h = Harness()
    o = h.c.init_producer_id("t", 1000, T0)
    h.c.unload(o.write.partition)
    assert h.c.persisted(o.write).error is ErrorCode.NOT_COORDINATOR
    assert "t" not in h.c.txns


def test_list_and_describe():
    h = Harness()
    pid, e = _init(h, "x")
    _init(h, "y")
    h.run(h.c.add_partitions("x", pid, e, TP[:1], T0))
    assert h.c.describe("x") == {"transactional_id": "x", "state": "Ongoing",
                                 "producer_id": pid, "producer_epoch": e,
                                 "timeout_ms": 60_000, "start_ms": T0,
                                 "partitions": [TP[0]]}
    assert [r["transactional_id"] for r in h.c.list_transactions()] == ["x", "y"]
    assert h.c.list_transactions(states=["Ongoing"]) == [
        {"transactional_id": "x", "producer_id": pid, "state": "Ongoing", "start_ms": T0}]
    assert h.c.list_transactions(producer_ids=[pid + 1]) == [
        {"transactional_id": "y", "producer_id": pid + 1, "state": "Empty", "start_ms": -1}]
    # KIP-994's duration filter: only transactions open for longer than it
    assert h.c.list_transactions(duration_ms=500, now_ms=T0 + 500) == []
    assert [r["transactional_id"] for r in
            h.c.list_transactions(duration_ms=500, now_ms=T0 + 501)] == ["x"]
    with pytest.raises(ApiError) as e:
        h.c.describe("nope")
    assert e.value.code is ErrorCode.TRANSACTIONAL_ID_NOT_FOUND


def test_list_refuses_while_a_partition_loads():
    """A list while a partition is loading would miss its ids: retriable error."""
    h = Harness()
    _init(h, "x")
    h.c.begin_loading(h.c.partition_for("x"), 2)
    with pytest.raises(ApiError) as e:
        h.c.list_transactions()
    assert e.value.code is ErrorCode.COORDINATOR_LOAD_IN_PROGRESS


# --------------------------------------------------------------------------- transaction version 1


def test_transaction_version_1_keeps_the_epoch_across_transactions():
    """Kafka's clients' EndTxn v0-v4: the markers carry the client's epoch, nothing is
    bumped, and the next transaction runs at the same epoch."""
    h = Harness()
    pid, e = _init(h)
    h.run(h.c.add_partitions("t", pid, e, TP[:2], T0, transaction_version=1))
    assert h.c.txns["t"].transaction_version == 1
    o = h.run(h.c.end_txn("t", pid, e, True, T0, transaction_version=1))
    assert o.response == {"producer_id": pid, "producer_epoch": e}  # not bumped
    [m] = o.effects
    assert m == SendMarkers("t", pid, e, ControlType.COMMIT, 1, tuple(sorted(TP[:2])))
    m0 = h.c.txns["t"]
    assert (m0.state, m0.producer_epoch, m0.transaction_version) == (S.PREPARE_COMMIT, e, 1)
    # while the markers are written: the retry, and the next transaction, wait
    assert _code(h.c.end_txn, "t", pid, e, True, T0,
                 transaction_version=1) is ErrorCode.CONCURRENT_TRANSACTIONS
    assert _code(h.c.add_partitions, "t", pid, e, TP, T0,
                 transaction_version=1) is ErrorCode.CONCURRENT_TRANSACTIONS
    assert h.c.verify_partitions("t", pid, e, TP[:1]) == {TP[0]: ErrorCode.INVALID_TXN_STATE}
    h.finish(m)
    assert (h.c.txns["t"].state, h.c.txns["t"].producer_epoch) == (S.COMPLETE_COMMIT, e)
    # a retried commit is answered as the first (Kafka's rule); an abort of it is not
    assert h.c.end_txn("t", pid, e, True, T0, transaction_version=1).response == {
        "producer_id": pid, "producer_epoch": e}
    assert _code(h.c.end_txn, "t", pid, e, False, T0,
                 transaction_version=1) is ErrorCode.INVALID_TXN_STATE
    # the next transaction, same epoch, aborted
    h.run(h.c.add_partitions("t", pid, e, TP[2:], T0, transaction_version=1))
    assert h.c.verify_partitions("t", pid, e, TP) == {
        TP[0]: ErrorCode.INVALID_TXN_STATE, TP[1]: ErrorCode.INVALID_TXN_STATE,
        TP[2]: ErrorCode.NONE}
    [m2] = h.run(h.c.end_txn("t", pid, e, False, T0, transaction_version=1)).effects
    assert (m2.producer_epoch, m2.result, m2.partitions) == (e, ControlType.ABORT, (TP[2],))
    h.finish(m2)
    assert (h.c.txns["t"].state, h.c.txns["t"].producer_epoch) == (S.COMPLETE_ABORT, e)
    # and version 2 (the native SDK) still bumps on the same id
    h.run(h.c.add_partitions("t", pid, e, TP[:1], T0))
    assert h.c.txns["t"].transaction_version == 2
    o = h.run(h.c.end_txn("t", pid, e, True, T0))
    assert o.response == {"producer_id": pid, "producer_epoch": e + 1}


def test_transaction_version_1_bad_requests_and_the_zombie():
    h = Harness()
    pid, e = _init(h)
    # EndTxn without a transaction: INVALID_TXN_STATE, nothing written
    assert _code(h.c.end_txn, "t", pid, e, True, T0,
                 transaction_version=1) is ErrorCode.INVALID_TXN_STATE
    assert _code(h.c.end_txn, "t", pid, e, True, T0,
                 transaction_version=3) is ErrorCode.INVALID_REQUEST
    assert _code(h.c.add_partitions, "t", pid, e, TP, T0,
                 transaction_version=0) is ErrorCode.INVALID_REQUEST
    assert len(h.log) == 1 and not h.c.pending
    # a new instance fences the version-1 zombie (the epoch is bumped: as Kafka)
    h.run(h.c.add_partitions("t", pid, e, TP, T0, transaction_version=1))
    o = h.run(h.c.init_producer_id("t", 60_000, T0))
    assert o.error is ErrorCode.CONCURRENT_TRANSACTIONS
    [m] = o.effects
    assert (m.result, m.producer_epoch) == (ControlType.ABORT, e + 1)
    h.finish(m)
    pid2, e2 = _init(h)
    assert (pid2, e2) == (pid, e + 2)
    for commit in (True, False):
        assert _code(h.c.end_txn, "t", pid, e, commit, T0,
                     transaction_version=1) is ErrorCode.PRODUCER_FENCED
    assert _code(h.c.add_partitions, "t", pid, e, TP, T0,
                 transaction_version=1) is ErrorCode.PRODUCER_FENCED


def test_transaction_version_1_timeout_abort_fences_the_client():
    """A timeout abort bumps the epoch in both versions; a version-1 client's EndTxn with
    its old epoch is PRODUCER_FENCED (Kafka's answer), not a retry."""
    h = Harness()
    pid, e = _init(h, timeout=1000)
    h.run(h.c.add_partitions("t", pid, e, TP, T0, transaction_version=1))
    [w] = h.c.tick(T0 + 1001)
    h.log.append((w.partition, w.key, w.value))
    [m] = h.c.persisted(w).effects
    assert (m.result, m.producer_epoch) == (ControlType.ABORT, e + 1)
    h.finish(m)
    assert _code(h.c.end_txn, "t", pid, e, False, T0,
                 transaction_version=1) is ErrorCode.PRODUCER_FENCED


@pytest.mark.parametrize("crash_at", ["prepare_written", "prepare_applied"])
def test_transaction_version_1_recovery_resends_the_markers_at_the_clients_epoch(crash_at):
    h = Harness()
    pid, e = _init(h)
    h.run(h.c.add_partitions("t", pid, e, TP, T0, transaction_version=1))
    o = h.c.end_txn("t", pid, e, True, T0, transaction_version=1)
    h.log.append((o.write.partition, o.write.key, o.write.value))
    if crash_at == "prepare_applied":
        h.c.persisted(o.write)
    [m] = h.failover()
    assert (m.producer_id, m.producer_epoch, m.result) == (pid, e, ControlType.COMMIT)
    assert h.c.txns["t"].transaction_version == 1
    h.finish(m)
    assert h.c.end_txn("t", pid, e, True, T0, transaction_version=1).response == {
        "producer_id": pid, "producer_epoch": e}


def test_records_written_before_the_transaction_version_read_as_version_2():
    import cbor2

    v = cbor2.loads(txn_value(TxnMetadata("t", 1, 0, 1000, S.EMPTY)))
    del v["tv"]
    assert decode_txn_value("t", cbor2.dumps(v)).transaction_version == 2


# --------------------------------------------------------------------------- records

_meta = st.builds(
    TxnMetadata, st.just("t"), st.integers(0, 2**40), st.integers(0, 2**15 - 1),
    st.integers(1, 900_000),
    st.sampled_from([S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT]), st.just(frozenset()),
    st.integers(-1, 2**41), st.integers(-1, 2**41), st.integers(-1, 2**40),
    st.integers(-1, 2**15 - 1), st.integers(-1, 2**40), st.booleans(), st.sampled_from([1, 2]))


@settings(max_examples=100, deadline=None)
@given(m=_meta, parts=st.frozensets(st.tuples(st.text(min_size=1, max_size=5),
                                              st.integers(0, 1000)), min_size=1, max_size=5),
       open_state=st.sampled_from([S.ONGOING, S.PREPARE_COMMIT, S.PREPARE_ABORT]),
       make_open=st.booleans())
def test_txn_records_round_trip(m, parts, open_state, make_open):
    if make_open:
        m = TxnMetadata(**{**{f: getattr(m, f) for f in m.__dataclass_fields__},
                           "state": open_state, "partitions": parts})
    assert decode_txn_key(txn_key("t")) == "t"
    assert decode_txn_value("t", txn_value(m)) == m


@settings(max_examples=300, deadline=None)
@given(data=st.binary(max_size=60))
def test_garbage_txn_records_raise_only_corrupt_txn_record_error(data):
    for fn in (decode_txn_key, lambda d: decode_txn_value("t", d)):
        try:
            fn(data)
        except CorruptTxnRecordError:
            pass


def test_txn_values_breaking_the_rules_are_corrupt():
    import cbor2

    good = cbor2.loads(txn_value(TxnMetadata("t", 1, 0, 1000, S.ONGOING, frozenset([TP[0]]))))
    for change in ({"state": "Dead"}, {"pid": -1}, {"partitions": []}, {"state": "Empty"},
                   {"v": 2}, {"fenced": 1}, {"partitions": [["a", -1]]}, {"tv": 3},
                   {"tv": True}):
        with pytest.raises(CorruptTxnRecordError):
            decode_txn_value("t", cbor2.dumps({**good, **change}))


# --------------------------------------------------------------------------- stateful

TIDS = ["t1", "t2"]
#: t2's client runs transaction version 1 (Kafka's clients: EndTxn keeps the epoch)
TV1_TIDS = {"t2"}


def _tv(tid):
    return 1 if tid in TV1_TIDS else 2


class _Fixed:
    """A stand-in for hypothesis' ``data`` that answers the given values in turn."""

    def __init__(self, values):
        self.values = list(values)

    def draw(self, _strategy):
        return self.values.pop(0)


class _First:
    """A stand-in for hypothesis' ``data`` that always picks the first item."""

    def draw(self, _strategy):
        return 0


class CoordinatorMachine(RuleBasedStateMachine):
    """Any sequence of requests (from current and stale producers), timeouts, failed
    writes, marker completions and failovers (a new coordinator replays the log, with
    any writes in flight landed or lost) keeps the invariants; t1's client bumps its
    epoch at every EndTxn (transaction version 2), t2's keeps it (version 1).

    A transaction is named (tid, n): the n-th that began (an AddPartitions that moved
    the id to Ongoing landed) -- with version 1 the producer id and epoch do not name it."""

    def __init__(self):
        super().__init__()
        self.h = Harness(TxnConfig(partitions=2, max_producer_epoch=6,
                                   id_expiration_ms=50_000))
        self.now = T0
        self.inflight: list = []  # writes not yet persisted
        self.markers: list = []  # SendMarkers not yet completed
        self.producers: dict = {t: set() for t in TIDS}  # (pid, epoch) handed out
        self.marker_results: dict = {}  # (tid, n) -> result
        self.last: dict = {}  # tid -> highest (pid, epoch) ever durable
        self.acked: dict = {}  # (tid, n) -> committed? (EndTxn acked)
        self.added: dict = {}  # (tid, n) -> partitions acknowledged as added
        self.add_requests: dict = {}  # id(write) -> (partitions, began a transaction?)
        self.txn_no: dict = {t: 0 for t in TIDS}  # tid -> n of its latest transaction

    @initialize()
    def producers_start(self):
        for tid in TIDS:
            self.init(tid, 60_000, True)

    # -- requests
    def _submit(self, fn, *a, land_now=False):
        try:
            o = fn(*a)
        except ApiError as e:
            assert e.code is not ErrorCode.UNKNOWN_SERVER_ERROR
            return
        if o.write is not None:
            w = o.write
            if w.target is not None and w.target.state in (S.PREPARE_COMMIT, S.PREPARE_ABORT):
                held = [e for p, e in self.producers[w.transactional_id]
                        if p == w.target.marker_producer_id]
                if w.kind == "end" and w.transactional_id in TV1_TIDS:
                    # version 1: the markers carry the client's epoch, which it keeps
                    old = self.h.c.txns[w.transactional_id]
                    assert w.target.marker_epoch == w.target.producer_epoch == old.producer_epoch
                    assert w.target.transaction_version == 1
                else:  # KIP-890: the markers' epoch is above every epoch a client holds
                    assert all(e < w.target.marker_epoch for e in held)
            self.inflight.append(w)
            if land_now:
                self.land(_Fixed([len(self.inflight) - 1]), True)
        else:
            self._answered(o)

    def _answered(self, o):
        r = o.response or {}
        if "producer_id" in r:
            for tid in TIDS:
                m = self.h.c.txns.get(tid)
                if m is not None and m.producer_id == r["producer_id"]:
                    self.producers[tid].add((r["producer_id"], r["producer_epoch"]))

    def _producer(self, tid, data):
        held = sorted(self.producers[tid])
        if not held or data.draw(st.booleans()):
            m = self.h.c.txns.get(tid)
            return (m.producer_id, m.producer_epoch) if m else (7, 0)
        return data.draw(st.sampled_from(held))

    @rule(tid=st.sampled_from(TIDS), timeout=st.sampled_from([1000, 5000, 60_000]),
          land_now=st.booleans())
    def init(self, tid, timeout, land_now):
        self._submit(self.h.c.init_producer_id, tid, timeout, self.now, land_now=land_now)

    @rule(tid=st.sampled_from(TIDS), parts=st.lists(st.sampled_from(TP), min_size=1,
                                                      max_size=3), data=st.data(),
          land_now=st.booleans())
    def add(self, tid, parts, data, land_now):
        pid, e = self._producer(tid, data)
        try:
            o = self.h.c.add_partitions(tid, pid, e, parts, self.now,
                                        transaction_version=_tv(tid))
        except ApiError:
            return
        if o.write is None:  # already in the transaction
            self.added.setdefault((tid, self.txn_no[tid]), set()).update(parts)
            return
        self.add_requests[id(o.write)] = (parts, self.h.c.txns[tid].state is not S.ONGOING)
        self._submit(lambda: o, land_now=land_now)

    @rule(tid=st.sampled_from(TIDS), commit=st.booleans(), data=st.data(),
          land_now=st.booleans())
    def end(self, tid, commit, data, land_now=False):
        pid, e = self._producer(tid, data)
        try:
            o = self.h.c.end_txn(tid, pid, e, commit, self.now, transaction_version=_tv(tid))
        except ApiError:
            return
        if o.write is None:  # a retry answered at once: that transaction ended so
            result = ControlType.COMMIT if commit else ControlType.ABORT
            assert self.marker_results[(tid, self.txn_no[tid])] is result
            self._answered(o)
        else:
            self._submit(lambda: o, land_now=land_now)

    @rule(tid=st.sampled_from(TIDS), commit=st.booleans())
    def retry_end(self, tid, commit):
        """A delayed or retried EndTxn of the last ended transaction (the Jepsen case)."""
        m = self.h.c.txns.get(tid)
        if m is not None and m.marker_producer_id >= 0:
            held = m.marker_epoch - (1 if _tv(tid) == 2 else 0)
            self.end(tid, commit, _Fixed([False, (m.marker_producer_id, held)]))

    @rule(tid=st.sampled_from(TIDS), data=st.data())
    def verify(self, tid, data):
        pid, e = self._producer(tid, data)
        got = self.h.c.verify_partitions(tid, pid, e, TP)
        m = self.h.c.txns.get(tid)
        for tp, code in got.items():
            if code is ErrorCode.NONE:
                assert m.state is S.ONGOING and tp in m.partitions
                assert (m.producer_id, m.producer_epoch) == (pid, e)

    @rule(ms=st.sampled_from([1, 500, 2000, 30_000]))
    def tick(self, ms):
        self.now += ms
        self.inflight += self.h.c.tick(self.now)

    # -- the log and the markers
    @precondition(lambda self: self.inflight)
    @rule(data=st.data(), ok=st.booleans())
    def land(self, data, ok):
        w = self.inflight.pop(data.draw(st.integers(0, len(self.inflight) - 1)))
        if not ok:
            self.h.c.write_failed(w)
            return
        self._durable(w)
        o = self.h.c.persisted(w)
        tid = w.transactional_id
        if o.error is ErrorCode.NONE and w.kind in ("add", "complete_add"):
            parts, _began = self.add_requests[id(w)]
            self.added.setdefault((tid, self.txn_no[tid]), set()).update(parts)
        if o.error is ErrorCode.NONE and w.kind == "end":
            self.acked[(tid, self.txn_no[tid])] = w.target.state is S.PREPARE_COMMIT
        self._answered(o)
        self._markers(o.effects)

    def _durable(self, w):
        """``w`` is in the log: an AddPartitions that began a transaction numbers it."""
        self.h.log.append((w.partition, w.key, w.value))
        if w.kind in ("add", "complete_add") and self.add_requests[id(w)][1]:
            self.txn_no[w.transactional_id] += 1

    def _markers(self, effects):
        for m in effects:
            key = (m.transactional_id, self.txn_no[m.transactional_id])
            assert self.marker_results.setdefault(key, m.result) is m.result, key
            # every partition an acknowledged AddPartitions put in the transaction is marked
            added = self.added.get(key)
            assert added is None or added <= set(m.partitions), (added, m.partitions)
            self.markers.append(m)

    @precondition(lambda self: self.markers)
    @rule(data=st.data())
    def markers_written(self, data):
        m = self.markers.pop(data.draw(st.integers(0, len(self.markers) - 1)))
        tid = m.transactional_id
        try:
            if data.draw(st.booleans()):  # the next transaction's add waits for them
                pid, e = self._producer(tid, data)
                parts = data.draw(st.lists(st.sampled_from(TP), min_size=1, max_size=3))
                o = self.h.c.complete_and_add(tid, m.coordinator_epoch, self.now, pid, e,
                                              parts, transaction_version=_tv(tid))
                if o.write.kind == "complete_add":
                    self.add_requests[id(o.write)] = (parts, True)
            else:
                o = self.h.c.complete(tid, m.coordinator_epoch, self.now)
        except ApiError as e:
            assert e.code in (ErrorCode.NOT_COORDINATOR, ErrorCode.CONCURRENT_TRANSACTIONS,
                              ErrorCode.INVALID_TXN_STATE)
            if e.code is ErrorCode.CONCURRENT_TRANSACTIONS:
                self.markers.append(m)  # retried later
            return
        self.inflight.append(o.write)

    @rule()
    def settle(self):
        """Every write lands and every marker is written (the common, quiet case)."""
        for _ in range(3):
            while self.inflight:
                self.land(_First(), True)
            while self.markers:
                self.markers_written(_First())

    @rule(data=st.data())
    def failover(self, data):
        for w in self.inflight:  # a write in flight may have landed, unacknowledged
            if data.draw(st.booleans()):
                self._durable(w)
        self.inflight = []
        self.markers = []
        resumed = self.h.failover()
        self._markers(resumed)
        # every decided, unfinished transaction is being finished
        prep = {t for t, m in self.h.c.txns.items()
                if m.state in (S.PREPARE_COMMIT, S.PREPARE_ABORT)}
        assert {m.transactional_id for m in resumed} == prep

    # -- invariants
    @invariant()
    def recovered_equals_live(self):
        replayed = {}
        for _p, k, v in self.h.log:  # (a compacted log replays the same: last per key)
            tid = decode_txn_key(k)
            if v is None:
                replayed.pop(tid, None)
            else:
                replayed[tid] = decode_txn_value(tid, v)
        assert replayed == self.h.c.txns

    @invariant()
    def one_open_transaction_and_epochs_only_grow(self):
        for tid, m in self.h.c.txns.items():
            assert (m.state is S.ONGOING or m.state in (S.PREPARE_COMMIT, S.PREPARE_ABORT)) \
                == bool(m.partitions)
            assert 0 <= m.producer_epoch <= 6
            cur = (m.producer_id, m.producer_epoch)
            assert cur >= self.last.get(tid, (-1, -1)), (tid, cur, self.last.get(tid))
            self.last[tid] = cur
        assert len({w.transactional_id for w in self.inflight}) == len(self.inflight)

    @invariant()
    def acknowledged_decisions_hold(self):
        for key, committed in self.acked.items():
            assert self.marker_results[key] is (ControlType.COMMIT if committed
                                                else ControlType.ABORT)


TestCoordinatorMachine = CoordinatorMachine.TestCase
TestCoordinatorMachine.settings = settings(
    max_examples=100, stateful_step_count=35, deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
