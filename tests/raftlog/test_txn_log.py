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
