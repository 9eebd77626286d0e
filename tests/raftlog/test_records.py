"""Record batch format: round trips, edges, and fuzzing of untrusted bytes."""

from __future__ import annotations

import struct

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from raftlog import records as R
from raftlog.errors import CorruptRecordError
from raftlog.records import (
    CREATE_TIME,
    LOG_APPEND_TIME,
    decode_batch,
    decode_batches,
    encode_batch,
    iter_batches,
    read_header,
    verify_crc,
)

CODECS = [R.NO_COMPRESSION, R.LZ4, R.ZSTD, R.GZIP]


@pytest.mark.parametrize("codec", CODECS)
def test_round_trip_with_none_keys_values_headers(codec):
    values = [b"a", None, b"", b"x" * 1000]
    keys = [None, b"k", b"", None]
    headers = [None, [("h", b"v"), ("n", None)], [], [("only", b"")]]
    ts = [5, 3, 2**40, 7]
    b = encode_batch(
        values, keys, timestamps=ts, headers=headers, compression=codec, base_offset=10
    )
    recs = decode_batch(b, "t", 4)
    assert [r.value for r in recs] == values
    assert [r.key for r in recs] == keys
    assert [r.headers for r in recs] == [(), (("h", b"v"), ("n", None)), (), (("only", b""),)]
    assert [r.timestamp for r in recs] == ts
    assert [r.offset for r in recs] == [10, 11, 12, 13]
    assert {r.topic for r in recs} == {"t"} and {r.partition for r in recs} == {4}


def test_uniform_timestamp_and_null_keys_carry_no_arrays():
    b = encode_batch([b"v"] * 10, timestamp=1234)
    h = read_header(b)
    assert h.attributes & R.ATTR_UNIFORM_TS and h.attributes & R.ATTR_NULL_KEYS
    assert len(b) == R.HEADER_SIZE + 10 * 4 + 10  # only value lengths + values
    assert {r.timestamp for r in decode_batch(b)} == {1234}


def test_header_fields():
    b = encode_batch(
        [b"x", b"y"],
        timestamps=[100, 50],
        producer_id=7,
        producer_epoch=2,
        base_sequence=40,
        leader_epoch=3,
        base_offset=9,
    )
    h = read_header(b)
    assert (h.base_offset, h.leader_epoch, h.last_offset_delta, h.record_count) == (9, 3, 1, 2)
    assert (h.first_timestamp, h.max_timestamp) == (100, 100)
    assert (h.producer_id, h.producer_epoch, h.base_sequence, h.last_sequence) == (7, 2, 40, 41)
    assert h.size == len(b) and h.timestamp_type == CREATE_TIME


def test_stamp_does_not_change_crc():
    b = bytearray(encode_batch([b"v"] * 3))
    crc_before = read_header(b).crc
    R.stamp(b, 0, 123456, 9)
    h = read_header(b)
    assert (h.base_offset, h.leader_epoch, h.crc) == (123456, 9, crc_before)
    verify_crc(b, 0, h)
    assert [r.offset for r in decode_batch(bytes(b))] == [123456, 123457, 123458]


def test_log_append_time():
    b = bytearray(encode_batch([b"v"] * 3, timestamps=[1, 2, 3]))
    R.set_log_append_time(b, 0, read_header(b), 999)
    h = read_header(b)
    verify_crc(b, 0, h)
    assert h.timestamp_type == LOG_APPEND_TIME
    assert {r.timestamp for r in decode_batch(bytes(b))} == {999}


def test_one_mib_records_and_max_batch_size():
    big = b"z" * (1024 * 1024)
    recs = decode_batch(encode_batch([big, big], [b"k", None]))
    assert recs[0].value == big and recs[1].value == big
    with pytest.raises(ValueError, match="MAX_BATCH_BYTES"):
        encode_batch([b"z" * (R.MAX_BATCH_BYTES + 1)])


def test_empty_batch_is_refused():
    with pytest.raises(ValueError):
        encode_batch([])


def test_offset_deltas_keep_gaps():
    b = encode_batch(
        [b"a", b"b", b"c"], [b"1", b"2", b"3"], offset_deltas=[0, 5, 9], base_offset=100
    )
    assert [r.offset for r in decode_batch(b)] == [100, 105, 109]
    assert read_header(b).last_offset == 109


def test_decode_batches_skips_below_start_and_ignores_partial_tail():
    a = encode_batch([b"a"] * 5, base_offset=0)
    b = encode_batch([b"b"] * 5, base_offset=5)
    recs = decode_batches(a + b + b[:20], start_offset=3)
    assert [r.offset for r in recs] == [3, 4, 5, 6, 7, 8, 9]
    with pytest.raises(CorruptRecordError):
        decode_batches(a + b[:20], allow_partial=False)


def test_crc_mismatch_is_detected():
    b = bytearray(encode_batch([b"hello"]))
    b[-1] ^= 1
    with pytest.raises(CorruptRecordError, match="CRC mismatch"):
        decode_batch(bytes(b))


def test_lying_record_count_does_not_allocate():
    """A record count of 2**31-1 with a valid CRC must fail cleanly, not build huge arrays."""
    b = bytearray(encode_batch([b"v"]))
    struct.pack_into("<i", b, 57, 2**31 - 1)  # record_count
    struct.pack_into("<i", b, 23, 2**31 - 1)  # last_offset_delta
    R.set_log_append_time(b, 0, read_header(b), 1)  # recompute the CRC
    with pytest.raises(CorruptRecordError):
        decode_batch(bytes(b))


def test_lying_lengths_are_rejected():
    b = bytearray(encode_batch([b"abc", b"def"]))
    # value lengths start right after the header (uniform ts, null keys)
    struct.pack_into("<i", b, R.HEADER_SIZE, 10**6)
    R.set_log_append_time(b, 0, read_header(b), 1)
    with pytest.raises(CorruptRecordError, match="add up"):
        decode_batch(bytes(b))


_record = st.tuples(
    st.one_of(st.none(), st.binary(max_size=40)),
    st.one_of(st.none(), st.binary(max_size=20)),
    st.integers(min_value=0, max_value=2**45),
    st.lists(
        st.tuples(st.text(max_size=5), st.one_of(st.none(), st.binary(max_size=5))), max_size=2
    ),
)


@settings(max_examples=150, deadline=None)
@given(st.lists(_record, min_size=1, max_size=30), st.sampled_from(CODECS))
def test_round_trip_property(recs, codec):
    values = [r[0] for r in recs]
    keys = [r[1] for r in recs]
    ts = [r[2] for r in recs]
    headers = [r[3] for r in recs]
    data = encode_batch(values, keys, timestamps=ts, headers=headers, compression=codec)
    R.check_records(memoryview(data), 0, read_header(data))  # (what a leader asks)
    out = decode_batch(data)
    assert [(r.value, r.key, r.timestamp, list(r.headers)) for r in out] == list(
        zip(values, keys, ts, headers)
    )


def _decode_all(data: bytes) -> None:
    for pos, h in iter_batches(data, verify=True, allow_partial=True):
        R.decode_records(data, pos, h)
    decode_batches(data)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.binary(max_size=400))
def test_fuzz_arbitrary_bytes_raise_only_corrupt_record_error(data):
    try:
        _decode_all(data)
        decode_batch(data)
    except CorruptRecordError:
        pass


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.lists(_record, min_size=1, max_size=5),
    st.sampled_from(CODECS),
    st.data(),
)
def test_fuzz_mutated_valid_batches(recs, codec, data):
    """Bit flips, truncations and overwritten fields (with the CRC fixed up, so the
    records region parser is reached) raise only CorruptRecordError."""
    b = bytearray(
        encode_batch(
            [r[0] for r in recs],
            [r[1] for r in recs],
            timestamps=[r[2] for r in recs],
            headers=[r[3] for r in recs],
            compression=codec,
        )
    )
    kind = data.draw(st.sampled_from(["flip", "truncate", "field"]))
    if kind == "flip":
        i = data.draw(st.integers(0, len(b) - 1))
        b[i] ^= 1 << data.draw(st.integers(0, 7))
    elif kind == "truncate":
        b = b[: data.draw(st.integers(0, len(b) - 1))]
    else:
        pos = data.draw(st.integers(R.ATTRIBUTES_OFFSET, len(b) - 4))
        struct.pack_into("<i", b, pos, data.draw(st.integers(-(2**31), 2**31 - 1)))
        try:
            R.set_log_append_time(b, 0, read_header(b), 1)
        except CorruptRecordError:
            pass
    try:
        _decode_all(bytes(b))
        decode_batch(bytes(b))
    except CorruptRecordError:
        pass
    _check_agrees_with_decode(bytes(b))


def _check_agrees_with_decode(buf: bytes) -> None:
    """The leader's check of a batch (``check_records``, on a view) refuses exactly the
    batches a consumer could not decode."""
    try:
        batches = list(iter_batches(buf, verify=True, allow_partial=True))
    except CorruptRecordError:
        return
    for pos, h in batches:
        try:
            R.decode_records(buf, pos, h)
            decodes = True
        except CorruptRecordError:
            decodes = False
        try:
            R.check_records(memoryview(buf), pos, h)
            passes = True
        except CorruptRecordError:
            passes = False
        assert passes == decodes, (h, buf.hex())


def _recrc(b: bytearray) -> bytes:
    struct.pack_into("<I", b, R.CRC_OFFSET, R.batch_crc(b, 0, read_header(b)))
    return bytes(b)


def lying_batches() -> dict:
    """Batches with a valid CRC whose records region does not parse, by kind."""
    plain = bytearray(encode_batch([b"abc", b"de"]))
    lengths = bytearray(plain)
    struct.pack_into("<i", lengths, len(lengths) - 5 - 8, 40)  # a value length past the end
    headers = bytearray(encode_batch([b"v"], headers=[[("h", b"x")]]))
    headers[R.RECORDS_OFFSET + 8] = 0xFF  # (value length, blob length, then CBOR garbage)
    compressed = bytearray(encode_batch([b"v" * 50], compression=R.LZ4))
    compressed[R.RECORDS_OFFSET + 4:] = bytes(len(compressed) - R.RECORDS_OFFSET - 4)
    kafka = bytearray(plain)
    struct.pack_into("<h", kafka, R.ATTRIBUTES_OFFSET,
                     read_header(kafka).attributes | R.ATTR_KAFKA_RECORDS)
    return {k: _recrc(v) for k, v in
            {"lengths": lengths, "headers": headers, "lz4": compressed,
             "kafka-records": kafka}.items()}


@pytest.mark.parametrize("kind", ["lengths", "headers", "lz4", "kafka-records"])
def test_check_records_refuses_a_region_that_does_not_parse(kind):
    data = lying_batches()[kind]
    h = read_header(data)
    R.verify_crc(data, 0, h)  # (the CRC holds: only the region lies)
    with pytest.raises(CorruptRecordError):
        R.decode_records(data, 0, h)
    with pytest.raises(CorruptRecordError):
        R.check_records(memoryview(data), 0, h)


def test_restamp_producer_moves_a_batch_to_another_producer_id_with_a_valid_crc():
    data = R.encode_batch([b"a", b"b"], producer_id=7, producer_epoch=1, base_sequence=3)
    out = R.restamp_producer(data, 9, 0, 11)
    h = R.read_header(out)
    R.verify_crc(out, 0, h)
    assert (h.producer_id, h.producer_epoch, h.base_sequence) == (9, 0, 11)
    assert [r.value for r in R.decode_batch(out)] == [b"a", b"b"]
    with pytest.raises(CorruptRecordError):
        R.restamp_producer(data + data, 9, 0, 11)  # exactly one batch


@pytest.mark.parametrize("codec", [0, 1, 3, 4])
def test_check_records_accepts_kafka_format_batches_on_a_view(codec):
    """A batch in Kafka's records format (what the Kafka listener stores; a native
    client may send one too) passes the leader's check, compressed or not."""
    from raftlog.kafka import batch as kb

    data, _n = kb.to_raftlog(kb.encode_batch([b"v1", None], timestamps=[1, 2],
                                             compression=codec))
    h = read_header(data)
    assert h.attributes & R.ATTR_KAFKA_RECORDS
    R.check_records(memoryview(data), 0, h)
    assert [r.value for r in decode_batches(data)] == [b"v1", None]


def _native_compressed(codec: int, region: bytes, n: int) -> bytes:
    """A native batch of ``n`` records whose (compressed) records region is ``region``."""
    b = bytearray(encode_batch([b""] * n, compression=codec))
    b[R.RECORDS_OFFSET:] = region
    struct.pack_into("<i", b, R.LENGTH_OFFSET, len(b) - R.LENGTH_OFFSET - 4)
    return _recrc(b)


def test_check_records_decompresses_a_bounded_multiple_of_the_batch():
    """The leader's check never expands a batch past CHECK_EXPANSION_MAX times its size
    (plus CHECK_DECOMPRESSED_MIN): a zstd bomb and a valid but very repetitive big batch
    are both let through unchecked (False: a consumer's own bound decides), an ordinary
    compressed batch is checked (True), and a broken frame is refused."""
    import zstandard

    ordinary = encode_batch([b"%d" % i * 20 for i in range(2000)], compression=R.ZSTD)
    assert R.check_records(memoryview(ordinary), 0, read_header(ordinary)) is True
    repetitive = encode_batch([b"x" * 1000] * 3000, compression=R.ZSTD)  # 3 MB -> KBs
    assert len(repetitive) * R.CHECK_EXPANSION_MAX < 3_000_000
    assert R.check_records(memoryview(repetitive), 0, read_header(repetitive)) is False
    assert len(decode_batches(repetitive)) == 3000  # (valid: a consumer reads it)
    bomb = _native_compressed(R.ZSTD, zstandard.ZstdCompressor().compress(bytes(80 << 20)), 1)
    assert len(bomb) < 10_000
    assert R.check_records(memoryview(bomb), 0, read_header(bomb)) is False
    with pytest.raises(CorruptRecordError):
        decode_batches(bomb)  # (the consumer's bound: DECOMPRESSED_BATCH_BYTES_MAX)
    broken = _native_compressed(R.ZSTD, b"\x28\xb5\x2f\xfd" + bytes(64), 1)
    with pytest.raises(CorruptRecordError):
        R.check_records(memoryview(broken), 0, read_header(broken))


def test_check_records_lets_a_big_kafka_format_batch_through_unchecked():
    """Kafka-format batches parse record by record (~1 us each in Python): the check
    takes at most CHECK_KAFKA_RECORDS_MAX of them, a bigger one goes unchecked."""
    from raftlog.kafka import batch as kb

    n = R.CHECK_KAFKA_RECORDS_MAX + 1
    data, _n = kb.to_raftlog(kb.encode_batch([b"v"] * n, timestamps=[1] * n))
    assert R.check_records(memoryview(data), 0, read_header(data)) is False
    small, _n = kb.to_raftlog(kb.encode_batch([b"v"] * 10, timestamps=[1] * 10))
    assert R.check_records(memoryview(small), 0, read_header(small)) is True
