"""Kafka record batch v2: our codec against kafka-python's record builder and reader,
and conversion to and from raftlog batches."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from raftlog import records as rl
from raftlog.errors import CorruptRecordError
from raftlog.kafka import batch as kb

default_records = pytest.importorskip("kafka.record.default_records")

CODECS = [kb.NONE, kb.GZIP, kb.SNAPPY, kb.LZ4, kb.ZSTD]

_header = st.tuples(st.text(max_size=8), st.none() | st.binary(max_size=8))
_record = st.tuples(
    st.none() | st.binary(max_size=30),  # key
    st.none() | st.binary(max_size=60),  # value
    st.integers(0, 2**41),  # timestamp
    st.lists(_header, max_size=3).map(tuple),
)
_batch = st.lists(_record, min_size=1, max_size=20)
_producer = st.one_of(st.just((-1, -1, -1)),
                      st.tuples(st.integers(0, 2**40), st.integers(0, 2**15 - 1),
                                st.integers(0, 2**31 - 100)))
_SETTINGS = settings(max_examples=40, deadline=None,
                     suppress_health_check=[HealthCheck.too_slow])


def _kp_build(recs, codec, producer, base_offset=0):
    b = default_records.DefaultRecordBatchBuilder(
        magic=2, compression_type=codec, is_transactional=False, producer_id=producer[0],
        producer_epoch=producer[1], base_sequence=producer[2], batch_size=2**30)
    for i, (k, v, ts, hs) in enumerate(recs):
        b.append(i, timestamp=ts, key=k, value=v, headers=list(hs))
    data = bytes(b.build())
    return data[:0] + base_offset.to_bytes(8, "big") + data[8:]  # base offset: not under CRC


def _kp_read(data):
    batch = default_records.DefaultRecordBatch(data)
    assert batch.validate_crc()
    return batch, [(r.offset, r.timestamp, r.key, r.value, tuple(r.headers)) for r in batch]


@pytest.mark.parametrize("codec", CODECS)
@_SETTINGS
@given(recs=_batch, producer=_producer)
def test_we_read_kafka_pythons_batches(codec, recs, producer):
    data = _kp_build(recs, codec, producer)
    [(pos, h)] = list(kb.iter_batches(data))
    got = kb.decode_records(data, pos, h)
    assert (h.producer_id, h.producer_epoch, h.base_sequence) == producer
    assert got.keys == [r[0] for r in recs]
    assert got.values == [r[1] for r in recs]
    assert got.timestamps == [r[2] for r in recs]
    assert got.headers == [r[3] for r in recs]
    assert got.offset_deltas == list(range(len(recs)))


@pytest.mark.parametrize("codec", CODECS)
@_SETTINGS
@given(recs=_batch, producer=_producer, base=st.integers(0, 2**40))
def test_kafka_python_reads_our_batches(codec, recs, producer, base):
    data = kb.encode_batch([r[1] for r in recs], [r[0] for r in recs],
                           timestamps=[r[2] for r in recs], headers=[r[3] for r in recs],
                           base_offset=base, compression=codec, producer_id=producer[0],
                           producer_epoch=producer[1], base_sequence=producer[2])
    batch, got = _kp_read(data)
    assert (batch.producer_id, batch.producer_epoch, batch.base_sequence) == producer
    assert got == [(base + i, r[2], r[0], r[1], r[3]) for i, r in enumerate(recs)]


@pytest.mark.parametrize("codec", CODECS)
@_SETTINGS
@given(recs=_batch, producer=_producer)
def test_kafka_to_raftlog_and_back_preserves_everything(codec, recs, producer):
    data = _kp_build(recs, codec, producer)
    ours, count = kb.to_raftlog(data)
    assert count == len(recs)
    decoded = rl.decode_batch(ours, "t", 0)
    assert [(r.key, r.value, r.timestamp, r.headers) for r in decoded] == list(recs)
    h = rl.read_header(ours)
    assert (h.producer_id, h.producer_epoch, h.base_sequence) == producer
    # the leader stamps offsets; the Kafka view of the stamped batch keeps them
    stamped = bytearray(ours)
    rl.stamp(stamped, 0, 1000, 7)
    back = kb.from_raftlog(bytes(stamped))
    batch, got = _kp_read(back)
    assert batch.partition_leader_epoch == 7 if hasattr(batch, "partition_leader_epoch") else True
    assert (batch.producer_id, batch.producer_epoch, batch.base_sequence) == producer
    assert got == [(1000 + i, r[2], r[0], r[1], r[3]) for i, r in enumerate(recs)]


def test_raftlog_batches_convert_with_gaps_log_append_time_and_partial_tail():
    b1 = rl.encode_batch([b"a", None, b"c"], [b"k", None, b"k2"], timestamps=[5, 9, 7],
                         headers=[[("h", b"1")], None, [("x", None)]],
                         offset_deltas=[0, 2, 5], base_offset=10,
                         producer_id=3, producer_epoch=1, base_sequence=40)
    b2 = rl.encode_batch([b"z"], timestamp=1, base_offset=16, timestamp_type=rl.LOG_APPEND_TIME)
    b2 = bytearray(b2)
    rl.set_log_append_time(b2, 0, rl.read_header(b2), 12345)
    data = b1 + bytes(b2) + b1[:30]  # a fetch slice ends mid-batch
    out = kb.from_raftlog(data)
    batches = []
    pos = 0
    while pos < len(out):
        h = kb.read_header(out, pos)
        batches.append(_kp_read(out[pos : pos + h.size]))
        pos += h.size
    (_, g1), (kb2, g2) = batches
    assert g1 == [(10, 5, b"k", b"a", (("h", b"1"),)), (12, 9, None, None, ()),
                  (15, 7, b"k2", b"c", (("x", None),))]
    assert kb2.timestamp_type == 1 and g2 == [(16, 12345, None, b"z", ())]
    assert kb.from_raftlog(data, start_offset=16) == out[kb.read_header(out).size:]


def test_produce_refuses_transactional_and_non_sequential_batches():
    b = default_records.DefaultRecordBatchBuilder(2, 0, True, 5, 0, 0, 2**20)
    b.append(0, timestamp=1, key=None, value=b"v", headers=[])
    with pytest.raises(CorruptRecordError, match="transactional"):
        kb.to_raftlog(bytes(b.build()))
    gap = kb.encode_batch([b"a", b"b"], timestamps=[1, 2], offset_deltas=[0, 3])
    with pytest.raises(CorruptRecordError, match="0..n-1"):
        kb.to_raftlog(gap)


def test_crc_mismatch_and_old_magic_are_refused():
    data = bytearray(kb.encode_batch([b"v"], timestamps=[1]))
    data[-1] ^= 1
    with pytest.raises(CorruptRecordError, match="CRC"):
        kb.to_raftlog(bytes(data))
    data = bytearray(kb.encode_batch([b"v"], timestamps=[1]))
    data[16] = 1
    with pytest.raises(CorruptRecordError, match="magic"):
        kb.to_raftlog(bytes(data))


def _recrc(data: bytearray) -> bytes:
    import crc32c

    data[17:21] = crc32c.crc32c(bytes(data[21:])).to_bytes(4, "big")
    return bytes(data)


@settings(max_examples=300, deadline=None)
@given(recs=_batch, codec=st.sampled_from(CODECS), data=st.data())
def test_mutated_batches_raise_only_corrupt_record_error(recs, codec, data):
    """Flip bytes (CRC fixed up, so the parser sees the damage) and cut the batch: only
    CorruptRecordError comes out."""
    raw = bytearray(_kp_build(recs, codec, (-1, -1, -1)))
    for _ in range(data.draw(st.integers(1, 4))):
        i = data.draw(st.integers(8, len(raw) - 1))
        raw[i] = data.draw(st.integers(0, 255))
    blob = _recrc(raw) if data.draw(st.booleans()) else bytes(raw)
    blob = blob[: data.draw(st.integers(0, len(blob)))]
    try:
        ours, count = kb.to_raftlog(blob)
    except CorruptRecordError:
        return
    # accepted means storable and readable: every record decodes again, both ways
    stamped = bytearray(ours)
    for pos, _h in rl.iter_batches(ours):
        rl.stamp(stamped, pos, 7, 1)
    assert len(rl.decode_batches(bytes(stamped))) == count
    assert sum(h.record_count for _, h in kb.iter_batches(kb.from_raftlog(bytes(stamped)))) == count


@pytest.mark.parametrize("codec", CODECS)
@_SETTINGS
@given(recs=_batch, producer=_producer, base=st.integers(0, 2**40), epoch=st.integers(0, 99))
def test_a_kafka_batch_is_stored_verbatim_and_served_back_byte_for_byte(
        codec, recs, producer, base, epoch):
    """What a Kafka producer sent is what a Kafka consumer gets: same records section,
    same CRC; only the offset and leader epoch the leader stamps differ."""
    sent = _kp_build(recs, codec, producer)
    ours, _ = kb.to_raftlog(sent)
    h = rl.read_header(ours)
    assert h.attributes & rl.ATTR_KAFKA_RECORDS and ours[rl.HEADER_SIZE:] == sent[kb.HEADER_SIZE:]
    stamped = bytearray(ours)
    rl.stamp(stamped, 0, base, epoch)
    back = kb.from_raftlog(bytes(stamped))
    assert back[kb.ATTRIBUTES_OFFSET - 4:] == sent[kb.ATTRIBUTES_OFFSET - 4:]  # CRC on
    k = kb.read_header(back)
    assert (k.base_offset, k.partition_leader_epoch, k.batch_length) == (
        base, epoch, len(sent) - 12)


def test_fast_check_and_full_parser_agree_on_shapes_the_fast_one_leaves():
    """Headers, keys, long values and large deltas leave the fast walk; the full parser
    takes them, and the stored batch reads back equal."""
    recs = [(b"k" * 300, b"v" * 9000, 10**12, (("h", b"1"),)), (None, None, 10**12 - 5, ())]
    sent = _kp_build(recs, kb.NONE, (-1, -1, -1))
    [(pos, h)] = list(kb.iter_batches(sent))
    assert kb._walk(sent[kb.HEADER_SIZE:], 2) is None
    ours, _ = kb.to_raftlog(sent)
    got = rl.decode_batch(ours)
    assert [(r.key, r.value, r.timestamp, r.headers) for r in got] == recs
    assert rl.read_header(ours).max_timestamp == 10**12
    plain = _kp_build([(None, b"x" * 100, 5 + i % 3, ()) for i in range(300)], kb.NONE,
                      (-1, -1, -1))
    assert kb._walk(plain[kb.HEADER_SIZE:], 300) == (0, 2)


def test_log_append_time_on_a_verbatim_batch():
    sent = _kp_build([(None, b"a", 5, ()), (b"k", b"b", 6, ())], kb.LZ4, (-1, -1, -1))
    ours = bytearray(kb.to_raftlog(sent)[0])
    rl.stamp(ours, 0, 40, 2)
    rl.set_log_append_time(ours, 0, rl.read_header(ours), 777)
    assert [(r.offset, r.timestamp) for r in rl.decode_batch(bytes(ours))] == [(40, 777), (41, 777)]
    batch, got = _kp_read(kb.from_raftlog(bytes(ours)))
    assert batch.timestamp_type == 1 and [g[:2] for g in got] == [(40, 777), (41, 777)]


@settings(max_examples=300, deadline=None)
@given(garbage=st.binary(max_size=300))
def test_garbage_raises_only_corrupt_record_error(garbage):
    try:
        kb.to_raftlog(garbage)
    except CorruptRecordError:
        pass


@pytest.mark.parametrize("size", [0, 55, 56, 63, 64, 8120, 8191, 8192, 8200, 70_000])
def test_varint_boundaries_agree_with_kafka_python(size):
    """Value lengths around the one-byte, two-byte and table limits, and a timestamp
    delta and offset delta past them, both directions."""
    recs = [(b"k" * min(size, 70), b"v" * size, 1_000, (("h", b"x" * size),)),
            (None, b"w", 1_000 + size * 1000, ())]
    data = _kp_build(recs, kb.NONE, (-1, -1, -1))
    [(pos, h)] = list(kb.iter_batches(data))
    got = kb.decode_records(data, pos, h)
    assert list(zip(got.keys, got.values, got.timestamps, got.headers)) == recs
    ours = kb.encode_batch([r[1] for r in recs], [r[0] for r in recs],
                           timestamps=[r[2] for r in recs], headers=[r[3] for r in recs],
                           offset_deltas=[0, size + 1])
    _, read = _kp_read(ours)
    assert read == [(0, 1_000, recs[0][0], recs[0][1], recs[0][3]),
                    (size + 1, recs[1][2], None, b"w", ())]


def test_timestamps_past_int64_are_a_corrupt_record_error():
    import struct

    data = bytearray(kb.encode_batch([b"a", b"b"], timestamps=[0, 20]))
    struct.pack_into(">q", data, 27, 2**63 - 10)  # base timestamp: the second record overflows
    with pytest.raises(CorruptRecordError):
        kb.to_raftlog(_recrc(data))
