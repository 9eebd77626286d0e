"""A ``__consumer_offsets`` partition loading while a transaction's marker is appended
to it (node/coordinator.py GroupHost._load / on_marker).

The replay reads the log up to the end it saw when it began; a TxnOffsetCommit below
that end whose COMMIT marker comes in while the replay runs must still become the
group's committed offset. (The 5-node txn harness run with power losses found a group
that read back its offsets from before such a transaction, while the transaction's
records were committed: the next transaction processed an input record again.)

The log is real (a PartitionLog on disk); the replay's worker-thread read is held at
its start so the marker lands inside the window every time."""

from __future__ import annotations

import threading
from types import SimpleNamespace

import trio

from raftlog import records
from raftlog.log import PartitionLog
from raftlog.node import coordinator as coordinator_module
from raftlog.node.coordinator import GroupHost
from raftlog.node.groups import (
    OFFSETS_TOPIC,
    CommittedOffset,
    GroupConfig,
    offset_key,
    offset_value,
)


class _Events:
    def __init__(self):
        self.seen: list[tuple[str, dict]] = []

    def _log(self, name, **kw):
        self.seen.append((name, kw))

    info = warning = error = _log


def _txn_offset_commit(log, pid: int, group: str, topic: str, offset: int) -> None:
    rec = (offset_key(group, topic, 0), offset_value(CommittedOffset(offset, None, 1)))
    log.append_as_leader(records.encode_batch([rec[1]], [rec[0]], producer_id=pid,
                                              producer_epoch=0, base_sequence=0,
                                              transactional=True, timestamp=1),
                         transactional_ok=True)


def _run(tmp_path, monkeypatch, commit: bool) -> list:
    log = PartitionLog.open(str(tmp_path / f"{OFFSETS_TOPIC}-0"))
    part = SimpleNamespace(log=log, is_leader=True, leader_epoch=1)
    replicas = SimpleNamespace(partitions={(OFFSETS_TOPIC, 0): part})
    store = SimpleNamespace(topics={})
    _txn_offset_commit(log, 7, "g", "in", 42)  # below the replay's end: open there

    started, go = threading.Event(), threading.Event()
    real = coordinator_module.read_with_transactions

    def held(log_, end):
        started.set()
        assert go.wait(10)
        return real(log_, end)

    monkeypatch.setattr(coordinator_module, "read_with_transactions", held)
    events = _Events()

    async def main():
        async with trio.open_nursery() as nursery:
            host = GroupHost(replicas, store, events, nursery,
                             GroupConfig(offsets_partitions=1),
                             topic_partitions=1, topic_replication_factor=1)
            host._loaded[0] = 1
            nursery.start_soon(host._load, 0, 1)
            await trio.to_thread.run_sync(started.wait, 10)
            # the transaction coordinator's marker, appended (and announced) mid-replay
            log.append_marker(7, 1, 0, commit)
            host.on_marker(0, 7, commit)
            go.set()
            with trio.fail_after(10):
                while not any(n == "group_partition_loaded" for n, _ in events.seen):
                    await trio.sleep(0.01)
            got = host.coordinator.fetch_offsets("g", [("in", 0)])
            nursery.cancel_scope.cancel()
        return got

    try:
        return trio.run(main)
    finally:
        log.close()


def test_a_commit_marker_appended_while_the_partition_loads_commits_the_offsets(
        tmp_path, monkeypatch):
    (row,) = _run(tmp_path, monkeypatch, commit=True)
    assert row.offset == 42


def test_an_abort_marker_appended_while_the_partition_loads_drops_them(tmp_path, monkeypatch):
    (row,) = _run(tmp_path, monkeypatch, commit=False)
    assert row.offset == -1
