"""raftlog/limits.py and raftlog/decompress.py without sockets: the limit table, the
Kafka codec's entry budget, and decompression that stops at the batch limit."""

from __future__ import annotations

import gzip
import resource
import struct
import zlib

import cramjam
import lz4.frame
import pytest
import zstandard

from raftlog import limits as L
from raftlog import records as rl
from raftlog.decompress import CHUNK_BYTES, DecompressedTooLarge, decompress
from raftlog.errors import CorruptRecordError
from raftlog.kafka import batch as kb
from raftlog.kafka.wire import RequestTooLarge, decode_request, encode_request
from raftlog.protocol import Api, BadRequest, Frame, parse_request

FETCH, METADATA, PRODUCE = 1, 3, 0


def test_the_table_names_every_limit_and_they_are_consistent():
    assert set(L.TABLE.values()) >= {L.ENTRIES_PER_REQUEST_MAX, L.DECOMPRESSED_BATCH_BYTES_MAX}
    assert L.DECOMPRESSED_BATCH_BYTES_MAX == rl.MAX_BATCH_BYTES == kb.MAX_BATCH_BYTES
    L.check("entries", 10, 10)
    with pytest.raises(L.LimitExceeded, match="11 entries exceed the limit of 10"):
        L.check("entries", 11, 10)


def _fetch_body(parts: int, topic: str = "t") -> dict:
    return {"replica_id": -1, "max_wait_ms": 0, "min_bytes": 0, "max_bytes": 1 << 20,
            "isolation_level": 0,
            "topics": [{"topic": topic, "partitions": [
                {"partition": 0, "fetch_offset": 0, "partition_max_bytes": 1 << 20}
                for _ in range(parts)]}]}


@pytest.mark.parametrize("version", [4, 12])
def test_a_kafka_fetch_over_the_entry_budget_is_refused_while_decoding(version):
    ok = encode_request(FETCH, version, 7, _fetch_body(L.ENTRIES_PER_REQUEST_MAX - 1))
    assert len(decode_request(ok[4:]).body["topics"][0]["partitions"]) == \
        L.ENTRIES_PER_REQUEST_MAX - 1
    big = encode_request(FETCH, version, 7, _fetch_body(L.ENTRIES_PER_REQUEST_MAX + 1))
    with pytest.raises(RequestTooLarge, match="split it"):
        decode_request(big[4:])


def test_the_budget_counts_every_array_of_the_request():
    # 2 topics x 5,000 partitions + the topics array itself: 10,002 entries
    body = _fetch_body(5_000)
    body["topics"] = [body["topics"][0], {**body["topics"][0], "topic": "u"}]
    with pytest.raises(RequestTooLarge):
        decode_request(encode_request(FETCH, 4, 1, body)[4:])


def test_a_million_entry_fetch_is_refused_from_its_length_prefix():
    # the 1,000,000-entry array is never read: a header that claims it is enough
    head = encode_request(FETCH, 4, 1, _fetch_body(1))[4:]
    one = encode_request(FETCH, 4, 1, _fetch_body(1))[4:]
    # rewrite the partitions count (int32 after the topic name) to 1,000,000 and pad
    i = one.index(b"\x00\x01t") + 3
    forged = one[:i] + struct.pack(">i", 1_000_000) + one[i + 4:] + bytes(28 * 1_000_000)
    assert head == one
    with pytest.raises(RequestTooLarge):
        decode_request(forged)


def test_responses_are_not_budgeted():
    from raftlog.kafka.wire import decode_response, encode_response
    body = {"throttle_time_ms": 0, "brokers": [], "cluster_id": None, "controller_id": 1,
            "topics": [{"error_code": 0, "name": "t", "is_internal": False, "partitions": [
                {"error_code": 0, "partition_index": i, "leader_id": 1, "replica_nodes": [1],
                 "isr_nodes": [1], "offline_replicas": []}
                for i in range(L.ENTRIES_PER_REQUEST_MAX + 5)]}]}
    frame = encode_response(METADATA, 1, 3, body)
    assert len(decode_response(METADATA, 1, frame[4:])[1]["topics"][0]["partitions"]) == \
        L.ENTRIES_PER_REQUEST_MAX + 5


def test_the_native_codec_takes_its_caps_from_the_table():
    part = ["t", 0, 0, 1024, -1]
    ok = Frame({"api": int(Api.FETCH), "v": 0, "id": 1,
                "parts": [part] * L.PARTITIONS_PER_FETCH_MAX}, b"")
    assert len(parse_request(ok).fields["parts"]) == L.PARTITIONS_PER_FETCH_MAX
    big = Frame({"api": int(Api.FETCH), "v": 0, "id": 1,
                 "parts": [part] * (L.PARTITIONS_PER_FETCH_MAX + 1)}, b"")
    with pytest.raises(BadRequest, match=f"more than {L.PARTITIONS_PER_FETCH_MAX}"):
        parse_request(big)


# --------------------------------------------------------------------------- decompression

LIMIT = 4 * CHUNK_BYTES + 123


def _bomb(codec: int, size: int) -> bytes:
    plain = bytes(size)
    if codec == kb.GZIP:
        return gzip.compress(plain)
    if codec == kb.LZ4:
        return lz4.frame.compress(plain)  # (stores the content size: a liar's header)
    if codec == kb.ZSTD:
        return zstandard.ZstdCompressor().compress(plain)  # content size in the header
    if codec == kb.SNAPPY:
        return bytes(cramjam.snappy.compress_raw(plain))
    raise AssertionError(codec)


CODECS = [kb.GZIP, kb.SNAPPY, kb.LZ4, kb.ZSTD]


@pytest.mark.parametrize("codec", CODECS)
def test_decompression_returns_what_fits_and_refuses_one_byte_more(codec):
    assert decompress(codec, _bomb(codec, LIMIT), LIMIT) == bytes(LIMIT)
    with pytest.raises(DecompressedTooLarge, match=f"more than {LIMIT} bytes"):
        decompress(codec, _bomb(codec, LIMIT + 1), LIMIT)


@pytest.mark.parametrize("codec", CODECS)
def test_a_bomb_stops_at_the_limit_in_memory(codec):
    """200 MB of zeros against the real 64 MiB limit: refused, and the process's peak
    RSS grows by less than the bomb (it would by 200 MB with one-shot calls)."""
    bomb = _bomb(codec, 200 * 1024 * 1024)
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    with pytest.raises(DecompressedTooLarge):
        decompress(codec, bomb)
    grown_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - peak
    assert grown_kib < 150 * 1024, grown_kib


def test_xerial_snappy_blocks_share_the_limit():
    block = bytes(cramjam.snappy.compress_raw(bytes(CHUNK_BYTES)))
    framed = kb._XERIAL + struct.pack(">ii", 1, 1) + (struct.pack(">i", len(block)) + block) * 5
    assert len(decompress(kb.SNAPPY, framed, 5 * CHUNK_BYTES)) == 5 * CHUNK_BYTES
    with pytest.raises(DecompressedTooLarge):
        decompress(kb.SNAPPY, framed, 5 * CHUNK_BYTES - 1)


@pytest.mark.parametrize("codec", CODECS)
def test_garbage_and_cut_short_input_are_corrupt_records(codec):
    good = _bomb(codec, 1000)
    for bad in (b"\x00garbage", good[: len(good) // 2]):
        with pytest.raises(CorruptRecordError):
            decompress(codec, bad, LIMIT)
    with pytest.raises(CorruptRecordError, match="unknown compression codec"):
        decompress(7, good, LIMIT)


def test_concatenated_gzip_members_are_read_as_one_stream():
    data = gzip.compress(b"ab") + gzip.compress(b"cd")
    assert decompress(kb.GZIP, data, 100) == b"abcd"
    # members longer than a step: the next one starts where the first ends
    big = gzip.compress(bytes(3 * CHUNK_BYTES)) * 2 + gzip.compress(b"z")
    assert decompress(kb.GZIP, big, LIMIT * 2) == bytes(6 * CHUNK_BYTES) + b"z"
    with pytest.raises(DecompressedTooLarge):
        decompress(kb.GZIP, gzip.compress(bytes(3 * CHUNK_BYTES)) * 2, 6 * CHUNK_BYTES - 1)
    assert zlib.decompress(gzip.compress(b"x"), wbits=31) == b"x"


def _native_bomb(codec: int) -> bytes:
    batch = bytearray(rl.encode_batch([b"v"], timestamp=1, compression=codec))
    h = rl.read_header(batch)
    region = _bomb(codec, rl.MAX_BATCH_BYTES + 1)
    # the same header over a region that expands past the limit, CRC recomputed
    out = bytearray(batch[: rl.HEADER_SIZE]) + region
    struct.pack_into("<i", out, rl.LENGTH_OFFSET, len(out) - rl.LOG_OVERHEAD)
    h = rl.read_header(out)
    struct.pack_into("<I", out, rl.CRC_OFFSET, rl.batch_crc(out, 0, h))
    return bytes(out)


@pytest.mark.parametrize("codec", [rl.GZIP, rl.LZ4, rl.ZSTD])
def test_native_batch_bomb_is_refused_by_decode_records(codec):
    buf = _native_bomb(codec)
    [(pos, h)] = list(rl.iter_batches(buf))
    with pytest.raises(CorruptRecordError, match="decompresses to more than"):
        rl.decode_records(buf, pos, h)


@pytest.mark.parametrize("codec", CODECS)
def test_kafka_batch_bomb_is_refused_by_to_raftlog(codec):
    batch = bytearray(kb.encode_batch([b"v"], timestamps=[1], compression=codec))
    section = _bomb(codec, rl.MAX_BATCH_BYTES + 1)
    out = bytearray(batch[: kb.HEADER_SIZE]) + section
    struct.pack_into(">i", out, 8, len(out) - kb.LOG_OVERHEAD)
    import crc32c
    struct.pack_into(">I", out, 17, crc32c.crc32c(bytes(out[kb.ATTRIBUTES_OFFSET:])))
    with pytest.raises(CorruptRecordError, match="decompresses to more than"):
        kb.to_raftlog(bytes(out))


def test_kafka_batch_limits_on_records_and_headers():
    hs = [tuple((f"h{i}", b"") for i in range(L.HEADERS_PER_RECORD_MAX + 1))]
    b = kb.encode_batch([b"v"], timestamps=[1], headers=hs)
    [(pos, h)] = list(kb.iter_batches(b))
    with pytest.raises(CorruptRecordError, match="headers, more than the limit"):
        kb.decode_records(b, pos, h)
    ok = kb.encode_batch([b"v"], timestamps=[1], headers=[hs[0][:-1]])
    [(pos, h)] = list(kb.iter_batches(ok))
    assert len(kb.decode_records(ok, pos, h).headers[0]) == L.HEADERS_PER_RECORD_MAX
    forged = bytearray(ok)
    struct.pack_into(">i", forged, 57, L.RECORDS_PER_BATCH_MAX + 1)
    struct.pack_into(">i", forged, 23, L.RECORDS_PER_BATCH_MAX + 1)
    with pytest.raises(CorruptRecordError, match="more than the limit"):
        kb.read_header(forged)


# --------------------------------------------------------------------------- native headers


def _native_frame(header: dict) -> bytes:
    import cbor2
    h = cbor2.dumps(header)
    return struct.pack("<II", 4 + len(h), len(h)) + h


def test_a_native_header_over_the_entry_budget_is_refused_before_decoding():
    from raftlog.cbor_scan import TooManyEntries, check_entries
    from raftlog.errors import RemoteProtocolError
    from raftlog.protocol import REQUEST_HEADER_ENTRIES_MAX, FrameDecoder
    huge = {"api": int(Api.FETCH), "v": 0, "id": 1, "parts": [["t", 0, 0, 1024, -1]] * 1_000_000}
    server = FrameDecoder(entries_max=REQUEST_HEADER_ENTRIES_MAX)
    server.receive_data(_native_frame(huge))
    with pytest.raises(RemoteProtocolError, match="more than 80000 entries.*split"):
        server.next_frame()
    # nested arrays add up: 100 lists of 1,000
    nested = {"api": 1, "parts": [[0] * 1000 for _ in range(100)]}
    with pytest.raises(TooManyEntries):
        import cbor2
        check_entries(cbor2.dumps(nested), REQUEST_HEADER_ENTRIES_MAX)
    # the largest legitimate fetch passes, and decodes as before
    ok = {"api": int(Api.FETCH), "v": 0, "id": 1,
          "parts": [[f"topic-{i}", 0, 0, 1024, -1] for i in range(L.PARTITIONS_PER_FETCH_MAX)]}
    server = FrameDecoder(entries_max=REQUEST_HEADER_ENTRIES_MAX)
    server.receive_data(_native_frame(ok))
    assert len(server.next_frame().header["parts"]) == L.PARTITIONS_PER_FETCH_MAX
    # a client's decoder (responses) has no budget
    client = FrameDecoder()
    client.receive_data(_native_frame({"parts": [[0, 1]] * 100_000}))
    assert len(client.next_frame().header["parts"]) == 100_000


def test_the_walk_leaves_malformed_cbor_to_the_decoder_and_refuses_indefinite_items():
    from raftlog.cbor_scan import TooManyEntries, check_entries
    check_entries(b"\x9a\x00\x00", 10)  # cut short: cbor2 will say so
    check_entries(b"\xfc", 10)  # reserved additional info
    with pytest.raises(TooManyEntries, match="indefinite"):
        check_entries(b"\x9f\x01\xff", 10)
    check_entries(b"\xa2\x61a\x01\x61b\x82\x01\x02", 4)  # {"a": 1, "b": [1, 2]}: 4 entries
    with pytest.raises(TooManyEntries):
        check_entries(b"\xa2\x61a\x01\x61b\x82\x01\x02", 3)


def test_native_batches_are_bounded_in_records_both_ways():
    with pytest.raises(ValueError, match="at most 1000000 records"):
        rl.encode_batch([b""] * (L.RECORDS_PER_BATCH_MAX + 1), timestamp=1)
    ok = bytearray(rl.encode_batch([b""] * 3, timestamp=1))
    # a forged header claiming more records than the limit: refused before decoding
    h = rl.read_header(ok)
    forged = h._replace(record_count=L.RECORDS_PER_BATCH_MAX + 1)
    with pytest.raises(CorruptRecordError, match="more than the limit"):
        rl.decode_records(bytes(ok), 0, forged)
