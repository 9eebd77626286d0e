"""The partition log's transactions: verified transactional appends, markers, the LSO and
the aborted-transaction index files (raftlog/txn_log.py)."""

import pytest

from raftlog import records
from raftlog.errors import ApiError, ErrorCode
from raftlog.log import PartitionLog


def tb(pid, epoch, seq, vals, txn=True):
    return records.encode_batch(vals, producer_id=pid, producer_epoch=epoch, base_sequence=seq, transactional=txn, timestamp=1)

def test_it(tmp_path):
    log = PartitionLog.open(str(tmp_path/"p"))
    with pytest.raises(ApiError) as e:
        log.append_as_leader(tb(1,0,0,[b"a"]))
    assert e.value.code is ErrorCode.INVALID_TXN_STATE
    assert log.log_end_offset == 0
    log.append_as_leader(tb(1,0,0,[b"a",b"b"]), transactional_ok=True)
    log.append_as_leader(records.encode_batch([b"x"], timestamp=1))
    log.maybe_increment_high_watermark(3)
    assert log.last_stable_offset() == 0
    m = log.append_marker(1, 1, 0, False)
    assert m == 3
    log.maybe_increment_high_watermark(4)
    assert log.last_stable_offset() == 4
    assert log.aborted_transactions(0, 4) == [(1, 0)]
    with pytest.raises(ApiError) as e:
        log.append_as_leader(tb(1,0,2,[b"late"]), transactional_ok=True)
    assert e.value.code is ErrorCode.INVALID_PRODUCER_EPOCH
    with pytest.raises(ApiError) as e:
        log.append_marker(1, 0, 0, True)
    log.close()
    log = PartitionLog.open(str(tmp_path/"p"))
    assert log.aborted_transactions(0, 4) == [(1, 0)]
    log.truncate_to(3)
    assert log.aborted_transactions(0, 4) == []
    log.close()


def test_follower_replays_markers_into_its_own_index(tmp_path):
    """A follower appending the leader's batches indexes the abort as the leader did."""
    leader = PartitionLog.open(str(tmp_path / "l"))
    follower = PartitionLog.open(str(tmp_path / "f"))
    leader.append_as_leader(tb(7, 0, 0, [b"x"]), transactional_ok=True)
    leader.append_as_leader(tb(8, 0, 0, [b"y"]), transactional_ok=True)
    leader.append_marker(7, 1, 3, False)
    leader.append_marker(8, 1, 3, True)
    follower.append_as_follower(leader.read_bytes(0, 1 << 20))
    for log in (leader, follower):
        log.maybe_increment_high_watermark(4)
        assert log.aborted_transactions(0, 4) == [(7, 0)]
        assert log.last_stable_offset() == 4
    leader.close()
    follower.close()


def test_index_is_rebuilt_when_its_file_is_corrupt(tmp_path):
    log = PartitionLog.open(str(tmp_path / "p"))
    log.append_as_leader(tb(1, 0, 0, [b"a"]), transactional_ok=True)
    log.append_marker(1, 1, 0, False)
    log.close()
    (tmp_path / "p" / "00000000000000000000.txnindex").write_bytes(b"\x00" * 38)
    log = PartitionLog.open(str(tmp_path / "p"))
    assert log.aborted_transactions(0, 2) == [(1, 0)]
    log.close()


def test_read_committed_filter_drops_aborted_and_markers():
    from raftlog.client.consumer import _decode_committed
    from raftlog.client.types import TopicPartition

    data = (records.encode_batch([b"keep"], timestamp=1, base_offset=0)
            + records.encode_batch([b"aborted"], producer_id=5, producer_epoch=0,
                                   base_sequence=0, transactional=True, timestamp=1,
                                   base_offset=1)
            + records.encode_batch([b"committed"], producer_id=6, producer_epoch=0,
                                   base_sequence=0, transactional=True, timestamp=1,
                                   base_offset=2))
    from raftlog.txn_markers import ControlType, EndTxnMarker
    data += records.encode_control_batch(EndTxnMarker(ControlType.ABORT, 0), producer_id=5,
                                         producer_epoch=1, timestamp=1, base_offset=3)
    got, end = _decode_committed(data, TopicPartition("t", 0), 0, [[5, 1]])
    assert [r.value for r in got] == [b"keep", b"committed"]
    assert end == 4  # past the trailing marker: the next fetch starts after it
    # runs of kept batches around an aborted one, each decoded whole, in order
    more = data + records.encode_batch([b"k2", b"k3"], timestamp=1, base_offset=4)
    got, end = _decode_committed(more, TopicPartition("t", 0), 2, [[5, 1]])
    assert [(r.offset, r.value) for r in got] == [(2, b"committed"), (4, b"k2"), (5, b"k3")]
    assert end == 6


def test_group_load_keeps_transactional_offsets_until_their_marker(tmp_path):
    from raftlog.node.coordinator import read_with_transactions

    log = PartitionLog.open(str(tmp_path / "o"))

    def txn(pid, key):
        log.append_as_leader(records.encode_batch([b"v"], [key], producer_id=pid,
                                                  producer_epoch=0, base_sequence=0,
                                                  transactional=True, timestamp=1),
                             transactional_ok=True)

    log.append_as_leader(records.encode_batch([b"v"], [b"plain"], timestamp=1))
    txn(5, b"committed")
    txn(6, b"aborted")
    txn(7, b"open")
    log.append_marker(6, 1, 0, False)
    log.append_marker(5, 1, 0, True)
    recs, pending = read_with_transactions(log, log.log_end_offset)
    assert [k for k, _ in recs] == [b"plain", b"committed"]
    assert pending == {7: [(b"open", b"v")]}
    log.close()
