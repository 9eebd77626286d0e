"""Leader-side replica bookkeeping (pure): HW, lagging and caught-up followers."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from raftlog.node.replica import UNKNOWN, LeaderState, proposed_isr

LAG = 1000


def test_hw_is_min_leo_over_isr_and_unknown_until_every_isr_follower_fetched():
    s = LeaderState(1, (1, 2, 3), now_ms=0)
    assert s.high_watermark(10, (1, 2, 3)) == UNKNOWN
    s.on_fetch(2, 7, leader_leo=10, now_ms=1)
    assert s.high_watermark(10, (1, 2, 3)) == UNKNOWN
    s.on_fetch(3, 4, leader_leo=10, now_ms=1)
    assert s.high_watermark(10, (1, 2, 3)) == 4
    assert s.high_watermark(10, (1, 2)) == 7  # 3 out of the ISR no longer holds it back
    assert s.high_watermark(10, (1,)) == 10


def test_unknown_replica_is_refused():
    s = LeaderState(1, (1, 2), now_ms=0)
    assert not s.on_fetch(9, 0, leader_leo=0, now_ms=0)


def test_follower_that_stops_fetching_lags_after_max_lag():
    s = LeaderState(1, (1, 2, 3), now_ms=0)
    s.on_fetch(2, 10, leader_leo=10, now_ms=100)
    s.on_fetch(3, 10, leader_leo=10, now_ms=100)
    assert s.lagging((1, 2, 3), now_ms=1000, max_lag_ms=LAG) == []
    s.on_fetch(2, 10, leader_leo=10, now_ms=1500)  # 3 went silent
    assert s.lagging((1, 2, 3), now_ms=1500, max_lag_ms=LAG) == [3]


def test_follower_keeping_up_with_a_stream_never_lags():
    """Always behind the live LEO, but always at the LEO of its previous fetch."""
    s = LeaderState(1, (1, 2), now_ms=0)
    leo = 0
    for t in range(0, 20_000, 100):
        fetch_at, leo = leo, leo + 50  # the leader appended 50 since the last fetch
        s.on_fetch(2, fetch_at, leader_leo=leo, now_ms=t)
        assert s.lagging((1, 2), now_ms=t, max_lag_ms=LAG) == []


def test_follower_falling_further_behind_lags():
    s = LeaderState(1, (1, 2), now_ms=0)
    for t in range(0, 5000, 100):
        s.on_fetch(2, t // 100, leader_leo=t, now_ms=t)  # fetches crawl, the leader races
    assert s.lagging((1, 2), now_ms=5000, max_lag_ms=LAG) == [2]


def test_caught_up_needs_hw_epoch_start_and_a_recent_fetch():
    s = LeaderState(1, (1, 2, 3), now_ms=0)
    s.on_fetch(3, 8, leader_leo=10, now_ms=100)
    assert s.caught_up((1, 2), 8, 0, now_ms=100, max_lag_ms=LAG) == [3]
    assert s.caught_up((1, 2), 9, 0, now_ms=100, max_lag_ms=LAG) == []  # below the HW
    assert s.caught_up((1, 2), 8, 9, now_ms=100, max_lag_ms=LAG) == []  # before the epoch start
    # a follower that died keeps its last LEO, but it is not fetching any more
    assert s.caught_up((1, 2), 8, 0, now_ms=100 + LAG + 1, max_lag_ms=LAG) == []


def test_proposed_isr_keeps_replica_order():
    assert proposed_isr((3, 1, 2), (1,), add=(2, 3)) == (3, 1, 2)
    assert proposed_isr((3, 1, 2), (3, 1, 2), remove=(1,)) == (3, 2)


@given(st.lists(st.tuples(st.sampled_from([2, 3]), st.integers(0, 100)), max_size=50))
def test_hw_never_exceeds_any_isr_members_leo(fetches):
    s = LeaderState(1, (1, 2, 3), now_ms=0)
    leo = 100
    seen = {}
    for t, (r, off) in enumerate(fetches):
        s.on_fetch(r, off, leader_leo=leo, now_ms=t)
        seen[r] = off
    hw = s.high_watermark(leo, (1, 2, 3))
    if len(seen) < 2:
        assert hw == UNKNOWN
    else:
        assert hw == min(leo, *seen.values())


def test_an_isr_follower_fetching_below_the_hw_is_not_in_sync():
    s = LeaderState(1, (1, 2, 3), now_ms=0)
    for r in (2, 3):
        s.on_fetch(r, 10, leader_leo=10, now_ms=1)
    hw = s.high_watermark(10, (1, 2, 3))
    assert hw == 10 and s.below_high_watermark((1, 2, 3), hw) == []
    s.on_fetch(3, 4, leader_leo=10, now_ms=2)  # truncated (repair of a corrupt segment)
    assert s.below_high_watermark((1, 2, 3), hw) == [3]
    assert s.lagging((1, 2, 3), now_ms=3, max_lag_ms=LAG) == []  # fetching, yet behind
    assert s.below_high_watermark((1, 2), hw) == []  # out of the ISR already
