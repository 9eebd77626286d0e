"""Group commit's scheduling (raftlog/group_commit.py) on trio's MockClock: a fake
sync that takes 1 s of mock time stands for the fdatasync, so when each sync starts,
what it covers and when each waiter is released are exact."""

import trio
import trio.testing

from raftlog.group_commit import GroupCommit, GroupCommitter, InlineSyncPolicy

SYNC_S = 1.0


class FakeLog:
    """A log end that appends move, and a sync that captures it at its start."""

    def __init__(self):
        self.end = 0
        self.starts: list[tuple[float, int]] = []  # (time, log end captured)

    async def sync(self) -> int:
        captured = self.end
        self.starts.append((trio.current_time(), captured))
        await trio.sleep(SYNC_S)
        return captured


def run(main):
    return trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0))


def test_pure_state_one_sync_in_flight_and_the_next_at_once():
    g = GroupCommit(0)
    assert g.append(1) is True  # idle: a sync is due
    assert g.begin() and g.in_flight == 1
    assert g.append(2) is False and g.append(3) is False  # one in flight: they wait
    assert not g.begin()
    assert g.done(1) is True and g.flushed == 1  # covers what it captured only
    assert g.begin() and g.in_flight == 3  # the next covers both appends
    assert g.done(3) is False and g.flushed == 3
    g.truncated(2, 3)
    assert g.flushed == 2 and g.appended == 2 and not g.pending


def test_pure_state_progress_of_a_sync_that_goes_on():
    """A sync still running (it syncs again for appends that came meanwhile) reports
    what is on disk so far: the flushed offset moves, never past what was appended,
    never back; once the sync ended, a late report changes nothing."""
    g = GroupCommit(0)
    g.append(2)
    assert g.begin() and g.in_flight == 2
    g.append(5)
    assert g.progress(2) is True and g.flushed == 2 and g.in_flight == 2
    assert g.progress(1) is False and g.flushed == 2  # never back
    assert g.progress(9) is True and g.flushed == 5  # never past the appends
    g.truncated(4, 5)
    assert g.progress(5) is False and g.flushed == 4
    assert g.done(4) is False and g.in_flight is None
    assert g.progress(4) is False  # (ended: its end said as much)


def test_progress_wakes_the_waiters_it_covers_while_the_sync_goes_on():
    log = FakeLog()
    flushed_told = []

    async def main():
        async with trio.open_nursery() as nursery:
            gc = GroupCommitter(log.sync, 0, on_flushed=flushed_told.append,
                                nursery=nursery)
            log.end = 1
            gc.appended(1)
            await trio.sleep(0.1)
            log.end = 2
            gc.appended(2)
            gc.progress(1)  # (as the worker thread does: its first fdatasync ended)
            assert await gc.wait_flushed(1)
            assert trio.current_time() == 0.1 and gc.in_flight  # not at the sync's end
            assert await gc.wait_flushed(2)

    run(main)
    assert flushed_told[0] == 1 and flushed_told[-1] == 2


def test_one_sync_covers_many_appends():
    log = FakeLog()

    async def main():
        async with trio.open_nursery() as nursery:
            gc = GroupCommitter(log.sync, 0, nursery=nursery)
            log.end = 1
            gc.appended(1)  # starts sync 1 at t=0
            await trio.sleep(0.1)
            for i in range(2, 102):  # 100 appends while sync 1 runs
                log.end = i
                gc.appended(i)
                await trio.sleep(0.005)
            assert await gc.wait_flushed(101)
            assert gc.flushed == 101
            return gc.state.syncs

    syncs = run(main)
    assert syncs == 2, log.starts  # one for the first append, one for the 100 after it
    assert log.starts == [(0.0, 1), (SYNC_S, 101)]  # the second as soon as the first returned


def test_no_append_is_released_by_a_sync_that_started_before_it():
    log = FakeLog()
    released: dict[int, float] = {}

    async def waiter(gc, offset):
        assert await gc.wait_flushed(offset)
        released[offset] = trio.current_time()

    async def main():
        async with trio.open_nursery() as nursery:
            gc = GroupCommitter(log.sync, 0, nursery=nursery)
            log.end = 1
            gc.appended(1)  # sync 1: [0, 1]
            nursery.start_soon(waiter, gc, 1)
            await trio.sleep(0.5)
            log.end = 2
            gc.appended(2)  # during sync 1: must wait for sync 2, [1, 2]
            nursery.start_soon(waiter, gc, 2)

    run(main)
    assert released == {1: SYNC_S, 2: 2 * SYNC_S}
    assert [s for _, s in log.starts] == [1, 2]


def test_idle_append_syncs_at_once_and_a_failure_is_reported_then_retried():
    errors = []
    calls = []

    async def sync():
        calls.append(trio.current_time())
        await trio.sleep(SYNC_S)
        if len(calls) == 1:
            raise OSError("disk gone")
        return 5

    async def main():
        async with trio.open_nursery() as nursery:
            gc = GroupCommitter(sync, 0, on_error=errors.append, nursery=nursery)
            gc.appended(5)
            assert not await gc.wait_flushed(5)  # the sync failed: the waiter is told
            assert errors and gc.flushed == 0 and not gc.in_flight
            gc.kick()  # (the next append or the periodic flush)
            assert await gc.wait_flushed(5)

    run(main)
    assert calls == [0.0, SYNC_S]


def test_inline_sync_runs_on_the_caller_and_leaves_a_busy_log_to_a_thread():
    log = FakeLog()
    flushed_seen = []

    async def main():
        async with trio.open_nursery() as nursery:
            gc = GroupCommitter(log.sync, 0, on_flushed=flushed_seen.append, nursery=nursery)
            log.end = 5
            gc.note(5)  # noted, nothing started
            await trio.sleep(0.5)
            assert log.starts == [] and gc.state.pending
            assert gc.sync_inline(lambda: 5) is True  # ran here, at once
            assert gc.flushed == 5 and flushed_seen == [5] and not gc.in_flight
            assert await gc.wait_flushed(5)
            assert gc.sync_inline(lambda: 99) is None  # nothing due: not run
            log.end = 7
            gc.note(7)
            assert gc.sync_inline(lambda: None) is None  # declined (a flush holds the log)
            assert not gc.in_flight and gc.state.pending and gc.flushed == 5
            gc.kick()  # so the caller hands it to the thread path
            assert await gc.wait_flushed(7)
            assert log.starts == [(0.5, 7)]
            gc.appended(8)
            log.end = 8
            assert gc.in_flight
            assert gc.sync_inline(lambda: 8) is None  # one in flight: it starts the next
            assert await gc.wait_flushed(8)

    run(main)


def test_a_failed_inline_sync_is_reported_and_moves_nothing():
    errors = []

    def boom():
        raise OSError(5, "EIO")

    async def main():
        gc = GroupCommitter(None, 0, on_error=errors.append)
        gc.note(3)
        assert gc.sync_inline(boom) is False
        assert gc.flushed == 0 and not gc.in_flight and gc.state.pending
        assert len(errors) == 1 and isinstance(errors[0], OSError)

    run(main)


def test_inline_policy_tells_a_flood_on_any_log_apart_from_the_inline_gap():
    """Appends of a leader with followers (never inline) do not move the inline rule's
    gap, but they do tell the node is flooded (``any_gap``: a worker thread then does
    not chain syncs, node/log_manager.py)."""
    p = InlineSyncPolicy(now=0.0)
    p.appended(1.0)  # a follower's
    gap = p.append_gap
    p.appended(1.0001, may_inline=False)  # a leader's with followers, right after
    assert p.append_gap == gap and abs(p.any_gap - 0.0001) < 1e-9
    p.appended(1.01, may_inline=False)
    assert p.any_gap > 0.0005 and p.append_gap == gap
    p.appended(1.0101)  # a follower's, 0.1 ms after the last append of any log
    assert abs(p.append_gap - 0.0101) < 1e-9 and p.any_gap < 0.0005


def test_inline_policy_needs_fast_sparse_syncs_and_a_bounded_share_of_the_loop():
    p = InlineSyncPolicy(now=0.0)
    assert p.allow(0.0)  # nothing measured yet: the first runs inline and measures
    for _ in range(30):
        p.observe(0.005)  # a slow disk (5 ms syncs)
    assert not p.allow(1.0)
    for _ in range(30):
        p.observe(0.0001)
    assert p.allow(2.0)
    # appends 0.2 ms apart: the node is busy (a flood), the next sync goes to a thread;
    # 0.6 ms apart: sparse again. A sync that just ended does not count (a threaded
    # sync returning while the appends are sparse: the next one may run inline)
    p.appended(2.0)
    p.appended(2.0002)
    assert not p.allow(2.0002)
    p.appended(2.0008)
    p.observe(0.0001)
    assert p.allow(2.0008)
    # inline syncs of 0.2 ms, each 0.5 ms after the last ended (1,400 syncs/s, 28% of
    # the loop): each takes 0.06 ms more than its interval refills, so the 10 ms burst
    # lasts ~167 of them, then the share (20% of the loop's time) holds them back
    now, ran = 2.001, 0
    while ran < 1000 and p.allow(now):
        p.ran_inline(0.0002)
        ran += 1
        now += 0.0007
    assert 150 <= ran <= 180, ran
    assert not p.allow(now)
    assert p.allow(now + 0.005)  # 5 ms later: 1 ms of tokens back
    assert p.inline == ran
