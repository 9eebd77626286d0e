"""The leader's ISR duty: shrink and expand, always through the controller.

Every ``check_s`` (a tenth of replica.lag.time.max.ms, 0.1-1 s; or at once when a follower catches up) each partition this
node leads is checked: ISR followers not caught up within ``replica.lag.time.max.ms``,
or fetching below the high watermark (they lost committed records, e.g. truncated to
repair a corrupt segment), are proposed for removal, out-of-sync followers that reached the high watermark
for addition. A change is an AlterPartition, a compare-and-set on the partition
epoch committed through the metadata quorum; the partition uses the new ISR only
when the committed record comes back (``Partition.update_metadata``). While a
change is pending, the HW is computed over the union of the old and new ISR.
One proposal per partition at a time; proposals run one after another.
"""

from __future__ import annotations

import trio

from raftlog.errors import ApiError, ErrorCode

from .clock import node_ms
from .replica import proposed_isr

#: The ISR duty looks at every partition this node leads this often: a tenth of
#: replica.lag.time.max.ms within these bounds (a follower that catches up pokes it
#: at once, so only removals wait for the tick).
ISR_CHECK_S_MIN = 0.1
ISR_CHECK_S_MAX = 1.0
#: A change the controller refused (a fenced broker to add, no controller, a stale
#: epoch) is not proposed again for this long unless the partition's epoch moves: it
#: was proposed again at every follower fetch -- ten times a second, each one a
#: metadata log entry and a warning line.
REFUSED_RETRY_MS = 1000
#: An AlterPartition whose outcome is unknown (timed out, or the controller changed
#: while it was in flight) is settled by a linearizable read of the metadata: tries,
#: and the pause between them. Until settled the HW counts the old and new ISR.
SETTLE_TRIES = 30
SETTLE_PAUSE_S = 0.5
SETTLE_READ_TIMEOUT_S = 2.0


class IsrManager:
    def __init__(self, replicas, store, events):
        #: the node's ReplicaManager: ``led``, the partitions this duty looks at
        self.replicas = replicas
        self.store = store
        self.events = events
        self.max_lag_ms = replicas.config.replica_lag_time_max_ms
        self.check_s = max(ISR_CHECK_S_MIN, min(ISR_CHECK_S_MAX, self.max_lag_ms / 10_000))
        self._poke = trio.Event()
        #: partition keys poked since the last check (None: look at every one)
        self._poked: set | None = set()

    def poke(self, keys=None) -> None:
        """Look at ``keys`` (partition keys; None: every partition led here) soon."""
        if keys is None:
            self._poked = None
        elif self._poked is not None:
            self._poked.update(keys)
        self._poke.set()

    async def run(self) -> None:
        """Every check_s, every partition led here (its quiet note makes most of them
        cheap); when poked, the partitions poked (a metadata change of some topics, a
        follower catching up): work proportional to what changed."""
        next_full = trio.current_time() + self.check_s
        while True:
            with trio.move_on_at(next_full):
                await self._poke.wait()
            self._poke = trio.Event()
            poked, self._poked = self._poked, set()
            if poked is None or trio.current_time() >= next_full:
                next_full = trio.current_time() + self.check_s
                parts = list(self.replicas.led.values())
            else:
                led = self.replicas.led
                parts = [led[k] for k in poked if k in led]
            for part, isr in self.changes(node_ms(), parts):
                await self._propose(part, isr)

    def changes(self, now_ms: int, parts=None) -> list:
        """(partition, proposed ISR) for every led partition whose ISR should change.

        A partition found with its whole replica set in sync and every follower at the
        leader's log end is noted quiet until its first follower could lag
        (LeaderState.quiet_until); until then, and as long as its log end, ISR,
        replicas and followers' positions stay the same, it is not looked at again:
        an idle node's duty is proportional to what changed, not to what it leads."""
        out = []
        for part in list(self.replicas.led.values()) if parts is None else parts:
            st = part.leader_state
            if not part.is_leader or st is None or part.pending_isr is not None:
                continue
            leo = part.log.log_end_offset
            q = st.quiet
            if (q is not None and now_ms < q[0] and q[1] == leo and q[2] == st.version
                    and q[3] is part.isr and q[4] is part.replicas):
                continue
            st.quiet = None
            remove = st.lagging(part.isr, now_ms, self.max_lag_ms, leo)
            remove += [r for r in st.below_high_watermark(part.isr, part.high_watermark)
                       if r not in remove]
            start = next((o for e, o in part.log.epochs if e == part.leader_epoch), 0)
            add = st.caught_up(part.isr, part.high_watermark, start, now_ms, self.max_lag_ms,
                                 part.durable)
            if not remove and not add:
                if len(part.isr) == len(part.replicas):
                    until = st.quiet_until(part.isr, leo, self.max_lag_ms)
                    if until is not None:
                        st.quiet = (until, leo, st.version, part.isr, part.replicas)
                continue
            isr = proposed_isr(part.replicas, part.isr, remove, add)
            refused = part.isr_refused
            if (refused is not None and refused[0] == isr
                    and refused[1] == part.partition_epoch and now_ms < refused[2]):
                continue  # (the periodic check proposes it again after the pause)
            if part.node_id in isr and isr != part.isr:
                out.append((part, isr))
        return out

    async def _propose(self, part, isr: tuple) -> None:
        if part.pending_isr is not None or not part.is_leader:
            return
        part.pending_isr = isr
        epoch, old = part.partition_epoch, list(part.isr)
        unknown = False
        try:
            result = await trio.to_thread.run_sync(
                self.store.alter_isr, part.topic, part.partition, isr, epoch,
                abandon_on_cancel=True)
            ok, why = result.ok, result.error
        except ApiError as e:
            ok, why = False, e.message
            # a timeout or a controller change: the record may still commit (Raft keeps
            # an entry a majority holds), and this node would learn of it only later
            unknown = e.code in (ErrorCode.REQUEST_TIMED_OUT, ErrorCode.NOT_CONTROLLER)
        if ok:
            self.events.info("isr_change", partition=part, old=old, new=list(isr),
                             partition_epoch=epoch + 1)
        else:
            self.events.warning("isr_change_rejected", partition=part, wanted=list(isr),
                                error=why)
            part.isr_refused = (isr, epoch, node_ms() + REFUSED_RETRY_MS)
            if unknown:
                await self._settle(part, isr, epoch)
            elif part.partition_epoch == epoch and part.pending_isr == isr:
                part.pending_isr = None
                part.maybe_advance_hw()

    async def _settle(self, part, isr: tuple, epoch: int) -> None:
        """An AlterPartition of unknown outcome: the HW keeps counting the old and the
        new ISR together (``pending_isr``) until a linearizable read of the metadata
        says whether it committed. Had the leader dropped the new members at once, a
        change that committed after all would put in the ISR -- electable -- a replica
        the HW never waited for, and a record every consumer may have read could go
        with the next election (the 5-node txn harness found one such)."""
        for _ in range(SETTLE_TRIES):
            if part.pending_isr != isr or part.partition_epoch != epoch or not part.is_leader:
                return  # the committed metadata reached this node and answered it
            try:
                committed = await trio.to_thread.run_sync(
                    self.store.committed_partition_epoch, part.topic, part.partition,
                    SETTLE_READ_TIMEOUT_S, abandon_on_cancel=True)
            except ApiError:
                await trio.sleep(SETTLE_PAUSE_S)
                continue
            if committed == epoch:  # it did not commit, and never will now
                if part.pending_isr == isr and part.partition_epoch == epoch:
                    part.pending_isr = None
                    part.maybe_advance_hw()
            # else it (or a later change) committed: this node applies it soon, and
            # update_metadata clears pending_isr then
            return
        self.events.warning("isr_change_unsettled", partition=part, wanted=list(isr),
                            reason="the metadata could not be read; the high watermark "
                                   "keeps counting the old and the new ISR")
