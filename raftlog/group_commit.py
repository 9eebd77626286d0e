"""Group commit: one fdatasync per log covers everything appended since the last one.

Appends only note where the log ends now (O(1) on the event loop). A sync runs off
the event loop (the caller's ``sync`` coroutine; the node runs
:meth:`PartitionLog.sync` in a worker thread), at most one per log at a time, and the
next one starts as soon as it returns if anything was appended meanwhile. So under
load every sync covers the appends that arrived while the previous one ran (one sync
for many appends), and when idle an append's sync starts at once.

An append is covered only by a sync that *started after it* (a sync in flight when
it was appended does not count: its bytes may not be in the file yet when that sync
captured the log end), which is why a sync reports the offset it captured, and the
flushed offset moves to that offset only.

Two parts: :class:`GroupCommit` is the pure scheduling state (no trio, no I/O), and
:class:`GroupCommitter` drives it with a sync coroutine on a trio nursery and lets
tasks wait for an offset to be flushed. Both are tested on trio's MockClock
(tests/raftlog/test_group_commit.py).
"""

from __future__ import annotations

import trio


class GroupCommit:
    """The scheduling state of one log: where it ends (as last told), what is on disk,
    and whether a sync is in flight. Pure."""

    __slots__ = ("appended", "flushed", "in_flight", "syncs")

    def __init__(self, flushed: int):
        #: the log end offset at the last append (or truncation)
        self.appended = flushed
        #: everything below this offset is on disk
        self.flushed = flushed
        #: the log end the sync in flight captured (None: no sync in flight)
        self.in_flight: int | None = None
        #: syncs begun (for tests and metrics)
        self.syncs = 0

    def append(self, end: int) -> bool:
        """The log now ends at ``end``. True when a sync should start now (none in
        flight; otherwise the one in flight starts the next when it returns)."""
        self.appended = end
        return self.in_flight is None and end > self.flushed

    def begin(self) -> bool:
        """Start a sync if one is due (nothing in flight, something unflushed)."""
        if self.in_flight is not None or self.appended <= self.flushed:
            return False
        self.in_flight = self.appended
        self.syncs += 1
        return True

    def done(self, flushed: int) -> bool:
        """The sync in flight returned; the log says ``flushed`` is on disk now. True
        when another sync is due at once (appends arrived meanwhile)."""
        self.in_flight = None
        self.flushed = max(self.flushed, min(flushed, self.appended))
        assert self.flushed <= self.appended, (self.flushed, self.appended)
        return self.appended > self.flushed

    def progress(self, flushed: int) -> bool:
        """The sync in flight, still running (it syncs again for the appends that came
        while it ran), says ``flushed`` is on disk. True if the flushed offset moved."""
        if self.in_flight is None:
            return False  # (it ended meanwhile: its end said as much or more)
        before = self.flushed
        self.flushed = max(before, min(flushed, self.appended))
        return self.flushed > before

    def failed(self) -> None:
        """The sync in flight failed: nothing more is on disk; the next append (or the
        periodic flush) tries again."""
        self.in_flight = None

    def truncated(self, end: int, flushed: int) -> None:
        """The log was cut (or restarted) to end at ``end``, ``flushed`` on disk."""
        self.appended = end
        self.flushed = min(flushed, end)

    @property
    def pending(self) -> bool:
        return self.appended > self.flushed


class GroupCommitter:
    """Runs :class:`GroupCommit` for one log.

    Args:
        sync: ``async () -> int``: make everything appended so far durable and return
            the flushed offset it reached (the log end it captured when it started).
        flushed: the offset already on disk.
        on_flushed: called (on the trio thread) with the new flushed offset after
            each sync that moved it.
        on_error: called with the exception of a failed sync (which is not retried
            until the next append).
    """

    __slots__ = ("state", "_sync", "_on_flushed", "_on_error", "_moved", "nursery")

    def __init__(self, sync, flushed: int, on_flushed=None, on_error=None, nursery=None):
        self.state = GroupCommit(flushed)
        self._sync = sync
        self._on_flushed = on_flushed
        self._on_error = on_error
        self._moved = trio.Event()  # set (and replaced) when a sync ends
        #: where syncs run (None: not yet; appends accumulate until :meth:`kick`)
        self.nursery = nursery

    @property
    def flushed(self) -> int:
        return self.state.flushed

    @property
    def in_flight(self) -> bool:
        return self.state.in_flight is not None

    def appended(self, end: int) -> None:
        """The log now ends at ``end`` (O(1): a sync starts only if none is in flight)."""
        if self.state.append(end) and self.nursery is not None:
            self.state.in_flight = -1  # (claimed now: a second append does not spawn)
            self.nursery.start_soon(self._run)

    def note(self, end: int) -> None:
        """The log now ends at ``end``; its sync is the caller's to start (by
        :meth:`sync_inline` or :meth:`kick`) before it waits for anything."""
        self.state.append(end)

    def sync_inline(self, sync_now) -> bool | None:
        """Run the due sync on the calling (trio) thread: ``sync_now()`` is the blocking
        sync, returning the flushed offset, or None when it could not start at once (a
        flush holds the log). Returns True if it ran, False if it failed (reported as a
        threaded sync's failure), None if nothing ran: none due, one in flight (it starts
        the next itself), or ``sync_now`` declined -- then :meth:`kick` it."""
        st = self.state
        if not st.begin():
            return None
        try:
            flushed = sync_now()
        except Exception as e:  # a disk error: as _run
            self._failed(e)
            return False
        if flushed is None:
            st.in_flight = None
            st.syncs -= 1
            return None
        self._done(flushed)
        return True

    def truncated(self, end: int, flushed: int) -> None:
        self.state.truncated(end, flushed)

    def progress(self, flushed: int) -> None:
        """The sync in flight reached ``flushed`` and goes on (trio thread): its waiters
        up to there are woken now, not when it ends."""
        if self.state.progress(flushed):
            self._wake()
            if self._on_flushed is not None:
                self._on_flushed(self.state.flushed)

    def kick(self) -> None:
        """Start a sync if one is due (after a failure, or once a nursery is set)."""
        if (self.nursery is not None and self.state.in_flight is None
                and self.state.pending):
            self.state.in_flight = -1
            self.nursery.start_soon(self._run)

    async def _run(self) -> None:
        st = self.state
        st.in_flight = None  # (the claim made by appended/kick)
        while st.begin():
            try:
                flushed = await self._sync()
            except Exception as e:  # a disk error: reported, retried at the next append
                self._failed(e)
                return
            if not self._done(flushed):
                return

    def _done(self, flushed: int) -> bool:
        """The sync in flight returned at ``flushed``: wake the waiters, tell the owner.
        True when another sync is due at once."""
        st = self.state
        before = st.flushed
        again = st.done(flushed)
        self._wake()
        if st.flushed > before and self._on_flushed is not None:
            self._on_flushed(st.flushed)
        return again

    def _failed(self, e: Exception) -> None:
        """The sync in flight failed: nothing more is on disk; waiters and owner told."""
        self.state.failed()
        self._wake()
        if self._on_error is not None:
            self._on_error(e)

    def _wake(self) -> None:
        ev, self._moved = self._moved, trio.Event()
        ev.set()

    async def wait_flushed(self, offset: int) -> bool:
        """Wait until everything below ``offset`` is on disk. False if a sync failed
        (or none is running) first: the caller decides whether to wait again."""
        while self.state.flushed < offset:
            if self.state.in_flight is None and not self.state.pending:
                return self.state.flushed >= offset
            if self.state.in_flight is None:
                return False  # a failed sync; nothing runs until the next append
            await self._moved.wait()
        return True


#: An inline sync is allowed while recent syncs took this long at most (mean). A
#: threaded sync's time includes its wait for the GIL and a core after the fdatasync:
#: at 0.5 ms (fdatasync 0.3 ms here) a busy 2-core node measured its means at 0.56-0.83
#: ms and sent nearly every sync to a thread (~0.25 ms more CPU each; the three nodes'
#: CPU per transaction of bench/transactions.py 36 -> 28-31 ms). A slow disk (several
#: ms a sync) still goes to threads.
INLINE_MAX_MEAN_S = 0.001
#: ... and while inline syncs took at most this share of the event loop's time.
INLINE_MAX_SHARE = 0.2
#: The loop time inline syncs may spend in one burst (the token bucket's size).
INLINE_BURST_S = 0.01
#: Weight of the newest duration in the running mean.
MEAN_WEIGHT = 0.2
#: ... and only when the node's last two appends (of logs that may sync inline) were at
#: least this far apart: appends closer together mean a busy node (a flood), where a
#: sync in a thread overlaps the appends and covers many of them, and one on the loop
#: would stop them.
INLINE_MIN_GAP_S = 0.0005


class InlineSyncPolicy:
    """When a sync may run on the event loop instead of in a worker thread. Pure.

    A sync handed to a worker thread costs the event loop two wake-ups (a task, then the
    thread's answer: ~0.2-0.35 ms of CPU each on a 2-core machine, more than a fast
    fdatasync) and the waiter a trip through the scheduler; run inline, it costs the
    fdatasync alone but stops the loop while it runs. The node runs inline only the
    syncs nothing else could overlap with (a follower's round, a leader alone in its
    ISR: node/log_manager.py), and only while they are short and sparse: the running
    mean of every sync's duration (inline or threaded) at most :data:`INLINE_MAX_MEAN_S`,
    inline syncs at most :data:`INLINE_MAX_SHARE` of the loop's time (a token bucket of
    :data:`INLINE_BURST_S`), and the last two appends :data:`INLINE_MIN_GAP_S` apart or
    more. A slow disk, a burst of many logs or a flood of appends goes to threads.

    The gap is between appends, not between syncs: a sync due when a threaded one
    returns (an append arrived while it ran) may run inline when the appends are sparse
    -- at 1,000 records/s a threaded sync (its two hand-offs ~1 ms on a loaded 2-core
    machine, 3x the fdatasync) overlapped the next append most of the time, and each
    following sync went to a thread again: a chain of threaded syncs that never ended.
    (The worker thread itself now syncs again at once when its log grew meanwhile:
    node/log_manager.py, ``THREAD_CHAIN_MAX``.)
    """

    __slots__ = ("mean_s", "tokens", "_at", "inline", "threaded", "last_append",
                 "append_gap", "last_any", "any_gap")

    def __init__(self, now: float):
        #: running mean of sync durations (0 until the first: the first one runs inline
        #: and so measures the disk)
        self.mean_s = 0.0
        self.tokens = INLINE_BURST_S
        self._at = now
        self.inline = 0
        self.threaded = 0
        #: when the last append was noted, and its distance from the one before
        self.last_append = -1.0
        self.append_gap = float("inf")
        #: the same over every durable append of the node (leaders with followers
        #: too): whether the node is flooded (node/log_manager.py's thread chain)
        self.last_any = -1.0
        self.any_gap = float("inf")

    def appended(self, now: float, may_inline: bool = True) -> None:
        """An append of a durable log of this node at ``now``; ``may_inline``: of a log
        that may sync inline (a follower's, a lone leader's), the appends the inline
        rule's gap is measured between."""
        self.any_gap = now - self.last_any
        self.last_any = now
        if may_inline:
            self.append_gap = now - self.last_append
            self.last_append = now

    def observe(self, secs: float) -> None:
        """A sync (inline or threaded) took ``secs``."""
        self.mean_s += MEAN_WEIGHT * (secs - self.mean_s)

    def allow(self, now: float) -> bool:
        """May the next sync run inline (at ``now``, monotonic seconds)?"""
        if now > self._at:
            self.tokens = min(INLINE_BURST_S, self.tokens + (now - self._at) * INLINE_MAX_SHARE)
            self._at = now
        return (self.mean_s <= INLINE_MAX_MEAN_S and self.tokens > 0
                and self.append_gap >= INLINE_MIN_GAP_S)

    def ran_inline(self, secs: float) -> None:
        """An inline sync took ``secs`` of the loop's time."""
        self.tokens -= secs
        self.inline += 1
        self.observe(secs)
