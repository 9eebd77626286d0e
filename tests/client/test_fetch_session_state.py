"""The SDK consumer's fetch session state (client/fetch_session.py): pure, no sockets."""

from __future__ import annotations

from raftlog.client.fetch_session import (
    FINAL_EPOCH,
    INITIAL_EPOCH,
    ClientFetchSession,
    next_epoch,
)

A, B, C = ("t", 0), ("t", 1), ("t", 2)
MAX = 1 << 20


def want(**offsets) -> dict:
    keys = {"a": A, "b": B, "c": C}
    return {keys[k]: (off, MAX, -1) for k, off in offsets.items()}


def test_first_fetch_is_full_then_only_changes_are_named():
    s = ClientFetchSession()
    sid, epoch, named, forgotten = s.build(want(a=0, b=5, c=9))
    assert (sid, epoch, forgotten) == (0, INITIAL_EPOCH, [])
    assert dict(named) == want(a=0, b=5, c=9)
    s.answered(1234)
    assert (s.session_id, s.epoch) == (1234, 1)
    # nothing moved: an incremental fetch naming nothing
    assert s.build(want(a=0, b=5, c=9)) == (1234, 1, [], [])
    s.answered(1234)
    # a's position moved, c is no longer wanted (unassigned, paused or moved away)
    sid, epoch, named, forgotten = s.build(want(a=3, b=5))
    assert (sid, epoch, named, forgotten) == (1234, 2, [(A, (3, MAX, -1))], [C])
    s.answered(1234)
    assert s.told == want(a=3, b=5)
    # c comes back (resumed): named again
    assert s.build(want(a=3, b=5, c=9))[2] == [(C, (9, MAX, -1))]
    assert (s.full_fetches, s.incremental_fetches) == (1, 3)


def test_a_session_error_starts_over_with_a_full_fetch_closing_the_old_id():
    s = ClientFetchSession()
    s.build(want(a=0, b=0))
    s.answered(77)
    s.build(want(a=1, b=0))
    s.session_error()  # FETCH_SESSION_ID_NOT_FOUND / INVALID_FETCH_SESSION_EPOCH
    sid, epoch, named, forgotten = s.build(want(a=1, b=0))
    assert (sid, epoch, forgotten) == (77, INITIAL_EPOCH, [])  # (closes 77 on the node)
    assert dict(named) == want(a=1, b=0)
    s.answered(78)
    assert (s.session_id, s.epoch) == (78, 1)
    # the id is closed once only
    s.session_error()
    s.build(want(a=1))
    s.answered(79)
    s.reset()  # a new connection: the node closed the old session with the old one
    assert s.build(want(a=1))[:2] == (0, INITIAL_EPOCH)


def test_an_answer_without_a_session_keeps_fetches_full():
    s = ClientFetchSession()  # (an older node, or its session cache is full)
    for _ in range(3):
        sid, epoch, named, _ = s.build(want(a=0, b=0))
        assert (sid, epoch, len(named)) == (0, INITIAL_EPOCH, 2)
        s.answered(0)
    assert s.incremental_fetches == 0


def test_discarded_records_and_failed_partitions_are_named_again():
    s = ClientFetchSession()
    s.build(want(a=0, b=0))
    s.answered(5)
    s.build(want(a=0, b=0))
    s.answered(5)
    s.discarded([B])  # a seek meanwhile: the answer's records of b were dropped
    assert s.build(want(a=0, b=0))[2] == [(B, (0, MAX, -1))]


def test_an_unanswered_fetch_changes_nothing_and_epochs_wrap_as_kafkas():
    s = ClientFetchSession()
    s.build(want(a=0))
    s.reset()  # the connection failed before the answer
    assert s.told == {} and s.build(want(a=0))[1] == INITIAL_EPOCH
    assert next_epoch(2**31 - 1) == 1 and next_epoch(FINAL_EPOCH) == 0


def test_a_fetch_sent_before_the_earlier_ones_answer_names_what_differs_from_it():
    s = ClientFetchSession()
    s.build(want(a=5, b=0))
    s.answered(9)
    assert s.open
    s.build(want(a=7, b=0))  # in flight when the consumer seeks a back to 5
    sid, epoch, named, _ = s.build(want(a=5, b=0))  # sent at once, before that answer
    assert (sid, epoch, named) == (9, 2, [(A, (5, MAX, -1))])  # (the node applies both)
    s.answered(9)  # (the earlier answer, dropped by the consumer)
    s.answered(9)
    assert (s.session_id, s.epoch, s.told) == (9, 3, want(a=5, b=0))
