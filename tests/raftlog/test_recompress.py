"""A topic's compression.type: batches recompressed to the topic's codec (pure)."""

from __future__ import annotations

import pytest

from raftlog import records as rl
from raftlog.config import LogConfig
from raftlog.errors import ConfigError, CorruptRecordError
from raftlog.kafka import batch as kb
from raftlog.recompress import recompress

VALUES = [b"value-%d" % i * 20 for i in range(50)]


def _codecs(data) -> list:
    return [h.attributes & rl.COMPRESSION_MASK for _, h in rl.iter_batches(data)]


def test_native_batches_take_the_topic_codec_and_keep_their_records():
    data = (rl.encode_batch(VALUES, compression=rl.LZ4, producer_id=7, producer_epoch=1,
                            base_sequence=5)
            + rl.encode_batch(VALUES[:3]))
    for ctype, code in (("zstd", rl.ZSTD), ("gzip", rl.GZIP), ("uncompressed", 0),
                        ("lz4", rl.LZ4)):
        out = recompress(data, ctype)
        assert _codecs(out) == [code, code]  # (iter_batches checks every CRC)
        assert [r.value for r in rl.decode_batches(out)] == VALUES + VALUES[:3]
        heads = [h for _, h in rl.iter_batches(out)]
        assert (heads[0].producer_id, heads[0].base_sequence) == (7, 5)
    assert recompress(data, "producer") is data
    lz4 = rl.encode_batch(VALUES, compression=rl.LZ4)
    assert recompress(lz4, "lz4") is lz4  # nothing to change: the same bytes


def test_kafka_batches_keep_kafka_codecs_and_read_back():
    kafka = kb.encode_batch(VALUES, timestamps=[1000 + i for i in range(50)],
                            compression=kb.SNAPPY)
    data, n = kb.to_raftlog(kafka)
    out = recompress(data, "zstd")
    assert _codecs(out) == [kb.ZSTD]
    back = kb.from_raftlog(out)
    ((pos, h),) = kb.iter_batches(back)
    assert h.attributes & kb.COMPRESSION_MASK == kb.ZSTD
    assert kb.decode_records(back, pos, h).values == VALUES


def test_damage_is_not_hidden_and_snappy_is_no_topic_codec():
    data = bytearray(rl.encode_batch(VALUES, compression=rl.LZ4))
    data[-3] ^= 0xFF
    with pytest.raises(CorruptRecordError):
        recompress(bytes(data), "zstd")
    with pytest.raises(ConfigError, match="snappy"):
        LogConfig.from_dict({"compression.type": "snappy"})
    assert LogConfig.from_dict({"compression.type": "zstd"}).compression_type == "zstd"
