"""Record batches: the unit of produce, storage, replication and fetch.

Byte layout (little-endian; full description in docs/format.md)::

    offset  size  field
    0       8     base_offset         i64  stamped by the leader on append
    8       4     length              i32  bytes after this field (batch size - 12)
    12      4     leader_epoch        i32  stamped by the leader on append
    16      1     magic               i8   MAGIC (format version)
    17      4     crc                 u32  CRC32C of bytes [21, end)
    21      2     attributes          i16  see ATTR_* below
    23      4     last_offset_delta   i32
    27      8     first_timestamp     i64  ms since the epoch
    35      8     max_timestamp       i64
    43      8     producer_id         i64  -1 when not idempotent
    51      2     producer_epoch      i16
    53      4     base_sequence       i32
    57      4     record_count        i32
    61            records region (compressed as a whole when compression is set)

Because the CRC starts at ``attributes``, the leader stamps ``base_offset`` and
``leader_epoch`` without recomputing it.

Records region, before compression, for N records -- fixed-width arrays first so
that encoding and decoding cost a few C calls per batch, never a Python loop per
record::

    [i32 x N offset deltas]        only if ATTR_OFFSET_DELTAS (after compaction)
    [i32 or i64 x N ts deltas]     absent if ATTR_UNIFORM_TS; i64 if ATTR_WIDE_TS
    [i32 x N key lengths]          absent if ATTR_NULL_KEYS; -1 means None
    i32 x N value lengths          -1 means None (a tombstone)
    [u32 n + n bytes CBOR headers] only if ATTR_HEADERS: a list of N lists of
                                   [key str, value bytes|None] pairs
    keys, concatenated
    values, concatenated
"""

from __future__ import annotations

import struct
import sys
from array import array
from collections import namedtuple
from collections.abc import Iterable, Iterator, Sequence
from itertools import accumulate, compress, repeat
from operator import add, ge

import cbor2
import crc32c as _crc32c

from raftlog.decompress import DecompressedTooLarge
from raftlog.decompress import decompress as bounded_decompress
from raftlog.errors import CorruptRecordError
from raftlog.limits import DECOMPRESSED_BATCH_BYTES_MAX, RECORDS_PER_BATCH_MAX

MAGIC = 1

HEADER = struct.Struct("<qiibIhiqqqhii")
HEADER_SIZE = HEADER.size  # 61
BASE_OFFSET_OFFSET = 0
LENGTH_OFFSET = BASE_OFFSET_OFFSET + 8
LEADER_EPOCH_OFFSET = LENGTH_OFFSET + 4
MAGIC_OFFSET = LEADER_EPOCH_OFFSET + 4
CRC_OFFSET = MAGIC_OFFSET + 1
ATTRIBUTES_OFFSET = CRC_OFFSET + 4
LAST_OFFSET_DELTA_OFFSET = ATTRIBUTES_OFFSET + 2
FIRST_TIMESTAMP_OFFSET = LAST_OFFSET_DELTA_OFFSET + 4
MAX_TIMESTAMP_OFFSET = FIRST_TIMESTAMP_OFFSET + 8
RECORDS_OFFSET = HEADER_SIZE
LOG_OVERHEAD = LENGTH_OFFSET + 4  # bytes before `length` counts: base_offset + length
assert RECORDS_OFFSET == 61

_BASE_OFFSET = struct.Struct("<q")
_LEADER_EPOCH = struct.Struct("<i")
_MAX_TS = struct.Struct("<q")
_U32 = struct.Struct("<I")
_LENGTH = struct.Struct("<i")

# attributes
COMPRESSION_MASK = 0x07
NO_COMPRESSION, GZIP, LZ4, ZSTD = 0, 1, 3, 4
COMPRESSION_NAMES = {"none": NO_COMPRESSION, "gzip": GZIP, "lz4": LZ4, "zstd": ZSTD}
ATTR_LOG_APPEND_TIME = 0x08
#: the batch belongs to a transaction (KIP-98): its records are undecided until a
#: marker of the same producer closes them; producer id and epoch are set
ATTR_TRANSACTIONAL = 0x10
#: a control batch (always transactional too): one transaction marker record
#: (raftlog/txn_markers.py), never a consumer's record
ATTR_CONTROL = 0x20
ATTR_OFFSET_DELTAS = 0x40
ATTR_HEADERS = 0x80
ATTR_UNIFORM_TS = 0x100
ATTR_WIDE_TS = 0x200
ATTR_NULL_KEYS = 0x400
#: the records region is a Kafka record batch v2 records section, stored as the Kafka
#: listener received it (raftlog.kafka.batch); bits 0-2 are then Kafka's codec numbers
ATTR_KAFKA_RECORDS = 0x800
ATTR_KNOWN = 0xFFF

CREATE_TIME, LOG_APPEND_TIME = 0, 1

#: Largest batch we will build or accept (before and after decompression).
MAX_BATCH_BYTES = 64 * 1024 * 1024
_I32_MAX = 2**31 - 1
_BIG_ENDIAN = sys.byteorder == "big"

NO_PRODUCER_ID = -1
NO_PRODUCER_EPOCH = -1
NO_SEQUENCE = -1


class Record(namedtuple("Record", "topic partition offset timestamp key value headers")):
    """One consumed record. A tuple, so a batch decodes with C-level calls only.

    ``headers`` is a tuple of ``(str, bytes | None)`` pairs (empty when none).
    """

    __slots__ = ()


_new_record = tuple.__new__


_BATCH_HEADER_FIELDS = (
    "base_offset length leader_epoch magic crc attributes last_offset_delta "
    "first_timestamp max_timestamp producer_id producer_epoch base_sequence record_count"
)


class BatchHeader(namedtuple("BatchHeader", _BATCH_HEADER_FIELDS)):
    """The fixed header of one batch, parsed but not CRC-checked. A tuple: built with
    one C-level call per batch (a frozen dataclass pays a setattr per field)."""

    __slots__ = ()

    @property
    def size(self) -> int:
        """Bytes of the whole batch on disk and on the wire."""
        return self.length + LOG_OVERHEAD

    @property
    def last_offset(self) -> int:
        return self.base_offset + self.last_offset_delta

    @property
    def next_offset(self) -> int:
        return self.base_offset + self.last_offset_delta + 1

    @property
    def compression(self) -> int:
        return self.attributes & COMPRESSION_MASK

    @property
    def timestamp_type(self) -> int:
        return LOG_APPEND_TIME if self.attributes & ATTR_LOG_APPEND_TIME else CREATE_TIME

    @property
    def is_transactional(self) -> bool:
        return bool(self.attributes & ATTR_TRANSACTIONAL)

    @property
    def is_control(self) -> bool:
        return bool(self.attributes & ATTR_CONTROL)

    @property
    def last_sequence(self) -> int:
        if self.base_sequence < 0:
            return NO_SEQUENCE
        return (self.base_sequence + self.last_offset_delta) % (_I32_MAX + 1)


def read_header(buf, pos: int = 0) -> BatchHeader:
    """Parse and sanity-check the header of the batch at ``buf[pos:]``.

    Checks only what the header alone can tell (magic, length bounds, record
    count vs. offset delta); the CRC is checked by :func:`verify_crc`.

    Raises:
        CorruptRecordError: fewer than HEADER_SIZE bytes, or an impossible field.
    """
    if len(buf) - pos < HEADER_SIZE:
        raise CorruptRecordError(
            f"batch header needs {HEADER_SIZE} bytes, {len(buf) - pos} available at {pos}"
        )
    h = BatchHeader(*HEADER.unpack_from(buf, pos))
    if h.magic != MAGIC:
        raise CorruptRecordError(f"unknown batch magic {h.magic} at position {pos}")
    if h.length < HEADER_SIZE - LOG_OVERHEAD or h.length > MAX_BATCH_BYTES:
        raise CorruptRecordError(f"impossible batch length {h.length} at position {pos}")
    if h.record_count < 0 or h.last_offset_delta < 0 or h.last_offset_delta + 1 < h.record_count:
        raise CorruptRecordError(
            f"record count {h.record_count} does not fit last offset delta "
            f"{h.last_offset_delta} at position {pos}"
        )
    if h.base_offset < 0:
        raise CorruptRecordError(f"negative base offset {h.base_offset} at position {pos}")
    if h.attributes & ~ATTR_KNOWN & 0xFFFF:
        raise CorruptRecordError(f"unknown attribute bits {h.attributes:#x} at position {pos}")
    if h.attributes & (ATTR_TRANSACTIONAL | ATTR_CONTROL):
        check_transactional_fields(h, pos)
    return h


def check_transactional_fields(h, pos: int = 0) -> None:
    """The rules of a transactional or control batch header (raftlog's or Kafka's:
    both have these fields and bits): a producer id and epoch; a control batch is
    transactional, holds one record at offset delta 0 and has no sequence.

    Raises:
        CorruptRecordError: a rule is broken.
    """
    if h.producer_id < 0 or h.producer_epoch < 0:
        raise CorruptRecordError(
            f"transactional batch at position {pos} has producer id {h.producer_id} epoch "
            f"{h.producer_epoch}: a transaction needs both")
    if h.attributes & ATTR_CONTROL:
        if not h.attributes & ATTR_TRANSACTIONAL:
            raise CorruptRecordError(f"control batch at position {pos} is not transactional")
        if h.record_count != 1 or h.last_offset_delta != 0:
            raise CorruptRecordError(
                f"control batch at position {pos} holds {h.record_count} records (last "
                f"offset delta {h.last_offset_delta}): a marker batch holds exactly one")
        if h.base_sequence != NO_SEQUENCE:
            raise CorruptRecordError(
                f"control batch at position {pos} has sequence {h.base_sequence}, not -1")


def batch_crc(buf, pos: int, header: BatchHeader) -> int:
    """CRC32C of the covered part of the batch at ``pos`` (attributes to end)."""
    end = pos + header.size
    if end > len(buf):
        raise CorruptRecordError(
            f"batch at {pos} claims {header.size} bytes, {len(buf) - pos} available"
        )
    with memoryview(buf) as view:
        return _crc32c.crc32c(view[pos + ATTRIBUTES_OFFSET : end])


def verify_crc(buf, pos: int, header: BatchHeader) -> None:
    """Raise CorruptRecordError unless the stored CRC matches the bytes."""
    actual = batch_crc(buf, pos, header)
    if actual != header.crc:
        raise CorruptRecordError(
            f"CRC mismatch in batch at offset {header.base_offset} (position {pos}): "
            f"stored {header.crc:#010x}, computed {actual:#010x}"
        )


def iter_batches(
    buf, *, verify: bool = True, allow_partial: bool = False
) -> Iterator[tuple[int, BatchHeader]]:
    """Yield ``(position, header)`` for every batch in ``buf``.

    Args:
        verify: check each batch's CRC.
        allow_partial: stop quietly at a trailing partial batch (a fetch response
            may end mid-batch, as in Kafka) instead of raising.
    """
    pos, end = 0, len(buf)
    while pos < end:
        if allow_partial and end - pos < HEADER_SIZE:
            return
        h = read_header(buf, pos)
        if pos + h.size > end:
            if allow_partial:
                return
            raise CorruptRecordError(
                f"batch at position {pos} claims {h.size} bytes, {end - pos} available"
            )
        if verify:
            verify_crc(buf, pos, h)
        yield pos, h
        pos += h.size


def stamp(buf: bytearray, pos: int, base_offset: int, leader_epoch: int) -> None:
    """Set base offset and leader epoch in place; the CRC does not cover them."""
    _BASE_OFFSET.pack_into(buf, pos + BASE_OFFSET_OFFSET, base_offset)
    _LEADER_EPOCH.pack_into(buf, pos + LEADER_EPOCH_OFFSET, leader_epoch)


_PRODUCER_FIELDS = struct.Struct("<qhi")  # producer id, producer epoch, base sequence
PRODUCER_ID_OFFSET = MAX_TIMESTAMP_OFFSET + 8


def restamp_producer(data: bytes, producer_id: int, producer_epoch: int,
                     base_sequence: int) -> bytes:
    """The one batch in ``data`` under another producer id, epoch and first sequence
    (the CRC covers them: recomputed). For an idempotent producer that had to take a
    new producer id while this batch waited to be (re)sent."""
    buf = bytearray(data)
    h = read_header(buf, 0)
    if h.size != len(buf):
        raise CorruptRecordError(f"batch claims {h.size} bytes, buffer has {len(buf)}")
    _PRODUCER_FIELDS.pack_into(buf, PRODUCER_ID_OFFSET, producer_id, producer_epoch, base_sequence)
    with memoryview(buf) as view:
        crc = _crc32c.crc32c(view[ATTRIBUTES_OFFSET : h.size])
    _U32.pack_into(buf, CRC_OFFSET, crc)
    return bytes(buf)


def set_log_append_time(buf: bytearray, pos: int, header: BatchHeader, now_ms: int) -> None:
    """Turn a batch into LogAppendTime with ``now_ms`` and recompute its CRC."""
    attrs = header.attributes | ATTR_LOG_APPEND_TIME
    struct.pack_into("<h", buf, pos + ATTRIBUTES_OFFSET, attrs)
    _MAX_TS.pack_into(buf, pos + MAX_TIMESTAMP_OFFSET, now_ms)
    with memoryview(buf) as view:
        crc = _crc32c.crc32c(view[pos + ATTRIBUTES_OFFSET : pos + header.size])
    _U32.pack_into(buf, pos + CRC_OFFSET, crc)


# --------------------------------------------------------------------------- encode


def _i32(values: Iterable[int]) -> bytes:
    a = array("i", values)
    if _BIG_ENDIAN:
        a.byteswap()
    return a.tobytes()


def _lengths(items: Sequence[bytes | None]) -> tuple[array, bytes]:
    """Lengths array (-1 for None) and the concatenated payload."""
    if None in items:
        lens = array("i", [-1 if x is None else len(x) for x in items])
        blob = b"".join(x for x in items if x is not None)
    else:
        lens = array("i", map(len, items))
        blob = b"".join(items)
    return lens, blob


def _compress(codec: int, data: bytes) -> bytes:
    if codec == LZ4:
        import lz4.frame

        return lz4.frame.compress(data, store_size=True)
    if codec == ZSTD:
        import zstandard

        return zstandard.ZstdCompressor(level=1).compress(data)
    if codec == GZIP:
        import gzip

        return gzip.compress(data, compresslevel=1)
    raise ValueError(f"unknown compression codec {codec}")


def _decompress(codec: int, data, limit: int | None = None) -> bytes:
    """The records region decompressed, at most ``limit`` (DECOMPRESSED_BATCH_BYTES_MAX)
    bytes (raftlog/decompress.py: a bomb stops there)."""
    if codec not in (LZ4, ZSTD, GZIP):
        raise CorruptRecordError(f"unknown compression codec {codec}")
    return bounded_decompress(codec, data, limit or DECOMPRESSED_BATCH_BYTES_MAX)


def compression_code(name: str | int | None) -> int:
    """Map 'none'/'lz4'/'zstd'/'gzip' (or a code) to the attribute code."""
    if name is None:
        return NO_COMPRESSION
    if isinstance(name, int):
        if name not in COMPRESSION_NAMES.values():
            raise ValueError(f"unknown compression code {name}")
        return name
    try:
        return COMPRESSION_NAMES[name.lower()]
    except KeyError:
        raise ValueError(
            f"unknown compression_type {name!r}; expected one of {sorted(COMPRESSION_NAMES)}"
        ) from None


def encode_batch(
    values: Sequence[bytes | None],
    keys: Sequence[bytes | None] | None = None,
    *,
    timestamp: int | None = None,
    timestamps: Sequence[int] | None = None,
    headers: Sequence[Sequence[tuple[str, bytes | None]] | None] | None = None,
    compression: int = NO_COMPRESSION,
    base_offset: int = 0,
    leader_epoch: int = -1,
    producer_id: int = NO_PRODUCER_ID,
    producer_epoch: int = NO_PRODUCER_EPOCH,
    base_sequence: int = NO_SEQUENCE,
    offset_deltas: Sequence[int] | None = None,
    timestamp_type: int = CREATE_TIME,
    transactional: bool = False,
    control: bool = False,
) -> bytes:
    """Build one batch from parallel sequences.

    Args:
        values: record values (bytes or None for a tombstone).
        keys: record keys, or None when no record has a key.
        timestamp: one timestamp (ms) for every record; used when ``timestamps``
            is None (then the batch carries no timestamp array at all).
        timestamps: per-record timestamps (ms).
        headers: per-record header lists (or None), or None for no headers.
        offset_deltas: strictly increasing offset deltas starting at 0 (only
            compaction writes them); default ``range(n)``.
        transactional: set ATTR_TRANSACTIONAL (needs a producer id and epoch).
        control: set ATTR_CONTROL (and ATTR_TRANSACTIONAL): a marker batch; use
            :func:`encode_control_batch`.

    Returns:
        The batch bytes, CRC set. Nothing is durable: this is pure encoding.
    """
    n = len(values)
    if n == 0:
        raise ValueError("a batch needs at least one record")
    if n > RECORDS_PER_BATCH_MAX:
        raise ValueError(f"a batch holds at most {RECORDS_PER_BATCH_MAX} records, not {n} "
                         "(raftlog/limits.py): use a smaller batch_size")
    attrs = compression | (ATTR_LOG_APPEND_TIME if timestamp_type == LOG_APPEND_TIME else 0)
    if transactional or control:
        if producer_id < 0 or producer_epoch < 0:
            raise ValueError(f"a transactional batch needs a producer id and epoch, not "
                             f"{producer_id}/{producer_epoch}")
        attrs |= ATTR_TRANSACTIONAL
    if control:
        if n != 1 or base_sequence != NO_SEQUENCE or offset_deltas is not None:
            raise ValueError("a control batch holds one record and no sequence")
        attrs |= ATTR_CONTROL
    parts: list[bytes] = []
    if offset_deltas is not None:
        assert len(offset_deltas) == n and offset_deltas[0] == 0
        attrs |= ATTR_OFFSET_DELTAS
        parts.append(_i32(offset_deltas))
        last_delta = offset_deltas[-1]
    else:
        last_delta = n - 1
    if timestamps is None:
        first_ts = max_ts = int(timestamp) if timestamp is not None else 0
        attrs |= ATTR_UNIFORM_TS
    else:
        assert len(timestamps) == n
        first_ts, max_ts = timestamps[0], max(timestamps)
        deltas = array("q", map(int.__sub__, timestamps, repeat(first_ts)))
        if min(deltas) >= -(2**31) and max(deltas) <= _I32_MAX:
            deltas = array("i", deltas)
        else:
            attrs |= ATTR_WIDE_TS
        if _BIG_ENDIAN:
            deltas.byteswap()
        parts.append(deltas.tobytes())
    if keys is None or keys.count(None) == n:
        attrs |= ATTR_NULL_KEYS
        key_blob = b""
    else:
        assert len(keys) == n
        key_lens, key_blob = _lengths(keys)
        if _BIG_ENDIAN:
            key_lens.byteswap()
        parts.append(key_lens.tobytes())
    value_lens, value_blob = _lengths(values)
    if _BIG_ENDIAN:
        value_lens.byteswap()
    parts.append(value_lens.tobytes())
    if headers is not None and any(headers):
        assert len(headers) == n
        attrs |= ATTR_HEADERS
        blob = cbor2.dumps([[list(kv) for kv in h] if h else [] for h in headers])
        parts.append(_U32.pack(len(blob)))
        parts.append(blob)
    parts.append(key_blob)
    parts.append(value_blob)
    region = b"".join(parts)
    if compression:
        region = _compress(compression, region)
    body = (
        struct.pack(
            "<hiqqqhii",
            attrs,
            last_delta,
            first_ts,
            max_ts,
            producer_id,
            producer_epoch,
            base_sequence,
            n,
        )
        + region
    )
    size = RECORDS_OFFSET + len(region)
    if size > MAX_BATCH_BYTES:
        raise ValueError(f"batch of {size} bytes exceeds MAX_BATCH_BYTES {MAX_BATCH_BYTES}")
    prefix = struct.pack(
        "<qiibI", base_offset, size - LOG_OVERHEAD, leader_epoch, MAGIC, _crc32c.crc32c(body)
    )
    return prefix + body


# --------------------------------------------------------------------------- decode


def _take_array(region, pos: int, typecode: str, n: int) -> tuple[array, int]:
    a = array(typecode)
    end = pos + n * a.itemsize
    if end > len(region):
        raise CorruptRecordError(f"records region too short for {n} x {typecode} at {pos}")
    a.frombytes(region[pos:end])
    if _BIG_ENDIAN:
        a.byteswap()
    return a, end


def _slices(blob, lens: array, base: int):
    """Per-record slices of blob from a lengths array (-1 = None). C-level loops."""
    if min(lens) >= 0:
        ends = list(accumulate(lens, initial=base))
        return list(map(blob.__getitem__, map(slice, ends, ends[1:]))), ends[-1]
    present = list(map(ge, lens, repeat(0)))
    real = [x if x >= 0 else 0 for x in lens]
    ends = list(accumulate(real, initial=base))
    out = list(map(blob.__getitem__, map(slice, ends, ends[1:])))
    for i, ok in enumerate(present):
        if not ok:
            out[i] = None
    return out, ends[-1]


def decode_records(
    buf, pos: int, header: BatchHeader, topic: str = "", partition: int = 0
) -> list[Record]:
    """Decode the records of the batch at ``buf[pos:]`` (CRC already verified).

    Raises:
        CorruptRecordError: the records region does not parse.
    """
    return _parse_records(buf, pos, header, topic, partition, True)


#: What the leader's check may decompress of one batch: this much per compressed byte,
#: plus CHECK_DECOMPRESSED_MIN (so an SDK batch, 256 KiB by default, always fits). A
#: 2.5 KB zstd "bomb" cost the event loop 57 ms at the full 64 MiB limit (gzip: 194 ms
#: for an 80 KB one); bounded so, a batch costs at most ~15-50 ns per byte it carries.
CHECK_EXPANSION_MAX = 16
CHECK_DECOMPRESSED_MIN = 1 << 20
#: A batch in Kafka's records format (the Kafka listener's; no native client writes one)
#: is parsed record by record in Python, ~1 us each: checked up to this many records.
CHECK_KAFKA_RECORDS_MAX = 4096


def check_records(buf, pos: int, header: BatchHeader) -> bool:
    """Check that the records region of the batch at ``buf[pos:]`` (CRC already
    verified) parses as :func:`decode_records` would parse it, without building the
    records: what a leader asks of a client's batch before it appends it, so that no
    consumer ever meets a batch it cannot decode. A few C calls per batch for the SDK's
    batches (lengths arrays); a compressed one is decompressed, one with headers or in
    Kafka's records format is parsed record by record.

    A compressed batch that expands past ``CHECK_EXPANSION_MAX`` times its size (and
    ``CHECK_DECOMPRESSED_MIN``) is not decompressed further here: such a batch may be
    valid (highly repetitive data in a big batch), so it is let through unchecked --
    False -- and a consumer's own bound (limits.DECOMPRESSED_BATCH_BYTES_MAX) decides;
    the check never costs the leader more than a bounded multiple of the bytes sent.
    So is a batch in Kafka's records format of more than ``CHECK_KAFKA_RECORDS_MAX``
    records (the Kafka listener checked its own batches already).

    Returns:
        True when checked whole, False when let through unchecked (above).
    Raises:
        CorruptRecordError: the records region does not parse.
    """
    budget = None
    if header.attributes & ATTR_KAFKA_RECORDS and header.record_count > CHECK_KAFKA_RECORDS_MAX:
        return False
    if header.attributes & COMPRESSION_MASK:
        size = header.size - RECORDS_OFFSET
        budget = min(DECOMPRESSED_BATCH_BYTES_MAX,
                     max(CHECK_DECOMPRESSED_MIN, CHECK_EXPANSION_MAX * size))
    try:
        _parse_records(buf, pos, header, "", 0, False, budget)
    except DecompressedTooLarge as e:
        if budget is not None and e.limit == budget < DECOMPRESSED_BATCH_BYTES_MAX:
            return False
        raise
    return True


def _parse_records(buf, pos: int, header: BatchHeader, topic: str, partition: int,
                   build: bool, decompressed_max: int | None = None) -> list[Record]:
    n = header.record_count
    if n > RECORDS_PER_BATCH_MAX:  # (a Python object per record: bounded before any)
        raise CorruptRecordError(f"batch at offset {header.base_offset} holds {n} records, "
                                 f"more than the limit of {RECORDS_PER_BATCH_MAX} "
                                 "(raftlog/limits.py)")
    attrs = header.attributes
    end = pos + header.size
    region = buf[pos + RECORDS_OFFSET : end]
    if attrs & ATTR_KAFKA_RECORDS:
        from raftlog.kafka import batch as kafka_batch  # (it imports this module)

        return kafka_batch.section_records(region, header, topic, partition,
                                           decompressed_max)
    if attrs & COMPRESSION_MASK:
        region = _decompress(attrs & COMPRESSION_MASK, region, decompressed_max)
    elif not isinstance(region, bytes) and (build or attrs & ATTR_HEADERS):
        region = bytes(region)  # (a check reads a view's arrays in place)
    # Each record needs at least a 4-byte value length: a lying count fails here,
    # before any allocation proportional to it.
    if n * 4 > len(region):
        raise CorruptRecordError(f"record count {n} does not fit a {len(region)}-byte region")
    try:
        return _decode_region(region, n, header, topic, partition, build)
    except CorruptRecordError:
        raise
    except (ValueError, TypeError, IndexError, OverflowError, cbor2.CBORDecodeError) as e:
        raise CorruptRecordError(
            f"records region of batch at offset {header.base_offset}: {e}"
        ) from None


def _decode_region(
    region, n: int, header: BatchHeader, topic: str, partition: int, build: bool = True
) -> list[Record]:
    """The records of a (decompressed) native records region; with ``build`` False,
    only every check (an empty list)."""
    attrs = header.attributes
    p = 0
    base = header.base_offset
    if attrs & ATTR_OFFSET_DELTAS:
        deltas, p = _take_array(region, p, "i", n)
        if n and (
            deltas[0] != 0
            or deltas[-1] != header.last_offset_delta
            or any(map(ge, deltas, deltas[1:]))
        ):
            raise CorruptRecordError("offset deltas are not increasing from 0 to last_offset_delta")
        offsets = map(add, repeat(base), deltas)
    else:
        if header.last_offset_delta != n - 1:
            raise CorruptRecordError("last_offset_delta does not match record count")
        offsets = range(base, base + n)
    if attrs & ATTR_UNIFORM_TS:
        timestamps = repeat(
            header.max_timestamp if attrs & ATTR_LOG_APPEND_TIME else header.first_timestamp, n
        )
    else:
        ts, p = _take_array(region, p, "q" if attrs & ATTR_WIDE_TS else "i", n)
        if attrs & ATTR_LOG_APPEND_TIME:
            timestamps = repeat(header.max_timestamp, n)
        else:
            timestamps = map(add, repeat(header.first_timestamp), ts)
    key_lens = None
    if not attrs & ATTR_NULL_KEYS:
        key_lens, p = _take_array(region, p, "i", n)
    value_lens, p = _take_array(region, p, "i", n)
    headers = repeat((), n)
    if attrs & ATTR_HEADERS:
        if p + 4 > len(region):
            raise CorruptRecordError("headers length missing")
        (hlen,) = _U32.unpack_from(region, p)
        p += 4
        if p + hlen > len(region):
            raise CorruptRecordError("headers overrun the records region")
        headers = _parse_headers(cbor2.loads(region[p : p + hlen]), n)
        p += hlen
    # Validate lengths against what is left before slicing anything.
    # (a -1 adds -1 to the sum: counted back only when there is one -- array.count
    # costs four times min and sum together)
    lo = min(value_lens) if n else 0
    total = sum(value_lens) + (value_lens.count(-1) if lo == -1 else 0) if lo >= -1 else -1
    if key_lens is not None:
        klo = min(key_lens) if n else 0
        ktotal = sum(key_lens) + (key_lens.count(-1) if klo == -1 else 0) if klo >= -1 else -1
    else:
        klo, ktotal = 0, 0
    if lo < -1 or klo < -1 or p + ktotal + total != len(region):
        raise CorruptRecordError(
            f"record lengths do not add up to the records region ({len(region)} bytes)"
        )
    if not build:
        return []
    if key_lens is None:
        keys = repeat(None, n)
    else:
        keys, p = _slices(region, key_lens, p)
    values, p = _slices(region, value_lens, p)
    return list(
        map(
            _new_record,
            repeat(Record, n),
            zip(repeat(topic, n), repeat(partition, n), offsets, timestamps, keys, values, headers),
        )
    )


def _parse_headers(obj, n: int) -> list[tuple]:
    if not isinstance(obj, list) or len(obj) != n:
        raise CorruptRecordError("headers are not a list with one entry per record")
    out = []
    for h in obj:
        if not isinstance(h, list):
            raise CorruptRecordError("record headers are not a list")
        pairs = []
        for kv in h:
            if (
                not isinstance(kv, list)
                or len(kv) != 2
                or not isinstance(kv[0], str)
                or not (kv[1] is None or isinstance(kv[1], bytes))
            ):
                raise CorruptRecordError("a header is not a [str, bytes|None] pair")
            pairs.append((kv[0], kv[1]))
        out.append(tuple(pairs))
    return out


def encode_control_batch(marker, *, producer_id: int, producer_epoch: int,
                         timestamp: int, base_offset: int = 0,
                         leader_epoch: int = -1) -> bytes:
    """The control batch of one transaction marker (raftlog/txn_markers.py): key and
    value in Kafka's bytes, ATTR_TRANSACTIONAL | ATTR_CONTROL, sequence -1."""
    from raftlog.txn_markers import encode_marker

    key, value = encode_marker(marker)
    return encode_batch([value], [key], timestamp=timestamp, base_offset=base_offset,
                        leader_epoch=leader_epoch, producer_id=producer_id,
                        producer_epoch=producer_epoch, transactional=True, control=True)


def read_control_marker(buf, pos: int, header: BatchHeader):
    """The :class:`~raftlog.txn_markers.EndTxnMarker` of the (CRC-checked) control
    batch at ``buf[pos:]``.

    Raises:
        CorruptRecordError: not a control batch, or its record is not a marker.
    """
    from raftlog.txn_markers import decode_marker

    if not header.attributes & ATTR_CONTROL:
        raise CorruptRecordError(f"batch at offset {header.base_offset} is not a control batch")
    (rec,) = decode_records(buf, pos, header)
    return decode_marker(rec.key, rec.value)


def decode_batch(buf, topic: str = "", partition: int = 0) -> list[Record]:
    """Verify and decode exactly one batch (``buf`` holds it and nothing else)."""
    h = read_header(buf, 0)
    if h.size != len(buf):
        raise CorruptRecordError(f"batch claims {h.size} bytes, buffer has {len(buf)}")
    verify_crc(buf, 0, h)
    return decode_records(buf, 0, h, topic, partition)


def decode_batches(
    buf, topic: str = "", partition: int = 0, *, start_offset: int = 0, allow_partial: bool = True
) -> list[Record]:
    """Verify and decode every batch in ``buf`` (a fetch body), dropping records
    below ``start_offset`` (a fetch may return a batch that starts earlier).

    A trailing partial batch is ignored when ``allow_partial`` (fetch responses
    are cut at a byte limit, as in Kafka). Control batches (transaction markers) are
    skipped: they are no records of the partition's data, as for Kafka's consumers.
    """
    out: list[Record] = []
    for pos, h in iter_batches(buf, verify=True, allow_partial=allow_partial):
        if h.last_offset < start_offset or h.record_count == 0 or h.attributes & ATTR_CONTROL:
            continue  # (a transaction marker is not a record of the partition's data)
        recs = decode_records(buf, pos, h, topic, partition)
        if h.base_offset < start_offset:
            recs = list(compress(recs, map(ge, map(_offset_of, recs), repeat(start_offset))))
        if out:
            out.extend(recs)
        else:
            out = recs
    return out


def _offset_of(r: Record) -> int:
    return r[2]


def batch_count_and_bytes(buf) -> tuple[int, int]:
    """(records, bytes) of a buffer of whole batches, without decoding."""
    n = 0
    for _, h in iter_batches(buf, verify=False):
        n += h.record_count
    return n, len(buf)


__all__ = [
    "MAGIC",
    "HEADER_SIZE",
    "Record",
    "BatchHeader",
    "read_header",
    "verify_crc",
    "iter_batches",
    "stamp",
    "encode_batch",
    "encode_control_batch",
    "read_control_marker",
    "check_transactional_fields",
    "decode_batch",
    "decode_batches",
    "decode_records",
    "check_records",
    "compression_code",
]
