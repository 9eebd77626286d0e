"""Directory entries survive a power loss: a new directory's name is durable only once
its parent is fsynced. On lazyfs (the harness's power-loss filesystem) when FUSE
mounts here; the fsync bookkeeping is also checked without it."""

from __future__ import annotations

import os

import pytest

from raftlog import checkpoint
from raftlog.checkpoint import makedirs_durable
from raftlog.config import LogConfig
from raftlog.log import PartitionLog
from raftlog.records import encode_batch


@pytest.fixture
def lazyfs(lazyfs_mount):
    return lazyfs_mount


def _values(log: PartitionLog) -> list[bytes]:
    out, offset = [], log.log_start_offset
    while offset < log.log_end_offset:
        batch = log.read_records(offset, 1 << 20)
        if not batch:
            break
        out += [r.value for r in batch]
        offset = batch[-1].offset + 1
    return out


def test_flushed_records_of_a_new_partition_survive_power_loss(lazyfs):
    path = os.path.join(lazyfs.mountpoint, "t-0")
    log = PartitionLog.open(path, LogConfig())
    log.append(encode_batch([b"a", b"b"]), leader_epoch=0)
    log.flush()
    log.append(encode_batch([b"unsynced"]), leader_epoch=0)
    lazyfs.crash()  # (the log's handles are stale now, as after a power loss)
    log = PartitionLog.open(path, LogConfig())
    try:
        assert _values(log) == [b"a", b"b"]
    finally:
        log.close()


def test_makedirs_durable_survives_power_loss(lazyfs):
    d = os.path.join(lazyfs.mountpoint, "__raft", "sub")
    assert makedirs_durable(d)
    assert not makedirs_durable(d)
    lazyfs.crash()
    assert os.path.isdir(d)


def test_new_directories_fsync_their_parents(tmp_path, monkeypatch):
    synced: list[str] = []
    real = checkpoint.fsync_dir
    monkeypatch.setattr(checkpoint, "fsync_dir", lambda p: (synced.append(p), real(p)))
    makedirs_durable(str(tmp_path / "a" / "b"))
    assert synced == [str(tmp_path), str(tmp_path / "a")]

    import raftlog.log as log_module

    monkeypatch.setattr(log_module, "fsync_dir", lambda p: (synced.append(p), real(p)))
    synced.clear()
    log = PartitionLog.open(str(tmp_path / "t-0"), LogConfig())
    try:
        assert synced == []  # creating a partition costs no fsync...
        log.append(encode_batch([b"x"]), leader_epoch=0)
        log.flush()
        assert str(tmp_path) in synced  # ...its first flush makes its name durable
        synced.clear()
        log.append(encode_batch([b"y"]), leader_epoch=0)
        log.flush()
        assert str(tmp_path) not in synced  # once
    finally:
        log.close()


def test_truncation_that_deletes_segments_survives_power_loss(lazyfs):
    path = os.path.join(lazyfs.mountpoint, "t-0")
    config = LogConfig(segment_bytes=1024)
    log = PartitionLog.open(path, config)
    for i in range(30):
        log.append(encode_batch([b"%03d" % i + b"x" * 100]), leader_epoch=0)
        log.flush()
    assert len(log.segments) > 3
    cut = log.segments[1].base_offset + 1  # deletes every segment after the second
    log.truncate_to(cut)  # durable when it returns (the checkpoint fsyncs the directory)
    lazyfs.crash()
    log = PartitionLog.open(path, config)
    try:
        assert log.log_end_offset <= cut
        assert len(_values(log)) == log.log_end_offset
    finally:
        log.close()


def test_truncate_fully_survives_power_loss(lazyfs):
    path = os.path.join(lazyfs.mountpoint, "t-0")
    config = LogConfig(segment_bytes=1024)
    log = PartitionLog.open(path, config)
    for _ in range(20):
        log.append(encode_batch([b"x" * 100]), leader_epoch=0)
        log.flush()
    log.truncate_fully_and_start_at(100)  # durable when it returns
    lazyfs.crash()
    log = PartitionLog.open(path, config)
    try:
        assert (log.log_start_offset, log.log_end_offset) == (100, 100)
        assert _values(log) == []
    finally:
        log.close()
