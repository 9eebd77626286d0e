"""Compaction: last record per key survives with its original offset; tombstones expire;
rewrites are swapped in only when the segment did not change meanwhile."""

from __future__ import annotations

import os
import random

from raftlog import compaction
from raftlog.config import LogConfig
from raftlog.log import PartitionLog
from raftlog.records import decode_batches, encode_batch, iter_batches


def _all(log):
    out, off = [], log.log_start_offset
    while off < log.log_end_offset:
        sl = log.read(off, 1 << 20)
        if not sl.length:
            break
        data = sl.read_bytes()
        list(iter_batches(data, verify=True))
        out += decode_batches(data, start_offset=off)
        off = sl.next_offset
    return out


def _compacted_log(tmp_path, now, n=300, keys=13, seed=1, committed=True, **cfg):
    rng = random.Random(seed)
    cfg = {"segment_bytes": 2048, "cleanup_policy": "compact", "delete_retention_ms": 1000, **cfg}
    log = PartitionLog.open(str(tmp_path / "p"), LogConfig(**cfg), clock_ms=lambda: now[0])
    written = []
    i = 0
    while i < n:
        size = rng.randint(1, 6)
        ks = [b"k%d" % rng.randrange(keys) for _ in range(size)]
        vs = [None if rng.random() < 0.1 else b"v%d" % (i + j) for j in range(size)]
        log.append(encode_batch(vs, ks, timestamp=now[0]))
        written += list(zip(range(i, i + size), ks, vs))
        i += size
    log.roll()
    if committed:
        log.maybe_increment_high_watermark(log.log_end_offset)
    return log, written


def _expected_latest(written):
    latest = {}
    for off, k, v in written:
        latest[k] = (off, v)
    return latest


def test_last_value_per_key_with_original_offsets(tmp_path):
    now = [10**12]
    log, written = _compacted_log(tmp_path, now)
    stats = log.compact()
    assert stats["segments"] > 0 and stats["records_removed"] > 0
    recs = _all(log)
    assert {r.key: (r.offset, r.value) for r in recs} == _expected_latest(written)
    assert len(recs) == len(_expected_latest(written))  # tombstones kept until the horizon
    now[0] += 10_000
    log.compact()
    recs = _all(log)
    assert all(r.value is not None for r in recs)
    live = {k: ov for k, ov in _expected_latest(written).items() if ov[1] is not None}
    assert {r.key: (r.offset, r.value) for r in recs} == live


def test_compaction_is_idempotent_and_survives_reopen(tmp_path):
    now = [10**12]
    log, _ = _compacted_log(tmp_path, now)
    log.compact()
    before = [(r.offset, r.key, r.value) for r in _all(log)]
    assert log.compact()["records_removed"] == 0
    log.close()
    log = PartitionLog.open(log.path, log.config)
    assert [(r.offset, r.key, r.value) for r in _all(log)] == before
    del log  # unclean: indexes rebuilt or validated, same answer
    log = PartitionLog.open(str(tmp_path / "p"), LogConfig(segment_bytes=2048))
    assert [(r.offset, r.key, r.value) for r in _all(log)] == before


def test_only_closed_committed_segments_are_cleaned(tmp_path):
    now = [10**12]
    log, written = _compacted_log(tmp_path, now, committed=False)  # HW 0
    assert log.compact()["segments"] == 0
    active_before = log.active_segment.size
    log.append(encode_batch([b"a", b"b"], [b"k1", b"k1"]))
    log.maybe_increment_high_watermark(log.log_end_offset)
    log.compact()
    assert log.active_segment.size == active_before + len(
        encode_batch([b"a", b"b"], [b"k1", b"k1"])
    )


def test_min_compaction_lag(tmp_path):
    now = [10**12]
    log, _ = _compacted_log(tmp_path, now, min_compaction_lag_ms=60_000)
    assert log.compact()["segments"] == 0
    now[0] += 61_000
    assert log.compact()["segments"] > 0


def test_rewrite_is_discarded_if_the_segment_changed(tmp_path, monkeypatch):
    """Truncation between the rewrite and the swap wins: the rewrite is thrown away."""
    now = [10**12]
    log, _ = _compacted_log(tmp_path, now)
    target = log.segments[0].next_offset - 1
    real_rewrite = compaction._rewrite

    def rewrite_then_truncate(snap, latest, horizon):
        out = real_rewrite(snap, latest, horizon)
        if snap.segment is log.segments[0]:
            log.truncate_to(target)  # the event loop truncates meanwhile
        return out

    monkeypatch.setattr(compaction, "_rewrite", rewrite_then_truncate)
    log.compact()
    assert log.log_end_offset <= target
    offsets = [r.offset for r in _all(log)]
    assert offsets == sorted(set(offsets)) and all(o < target for o in offsets)
    assert not [f for f in os.listdir(log.path) if f.endswith(".cleaned")]


def test_leftover_cleaned_file_is_removed_on_open(tmp_path):
    now = [10**12]
    log, _ = _compacted_log(tmp_path, now)
    before = [(r.offset, r.value) for r in _all(log)]
    seg = log.segments[0]
    with open(seg.path + ".cleaned", "wb") as f:
        f.write(b"half a rewrite")
    del log  # crash mid-compaction
    log = PartitionLog.open(str(tmp_path / "p"), LogConfig(segment_bytes=2048))
    assert not [f for f in os.listdir(log.path) if f.endswith(".cleaned")]
    assert [(r.offset, r.value) for r in _all(log)] == before


def test_follower_replicates_a_compacted_log_across_gaps(tmp_path):
    now = [10**12]
    leader, _ = _compacted_log(tmp_path, now, keys=3)
    now[0] += 10_000
    leader.compact()
    expect = [(r.offset, r.key, r.value) for r in _all(leader)]
    follower = PartitionLog.open(str(tmp_path / "f"))
    off = 0
    while off < leader.log_end_offset:
        sl = leader.read(off, 300)
        if not sl.length:
            break
        follower.append_as_follower(sl.read_bytes())
        off = follower.log_end_offset
    assert [(r.offset, r.key, r.value) for r in _all(follower)] == expect


def test_offset_map_is_bounded(tmp_path, monkeypatch):
    now = [10**12]
    log, written = _compacted_log(tmp_path, now, keys=200)
    monkeypatch.setattr(compaction, "MAX_MAP_KEYS", 20)
    segments = log.segment_count
    stats = log.compact()
    assert 0 < stats["segments"] < segments - 1  # a prefix this round
    for _ in range(segments):
        if not log.compact()["segments"]:
            break
    recs = _all(log)
    offsets = [r.offset for r in recs]
    assert offsets == sorted(set(offsets))
    latest = _expected_latest(written)
    assert all(latest[r.key][0] >= r.offset for r in recs)
