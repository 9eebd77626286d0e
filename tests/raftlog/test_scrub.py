"""The scrubber's pure core: cursor walk, batch checks, pacing. No I/O."""

from __future__ import annotations

import pytest

from raftlog import records
from raftlog.records import HEADER_SIZE
from raftlog.scrub import (
    SCRUB_CHUNK_BYTES_MAX,
    SCRUB_CHUNK_BYTES_MIN,
    ScrubCheck,
    ScrubCursor,
    SegmentInfo,
    check_batches,
    chunk_bytes,
    pace_s,
)


def stamped(base: int, n: int, size: int = 100) -> bytes:
    buf = bytearray(records.encode_batch([b"v" * size] * n))
    records.stamp(buf, 0, base, 1)
    return bytes(buf)


def segment(base: int, batches: int, per: int = 3) -> tuple[bytes, int]:
    """(bytes of ``batches`` batches of ``per`` records from ``base``, next offset)."""
    data = b"".join(stamped(base + i * per, per) for i in range(batches))
    return data, base + batches * per


# ---------------------------------------------------------------- check_batches


def test_good_batches_are_consumed_whole_and_the_next_offset_follows():
    data, nxt = segment(10, 4)
    c = check_batches(data, 10, nxt, len(data))
    assert c == ScrubCheck(len(data), nxt, None, 0)
    one = len(stamped(0, 3))
    partial = check_batches(data[: one * 2 + 5], 10, nxt, len(data))  # chunk ends mid-batch
    assert partial == ScrubCheck(one * 2, 16, None, 0)


@pytest.mark.parametrize("where", ["records", "header_crc_covered"])
def test_a_flipped_bit_is_found_at_the_offset_after_the_last_good_batch(where):
    data, nxt = segment(0, 5)
    one = len(stamped(0, 3))
    bad = bytearray(data)
    pos = 2 * one + (HEADER_SIZE + 7 if where == "records" else HEADER_SIZE - 2)
    bad[pos] ^= 0x10
    c = check_batches(bytes(bad), 0, nxt, len(bad))
    assert c.corrupt is not None and c.consumed == 2 * one and c.next_offset == 6


def test_a_corrupt_length_is_found_without_reading_past_the_segment():
    data, nxt = segment(0, 3)
    bad = bytearray(data)
    bad[len(stamped(0, 3)) + 8: len(stamped(0, 3)) + 12] = (10_000_000).to_bytes(4, "big")
    c = check_batches(bytes(bad), 0, nxt, len(bad))
    assert c.corrupt is not None and c.next_offset == 3 and c.need_bytes == 0


def test_offsets_that_go_back_or_leave_the_segment_are_corrupt():
    data = stamped(0, 3) + stamped(1, 3)  # the second overlaps the first (offsets not CRC'd)
    c = check_batches(data, 0, 10, len(data))
    assert c.corrupt and "outside" in c.corrupt and c.next_offset == 3
    data = stamped(0, 3)
    assert check_batches(data, 0, 2, len(data)).corrupt  # ends past the segment's end
    assert check_batches(data, 5, 10, len(data)).corrupt  # below the expected offset


def test_stray_bytes_at_the_segment_end_are_corrupt_but_not_mid_segment():
    data, nxt = segment(0, 2)
    c = check_batches(data + b"\0" * 10, 0, nxt, len(data) + 10)
    assert c.corrupt and c.consumed == len(data)
    c = check_batches(data + b"\0" * 10, 0, nxt, len(data) + 5000)  # more follows: read on
    assert c.corrupt is None and c.consumed == len(data)


def test_a_batch_bigger_than_the_chunk_asks_for_a_whole_read():
    big = stamped(0, 50, size=1000)
    c = check_batches(big[:4096], 0, 50, len(big))
    assert c == ScrubCheck(0, 0, None, len(big))
    assert check_batches(big, 0, 50, len(big)) == ScrubCheck(len(big), 50)


# ---------------------------------------------------------------- pacing


def test_chunk_and_pace_bound_the_rate():
    assert chunk_bytes(1) == SCRUB_CHUNK_BYTES_MIN
    assert chunk_bytes(10**12) == SCRUB_CHUNK_BYTES_MAX
    assert chunk_bytes(1_000_000) == 100_000
    assert pace_s(100_000, 1_000_000) == pytest.approx(0.1)
    # a whole pass over B bytes takes at least B / rate seconds of rests
    total = sum(pace_s(chunk_bytes(2_000_000), 2_000_000) for _ in range(20))
    assert total == pytest.approx(20 * chunk_bytes(2_000_000) / 2_000_000)


# ---------------------------------------------------------------- cursor


class Layout:
    """A fake log layout: {key: [SegmentInfo...]} of closed segments."""

    def __init__(self, segs: dict):
        self.segs = segs
        self.keys_calls = 0

    def keys(self):
        self.keys_calls += 1
        return sorted(self.segs)

    def of(self, key):
        return self.segs.get(key)


def walk(cursor, layout, chunk, steps):
    """Read ``chunk`` bytes per step (whole segments' worth of good data)."""
    seen = []
    for _ in range(steps):
        t = cursor.place(layout.keys, layout.of)
        if t is None:
            seen.append(None)
            continue
        n = min(chunk, t.segment_size - t.position)
        seen.append((t.key, t.base_offset, t.position))
        cursor.advance(t, ScrubCheck(n, t.expected_offset + 1))
    return seen


def test_cursor_walks_every_closed_segment_in_order_and_counts_passes():
    lay = Layout({("a", 0): [SegmentInfo(0, 200, 0, 10), SegmentInfo(10, 100, 0, 20)],
                  ("b", 0): [],
                  ("c", 1): [SegmentInfo(5, 100, 0, 9)]})
    cur = ScrubCursor()
    seen = walk(cur, lay, 100, 9)
    assert seen == [(("a", 0), 0, 0), (("a", 0), 0, 100), (("a", 0), 10, 0),
                    (("c", 1), 5, 0),
                    (("a", 0), 0, 0), (("a", 0), 0, 100), (("a", 0), 10, 0),
                    (("c", 1), 5, 0), (("a", 0), 0, 0)]
    assert cur.passes == 2


def test_cursor_restarts_a_rewritten_segment_and_skips_a_deleted_one():
    lay = Layout({("a", 0): [SegmentInfo(0, 300, 0, 10), SegmentInfo(10, 100, 0, 20)]})
    cur = ScrubCursor()
    walk(cur, lay, 100, 2)
    assert cur.position == 200
    lay.segs[("a", 0)][0] = SegmentInfo(0, 250, 1, 10)  # compacted: generation moved
    t = cur.place(lay.keys, lay.of)
    assert (t.base_offset, t.position, t.expected_offset) == (0, 0, 0)
    lay.segs[("a", 0)] = [SegmentInfo(10, 100, 0, 20)]  # retention deleted it
    t = cur.place(lay.keys, lay.of)
    assert (t.base_offset, t.position) == (10, 0)


def test_cursor_moves_on_when_its_partition_goes_and_idles_with_nothing_closed():
    lay = Layout({("a", 0): [SegmentInfo(0, 100, 0, 10)], ("b", 0): [SegmentInfo(0, 100, 0, 4)]})
    cur = ScrubCursor()
    assert cur.place(lay.keys, lay.of).key == ("a", 0)
    del lay.segs[("a", 0)]
    assert cur.place(lay.keys, lay.of).key == ("b", 0)
    lay.segs.clear()
    assert cur.place(lay.keys, lay.of) is None


def test_cursor_skips_the_rest_of_a_segment_after_corruption():
    lay = Layout({("a", 0): [SegmentInfo(0, 300, 0, 10), SegmentInfo(10, 100, 0, 20)]})
    cur = ScrubCursor()
    t = cur.place(lay.keys, lay.of)
    cur.advance(t, ScrubCheck(40, 3, "CRC mismatch"))
    t = cur.place(lay.keys, lay.of)
    assert (t.base_offset, t.position) == (10, 0)


def test_a_stale_step_does_not_move_the_cursor():
    lay = Layout({("a", 0): [SegmentInfo(0, 300, 0, 10)]})
    cur = ScrubCursor()
    t = cur.place(lay.keys, lay.of)
    cur.advance(t, ScrubCheck(100, 5))
    cur.advance(t, ScrubCheck(100, 5))  # the same target again: ignored
    assert (cur.position, cur.expected_offset) == (100, 5)
