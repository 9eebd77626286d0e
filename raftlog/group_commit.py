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

    def truncated(self, end: int, flushed: int) -> None:
        self.state.truncated(end, flushed)

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
                st.failed()
                self._wake()
                if self._on_error is not None:
                    self._on_error(e)
                return
            before = st.flushed
            again = st.done(flushed)
            self._wake()
            if st.flushed > before and self._on_flushed is not None:
                self._on_flushed(st.flushed)
            if not again:
                return

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
