"""Recovery with real damage: SIGKILLed writers, flipped bits, truncated and missing files."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time

import pytest

from raftlog.config import LogConfig
from raftlog.errors import CorruptRecordError
from raftlog.log import PartitionLog
from raftlog.records import decode_batches, encode_batch, iter_batches

CONFIG = LogConfig(segment_bytes=16 * 1024)

WRITER = r"""
import sys
from raftlog.config import LogConfig
from raftlog.log import PartitionLog
from raftlog.records import encode_batch
log = PartitionLog.open(sys.argv[1], LogConfig(segment_bytes=16 * 1024))
print("ready", flush=True)
i = log.log_end_offset
while True:
    n = 1 + i % 50
    log.append(encode_batch([b"%d" % (i + k) for k in range(n)], [b"k"] * n))
    i += n
"""


def _serve_everything(log: PartitionLog) -> list:
    """Read the whole log; every byte served passes CRC and values match offsets."""
    out, off = [], log.log_start_offset
    while off < log.log_end_offset:
        sl = log.read(off, 256 * 1024)
        data = sl.read_bytes()
        assert sl.length, f"no progress at {off}"
        list(iter_batches(data, verify=True))  # raises if anything served is corrupt
        recs = decode_batches(data, start_offset=off, allow_partial=False)
        out += recs
        off = sl.next_offset
    return out


def _fill(path: str, batches: int = 300) -> PartitionLog:
    log = PartitionLog.open(path, CONFIG)
    i = 0
    for b in range(batches):
        n = 1 + b % 20
        log.append(encode_batch([b"%d" % (i + k) for k in range(n)], [b"k"] * n))
        i += n
    return log


def test_sigkill_mid_append_recovers_a_valid_prefix(tmp_path):
    path = str(tmp_path / "p")
    previous_end = 0
    for _ in range(4):
        proc = subprocess.Popen([sys.executable, "-c", WRITER, path], stdout=subprocess.PIPE)
        assert proc.stdout.readline().strip() == b"ready"
        time.sleep(random.uniform(0.1, 0.3))
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        log = PartitionLog.open(path, CONFIG)
        recs = _serve_everything(log)
        assert [r.offset for r in recs] == list(range(log.log_end_offset))
        assert all(r.value == b"%d" % r.offset for r in recs)
        assert log.log_end_offset >= previous_end  # nothing the OS had was lost
        previous_end = log.log_end_offset
        log.close()
    assert previous_end > 0


def test_torn_tail_is_truncated(tmp_path):
    path = str(tmp_path / "p")
    log = _fill(path)
    end = log.log_end_offset
    active = log.active_segment.path
    del log  # crash: no clean shutdown
    with open(active, "ab") as f:
        f.write(encode_batch([b"torn"] * 10)[:37])
    log = PartitionLog.open(path, CONFIG)
    assert log.log_end_offset == end
    assert len(_serve_everything(log)) == end


@pytest.mark.parametrize("seed", range(6))
def test_random_truncation_of_segment_files(tmp_path, seed):
    rng = random.Random(seed)
    path = str(tmp_path / "p")
    log = _fill(path)
    logs = sorted(f for f in os.listdir(path) if f.endswith(".log"))
    del log
    victim = os.path.join(path, rng.choice(logs))
    size = os.path.getsize(victim)
    os.truncate(victim, rng.randrange(size))
    log = PartitionLog.open(path, CONFIG)
    recs = _serve_everything(log)
    assert [r.offset for r in recs] == list(range(log.log_start_offset, log.log_end_offset))
    assert all(r.value == b"%d" % r.offset for r in recs)


@pytest.mark.parametrize("seed", range(16))
def test_flipped_bits_are_never_served(tmp_path, seed):
    """A flipped byte anywhere: after an unclean restart the log is a valid prefix; after a
    clean one the corrupt batch is detected when read and never served."""
    rng = random.Random(seed)
    path = str(tmp_path / "p")
    log = _fill(path)
    clean = seed % 2 == 0
    if clean:
        log.close()
    else:
        log.flush()
        del log
    logs = sorted(f for f in os.listdir(path) if f.endswith(".log"))
    victim = os.path.join(path, rng.choice(logs[:-1]))  # a closed segment
    with open(victim, "r+b") as f:
        f.seek(rng.randrange(os.path.getsize(victim)))
        b = f.read(1)
        f.seek(-1, 1)
        f.write(bytes([b[0] ^ (1 << rng.randrange(8))]))
    log = PartitionLog.open(path, CONFIG)
    try:
        recs = _serve_everything(log)
    except CorruptRecordError as e:
        assert "not served" in str(e) or "CRC" in str(e)
        return
    assert all(r.value == b"%d" % r.offset for r in recs)


def test_deleted_and_garbage_indexes_are_rebuilt(tmp_path):
    path = str(tmp_path / "p")
    log = _fill(path)
    end = log.log_end_offset
    expect = [(r.offset, r.value) for r in _serve_everything(log)]
    log.close()
    idx = sorted(f for f in os.listdir(path) if f.endswith(".index"))
    os.unlink(os.path.join(path, idx[0]))
    with open(os.path.join(path, idx[1]), "wb") as f:
        f.write(b"\xff" * 24)
    for f in os.listdir(path):
        if f.endswith(".timeindex"):
            os.unlink(os.path.join(path, f))
    log = PartitionLog.open(path, CONFIG)
    assert log.log_end_offset == end
    assert [(r.offset, r.value) for r in _serve_everything(log)] == expect
    assert log.offset_for_timestamp(0) == 0


def test_damage_below_the_recovery_point_keeps_the_later_segments_as_a_lost_range(tmp_path):
    """A closed segment cut short after its data was fsynced (a disk's damage, not a torn
    write): the intact segments after it stay -- they hold acknowledged records a
    replica elected on this copy must not drop -- and the hole is a lost range: never
    served, kept across restarts, gone once truncation refetches it."""
    path = str(tmp_path / "p")
    log = _fill(path)
    log.flush()  # everything below the log end is on disk: the recovery point
    end, bases = log.log_end_offset, [s.base_offset for s in log.segments]
    assert len(bases) >= 4
    victim = log.segments[1].path
    del log  # crash
    os.truncate(victim, os.path.getsize(victim) // 2)

    log = PartitionLog.open(path, CONFIG)
    assert log.log_end_offset == end
    [(cut, hole_end)] = log.lost
    assert bases[1] < cut < bases[2] == hole_end
    assert log.recovery_cuts[0][1:] == (cut, log.recovery_cuts[0][2], bases[2])
    with pytest.raises(CorruptRecordError, match="not served"):
        log.read(cut, 1024)
    with pytest.raises(CorruptRecordError):
        log.read(hole_end - 1, 1024)
    after = decode_batches(log.read(bases[2], 1 << 20).read_bytes(), start_offset=bases[2])
    assert after[0].offset == bases[2] and all(r.value == b"%d" % r.offset for r in after)
    held = [h.base_offset for h, _ in log.iter_batches(skip_lost=True)]
    assert held and not any(cut <= o < hole_end for o in held) and held[-1] < end
    assert log.lost_from(0) == cut and log.lost_from(hole_end) is None
    # the producer state rebuilds over the hole; a new append goes on at the end
    first, _ = log.append(encode_batch([b"%d" % end], [b"k"]))
    assert first == end
    log.flush()
    del log

    log = PartitionLog.open(path, CONFIG)  # the hole survives a restart (the checkpoint)
    assert log.lost == [(cut, hole_end)] and log.log_end_offset == end + 1
    log.truncate_to(cut)  # a follower refetching it
    assert log.lost == [] and log.log_end_offset == cut
    log.close()
    log = PartitionLog.open(path, CONFIG)
    assert log.lost == [] and log.log_end_offset == cut
    assert [r.offset for r in _serve_everything(log)] == list(range(cut))

