"""A node's logs as storage: the data dir, its health, and the duties over every hosted
log -- flush, compaction, retention (the parts of Kafka's LogManager this node has).

The partitions belong to the :class:`~raftlog.node.replica_manager.ReplicaManager`;
this module opens their logs and reads the same ``{(topic, partition): Partition}``
dict. The duties run in a worker thread (node.py) or on the trio thread;
``PartitionLog`` holds its lock only for bookkeeping.
"""

from __future__ import annotations

import time

import trio

from raftlog.checkpoint import makedirs_durable
from raftlog.config import LogConfig
from raftlog.errors import CorruptRecordError, StorageError
from raftlog.group_commit import INLINE_MIN_GAP_S, GroupCommitter, InlineSyncPolicy
from raftlog.log import PartitionLog

from .clock import wall_ms
from .config import NodeConfig
from .disk import DiskHealth
from .logfmt import EventLog
from .partition import partition_dir
from .sync_threads import SyncThreads

#: flush_all looks at every partition (not only the written ones) every this many calls.
FULL_FLUSH_EVERY = 60
#: Group-commit syncs (fdatasync) running at once, node-wide, each in a worker thread.
SYNC_THREADS = 16
#: A worker thread's sync is followed at once, in the same thread, by another when the
#: log grew while it ran -- this many more at most before it returns to the loop.
THREAD_CHAIN_MAX = 8


class SyncRunner:
    """Runs the logs' group commits (raftlog/group_commit.py): each log's sync in a
    worker thread (node/sync_threads.py), at most one per log and SYNC_THREADS node-wide
    at once -- or, when nothing could overlap with it, on the event loop (below). Syncs
    start once :meth:`start` gave a nursery (appends before accumulate).

    Inline syncs: a follower's round (node/fetcher.py) waits for its syncs before its
    next fetch, and a leader alone in its ISR answers its acks only after its own sync:
    in both the sync is all the waiter has to do, so a worker thread adds its two
    hand-offs and nothing overlaps with it. Such an append runs its sync at once, on the
    event loop (:meth:`sync_now`), while :class:`~raftlog.group_commit.InlineSyncPolicy`
    allows (fast and sparse syncs, a bounded share of the loop). A leader with followers
    in its ISR syncs in a thread: its sync overlaps the followers' fetch and sync, which need the
    loop (measured: inline there halved RF3 throughput).
    """

    def __init__(self, manager: LogManager):
        self.manager = manager
        self.nursery = None
        self.threads = SyncThreads(SYNC_THREADS)
        #: the policy's clock (monotonic seconds; tests replace it)
        self.clock = time.monotonic
        self.policy = InlineSyncPolicy(self.clock())

    def committer(self, part) -> GroupCommitter:
        """The group commit of ``part``'s log (a Partition, node/partition.py)."""
        log, policy = part.log, self.policy

        def timed_sync(progress) -> tuple[int, float]:
            # (worker thread) Appends that came while the fdatasync ran are synced here
            # at once: the waiters of the first are woken meanwhile (``progress``, on
            # the loop), and the next sync skips the trip to the loop and back -- two
            # hand-offs, ~1 ms on a loaded 2-core machine, which each record appended
            # during a sync used to wait for on top of its own sync.
            chained = 0
            while True:
                t0 = self.clock()
                flushed = log.sync()
                secs = self.clock() - t0
                # (a flood: the trip to the loop lets more appends join the next sync)
                if (chained == THREAD_CHAIN_MAX or log.log_end_offset <= flushed
                        or policy.any_gap < INLINE_MIN_GAP_S):
                    return flushed, secs
                progress(flushed, secs)
                chained += 1

        def progressed(flushed: int, secs: float) -> None:  # (trio thread)
            policy.observe(secs)
            policy.threaded += 1
            committer.progress(flushed)

        async def sync() -> int:
            # a sync due when the one before returned (appends arrived meanwhile): on
            # the loop when that is where this log's append would have run it
            if self.may_inline(part) and policy.allow(self.clock()):
                flushed = self._sync_inline(log)
                if flushed is not None:
                    return flushed
            policy.threaded += 1
            token = trio.lowlevel.current_trio_token()
            flushed, secs = await self.threads.run_sync(
                timed_sync, lambda f, s: token.run_sync_soon(progressed, f, s))
            policy.observe(secs)
            return flushed

        def failed(e: Exception) -> None:
            if self.manager.partitions.get(part.key) is not part:
                return  # deleted meanwhile
            err = e if isinstance(e, StorageError) else StorageError(str(e))
            self.manager.disk.write_failed(err, part, op="sync")

        committer = GroupCommitter(sync, log.flushed_offset, on_flushed=part.on_flushed,
                                   on_error=failed, nursery=self.nursery)
        return committer  # (named: ``progressed`` tells it of a chained sync's first)

    @staticmethod
    def may_inline(part) -> bool:
        """Whether ``part``'s syncs may run on the loop at all: a follower's, or a
        leader's alone in its ISR (whose waiters wait for nothing else)."""
        return not part.is_leader or part.hw_isr == (part.node_id,)

    def sync_now(self, part) -> bool:
        """Note an append of a durable log (the policy's gaps: a flood on any log of
        this node keeps worker threads from chaining syncs), and run the sync it made
        due on the event loop if ``part`` may (:meth:`may_inline`), the policy allows
        and no sync of its log is in flight. True if it ran (or failed and was
        reported); False: the caller starts it in a thread (GroupCommitter.appended)."""
        c = part.committer
        now = self.clock()
        may = self.may_inline(part)
        self.policy.appended(now, may)
        if c is None or self.nursery is None or c.in_flight or not may:
            return False
        if not self.policy.allow(now):
            return False
        log = part.log
        c.note(log.log_end_offset)
        return c.sync_inline(lambda: self._sync_inline(log)) is not None

    def _sync_inline(self, log) -> int | None:
        """``log``'s sync on the event loop, its time (a failed one's too) spent from the
        policy's share of the loop; None if it could not start at once (a flush holds
        the log: the caller runs it in a thread)."""
        t0 = self.clock()
        try:
            flushed = log.sync(blocking=False)
        except Exception:
            self.policy.ran_inline(self.clock() - t0)
            raise
        if flushed is not None:
            self.policy.ran_inline(self.clock() - t0)
        return flushed

    def after_flush(self, parts) -> None:
        """After the periodic flush (trio thread): the group commits of the durable
        logs it flushed run a (quick) sync, so their HW moves even with no append to
        come -- and a sync that failed is retried."""
        if self.nursery is None:
            return
        for part in parts:
            c = part.committer
            if c is not None and part.durable:
                c.kick()

    def start(self, nursery) -> None:
        """Syncs run in ``nursery`` from now on (trio thread)."""
        self.nursery = nursery
        for part in list(self.manager.partitions.values()):
            c = part.committer
            if c is not None:
                c.nursery = nursery
                c.kick()


class LogManager:
    """The data dir of one node and the background duties over its logs."""

    def __init__(self, config: NodeConfig, events: EventLog, partitions: dict):
        self.data_dir = config.data_dir
        self.events = events
        makedirs_durable(config.data_dir)
        #: the replica manager's partitions (read here, never changed)
        self.partitions = partitions
        #: partitions written (appended, truncated, created) since the last flush_all;
        #: each Partition adds itself (node/partition.py)
        self.unflushed: set = set()
        self._flushes = 0
        #: Whether the data dir takes writes (one log line per incident), node/disk.py.
        self.disk = DiskHealth(config.node_id, config.data_dir, events)
        #: the logs' group commits (started by the node once its nursery runs)
        self.syncs = SyncRunner(self)

    def open_log(self, topic: str, partition: int, config: LogConfig) -> PartitionLog:
        """Open (and recover) the log of one replica, created empty if new. What
        recovery cut is logged: a torn tail (a crash mid-write) as a warning; damage to
        data once fsynced (a lost range, never served, fetched again from a replica) as
        an error."""
        log = PartitionLog.open(partition_dir(self.data_dir, topic, partition), config)
        for path, cut, nbytes, lost_end in log.recovery_cuts:
            if lost_end is None:
                self.events.warning("log_recovered_torn_tail", topic=topic, partition=partition,
                                    segment=path, from_offset=cut, bytes=nbytes)
            else:
                self.events.error(
                    "log_recovered_lost_range", topic=topic, partition=partition, segment=path,
                    from_offset=cut, to_offset=lost_end, bytes=nbytes,
                    message="a segment below the recovery point was damaged: its offsets "
                            "are never served and are fetched again from a replica")
        return log

    def flush_all(self) -> list:
        """fsync every log with unflushed data; returns the partitions flushed. Runs in
        a worker thread (see node.py).

        Looks at the partitions written since the last call only (work proportional to
        what changed, not to what exists), and at all of them every FULL_FLUSH_EVERY
        calls (a safety net: a log that got dirty some other way)."""
        self._flushes += 1
        if self._flushes % FULL_FLUSH_EVERY == 0:
            todo = list(self.partitions.values())
        else:
            todo = list(self.unflushed)
        # (an append after this line re-adds its partition: flushed now or next time)
        self.unflushed.difference_update(todo)
        done = []
        for part in todo:
            if self.partitions.get(part.key) is not part or not part.log.needs_flush:
                continue
            try:
                part.log.flush()
                done.append(part)
            except StorageError as e:  # one line per incident (recovery: the next append)
                self.unflushed.add(part)  # (tried again next time)
                self.disk.write_failed(e, part, op="flush")
        return done

    def compact_all(self) -> int:
        """Compact every log whose topic has cleanup.policy=compact. Worker thread.
        Returns the records removed."""
        removed = 0
        for part in list(self.partitions.values()):
            if part.log.config.compact:
                try:
                    removed += part.log.compact()["records_removed"]
                except (StorageError, CorruptRecordError, OSError) as e:
                    self.events.error("compaction_failed", partition=part, error=e)
        return removed

    def retention_all(self) -> int:
        """Delete the segments retention.ms / retention.bytes let go. Returns how many."""
        deleted = 0
        for part in list(self.partitions.values()):
            try:
                deleted += part.log.apply_retention(wall_ms())
            except StorageError as e:
                self.events.error("retention_failed", partition=part, error=e)
        return deleted
