"""Checkpoint files: atomic replacement, validation on read, safe fallbacks."""

from __future__ import annotations

import os

import pytest

from raftlog.checkpoint import PartitionCheckpoint, atomic_write, write_file
from raftlog.config import LogConfig
from raftlog.errors import StorageError
from raftlog.log import CHECKPOINT_FILE, PartitionLog
from raftlog.records import encode_batch


def test_round_trip(tmp_path):
    path = str(tmp_path / "cp")
    cp = PartitionCheckpoint(
        recovery_point=10, log_start_offset=3, high_watermark=9, epochs=[(1, 0), (4, 7)]
    )
    cp.write(path)
    assert PartitionCheckpoint.read(path) == cp
    assert not os.path.exists(path + ".tmp")


def test_missing_is_none(tmp_path):
    assert PartitionCheckpoint.read(str(tmp_path / "absent")) is None


@pytest.mark.parametrize("damage", ["flip", "truncate", "empty", "garbage"])
def test_damaged_checkpoint_reads_as_none(tmp_path, damage):
    path = str(tmp_path / "cp")
    PartitionCheckpoint(5, 0, 5, [(0, 0)]).write(path)
    data = bytearray(open(path, "rb").read())
    if damage == "flip":
        data[len(data) // 2] ^= 0x10
    elif damage == "truncate":
        data = data[:-3]
    elif damage == "empty":
        data = bytearray()
    else:
        data = bytearray(b"not a checkpoint at all")
    open(path, "wb").write(bytes(data))
    assert PartitionCheckpoint.read(path) is None


def test_valid_crc_but_wrong_version_or_negative_is_refused():
    import cbor2
    import crc32c

    def seal(d):
        body = cbor2.dumps(d)
        return body + crc32c.crc32c(body).to_bytes(4, "little")

    good = {"v": 1, "recovery_point": 1, "log_start_offset": 0, "high_watermark": 0, "epochs": []}
    assert PartitionCheckpoint.decode(seal(good)) is not None
    assert PartitionCheckpoint.decode(seal({**good, "v": 2})) is None
    assert PartitionCheckpoint.decode(seal({**good, "recovery_point": -1})) is None
    assert PartitionCheckpoint.decode(seal({**good, "epochs": [[1]]})) is None
    assert PartitionCheckpoint.decode(seal([1, 2])) is None


def test_lost_ranges_round_trip_and_bad_ones_are_refused():
    """``lost`` (recovery's damaged ranges): absent from older checkpoints (read as none),
    kept when present, and a malformed or empty/negative range refuses the checkpoint."""
    import cbor2
    import crc32c

    def seal(d):
        body = cbor2.dumps(d)
        return body + crc32c.crc32c(body).to_bytes(4, "little")

    old = {"v": 1, "recovery_point": 9, "log_start_offset": 0, "high_watermark": 9, "epochs": []}
    assert PartitionCheckpoint.decode(seal(old)).lost == []
    cp = PartitionCheckpoint(9, 0, 9, [], [(3, 5)])
    assert PartitionCheckpoint.decode(cp.encode()).lost == [(3, 5)]
    assert "lost" not in cbor2.loads(PartitionCheckpoint(9, 0, 9, []).encode()[:-4])
    for bad in ([[5, 3]], [[4, 4]], [[-1, 2]], [[1]], [["a", 2]], 7):
        assert PartitionCheckpoint.decode(seal({**old, "lost": bad})) is None, bad


def test_atomic_write_replaces_and_reports_errors(tmp_path):
    path = str(tmp_path / "f")
    atomic_write(path, b"one")
    atomic_write(path, b"two")
    assert open(path, "rb").read() == b"two"
    write_file(path, b"three")
    assert open(path, "rb").read() == b"three"
    with pytest.raises(StorageError):
        atomic_write(str(tmp_path / "no" / "such" / "dir"), b"x")


def test_log_falls_back_to_full_scan_on_bad_checkpoint(tmp_path):
    path = str(tmp_path / "p")
    log = PartitionLog.open(path, LogConfig(segment_bytes=1024))
    for _ in range(30):
        log.append(encode_batch([b"v" * 50] * 3), leader_epoch=2)
    log.maybe_increment_high_watermark(60)
    log.flush()
    # crash (no close), then the checkpoint is destroyed
    open(os.path.join(path, CHECKPOINT_FILE), "wb").write(b"\x00" * 10)
    log = PartitionLog.open(path, LogConfig(segment_bytes=1024))
    assert log.log_end_offset == 90
    assert log.high_watermark == 0  # unknown: the caller learns it again
    assert log.recovery_point == 90  # re-established by the full scan + checkpoint
    cp = PartitionCheckpoint.read(os.path.join(path, CHECKPOINT_FILE))
    assert cp is not None and cp.log_start_offset == 0
