"""Leader-side replica bookkeeping, pure: follower log end offsets, ISR health, HW.

The partition leader owns one :class:`LeaderState` per partition. Followers report
their log end offset (LEO) implicitly: a Fetch at offset ``o`` means the follower
holds every record below ``o``. From that the leader derives

- the high watermark: the minimum LEO over the ISR (the leader's own included);
- which ISR members fell behind for longer than ``replica.lag.time.max.ms``
  (Kafka's *last caught-up time* rule: a follower is caught up at a fetch when it
  asked for the leader's LEO at that moment, or when it asked for at least the LEO
  the leader had at the follower's previous fetch, so a follower that keeps up with
  a continuous stream is never considered lagging);
- which out-of-sync replicas have caught up and may rejoin the ISR.

A follower fetching through a fetch session (node/fetch_session.py) names a
partition only when its offset changes; between those fetches its entry points at
the session (anything with ``last_fetch_ms`` and ``closed``): a follower whose
recorded LEO equals the leader's counts as caught up, and as fetching, at the
session's last fetch -- nothing was appended since it asked, so it had everything.

Nothing here changes the ISR: the leader proposes a change to the controller
(a compare-and-set on the partition epoch) and applies it only once committed.
Time is an argument; there is no clock inside.
"""

from __future__ import annotations

from dataclasses import dataclass

UNKNOWN = -1


@dataclass(slots=True)
class FollowerState:
    leo: int = UNKNOWN
    last_caught_up_ms: int = 0
    last_fetch_ms: int = 0
    last_fetch_leader_leo: int = UNKNOWN
    #: what the follower has on disk (its last report, <= leo); UNKNOWN until told
    flushed: int = UNKNOWN
    #: whether it reports its flushed offset (a node older than #34 does not: its
    #: LEO stands for it, the page-cache acknowledgement of before)
    reports_flushed: bool = False
    #: the fetch session this follower last fetched through (None: plain fetches)
    session: object = None

    def fetched_ms(self) -> int:
        """When this follower last fetched (through its live session, if any)."""
        s = self.session
        if s is not None and not s.closed and s.last_fetch_ms > self.last_fetch_ms:
            return s.last_fetch_ms
        return self.last_fetch_ms

    def caught_up_ms(self, leader_leo: int | None) -> int:
        """When this follower was last caught up with the leader's log end."""
        s = self.session
        if (s is not None and not s.closed and leader_leo is not None
                and self.leo >= leader_leo and s.last_fetch_ms > self.last_caught_up_ms):
            return s.last_fetch_ms
        return self.last_caught_up_ms


class LeaderState:
    """Bookkeeping of one partition led by ``leader_id`` for one leader epoch."""

    def __init__(self, leader_id: int, replicas: tuple, now_ms: int):
        self.leader_id = leader_id
        #: bumped whenever a follower's LEO or session changes (see quiet_until)
        self.version = 0
        #: the ISR duty's note that nothing could change here before a time (node/isr.py)
        self.quiet: tuple | None = None
        # Every follower gets a full lag window from the moment leadership starts.
        self.followers: dict[int, FollowerState] = {
            r: FollowerState(last_caught_up_ms=now_ms) for r in replicas if r != leader_id
        }

    def set_replicas(self, replicas: tuple, now_ms: int) -> None:
        for r in replicas:
            if r != self.leader_id and r not in self.followers:
                self.followers[r] = FollowerState(last_caught_up_ms=now_ms)
        for r in [r for r in self.followers if r not in replicas]:
            del self.followers[r]

    def on_fetch(self, replica: int, fetch_offset: int, leader_leo: int, now_ms: int,
                 session=None, flushed: int | None = None) -> bool:
        """Record a follower's fetch (through ``session``, if one) and the flushed
        offset it reported with it (None: not reported in this fetch). False if
        ``replica`` is not a follower of this partition (the caller answers with an
        error)."""
        f = self.followers.get(replica)
        if f is None:
            return False
        if f.session is not session or f.leo != min(fetch_offset, leader_leo):
            self.version += 1
        f.session = session
        if fetch_offset >= leader_leo:
            f.last_caught_up_ms = now_ms
        elif f.last_fetch_leader_leo != UNKNOWN and fetch_offset >= f.last_fetch_leader_leo:
            f.last_caught_up_ms = max(f.last_caught_up_ms, f.last_fetch_ms)
        f.leo = min(fetch_offset, leader_leo)
        f.last_fetch_ms = now_ms
        f.last_fetch_leader_leo = leader_leo
        if flushed is not None:
            self.on_flushed(replica, flushed)
        elif f.flushed > f.leo:
            f.flushed = f.leo
        return True

    def on_flushed(self, replica: int, flushed: int) -> bool:
        """A follower reported ``flushed``: everything below it is on its disk. True if
        that changed what is known."""
        f = self.followers.get(replica)
        if f is None:
            return False
        new = min(flushed, f.leo) if f.leo != UNKNOWN else UNKNOWN
        changed = new != f.flushed or not f.reports_flushed
        f.flushed, f.reports_flushed = new, True
        return changed

    def flushed_of(self, replica: int) -> int:
        """What ``replica`` has on disk as far as known (its LEO if it does not report)."""
        f = self.followers.get(replica)
        if f is None:
            return UNKNOWN
        return f.flushed if f.reports_flushed else f.leo

    def before_append(self, leader_leo: int) -> None:
        """The leader is about to append at ``leader_leo``. A follower that had all of it
        at its session's last fetch was caught up then: recorded now, because once the
        log end moves its session's later fetches no longer say so (until it fetches
        the new records, which names the partition)."""
        for f in self.followers.values():
            s = f.session
            if (s is not None and not s.closed and f.leo >= leader_leo
                    and s.last_fetch_ms > f.last_caught_up_ms):
                f.last_caught_up_ms = s.last_fetch_ms

    def high_watermark(self, leader_leo: int, isr, durable: bool = False) -> int:
        """min LEO over ``isr`` (``leader_leo``: the leader's); ``durable``: min flushed
        offset (``leader_leo`` is then the leader's flushed offset). UNKNOWN while an ISR
        follower has not fetched (or told its flushed offset) yet."""
        hw = leader_leo
        for r in isr:
            if r == self.leader_id:
                continue
            f = self.followers.get(r)
            if f is None or f.leo == UNKNOWN:
                return UNKNOWN
            if durable and f.reports_flushed:
                if f.flushed == UNKNOWN:
                    return UNKNOWN
                hw = min(hw, f.flushed)
            else:
                hw = min(hw, f.leo)
        return hw

    def lagging(self, isr, now_ms: int, max_lag_ms: int,
                leader_leo: int | None = None) -> list[int]:
        """ISR followers not caught up within ``max_lag_ms``: candidates to remove.
        ``leader_leo`` lets a session's fetches count (see FollowerState)."""
        out = []
        for r in isr:
            f = self.followers.get(r)
            if (r != self.leader_id and f is not None
                    and now_ms - f.caught_up_ms(leader_leo) > max_lag_ms):
                out.append(r)
        return out

    def quiet_until(self, isr, leader_leo: int, max_lag_ms: int) -> int | None:
        """When an ISR follower could first become lagging if nothing changes -- every
        follower has the leader's whole log and keeps it (its caught-up time only moves
        forward while its LEO and session stay as they are) -- or None when some
        follower is behind (then any fetch may matter)."""
        until = None
        for r in isr:
            if r == self.leader_id:
                continue
            f = self.followers.get(r)
            if f is None or f.leo != leader_leo:
                return None
            t = f.caught_up_ms(leader_leo) + max_lag_ms
            until = t if until is None else min(until, t)
        return until

    def below_high_watermark(self, isr, high_watermark: int) -> list[int]:
        """ISR followers whose last fetch asked for an offset below the HW: they lost
        committed records (truncated after finding corrupt data, or lost unsynced data
        in a power loss), so they are not in sync, however recently they fetched.
        Candidates to remove at once (the HW never lowers; an ISR member below it
        must not be elected)."""
        return [r for r in isr if r != self.leader_id
                and (f := self.followers.get(r)) is not None
                and f.leo != UNKNOWN and f.leo < high_watermark]

    def caught_up(self, isr, high_watermark: int, epoch_start_offset: int, now_ms: int,
                  max_lag_ms: int, durable: bool = False) -> list[int]:
        """Out-of-ISR followers that are fetching (a fetch within ``max_lag_ms``) and
        whose LEO reached the HW and the start of the current leader epoch (so they
        have truncated any divergent tail): candidates to add. A follower that died
        keeps its last LEO, so the recent fetch is what tells the living apart.
        ``durable``: its flushed offset must reach the HW too (the HW never passes
        what an ISR member has on disk)."""
        need = max(high_watermark, epoch_start_offset)
        return sorted(
            r for r, f in self.followers.items()
            if r not in isr and f.leo != UNKNOWN and f.leo >= need
            and (not durable or self.flushed_of(r) >= high_watermark)
            and now_ms - f.fetched_ms() <= max_lag_ms
        )


def proposed_isr(replicas: tuple, isr: tuple, remove=(), add=()) -> tuple:
    """The new ISR in replica order: ``isr`` minus ``remove`` plus ``add``."""
    want = (set(isr) - set(remove)) | set(add)
    return tuple(r for r in replicas if r in want)
