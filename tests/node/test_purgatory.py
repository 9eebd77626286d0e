"""The purgatory: parked requests complete in the turn that wakes them, expire at their
deadlines with one timer, and a finished request is never completed again."""

from __future__ import annotations

import trio

from raftlog.node.purgatory import Delayed, Purgatory


class Part:
    """A partition's waiter sets, as Partition keeps them."""

    def __init__(self, room: int = 10):
        self.waiters: set = set()
        self.room = room

    def add_waiter(self, w, leo: bool = False) -> bool:
        if len(self.waiters) >= self.room:
            return False
        self.waiters.add(w)
        return True

    def remove_waiter(self, w) -> None:
        self.waiters.discard(w)

    def wake(self) -> None:
        waiters, self.waiters = self.waiters, set()
        for w in waiters:
            w.set()


class Op(Delayed):
    __slots__ = ("ready_when", "log")

    def __init__(self, purgatory, deadline, ready_when, log):
        super().__init__(purgatory, deadline)
        self.ready_when, self.log = ready_when, log

    def try_complete(self, expired: bool) -> bool:
        if self.ready_when() or expired:
            self.log.append("expired" if expired else "done")
            return True
        return False


def test_a_wake_queues_and_run_ready_completes_synchronously():
    pg, part, log = Purgatory(), Part(), []
    state = {"ok": False}
    op = Op(pg, 1e9, lambda: state["ok"], log)
    op.watch([part])
    pg.park(op)
    part.wake()
    pg.run_ready()
    assert log == [] and not op.done  # not ready yet: still parked (watching again is its job)
    op.watch([part])
    state["ok"] = True
    part.wake()
    part.wake()  # a second wake before completion queues nothing more
    assert len(pg.ready) == 1
    pg.run_ready()
    assert log == ["done"] and op.done and pg.live == 0
    assert part.waiters == set()


def test_deadlines_expire_in_order_and_finished_ones_are_skipped():
    pg, log = Purgatory(), []
    ops = [Op(pg, d, lambda: False, log) for d in (3.0, 1.0, 2.0)]
    for op in ops:
        pg.park(op)
    ops[2].finish()  # answered some other way
    pg.expire(2.5)
    assert log == ["expired"] and ops[1].done and not ops[0].done
    assert pg.next_deadline() == 3.0
    pg.expire(10)
    assert log == ["expired", "expired"] and pg.live == 0


def test_a_failing_completion_is_reported_and_finished():
    pg, seen = Purgatory(), []
    pg.on_error = lambda op, e: seen.append((op, str(e)))

    class Bad(Delayed):
        def try_complete(self, expired):
            raise RuntimeError("boom")

    op = Bad(pg, 5.0)
    pg.park(op)
    op.set()
    pg.run_ready()
    assert seen == [(op, "boom")] and op.done


async def test_the_timer_task_expires_and_completes_wakes_from_outside():
    pg, log = Purgatory(), []
    async with trio.open_nursery() as n:
        n.start_soon(pg.run)
        await trio.sleep(0)
        part = Part()
        a = Op(pg, trio.current_time() + 0.05, lambda: False, log)
        pg.park(a)
        b = Op(pg, trio.current_time() + 60, lambda: True, log)
        b.watch([part])
        pg.park(b)
        part.wake()  # nobody calls run_ready: the purgatory's task does
        await trio.sleep(0.01)
        assert log == ["done"]
        await trio.sleep(0.1)
        assert log == ["done", "expired"] and pg.live == 0
        n.cancel_scope.cancel()
