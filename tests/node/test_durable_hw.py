"""Durable acknowledgement (#34, write.caching=false): the leader's HW never passes the
minimum flushed offset of the ISR; write.caching=true keeps the page-cache HW; a
follower older than #34 (no flushed offsets) counts by its fetch offset. Pure and
over real logs, no sockets."""

from __future__ import annotations

import pytest

from raftlog.config import LogConfig
from raftlog.log import PartitionLog
from raftlog.node.partition import Partition
from raftlog.node.replica import UNKNOWN, LeaderState
from raftlog.protocol import REQUEST_SCHEMAS, Api, _apply_fields
from raftlog.records import encode_batch


def _leader(tmp_path, write_caching: bool) -> Partition:
    log = PartitionLog.open(str(tmp_path / "t-0"), LogConfig(write_caching=write_caching))
    part = Partition("t", 0, log, node_id=1)
    part.update_metadata(1, 1, (1, 2, 3), (1, 2, 3), 0)
    return part


def _min_isr_flushed(part: Partition) -> int:
    st = part.leader_state
    return min([part.log.flushed_offset]
               + [st.flushed_of(r) for r in part.isr if r != part.node_id])


def test_hw_waits_for_every_isr_member_to_flush(tmp_path):
    part = _leader(tmp_path, write_caching=False)
    part.append_as_leader(encode_batch([b"a", b"b", b"c"]), 1 << 20)
    assert part.log.flushed_offset == 3  # (no worker here: the leader synced inline)
    part.on_follower_fetch(2, 3, flushed=1)  # has all three, one on disk
    part.on_follower_fetch(3, 3, flushed=3)
    assert part.high_watermark == 1 == _min_isr_flushed(part)
    part.on_follower_flushed(2, 2)  # a report without a new fetch offset
    assert part.high_watermark == 2 == _min_isr_flushed(part)
    part.on_follower_fetch(2, 3, flushed=3)
    assert part.high_watermark == 3
    part.log.close()


def test_page_cache_topic_keeps_the_min_leo_hw(tmp_path):
    part = _leader(tmp_path, write_caching=True)
    part.append_as_leader(encode_batch([b"a", b"b", b"c"]), 1 << 20)
    assert part.log.flushed_offset == 0  # no sync on the append path
    part.on_follower_fetch(2, 3, flushed=0)
    part.on_follower_fetch(3, 3, flushed=0)
    assert part.high_watermark == 3
    part.log.close()


def test_a_follower_that_does_not_report_counts_by_its_fetch_offset():
    s = LeaderState(1, (1, 2, 3), now_ms=0)
    s.on_fetch(2, 5, leader_leo=9, now_ms=1)  # an older node: no flushed offsets
    s.on_fetch(3, 9, leader_leo=9, now_ms=1, flushed=4)
    assert s.high_watermark(9, (1, 2, 3), durable=True) == 4
    assert s.high_watermark(9, (1, 2), durable=True) == 5
    assert s.high_watermark(9, (1, 2, 3)) == 5  # write.caching=true: LEOs
    s.on_fetch(3, 9, leader_leo=9, now_ms=2, flushed=12)  # never above what it holds
    assert s.flushed_of(3) == 9


def test_flushed_is_unknown_until_told_and_rejoin_needs_it_on_disk():
    s = LeaderState(1, (1, 2), now_ms=0)
    assert s.high_watermark(5, (1, 2), durable=True) == UNKNOWN
    s.on_fetch(2, 5, leader_leo=5, now_ms=1, flushed=2)
    # out of the ISR, at the leader's end, but only 2 on disk: not back while HW is 5
    assert s.caught_up((1,), 5, 0, now_ms=1, max_lag_ms=1000, durable=True) == []
    assert s.caught_up((1,), 5, 0, now_ms=1, max_lag_ms=1000) == [2]
    s.on_fetch(2, 5, leader_leo=5, now_ms=2, flushed=5)
    assert s.caught_up((1,), 5, 0, now_ms=2, max_lag_ms=1000, durable=True) == [2]


def test_fetch_flushed_field_is_optional_on_the_wire():
    base = {"replica_id": 2, "parts": [["t", 0, 5, 1024, 1]]}
    assert _apply_fields(REQUEST_SCHEMAS[Api.FETCH], base, "")["flushed"] is None
    got = _apply_fields(REQUEST_SCHEMAS[Api.FETCH], {**base, "flushed": [["t", 0, 4]]}, "")
    assert got["flushed"] == [("t", 0, 4)]


def test_acks_one_and_the_hw_wait_for_the_leaders_group_commit(tmp_path):
    """A one-replica durable topic with its group commit on trio's MockClock: the
    append returns at once (the sync runs as a task), an acks=1 wait and the HW pass the
    batch only when the sync that started after it returns."""
    import trio
    import trio.testing

    from raftlog.group_commit import GroupCommitter
    from raftlog.node.replica_manager import ReplicaManager

    log = PartitionLog.open(str(tmp_path / "t-0"), LogConfig())
    part = Partition("t", 0, log, node_id=1)
    part.update_metadata(1, 1, (1,), (1,), 0)
    syncs = []

    async def slow_sync() -> int:  # the real fdatasync, taking 1 s of mock time
        syncs.append(trio.current_time())
        flushed = log.sync()  # (what it covers: the log end when it starts)
        await trio.sleep(1)
        return flushed

    async def main():
        async with trio.open_nursery() as nursery:
            part.committer = GroupCommitter(slow_sync, log.flushed_offset,
                                            on_flushed=part.on_flushed, nursery=nursery)
            _, last = part.append_as_leader(encode_batch([b"a"]), 1 << 20)
            wait = [(part, part.leader_epoch, last, "t", 0, True)]
            assert part.high_watermark == 0 and log.flushed_offset == 0
            assert ReplicaManager.check_high_watermarks(wait, False) == (wait, {})
            await trio.sleep(0.5)
            part.append_as_leader(encode_batch([b"b"]), 1 << 20)  # during the sync
            await trio.sleep(0.6)  # the first sync returned: "a" on disk, "b" not yet
            assert ReplicaManager.check_high_watermarks(wait, False) == ([], {})
            assert part.high_watermark == 1  # (the second sync, started at once, covers "b")
            assert await part.committer.wait_flushed(2)
            assert part.high_watermark == 2

    trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0))
    assert syncs == [0.0, 1.0]
    log.close()


@pytest.mark.parametrize("where", ["inline", "thread"])
def test_a_failed_sync_is_reported_and_the_periodic_flush_lets_the_hw_move(tmp_path,
                                                                            monkeypatch, where):
    """The node's group commits (node/log_manager.py SyncRunner: on the loop, or in a
    worker thread when the disk is slow): an fdatasync that fails leaves the HW where
    it is and logs the data dir as unwritable; the periodic flush then fsyncs the log
    and its after_flush kick moves the HW although nothing more is appended."""
    import io
    import os

    import trio

    from raftlog.node.config import NodeConfig
    from raftlog.node.log_manager import LogManager
    from raftlog.node.logfmt import EventLog

    events = io.StringIO()
    partitions: dict = {}
    logs = LogManager(NodeConfig(data_dir=str(tmp_path / "data")), EventLog(1, stream=events),
                      partitions)
    part = Partition("t", 0, logs.open_log("t", 0, LogConfig()), node_id=1,
                     unflushed=logs.unflushed, syncs=logs.syncs)
    part.disk = logs.disk
    partitions[part.key] = part
    part.update_metadata(1, 1, (1,), (1,), 0)

    def broken(fd):
        raise OSError(5, "Input/output error")

    if where == "thread":
        logs.syncs.policy.mean_s = 0.01  # a slow disk: syncs go to worker threads

    async def main():
        async with trio.open_nursery() as nursery:
            logs.syncs.start(nursery)
            monkeypatch.setattr(os, "fdatasync", broken)
            part.append_as_leader(encode_batch([b"a"]), 1 << 20)
            assert not await part.committer.wait_flushed(1)  # the sync failed
            assert part.high_watermark == 0 and part.log.flushed_offset == 0
            monkeypatch.undo()
            done = await trio.to_thread.run_sync(logs.flush_all)
            assert done == [part] and part.log.flushed_offset == 1
            logs.syncs.after_flush(done)
            assert await part.committer.wait_flushed(1)
            assert part.high_watermark == 1

    trio.run(main)
    assert "log_dir_unwritable" in events.getvalue() and "op=sync" in events.getvalue()
    policy = logs.syncs.policy
    # (the kick after the flush starts the group commit's task; its sync runs where the
    # append's ran: on the loop while the disk is fast, else in a thread)
    assert (policy.inline, policy.threaded) == ((2, 0) if where == "inline" else (0, 2))
    part.close()


def test_syncs_run_inline_only_where_nothing_overlaps_them(tmp_path):
    """A leader alone in its ISR and a follower sync on the event loop, so the append
    returns with its record on disk (no hand-off to a thread and back); a leader with
    followers in its ISR syncs in a worker thread, overlapping their fetches; so do the
    sync of an append right after another (a flood) and every sync of a slow disk."""
    import io

    import trio

    from raftlog.node.config import NodeConfig
    from raftlog.node.log_manager import LogManager
    from raftlog.node.logfmt import EventLog

    partitions: dict = {}
    logs = LogManager(NodeConfig(data_dir=str(tmp_path / "data")),
                      EventLog(1, stream=io.StringIO()), partitions)

    def make(name, leader, isr):
        part = Partition(name, 0, logs.open_log(name, 0, LogConfig()), node_id=1,
                         unflushed=logs.unflushed, syncs=logs.syncs)
        part.disk = logs.disk
        partitions[part.key] = part
        part.update_metadata(leader, 1, (1, 2, 3), isr, 0)
        return part

    alone, shared = make("alone", 1, (1,)), make("shared", 1, (1, 2, 3))
    follower = make("follower", 2, (1, 2, 3))
    policy = logs.syncs.policy
    now = [1000.0]  # the policy's clock: moved by the test only
    logs.syncs.clock = lambda: now[0]

    async def main():
        async with trio.open_nursery() as nursery:
            logs.syncs.start(nursery)
            alone.append_as_leader(encode_batch([b"a"]), 1 << 20)
            assert alone.log.flushed_offset == 1 and alone.high_watermark == 1  # at once
            now[0] += 0.01  # (syncs back to back would mean a flood: below)
            follower.append_as_follower(encode_batch([b"f"], base_offset=0))
            assert follower.log.flushed_offset == 1
            assert (policy.inline, policy.threaded) == (2, 0)
            shared.append_as_leader(encode_batch([b"s"]), 1 << 20)
            assert shared.log.flushed_offset == 0  # its sync runs in a thread
            assert await shared.committer.wait_flushed(1)
            assert (policy.inline, policy.threaded) == (2, 1)
            now[0] += 0.01
            alone.append_as_leader(encode_batch([b"b"]), 1 << 20)
            assert alone.log.flushed_offset == 2 and policy.inline == 3
            # a flood: the next append comes right after that sync ended (the clock
            # did not move) -> a thread
            alone.append_as_leader(encode_batch([b"c"]), 1 << 20)
            assert alone.log.flushed_offset == 2 and alone.high_watermark == 2
            assert await alone.committer.wait_flushed(3)
            assert alone.high_watermark == 3 and policy.threaded == 2
            now[0] += 0.01
            policy.mean_s = 0.01  # a slow disk
            alone.append_as_leader(encode_batch([b"d"]), 1 << 20)
            assert alone.log.flushed_offset == 3 and alone.high_watermark == 3
            assert await alone.committer.wait_flushed(4)
            assert alone.high_watermark == 4 and policy.threaded == 3
            nursery.cancel_scope.cancel()

    trio.run(main)
    for p in (alone, shared, follower):
        p.close()


def test_a_sync_due_when_a_threaded_one_returns_runs_at_once_in_its_thread(tmp_path):
    """A threaded sync takes two hand-offs (~1 ms on a loaded 2-core machine at 1,000
    records/s, 2-3x its fdatasync), so the next append usually arrives while it runs;
    the sync due when it returned then waited for a trip to the loop and back before it
    began -- each record appended during a sync paid its own sync plus those hand-offs.
    Now the worker thread syncs again at once when the log grew meanwhile, and the first
    sync's waiters are woken as it ends, not when the chained one does."""
    import io
    import threading
    import time

    import trio

    from raftlog.node.config import NodeConfig
    from raftlog.node.log_manager import LogManager
    from raftlog.node.logfmt import EventLog

    partitions: dict = {}
    logs = LogManager(NodeConfig(data_dir=str(tmp_path / "data")),
                      EventLog(1, stream=io.StringIO()), partitions)
    part = Partition("t", 0, logs.open_log("t", 0, LogConfig()), node_id=1,
                     unflushed=logs.unflushed, syncs=logs.syncs)
    part.disk = logs.disk
    partitions[part.key] = part
    part.update_metadata(1, 1, (1,), (1,), 0)
    policy = logs.syncs.policy
    policy.mean_s = 0.01  # a slow disk: every sync in a worker thread
    now = [1000.0]  # the policy's clock: moved by the test only
    logs.syncs.clock = lambda: now[0]
    gates = [threading.Event(), threading.Event()]
    calls = []
    real_sync = part.log.sync

    def held_sync(*a, **kw):  # the worker thread's syncs each wait for their gate
        flushed = real_sync(*a, **kw)
        calls.append((threading.current_thread() is threading.main_thread(), flushed))
        assert gates[len(calls) - 1].wait(10)
        return flushed

    part.log.sync = held_sync

    async def main():
        async with trio.open_nursery() as nursery:
            logs.syncs.start(nursery)
            part.append_as_leader(encode_batch([b"a"]), 1 << 20)  # its sync: a thread
            while not calls:
                await trio.sleep(0.001)
            # appended while that sync runs (10 ms later: sparse): due when it returns
            now[0] += 0.01
            part.append_as_leader(encode_batch([b"b"]), 1 << 20)
            gates[0].set()
            # the loop stays busy (a blocking wait): the second sync begins without it
            deadline = time.monotonic() + 10
            while len(calls) < 2 and time.monotonic() < deadline:
                time.sleep(0.001)
            assert calls == [(False, 1), (False, 2)]
            assert await part.committer.wait_flushed(1)  # the first's end, told meanwhile
            assert part.high_watermark >= 1 and part.committer.in_flight
            assert part.committer.flushed == 1  # (the second has not returned)
            gates[1].set()
            assert await part.committer.wait_flushed(2)
            assert part.high_watermark == 2 and not part.committer.in_flight
            assert (policy.inline, policy.threaded) == (0, 2)
            nursery.cancel_scope.cancel()

    trio.run(main)
    part.close()


@pytest.mark.parametrize("seed", range(5))
def test_every_append_of_a_leader_ends_up_synced(tmp_path, seed):
    """Leaders (one alone in its ISR, syncing inline; one with followers, in threads)
    under a random mix of appends (some in one turn), turns, periodic flushes, clock
    steps and a slow disk: whatever the order, everything appended is synced in the end
    and no append is left waiting for a sync that never runs."""
    import io
    import random

    import trio

    from raftlog.node.config import NodeConfig
    from raftlog.node.log_manager import LogManager
    from raftlog.node.logfmt import EventLog

    rnd = random.Random(seed)
    partitions: dict = {}
    logs = LogManager(NodeConfig(data_dir=str(tmp_path / "data")),
                      EventLog(1, stream=io.StringIO()), partitions)
    parts = []
    for name, isr in (("a", (1,)), ("b", (1, 2, 3))):
        part = Partition(name, 0, logs.open_log(name, 0, LogConfig()), node_id=1,
                         unflushed=logs.unflushed, syncs=logs.syncs)
        part.disk = logs.disk
        partitions[part.key] = part
        part.update_metadata(1, 1, (1, 2, 3), isr, 0)
        parts.append(part)
    policy = logs.syncs.policy
    now = [1000.0]
    logs.syncs.clock = lambda: now[0]

    async def main():
        async with trio.open_nursery() as nursery:
            logs.syncs.start(nursery)
            for _ in range(300):
                op = rnd.random()
                if op < 0.5:
                    for _ in range(rnd.choice((1, 1, 3))):
                        rnd.choice(parts).append_as_leader(encode_batch([b"x"]), 1 << 20)
                elif op < 0.75:
                    await trio.sleep(0)
                elif op < 0.85:
                    now[0] += rnd.choice((0.0001, 0.001, 0.01))
                elif op < 0.92:
                    await trio.to_thread.run_sync(logs.flush_all)
                else:
                    policy.mean_s = rnd.choice((0.0, 0.01))  # a fast or a slow disk
            with trio.fail_after(30):
                for part in parts:
                    end = part.log.log_end_offset
                    while part.log.flushed_offset < end:
                        assert await part.wait_flushed(end) or part.committer.in_flight \
                            or part.log.flushed_offset >= end, "no sync runs for it"
                        await trio.sleep(0)
                # (a sync in flight ends: a periodic flush may have reached the end of the
                # log before a group-commit sync started earlier returned)
                while any(part.committer.in_flight for part in parts):
                    await trio.sleep(0.001)
            for part in parts:  # (the log's flushed offset: a periodic flush moves it
                # without the group commit, which hears of it at the node's after_flush)
                assert part.log.flushed_offset == part.log.log_end_offset
            assert policy.inline and policy.threaded  # (both ways were taken)
            nursery.cancel_scope.cancel()

    trio.run(main)
    for p in parts:
        p.close()
