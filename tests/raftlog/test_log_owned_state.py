"""What PartitionLog owns beside its bytes (Kafka's UnifiedLog): the high watermark,
idempotent producers' state and its snapshot, and a scan of its batches -- and that
an appended batch is parsed once."""

from __future__ import annotations

import os

import pytest

from raftlog import records
from raftlog.errors import ApiError, ErrorCode
from raftlog.log import PRODUCER_SNAPSHOT_FILE, PartitionLog
from raftlog.records import encode_batch

PID = 7


def _idem(seq: int, n: int = 1, epoch: int = 0, pid: int = PID) -> bytes:
    return encode_batch([b"v%d" % i for i in range(n)], producer_id=pid,
                        producer_epoch=epoch, base_sequence=seq, timestamp=1)


def test_a_retried_idempotent_batch_answers_its_original_offsets_and_appends_nothing(tmp_path):
    log = PartitionLog.open(str(tmp_path / "p"))
    log.append(encode_batch([b"plain"]))
    first = log.append_as_leader(_idem(0, 3), leader_epoch=2)
    assert (first.base_offset, first.last_offset, first.duplicate) == (1, 3, False)
    retry = log.append_as_leader(_idem(0, 3), leader_epoch=2)
    assert (retry.base_offset, retry.last_offset, retry.duplicate) == (1, 3, True)
    assert log.log_end_offset == 4
    with pytest.raises(ApiError) as e:
        log.append_as_leader(_idem(9), leader_epoch=2)  # expected 3
    assert e.value.code == ErrorCode.OUT_OF_ORDER_SEQUENCE
    with pytest.raises(ApiError) as e:
        log.append_as_leader(_idem(3) + _idem(4), leader_epoch=2)
    assert e.value.code == ErrorCode.INVALID_REQUEST
    assert log.log_end_offset == 4  # refusals write nothing
    assert log.append_as_leader(_idem(3), leader_epoch=2)[:2] == (4, 4)


def test_producer_state_survives_a_clean_restart_from_its_snapshot_and_a_crash_from_the_log(tmp_path):
    path = str(tmp_path / "p")
    log = PartitionLog.open(path)
    log.append_as_leader(_idem(0, 2))
    log.close()
    assert os.path.exists(os.path.join(path, PRODUCER_SNAPSHOT_FILE))
    log = PartitionLog.open(path)
    assert log.append_as_leader(_idem(0, 2)).duplicate  # from the snapshot
    log.append_as_leader(_idem(2))
    del log  # a crash: no new snapshot; the old one plus the batches after it
    log = PartitionLog.open(path)
    assert log.append_as_leader(_idem(2)) == (2, 2, True)
    os.unlink(os.path.join(path, PRODUCER_SNAPSHOT_FILE))
    log = PartitionLog.open(path)  # no snapshot: rebuilt from every batch header
    assert log.append_as_leader(_idem(0, 2)) == (0, 1, True)


def test_truncation_forgets_producer_state_ahead_of_the_log(tmp_path):
    log = PartitionLog.open(str(tmp_path / "p"))
    log.append_as_leader(_idem(0))
    log.append_as_leader(_idem(1))
    assert log.producers.producers[PID].last_seq == 1
    log.truncate_to(1)
    # sequence 1 is gone from the log: a new leader accepts it again, not as a duplicate
    assert log.append_as_leader(_idem(1)) == (1, 1, False)
    log.truncate_fully_and_start_at(10)
    assert log.producers.producers == {}


def test_follower_appends_replay_into_a_loaded_producer_state(tmp_path):
    leader = PartitionLog.open(str(tmp_path / "l"))
    follower = PartitionLog.open(str(tmp_path / "f"))
    assert follower.producers.producers == {}  # loaded (empty) before the appends
    for seq in range(3):
        leader.append_as_leader(_idem(seq), leader_epoch=1)
    follower.append_as_follower(leader.read_bytes(0, 1 << 20))
    assert follower.producers.producers[PID].last_seq == 2
    # after a leader change the follower's state answers a retry as a duplicate
    assert follower.append_as_leader(_idem(2), leader_epoch=2) == (2, 2, True)


def test_high_watermark_moves_forward_only_and_truncation_lowers_it(tmp_path):
    log = PartitionLog.open(str(tmp_path / "p"))
    for v in (b"a", b"b", b"c"):
        log.append(encode_batch([v]))
    assert log.maybe_increment_high_watermark(2)
    assert not log.maybe_increment_high_watermark(1)
    assert not log.maybe_increment_high_watermark(2)
    assert log.high_watermark == 2
    with pytest.raises(AssertionError):
        log.maybe_increment_high_watermark(4)  # beyond the log end
    log.truncate_to(1)
    assert log.high_watermark == 1


def test_iter_batches_covers_a_range_in_small_reads(tmp_path):
    log = PartitionLog.open(str(tmp_path / "p"))
    for i in range(20):
        log.append(encode_batch([b"r%d-%d" % (i, j) for j in range(3)]))  # 3 per batch
    got = list(log.iter_batches(7, 20, chunk_bytes=1))  # one batch per read
    assert [h.base_offset for h, _ in got] == [6, 9, 12, 15, 18]
    h, batch = got[0]
    assert [r.value for r in records.decode_batch(bytes(batch))] == [b"r2-0", b"r2-1", b"r2-2"]
    assert [h.base_offset for h, _ in log.iter_batches()] == list(range(0, 60, 3))
    assert list(log.iter_batches(60)) == []


def test_an_appended_batch_is_parsed_once(tmp_path, monkeypatch):
    log = PartitionLog.open(str(tmp_path / "p"))
    log.append_as_leader(_idem(0))  # (the producer state is loaded by now)
    calls = []
    real = records.read_header
    monkeypatch.setattr(records, "read_header",
                        lambda buf, pos=0: calls.append(pos) or real(buf, pos))
    log.append_as_leader(_idem(1))
    log.append_as_leader(encode_batch([b"x"]) + encode_batch([b"y"]))
    assert len(calls) == 3  # one header read per batch
    follower = PartitionLog.open(str(tmp_path / "f"))
    follower.producers  # noqa: B018 (load it: a loaded state replays the appends)
    calls.clear()
    follower.append_as_follower(log.read_bytes(0, 1 << 20))
    assert len(calls) == 4
