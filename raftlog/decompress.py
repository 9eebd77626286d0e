"""Bounded decompression of a batch's records section: gzip, snappy, lz4, zstd.

Every codec is driven as a stream that yields at most :data:`CHUNK_BYTES` at a time
and stops as soon as the output passes the limit (``limits.DECOMPRESSED_BATCH_BYTES_MAX``
unless told), so a 10 MB "bomb" that would expand to gigabytes costs at most the limit
in memory and the time to produce it, and is refused with :class:`DecompressedTooLarge`
(a :class:`~raftlog.errors.CorruptRecordError`: CORRUPT_MESSAGE on the Kafka listener,
as a Kafka broker answers records it cannot read). A one-shot call such as
``lz4.frame.decompress`` or ``ZstdDecompressor().decompress`` is never used on
untrusted bytes: both allocate whatever the frame header claims (zstd ignores
``max_output_size`` when the frame states its content size).

Codec numbers are Kafka's (and raftlog's for the three it shares): 1 gzip, 2 snappy
(raw or xerial-framed, as Java writes it), 3 lz4 frame, 4 zstd. Pure functions: no I/O.
Untrusted bytes raise CorruptRecordError and nothing else.
"""

from __future__ import annotations

import io
import struct
import zlib

from raftlog.errors import CorruptRecordError
from raftlog.limits import DECOMPRESSED_BATCH_BYTES_MAX

GZIP, SNAPPY, LZ4, ZSTD = 1, 2, 3, 4
#: Output taken from a decompressor per step.
CHUNK_BYTES = 1024 * 1024
#: xerial's snappy framing (Java's SnappyOutputStream): magic, version, compatible version.
XERIAL_MAGIC = b"\x82SNAPPY\x00"
XERIAL_HEADER_BYTES = 16
_I32 = struct.Struct(">i")


class DecompressedTooLarge(CorruptRecordError):
    """The records section decompresses to more than the limit."""

    def __init__(self, limit: int):
        self.limit = limit
        super().__init__(f"records section decompresses to more than {limit} bytes (the "
                         f"decompressed batch limit, raftlog/limits.py): send smaller batches")


def decompress(codec: int, data, limit: int = DECOMPRESSED_BATCH_BYTES_MAX) -> bytes:
    """The decompressed bytes of ``data`` (codec numbers above), at most ``limit``.

    Raises:
        DecompressedTooLarge: the output would pass ``limit`` (decompression stopped there).
        CorruptRecordError: the bytes do not decompress, or an unknown codec.
    """
    assert limit > 0
    fn = _CODECS.get(codec)
    if fn is None:
        raise CorruptRecordError(f"unknown compression codec {codec}")
    try:
        out = fn(data, limit)
    except CorruptRecordError:
        raise
    except Exception as e:  # each codec raises its own types on garbage
        raise CorruptRecordError(f"records section does not decompress: {e}") from None
    assert len(out) <= limit
    return out


def _drain(step, limit: int) -> bytes:
    """Join the chunks ``step(room)`` yields (b"" when done) while they fit ``limit``."""
    chunks, total = [], 0
    while True:
        chunk = step(min(CHUNK_BYTES, limit - total + 1))
        if not chunk:
            return b"".join(chunks)
        total += len(chunk)
        if total > limit:
            raise DecompressedTooLarge(limit)
        chunks.append(chunk)


def _gzip(data, limit: int) -> bytes:
    # Members one after another, as Java's GZIPInputStream reads them.
    pending = [bytes(data)]
    d = zlib.decompressobj(wbits=31)

    def step(room: int) -> bytes:
        nonlocal d
        while pending:
            src = pending.pop()
            out = d.decompress(src, room)
            if d.eof:  # a member ended: what follows it is the next one
                if d.unused_data:  # (all that is left; unconsumed_tail may be stale)
                    pending.append(d.unused_data)
                    d = zlib.decompressobj(wbits=31)
            elif d.unconsumed_tail:
                pending.append(d.unconsumed_tail)
            if out:
                return out
        if not d.eof:
            raise CorruptRecordError("gzip records section is cut short")
        return b""

    return _drain(step, limit)


def _lz4(data, limit: int) -> bytes:
    import lz4.frame

    d = lz4.frame.LZ4FrameDecompressor()
    first = [bytes(data)]

    def step(room: int) -> bytes:
        src = first.pop() if first else b""
        if d.eof:
            return b""
        out = d.decompress(src, max_length=room)
        if not out and not d.eof:
            raise CorruptRecordError("lz4 records section is cut short")
        return out

    return _drain(step, limit)


def _zstd(data, limit: int) -> bytes:
    import zstandard

    data = bytes(data)
    reader = zstandard.ZstdDecompressor().stream_reader(io.BytesIO(data),
                                                        read_across_frames=True)
    with reader:
        out = _drain(reader.read, limit)
    if zstandard.frame_content_size(data) == len(out):
        return out  # one whole frame, as its header says
    # The stream reader stops silently where the input is cut; the output is known to
    # fit the limit now, so a one-shot pass may check that every frame ends.
    rest = data
    while rest:
        d = zstandard.ZstdDecompressor().decompressobj()
        d.decompress(rest)
        if not d.eof:
            raise CorruptRecordError("zstd records section is cut short")
        rest = d.unused_data
    return out


def _snappy(data, limit: int) -> bytes:
    """Raw snappy states its length up front: checked before decompressing. xerial's
    framing is a list of raw blocks, each checked against what is left."""
    import cramjam

    data = bytes(data)
    if not data.startswith(XERIAL_MAGIC):
        if cramjam.snappy.decompress_raw_len(data) > limit:
            raise DecompressedTooLarge(limit)
        return bytes(cramjam.snappy.decompress_raw(data))
    pos, out, total = XERIAL_HEADER_BYTES, [], 0
    while pos < len(data):
        if pos + 4 > len(data):
            raise CorruptRecordError("xerial snappy block length cut short")
        (n,) = _I32.unpack_from(data, pos)
        if n < 0 or pos + 4 + n > len(data):
            raise CorruptRecordError(f"xerial snappy block of {n} bytes overruns the data")
        block = data[pos + 4 : pos + 4 + n]
        if cramjam.snappy.decompress_raw_len(block) > limit - total:
            raise DecompressedTooLarge(limit)
        block = bytes(cramjam.snappy.decompress_raw(block))
        total += len(block)
        out.append(block)
        pos += 4 + n
    return b"".join(out)


_CODECS = {GZIP: _gzip, SNAPPY: _snappy, LZ4: _lz4, ZSTD: _zstd}

__all__ = ["decompress", "DecompressedTooLarge", "CHUNK_BYTES", "GZIP", "SNAPPY", "LZ4",
           "ZSTD"]
