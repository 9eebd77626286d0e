"""Power-loss emulation: writes after the last fsync disappear, fsynced ones stay."""

from __future__ import annotations

from raftlog.config import LogConfig
from raftlog.jepsen.powerloss import lose_unsynced_writes
from raftlog.log import PartitionLog
from raftlog.records import encode_batch


def test_unsynced_appends_are_dropped_and_synced_ones_kept(tmp_path):
    d = tmp_path / "node"
    path = str(d / "t-0")
    log = PartitionLog.open(path, LogConfig())
    for i in range(5):
        log.append(encode_batch([b"synced-%d" % i]))
    log.flush()
    for i in range(3):
        log.append(encode_batch([b"lost-%d" % i]))
    assert log.log_end_offset == 8
    # a SIGKILL: no close, no flush (the page cache would keep the bytes); the power goes
    assert lose_unsynced_writes(str(d)) == {"t-0": 3}
    after = PartitionLog.open(path, LogConfig())
    try:
        assert after.log_end_offset == 5
        assert [r.value for r in after.read_records(0, 1 << 20)] == [b"synced-%d" % i for i in range(5)]
    finally:
        after.close()
    # nothing unsynced left: a second power loss drops nothing
    assert lose_unsynced_writes(str(d)) == {}


def test_a_log_never_flushed_loses_everything(tmp_path):
    # a new partition writes no checkpoint until its first flush: all of it is unsynced
    d = tmp_path / "node"
    path = str(d / "t-0")
    log = PartitionLog.open(path, LogConfig())
    log.assign_epoch(3, 0)
    for i in range(4):
        log.append(encode_batch([b"lost-%d" % i]), leader_epoch=3)
    assert lose_unsynced_writes(str(d)) == {"t-0": 4}
    after = PartitionLog.open(path, LogConfig())
    try:
        assert after.log_end_offset == 0 and after.epochs == []
    finally:
        after.close()
