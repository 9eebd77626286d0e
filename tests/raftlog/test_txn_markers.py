"""Control batches (transaction markers): the marker record, raftlog's and Kafka's control
batches, transactional batches through the Kafka conversion, and what is refused."""

from __future__ import annotations

import struct

import crc32c
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from raftlog import records as rl
from raftlog.errors import CorruptRecordError
from raftlog.kafka import batch as kb
from raftlog.log import PartitionLog
from raftlog.txn_markers import ControlType, EndTxnMarker, decode_marker, encode_marker

default_records = pytest.importorskip("kafka.record.default_records")

_marker = st.builds(EndTxnMarker, st.sampled_from(list(ControlType)), st.integers(0, 2**31 - 1))
_pid = st.integers(0, 2**63 - 1)
_epoch = st.integers(0, 2**15 - 1)


@settings(max_examples=200, deadline=None)
@given(m=_marker)
def test_marker_record_round_trips_in_kafkas_bytes(m):
    key, value = encode_marker(m)
    assert key == struct.pack(">hh", 0, int(m.control_type))
    assert value == struct.pack(">hi", 0, m.coordinator_epoch)
    assert decode_marker(key, value) == m
    # a newer version with trailing bytes is read as version 0, as Kafka does
    assert decode_marker(struct.pack(">hh", 3, m.control_type) + b"xx",
                         struct.pack(">hi", 1, m.coordinator_epoch) + b"tail") == m


@settings(max_examples=400, deadline=None)
@given(key=st.none() | st.binary(max_size=8), value=st.none() | st.binary(max_size=10))
def test_marker_garbage_raises_only_corrupt_record_error(key, value):
    try:
        m = decode_marker(key, value)
    except CorruptRecordError:
        return
    assert m.control_type in (ControlType.ABORT, ControlType.COMMIT)
    assert m.coordinator_epoch >= 0 and len(key) >= 4 and len(value) >= 6


def test_marker_refuses_other_control_types_and_negative_fields():
    for key, value, why in [
        (struct.pack(">hh", 0, 2), struct.pack(">hi", 0, 1), "not a transaction marker"),
        (struct.pack(">hh", -1, 1), struct.pack(">hi", 0, 1), "negative"),
        (struct.pack(">hh", 0, 1), struct.pack(">hi", 0, -5), "negative"),
        (struct.pack(">hh", 0, 1), b"\x00\x00\x00", "needs 6"),
        (None, struct.pack(">hi", 0, 1), "needs 4"),
    ]:
        with pytest.raises(CorruptRecordError, match=why):
            decode_marker(key, value)


@settings(max_examples=150, deadline=None)
@given(m=_marker, pid=_pid, epoch=_epoch, ts=st.integers(0, 2**41),
       base=st.integers(0, 2**40), leader_epoch=st.integers(0, 2**31 - 1))
def test_native_control_batch_round_trips_and_converts_to_kafkas_bytes(
        m, pid, epoch, ts, base, leader_epoch):
    data = rl.encode_control_batch(m, producer_id=pid, producer_epoch=epoch, timestamp=ts,
                                   base_offset=base, leader_epoch=leader_epoch)
    [(pos, h)] = list(rl.iter_batches(data))
    assert h.is_control and h.is_transactional and h.record_count == 1
    assert (h.producer_id, h.producer_epoch, h.base_sequence) == (pid, epoch, -1)
    assert rl.read_control_marker(data, pos, h) == m
    assert rl.decode_batches(data) == []  # a marker is no record of the partition's data
    # served to a Kafka client: exactly the batch a Kafka broker writes for this marker
    kafka = kb.from_raftlog(data)
    assert kafka == kb.encode_control_batch(m, producer_id=pid, producer_epoch=epoch,
                                            timestamp=ts, base_offset=base,
                                            partition_leader_epoch=leader_epoch)
    [(kpos, kh)] = list(kb.iter_batches(kafka))
    assert kb.read_control_marker(kafka, kpos, kh) == m
    batch = default_records.DefaultRecordBatch(kafka)  # kafka-python's reader agrees
    assert batch.validate_crc() and batch.is_control_batch and batch.is_transactional
    [rec] = list(batch)
    assert (rec.key, rec.value) == encode_marker(m)


def _recrc_native(buf: bytearray) -> bytes:
    buf[rl.CRC_OFFSET:rl.CRC_OFFSET + 4] = struct.pack(
        "<I", crc32c.crc32c(bytes(buf[rl.ATTRIBUTES_OFFSET:])))
    return bytes(buf)


def _with(data: bytes, **fields) -> bytes:
    """``data`` (one native batch) with header fields replaced, CRC fixed up."""
    h = rl.read_header(data)
    buf = bytearray(data)
    rl.HEADER.pack_into(buf, 0, *h._replace(**fields))
    return _recrc_native(buf)


def test_native_headers_of_broken_transactional_and_control_batches_are_corrupt():
    m = EndTxnMarker(ControlType.COMMIT, 3)
    good = rl.encode_control_batch(m, producer_id=7, producer_epoch=2, timestamp=1)
    attrs = rl.read_header(good).attributes
    data = rl.encode_batch([b"a", b"b"], producer_id=7, producer_epoch=2, base_sequence=0,
                           transactional=True)
    assert rl.read_header(data).is_transactional and not rl.read_header(data).is_control
    for bad, why in [
        (_with(good, attributes=attrs & ~rl.ATTR_TRANSACTIONAL), "not transactional"),
        (_with(good, producer_id=-1), "needs both"),
        (_with(good, producer_epoch=-1), "needs both"),
        (_with(good, base_sequence=0), "not -1"),
        (_with(data, attributes=attrs), "exactly one"),
        (_with(data, producer_id=-1), "needs both"),
    ]:
        with pytest.raises(CorruptRecordError, match=why):
            list(rl.iter_batches(bad))
    with pytest.raises(ValueError):
        rl.encode_batch([b"a"], transactional=True)  # no producer id
    with pytest.raises(ValueError):
        rl.encode_batch([b"a", b"b"], producer_id=1, producer_epoch=0, control=True)
    with pytest.raises(CorruptRecordError, match="not a control batch"):
        rl.read_control_marker(data, 0, rl.read_header(data))


def _kp_transactional(pid=5, epoch=1, seq=0, codec=0):
    b = default_records.DefaultRecordBatchBuilder(2, codec, True, pid, epoch, seq, 2**20)
    for i in range(3):
        b.append(i, timestamp=100 + i, key=b"k%d" % i, value=b"v%d" % i, headers=[])
    return bytes(b.build())


@pytest.mark.parametrize("codec", [kb.NONE, kb.GZIP, kb.LZ4, kb.ZSTD])
def test_kafka_transactional_batch_is_kept_when_allowed_and_served_back_byte_for_byte(codec):
    data = _kp_transactional(codec=codec)
    with pytest.raises(CorruptRecordError, match="transactional"):
        kb.to_raftlog(data)  # the default: the caller has verified no transaction
    ours, n = kb.to_raftlog(data, allow_transactional=True)
    h = rl.read_header(ours)
    assert n == 3 and h.is_transactional and not h.is_control
    assert [r.value for r in rl.decode_batches(ours)] == [b"v0", b"v1", b"v2"]
    back = kb.from_raftlog(ours)  # (leader epoch: the leader stamps it, -1 here)
    assert back[:12] == data[:12] and back[16:] == data[16:]
    assert default_records.DefaultRecordBatch(kb.from_raftlog(ours)).is_transactional


def test_kafka_converted_transactional_batch_keeps_its_bit():
    gap = kb.encode_batch([b"a", b"b"], timestamps=[1, 2], offset_deltas=[0, 3],
                          producer_id=9, producer_epoch=0, base_sequence=0, transactional=True)
    ours, _ = kb.to_raftlog(gap, require_sequential=False, allow_transactional=True)
    h = rl.read_header(ours)
    assert h.is_transactional and not h.attributes & rl.ATTR_KAFKA_RECORDS
    back = kb.read_header(kb.from_raftlog(ours))
    assert back.attributes & kb.TRANSACTIONAL and not back.attributes & kb.CONTROL


def test_produce_never_takes_control_batches_nor_unsequenced_transactional_ones():
    marker = kb.encode_control_batch(EndTxnMarker(ControlType.ABORT, 0), producer_id=5,
                                     producer_epoch=1, timestamp=1)
    with pytest.raises(CorruptRecordError, match="control"):
        kb.to_raftlog(marker, allow_transactional=True)
    # (kafka-python's builder cannot make this one: a transactional batch without sequence)
    raw = bytearray(kb.encode_batch([b"v"], timestamps=[1], producer_id=5, producer_epoch=1,
                                    transactional=True))
    with pytest.raises(CorruptRecordError, match="idempotent"):
        kb.to_raftlog(bytes(raw), allow_transactional=True)
    with pytest.raises(CorruptRecordError, match="needs both"):
        raw[43:51] = (-1).to_bytes(8, "big", signed=True)
        raw[17:21] = crc32c.crc32c(bytes(raw[21:])).to_bytes(4, "big")
        list(kb.iter_batches(bytes(raw)))


def test_a_log_refuses_control_and_unverified_transactional_batches_from_producers(tmp_path):
    """A producer never appends a marker (only WriteTxnMarkers does, append_marker), and
    a transactional batch only once its leader verified the transaction
    (transactional_ok, KIP-890)."""
    from raftlog.errors import ApiError, ErrorCode

    log = PartitionLog.open(str(tmp_path / "p"))
    log.append(rl.encode_batch([b"a"]))
    with pytest.raises(CorruptRecordError, match="transaction coordinator only"):
        log.append(rl.encode_control_batch(EndTxnMarker(ControlType.COMMIT, 0), producer_id=1,
                                           producer_epoch=0, timestamp=1))
    txn = rl.encode_batch([b"t"], producer_id=1, producer_epoch=0, base_sequence=0,
                          transactional=True)
    with pytest.raises(ApiError) as e:
        log.append(txn)
    assert e.value.code is ErrorCode.INVALID_TXN_STATE
    assert log.log_end_offset == 1
    log.append_as_leader(txn, transactional_ok=True)
    assert log.log_end_offset == 2
    log.close()


def test_compaction_keeps_every_marker_and_the_transactional_bit(tmp_path):
    from raftlog.config import LogConfig

    log = PartitionLog.open(str(tmp_path / "p"), LogConfig(segment_bytes=1024,
                                                           cleanup_policy="compact"))
    commit_key = encode_marker(EndTxnMarker(ControlType.COMMIT, 0))[0]
    offset, batches = 0, []
    for i in range(12):  # transactional pairs (k, <commit key>) each closed by a marker
        batches.append(rl.encode_batch([b"v%d" % i, b"w%d" % i], [b"k", commit_key],
                                       base_offset=offset, leader_epoch=1, producer_id=3,
                                       producer_epoch=i, base_sequence=0, transactional=True))
        batches.append(rl.encode_control_batch(EndTxnMarker(ControlType(i % 2), 1),
                                               producer_id=3, producer_epoch=i + 1,
                                               timestamp=1, base_offset=offset + 2,
                                               leader_epoch=1))
        offset += 3
    for b in batches:
        log.append_as_follower(b)
    log.roll()
    log.maybe_increment_high_watermark(log.log_end_offset)
    assert log.compact()["records_removed"] > 0
    markers, data = [], []
    for h, raw in log.iter_batches():
        if h.is_control:
            markers.append((h.base_offset, rl.read_control_marker(raw, 0, h)))
        else:
            assert h.is_transactional
            data += [r.offset for r in rl.decode_batch(raw)]
    assert markers == [(3 * i + 2, EndTxnMarker(ControlType(i % 2), 1)) for i in range(12)]
    assert data == [33, 34]  # only the last of each key (the markers' key is not theirs)
    log.close()


@settings(max_examples=300, deadline=None)
@given(m=_marker, data=st.data(), kafka=st.booleans())
def test_mutated_control_batches_raise_only_corrupt_record_error(m, data, kafka):
    """Flip bytes of a marker batch (CRC fixed up or not) and cut it: reading it either
    fails with CorruptRecordError or yields a valid marker of a valid control batch."""
    if kafka:
        raw = bytearray(kb.encode_control_batch(m, producer_id=4, producer_epoch=2, timestamp=9))
    else:
        raw = bytearray(rl.encode_control_batch(m, producer_id=4, producer_epoch=2, timestamp=9))
    for _ in range(data.draw(st.integers(1, 3))):
        raw[data.draw(st.integers(8, len(raw) - 1))] = data.draw(st.integers(0, 255))
    if data.draw(st.booleans()):
        if kafka:
            raw[17:21] = crc32c.crc32c(bytes(raw[21:])).to_bytes(4, "big")
        else:
            raw = bytearray(_recrc_native(raw))
    blob = bytes(raw[: data.draw(st.integers(0, len(raw)))])
    mod, read = (kb, kb.read_control_marker) if kafka else (rl, rl.read_control_marker)
    try:
        for pos, h in mod.iter_batches(blob):
            got = read(blob, pos, h)
            assert h.attributes & mod.CONTROL if kafka else h.is_control
            assert got.coordinator_epoch >= 0
    except CorruptRecordError:
        pass
