"""node/sync_threads.py: the group commit's worker threads (real threads, trio)."""

import threading
import time

import pytest
import trio

from raftlog.node import sync_threads
from raftlog.node.sync_threads import SyncThreads


async def test_returns_the_result_and_raises_the_exception():
    t = SyncThreads(2)
    assert await t.run_sync(lambda a, b: a + b, 2, 3) == 5
    assert await t.run_sync(threading.get_ident) != threading.get_ident()

    def boom():
        raise OSError(5, "EIO")
    with pytest.raises(OSError, match="EIO"):
        await t.run_sync(boom)
    assert await t.run_sync(len, b"abc") == 3  # (the thread survived the exception)


async def test_at_most_max_threads_run_at_once_and_every_job_finishes():
    t = SyncThreads(2)
    release = threading.Event()
    lock = threading.Lock()
    running, peak, done = [0], [0], []

    def job(i):
        with lock:
            running[0] += 1
            peak[0] = max(peak[0], running[0])
        release.wait(10)
        with lock:
            running[0] -= 1
        return i

    async def one(i):
        done.append(await t.run_sync(job, i))

    async with trio.open_nursery() as n:
        for i in range(5):
            n.start_soon(one, i)
        deadline = time.monotonic() + 10
        while running[0] < 2 and time.monotonic() < deadline:
            await trio.sleep(0.005)
        assert running[0] == 2 and t.threads == 2  # the other three wait in the queue
        await trio.sleep(0.05)
        assert running[0] == 2 and not done
        release.set()
    assert sorted(done) == [0, 1, 2, 3, 4] and peak[0] == 2 and t.threads <= 2


async def test_a_waiting_task_is_not_cancelled_before_its_sync_ends():
    t = SyncThreads(1)
    started, release = threading.Event(), threading.Event()
    ended = []

    def sync():
        started.set()
        release.wait(10)
        ended.append(True)
        return 42

    got = None
    with trio.CancelScope() as cs:
        async with trio.open_nursery() as n:
            async def go():
                nonlocal got
                got = await t.run_sync(sync)
            n.start_soon(go)
            while not started.is_set():
                await trio.sleep(0.001)
            cs.cancel()  # the sync is under way: its result still arrives
            threading.Timer(0.05, release.set).start()
    assert got == 42 and ended == [True]


async def test_idle_threads_end(monkeypatch):
    monkeypatch.setattr(sync_threads, "IDLE_EXIT_S", 0.05)
    t = SyncThreads(4)
    await t.run_sync(time.sleep, 0)
    assert t.threads == 1
    deadline = time.monotonic() + 10
    while t.threads and time.monotonic() < deadline:
        await trio.sleep(0.01)
    assert t.threads == 0
    assert await t.run_sync(len, b"xy") == 2 and t.threads == 1  # started again
