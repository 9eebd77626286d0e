"""The scrubber's I/O step over a real log on disk (no node process): a flipped bit
in a closed segment is found at the right offset, reported once, and never served."""

from __future__ import annotations

import pytest

from raftlog.config import LogConfig
from raftlog.errors import CorruptRecordError
from raftlog.log import PartitionLog
from raftlog.node.partition import Partition
from raftlog.node.scrubber import Scrubber
from raftlog.records import HEADER_SIZE, encode_batch, iter_batches


class Events:
    def __init__(self):
        self.lines = []

    def info(self, event, **f):
        self.lines.append(("info", event, f))

    def error(self, event, **f):
        self.lines.append(("error", event, f))


class Host:
    """What the scrubber reads from the replica manager: its partitions."""

    def __init__(self, parts):
        self.partitions = {(p.topic, p.partition): p for p in parts}


def make_partition(tmp_path, name="t", batches=40):
    log = PartitionLog.open(str(tmp_path / f"{name}-0"), LogConfig(segment_bytes=8 * 1024))
    for i in range(batches):
        log.append(encode_batch([b"%d-%d" % (i, j) + b"x" * 100 for j in range(5)]))
    assert log.segment_count > 3
    return Partition(name, 0, log)


def flip_bit(seg, nth_batch: int) -> int:
    """Flip a bit in the records of the ``nth_batch`` of ``seg``; returns its base offset."""
    with open(seg.path, "r+b") as f:
        data = f.read()
        pos, h = list(iter_batches(data, verify=True))[nth_batch]
        f.seek(pos + HEADER_SIZE + 3)
        f.write(bytes([data[pos + HEADER_SIZE + 3] ^ 0x04]))
    return h.base_offset


def run_until(scrubber, cond, max_steps=10_000):
    for _ in range(max_steps):
        scrubber.step()
        if cond():
            return
    raise AssertionError("condition not met")


def test_clean_segments_pass_and_passes_are_counted(tmp_path):
    parts = [make_partition(tmp_path, "a"), make_partition(tmp_path, "b")]
    ev = Events()
    s = Scrubber(Host(parts), ev, 10_000_000, on_corrupt=lambda *a: pytest.fail(f"{a}"))
    run_until(s, lambda: s.stats["scrub_passes"] >= 2)
    closed = sum(seg.size for p in parts for seg in p.log.segments[:-1])
    assert s.stats["scrub_bytes"] >= closed  # every closed byte read at least once
    assert s.stats["scrub_corrupt_batches"] == 0 and not [x for x in ev.lines if x[0] == "error"]


def test_a_flipped_bit_is_found_reported_once_and_never_served(tmp_path):
    part = make_partition(tmp_path)
    seg = part.log.segments[1]
    bad_offset = flip_bit(seg, 2)
    calls, ev = [], Events()
    s = Scrubber(Host([part]), ev, 10_000_000,
                 on_corrupt=lambda p, off, why: calls.append((p, off, why)) or "test_repair")
    run_until(s, lambda: s.cursor.passes >= 1)
    assert [(p, off) for p, off, _ in calls] == [(part, bad_offset)]
    assert "CRC" in calls[0][2]
    repairs = [f for lvl, e, f in ev.lines if e == "scrub_repair"]
    assert len(repairs) == 1 and repairs[0]["action"] == "test_repair"
    assert repairs[0]["offset"] == bad_offset and repairs[0]["segment"] == seg.path
    assert s.stats["scrub_repairs"] == 1
    # the bytes were verified on append (this process wrote them): the scrubber made
    # every read of them check again, so they are refused, not served
    with pytest.raises(CorruptRecordError):
        part.log.read(bad_offset, 1 << 20)
    assert part.log.read(seg.base_offset, 1).length  # what precedes it is still served
    # the repair a follower does: truncate there, append the good batches again
    part.truncate_to(bad_offset)
    assert part.log.log_end_offset == bad_offset


def test_a_rewritten_segment_is_started_again(tmp_path):
    part = make_partition(tmp_path)
    s = Scrubber(Host([part]), Events(), 40_000)  # 4 KiB steps: 8 KiB segments take two
    s.step()
    base, pos = s.cursor.base_offset, s.cursor.position
    assert 0 < pos < part.log.segments[0].size
    part.log.segments[0].generation += 1  # what truncation or a compaction swap does
    t = s.cursor.place(s._keys, s._segments_of)
    assert (t.base_offset, t.position, t.expected_offset) == (base, 0, base)
    s.step()
    assert s.stats["scrub_corrupt_batches"] == 0
