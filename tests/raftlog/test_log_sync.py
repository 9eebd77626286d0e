"""PartitionLog's flushed offset and group commit's sync: what is on disk, across
appends, rolls, truncation and reopening."""

from __future__ import annotations

import os

from raftlog.config import LogConfig
from raftlog.log import PartitionLog
from raftlog.records import encode_batch


def test_sync_moves_the_flushed_offset_to_the_log_end(tmp_path, monkeypatch):
    log = PartitionLog.open(str(tmp_path / "p"))
    assert log.flushed_offset == 0
    log.append(encode_batch([b"a", b"b"]))
    assert log.flushed_offset == 0 and log.log_end_offset == 2  # page cache only
    synced = []
    real = os.fdatasync
    monkeypatch.setattr(os, "fdatasync", lambda fd: (synced.append(fd), real(fd)))
    assert log.sync() == 2 and log.flushed_offset == 2
    assert len(synced) == 1
    assert log.sync() == 2 and len(synced) == 1  # nothing new: no fdatasync
    log.close()


def test_a_rolled_segment_is_synced_before_its_offsets_count(tmp_path, monkeypatch):
    log = PartitionLog.open(str(tmp_path / "p"), LogConfig(segment_bytes=1024))
    for _ in range(30):  # several segments
        log.append(encode_batch([b"x" * 100]))
    assert log.segment_count > 2
    synced = []
    real = os.fdatasync
    monkeypatch.setattr(os, "fdatasync", lambda fd: (synced.append(fd), real(fd)))
    assert log.sync() == 30
    assert sorted(synced) == sorted(s.file.fd for s in log.segments)  # every one written
    log.close()


def test_truncation_lowers_the_flushed_offset_and_a_sync_racing_it_does_not_raise_it(tmp_path):
    log = PartitionLog.open(str(tmp_path / "p"))
    for _ in range(5):
        log.append(encode_batch([b"a"]))
    assert log.sync() == 5
    log.truncate_to(3)
    assert log.flushed_offset == 3 <= log.log_end_offset
    log.append(encode_batch([b"b"]))
    log.truncate_fully_and_start_at(10)
    assert log.flushed_offset == 10 == log.log_end_offset
    log.close()


def test_reopened_log_counts_what_it_recovered_as_flushed(tmp_path):
    path = str(tmp_path / "p")
    log = PartitionLog.open(path)
    for _ in range(4):
        log.append(encode_batch([b"a"]))
    log.close()
    again = PartitionLog.open(path)
    assert again.flushed_offset == again.log_end_offset == 4
    again.close()


def test_a_non_blocking_sync_declines_while_a_flush_holds_the_log(tmp_path):
    """The event loop's inline sync (node/log_manager.py) must never wait for a flush
    running in a worker thread (which writes indexes and a checkpoint)."""
    import threading

    log = PartitionLog.open(str(tmp_path / "p"))
    log.append(encode_batch([b"a"]))
    held, release = threading.Event(), threading.Event()

    def flush_holding_the_log():
        with log._sync_lock:
            held.set()
            release.wait(10)

    t = threading.Thread(target=flush_holding_the_log)
    t.start()
    assert held.wait(10)
    try:
        assert log.sync(blocking=False) is None
        assert log.flushed_offset == 0
    finally:
        release.set()
        t.join()
    assert log.sync(blocking=False) == 1 and log.flushed_offset == 1
    log.close()
