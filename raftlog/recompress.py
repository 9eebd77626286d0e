"""A topic's ``compression.type`` (Kafka's): the batches a leader appends are stored in
the topic's codec, whatever their producer used; ``producer`` keeps each as it came.

Pure and per batch: the records region is decompressed (bounded: raftlog/decompress.py)
and compressed again with the target codec, and the header's attributes, length and
CRC are rewritten; offsets, timestamps, producer id and sequence are untouched (so
idempotent-producer checks see the same batch). A batch of Kafka records
(``records.ATTR_KAFKA_RECORDS``) keeps Kafka's codec numbers and framing (a Kafka
consumer reads it back), a raftlog batch raftlog's.
"""

from __future__ import annotations

import struct

import crc32c as _crc32c

from raftlog import records as rl
from raftlog.decompress import decompress as bounded_decompress
from raftlog.kafka import batch as kb

#: compression.type -> (raftlog codec, Kafka codec)
_CODECS = {"uncompressed": (rl.NO_COMPRESSION, kb.NONE), "gzip": (rl.GZIP, kb.GZIP),
           "lz4": (rl.LZ4, kb.LZ4), "zstd": (rl.ZSTD, kb.ZSTD)}
_I32 = struct.Struct("<i")
_I16 = struct.Struct("<h")
_U32 = struct.Struct("<I")


def recompress(data: bytes, compression_type: str) -> bytes:
    """``data`` (raftlog batches) with every batch in the codec ``compression_type``
    ("producer": unchanged). The same object when nothing changes.

    Raises:
        CorruptRecordError: a batch that does not parse or decompress.
    """
    if compression_type == "producer":
        return data
    native, kafka = _CODECS[compression_type]
    out, pos, changed = [], 0, False
    view = memoryview(data)
    while pos < len(data):
        h = rl.read_header(data, pos)
        end = pos + h.size
        attrs = h.attributes
        is_kafka = attrs & rl.ATTR_KAFKA_RECORDS
        have, want = attrs & rl.COMPRESSION_MASK, kafka if is_kafka else native
        if have == want:
            out.append(view[pos:end])
            pos = end
            continue
        rl.verify_crc(data, pos, h)  # (a fresh CRC must not hide damage)
        region = view[pos + rl.HEADER_SIZE:end]
        plain = bounded_decompress(have, region) if have else bytes(region)
        if not want:
            new = plain
        elif is_kafka:
            new = kb._compress(want, plain)
        else:
            new = rl._compress(want, plain)
        head = bytearray(view[pos:pos + rl.HEADER_SIZE])
        _I32.pack_into(head, rl.LENGTH_OFFSET, rl.HEADER_SIZE - rl.LOG_OVERHEAD + len(new))
        _I16.pack_into(head, rl.ATTRIBUTES_OFFSET, (attrs & ~rl.COMPRESSION_MASK) | want)
        crc = _crc32c.crc32c(new, _crc32c.crc32c(bytes(head[rl.ATTRIBUTES_OFFSET:])))
        _U32.pack_into(head, rl.CRC_OFFSET, crc)
        out += (bytes(head), new)
        changed = True
        pos = end
    return b"".join(out) if changed else data
