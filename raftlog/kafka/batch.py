"""Kafka record batch v2 (magic 2): decode, encode, and conversion to and from raftlog batches.

Byte layout (big-endian), the same 61-byte header shape as raftlog's (records.py)::

    offset  size  field
    0       8     base_offset
    8       4     batch_length            bytes after this field
    12      4     partition_leader_epoch
    16      1     magic                   2
    17      4     crc                     CRC-32C of bytes [21, end)
    21      2     attributes              bits 0-2 compression (0 none, 1 gzip, 2 snappy,
                                          3 lz4, 4 zstd), 3 timestamp type (1 LogAppendTime),
                                          4 transactional, 5 control
    23      4     last_offset_delta
    27      8     base_timestamp
    35      8     max_timestamp
    43      8     producer_id
    51      2     producer_epoch
    53      4     base_sequence
    57      4     record_count
    61            records (the whole section compressed when compression is set)

A record is ``varint length, int8 attributes, varlong timestamp_delta, varint
offset_delta, varint key_length (-1 null), key, varint value_length, value, varint
header_count, (varint key_length, key utf-8, varint value_length, value)*``.

Conversion happens once per batch at the Kafka listener's edge: offsets (as deltas),
timestamps and their type, keys, values, headers and the producer id, epoch and base
sequence survive both ways, so a record produced through either listener is
consumed unchanged through the other. Kafka's record format needs a Python loop per
record (varints); it is kept to one tight function each way. Snappy, which raftlog's
storage does not have, is stored as lz4.

Untrusted bytes raise :class:`~raftlog.errors.CorruptRecordError` and nothing else.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator
from typing import NamedTuple

import crc32c as _crc32c

from raftlog import records as rl
from raftlog.decompress import XERIAL_MAGIC as _XERIAL
from raftlog.decompress import decompress as bounded_decompress
from raftlog.errors import CorruptRecordError
from raftlog.limits import (
    DECOMPRESSED_BATCH_BYTES_MAX,
    HEADERS_PER_RECORD_MAX,
    RECORDS_PER_BATCH_MAX,
)

MAGIC = 2
HEADER = struct.Struct(">qiibIhiqqqhii")
HEADER_SIZE = HEADER.size  # 61
ATTRIBUTES_OFFSET = 21
LOG_OVERHEAD = 12
assert HEADER_SIZE == 61

NONE, GZIP, SNAPPY, LZ4, ZSTD = 0, 1, 2, 3, 4
COMPRESSION_MASK = 0x07
TIMESTAMP_TYPE = 0x08
TRANSACTIONAL = 0x10
CONTROL = 0x20

#: Largest batch (and decompressed records section) accepted, as raftlog's.
MAX_BATCH_BYTES = rl.MAX_BATCH_BYTES

_TO_RAFTLOG_CODEC = {NONE: rl.NO_COMPRESSION, GZIP: rl.GZIP, SNAPPY: rl.LZ4, LZ4: rl.LZ4,
                     ZSTD: rl.ZSTD}
_FROM_RAFTLOG_CODEC = {rl.NO_COMPRESSION: NONE, rl.GZIP: GZIP, rl.LZ4: LZ4, rl.ZSTD: ZSTD}
_I32 = struct.Struct(">i")


class KafkaBatchHeader(NamedTuple):
    base_offset: int
    batch_length: int
    partition_leader_epoch: int
    magic: int
    crc: int
    attributes: int
    last_offset_delta: int
    base_timestamp: int
    max_timestamp: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    record_count: int

    @property
    def size(self) -> int:
        return self.batch_length + LOG_OVERHEAD


class KafkaRecords(NamedTuple):
    """The records of one batch as parallel lists."""

    offset_deltas: list
    timestamps: list  # absolute, ms
    keys: list
    values: list
    headers: list  # per record: tuple of (str, bytes | None)


# --------------------------------------------------------------------------- varints


def _zz32(n: int) -> int:
    return ((n << 1) ^ (n >> 31)) & 0xFFFFFFFF


def _zz64(n: int) -> int:
    return ((n << 1) ^ (n >> 63)) & 0xFFFFFFFFFFFFFFFF


def _uv(n: int) -> bytes:
    if n < 0x80:
        return _SMALL[n]
    out = bytearray()
    while n >= 0x80:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


_SMALL = [bytes((i,)) for i in range(0x80)]


def _read_varint(data, pos: int) -> tuple[int, int]:
    """Zigzag varint (up to 64 bits) at ``pos``: (value, next position)."""
    b = data[pos]
    if b < 0x80:
        return (b >> 1) ^ -(b & 1), pos + 1
    value, shift = b & 0x7F, 7
    while True:
        pos += 1
        b = data[pos]
        value |= (b & 0x7F) << shift
        if b < 0x80:
            return (value >> 1) ^ -(value & 1), pos + 1
        shift += 7
        if shift > 63:
            raise CorruptRecordError(f"varint longer than 10 bytes at {pos}")


# --------------------------------------------------------------------------- compression


def _decompress(codec: int, data, limit: int | None = None) -> bytes:
    """The records section decompressed into a bounded buffer (raftlog/decompress.py):
    at most ``limit`` (DECOMPRESSED_BATCH_BYTES_MAX) bytes, a bomb stops there."""
    return bounded_decompress(codec, data, limit or DECOMPRESSED_BATCH_BYTES_MAX)


def _compress(codec: int, data: bytes) -> bytes:
    if codec == LZ4:
        import lz4.frame

        # Kafka's Java LZ4 reader wants independent blocks and no content size
        return lz4.frame.compress(data, block_linked=False, store_size=False)
    if codec == SNAPPY:
        import cramjam

        blocks = [_XERIAL, struct.pack(">ii", 1, 1)]
        for i in range(0, len(data), 32 * 1024):
            block = bytes(cramjam.snappy.compress_raw(data[i : i + 32 * 1024]))
            blocks.append(_I32.pack(len(block)))
            blocks.append(block)
        return b"".join(blocks)
    if codec in (GZIP, ZSTD):
        return rl._compress(_TO_RAFTLOG_CODEC[codec], data)
    raise ValueError(f"unknown compression codec {codec}")


# --------------------------------------------------------------------------- decode


def read_header(buf, pos: int = 0) -> KafkaBatchHeader:
    """Parse and sanity-check the Kafka batch header at ``buf[pos:]``."""
    if len(buf) - pos < HEADER_SIZE:
        raise CorruptRecordError(
            f"Kafka batch header needs {HEADER_SIZE} bytes, {len(buf) - pos} available")
    h = KafkaBatchHeader(*HEADER.unpack_from(buf, pos))
    if h.magic != MAGIC:
        raise CorruptRecordError(
            f"record batch magic {h.magic} at {pos}: only magic 2 (Kafka 0.11+) is accepted")
    if h.batch_length < HEADER_SIZE - LOG_OVERHEAD or h.batch_length > MAX_BATCH_BYTES:
        raise CorruptRecordError(f"impossible batch length {h.batch_length} at {pos}")
    if h.record_count < 0 or h.last_offset_delta < 0 or (
            h.record_count and h.last_offset_delta + 1 < h.record_count):
        raise CorruptRecordError(f"record count {h.record_count} does not fit last offset "
                                 f"delta {h.last_offset_delta} at {pos}")
    if h.record_count > RECORDS_PER_BATCH_MAX:
        raise CorruptRecordError(f"batch at {pos} holds {h.record_count} records, more than "
                                 f"the limit of {RECORDS_PER_BATCH_MAX} (raftlog/limits.py): "
                                 "send smaller batches")
    if h.attributes & (TRANSACTIONAL | CONTROL):
        rl.check_transactional_fields(h, pos)
    return h


def iter_batches(buf, *, allow_partial: bool = False) -> Iterator[tuple[int, KafkaBatchHeader]]:
    """(position, header) of every batch in ``buf``, CRC-checked. A trailing partial
    batch is an error unless ``allow_partial``."""
    pos, end = 0, len(buf)
    with memoryview(buf) as view:
        while pos < end:
            if allow_partial and end - pos < HEADER_SIZE:
                return
            h = read_header(buf, pos)
            stop = pos + h.size
            if stop > end:
                if allow_partial:
                    return
                raise CorruptRecordError(f"batch at {pos} claims {h.size} bytes, "
                                         f"{end - pos} available")
            crc = _crc32c.crc32c(view[pos + ATTRIBUTES_OFFSET : stop])
            if crc != h.crc:
                raise CorruptRecordError(f"CRC-32C mismatch in batch at {pos}: stored "
                                         f"{h.crc:#010x}, computed {crc:#010x}")
            yield pos, h
            pos = stop


def decode_records(buf, pos: int, h: KafkaBatchHeader) -> KafkaRecords:
    """The records of the (CRC-checked) batch at ``buf[pos:]``."""
    data = buf[pos + HEADER_SIZE : pos + h.size]
    codec = h.attributes & COMPRESSION_MASK
    data = _decompress(codec, data) if codec else bytes(data)
    n = h.record_count
    if n * 7 > len(data):  # a record takes at least 7 bytes: a lying count fails here
        raise CorruptRecordError(f"record count {n} does not fit {len(data)} bytes")
    try:
        return _parse_records(data, n, h.base_timestamp)
    except CorruptRecordError:
        raise
    except (IndexError, ValueError, UnicodeDecodeError) as e:
        raise CorruptRecordError(f"records of batch at offset {h.base_offset}: {e}") from None


#: zigzag value of every one-byte varint: the common case decodes with one lookup
_ZZ1 = [(b >> 1) ^ -(b & 1) for b in range(0x80)]


def _parse_records(data: bytes, n: int, base_ts: int) -> KafkaRecords:
    # One loop per record, varints inlined (one-byte ones are a table lookup): this is
    # the only per-record Python work of a Kafka produce.
    rv, zz = _read_varint, _ZZ1
    offs, tss, keys, vals, hdrs = [], [], [], [], []
    add_o, add_t, add_k, add_v, add_h = (offs.append, tss.append, keys.append, vals.append,
                                         hdrs.append)
    pos, end = 0, len(data)
    no_headers = ()
    for _ in range(n):
        b = data[pos]
        if b < 0x80:
            length = zz[b]
            pos += 1
        elif data[pos + 1] < 0x80:  # two bytes: records of 64..8191 bytes
            length = (b & 0x7F) | (data[pos + 1] << 7)
            length = (length >> 1) ^ -(length & 1)
            pos += 2
        else:
            length, pos = rv(data, pos)
        stop = pos + length
        if length < 6 or stop > end:
            raise CorruptRecordError(f"record length {length} at {pos} overruns the batch")
        b = data[pos + 1]  # (pos: record attributes, unused)
        if b < 0x80:
            ts = zz[b]
            pos += 2
        else:
            ts, pos = rv(data, pos + 1)
        b = data[pos]
        if b < 0x80:
            od = zz[b]
            pos += 1
        else:
            od, pos = rv(data, pos)
        b = data[pos]
        if b < 0x80:
            kl = zz[b]
            pos += 1
        else:
            kl, pos = rv(data, pos)
        if kl < 0:
            key = None
        else:
            key = data[pos : pos + kl]
            pos += kl
        b = data[pos]
        if b < 0x80:
            vl = zz[b]
            pos += 1
        elif data[pos + 1] < 0x80:
            vl = (b & 0x7F) | (data[pos + 1] << 7)
            vl = (vl >> 1) ^ -(vl & 1)
            pos += 2
        else:
            vl, pos = rv(data, pos)
        if vl < 0:
            value = None
        else:
            value = data[pos : pos + vl]
            pos += vl
        if data[pos] == 0:
            headers = no_headers
            pos += 1
        else:
            hc, pos = rv(data, pos)
            headers, pos = _parse_headers(data, pos, hc, stop)
        if pos != stop:
            raise CorruptRecordError(f"record ends at {pos}, its length says {stop}")
        add_o(od)
        add_t(ts)
        add_k(key)
        add_v(value)
        add_h(headers)
    if pos != end:
        raise CorruptRecordError(f"{end - pos} bytes after the last record")
    if base_ts:
        tss = [base_ts + t for t in tss]
    return KafkaRecords(offs, tss, keys, vals, hdrs)


def _parse_headers(data: bytes, pos: int, hc: int, stop: int) -> tuple[tuple, int]:
    rv = _read_varint
    if hc < 0 or hc > stop - pos:
        raise CorruptRecordError(f"header count {hc} overruns its record")
    if hc > HEADERS_PER_RECORD_MAX:
        raise CorruptRecordError(f"record has {hc} headers, more than the limit of "
                                 f"{HEADERS_PER_RECORD_MAX} (raftlog/limits.py)")
    pairs = []
    for _ in range(hc):
        hkl, pos = rv(data, pos)
        if hkl < 0 or pos + hkl > stop:
            raise CorruptRecordError("a record header key is null or overruns its record")
        hk = data[pos : pos + hkl].decode()
        pos += hkl
        hvl, pos = rv(data, pos)
        if hvl < 0:
            hv = None
        else:
            hv = data[pos : pos + hvl]
            pos += hvl
        pairs.append((hk, hv))
    return tuple(pairs), pos


# --------------------------------------------------------------------------- encode


#: zigzag varint encodings of 0..8191 (one or two bytes): record lengths, key and value
#: lengths, offset and timestamp deltas of ordinary records come from this table
_ZZ_TABLE_SIZE = 8192
_SMALL_ZZ = [bytes((n << 1,)) if n < 64 else bytes((((n << 1) & 0x7F) | 0x80, n >> 6))
             for n in range(_ZZ_TABLE_SIZE)]


def _zzb(n: int) -> bytes:
    """Zigzag varint of a (32- or 64-bit) int, small non-negative ones from a table."""
    if 0 <= n < _ZZ_TABLE_SIZE:
        return _SMALL_ZZ[n]
    return _uv(((n << 1) ^ (n >> 63)) & 0xFFFFFFFFFFFFFFFF)


def _bytes_field(b) -> bytes:
    if b is None:
        return b"\x01"
    n = len(b)
    return (_SMALL_ZZ[n] if n < _ZZ_TABLE_SIZE else _uv(_zz32(n))) + b


def _encode_headers(hs) -> bytes:
    parts = [_zzb(len(hs))]
    for hk, hv in hs:
        parts.append(_bytes_field(hk.encode()))
        parts.append(_bytes_field(hv))
    return b"".join(parts)


def _encode_records(offset_deltas, timestamps, keys, values, headers, base_ts: int) -> bytes:
    zzb, field, small, uv = _zzb, _bytes_field, _SMALL_ZZ, _uv
    out = []
    append = out.append
    join = b"".join
    for od, ts, k, v, hs in zip(offset_deltas, timestamps, keys, values, headers):
        body = join((b"\x00", zzb(ts - base_ts), zzb(od), field(k), field(v),
                     _encode_headers(hs) if hs else b"\x00"))
        n = len(body)
        append(small[n] if n < 8192 else uv(_zz32(n)))
        append(body)
    return join(out)


def encode_batch(values, keys=None, *, timestamps, headers=None, offset_deltas=None,
                 base_offset: int = 0, partition_leader_epoch: int = -1,
                 compression: int = NONE, log_append_time: int | None = None,
                 producer_id: int = -1, producer_epoch: int = -1,
                 base_sequence: int = -1, transactional: bool = False,
                 control: bool = False) -> bytes:
    """One Kafka record batch v2 from parallel sequences (CRC set).

    ``log_append_time`` set makes a LogAppendTime batch whose max timestamp is it.
    ``transactional`` and ``control`` set those attribute bits (a control batch is
    transactional too: :func:`encode_control_batch`). Pure encoding: nothing is durable.
    """
    n = len(values)
    if n == 0:
        raise ValueError("a batch needs at least one record")
    flags = (TRANSACTIONAL if transactional or control else 0) | (CONTROL if control else 0)
    if flags and (producer_id < 0 or producer_epoch < 0):
        raise ValueError(f"a transactional batch needs a producer id and epoch, not "
                         f"{producer_id}/{producer_epoch}")
    if control and (n != 1 or base_sequence != -1):
        raise ValueError("a control batch holds one record and no sequence")
    keys = keys if keys is not None else [None] * n
    headers = headers if headers is not None else [()] * n
    offset_deltas = offset_deltas if offset_deltas is not None else range(n)
    base_ts = timestamps[0]
    section = _encode_records(offset_deltas, timestamps, keys, values, headers, base_ts)
    if compression:
        section = _compress(compression, section)
    attrs = compression | flags
    max_ts = max(timestamps)
    if log_append_time is not None:
        attrs |= TIMESTAMP_TYPE
        max_ts = log_append_time
    body = struct.pack(">hiqqqhii", attrs, offset_deltas[-1], base_ts, max_ts, producer_id,
                       producer_epoch, base_sequence, n) + section
    size = HEADER_SIZE + len(section)
    if size > MAX_BATCH_BYTES:
        raise ValueError(f"batch of {size} bytes exceeds MAX_BATCH_BYTES")
    return struct.pack(">qiibI", base_offset, size - LOG_OVERHEAD, partition_leader_epoch,
                       MAGIC, _crc32c.crc32c(body)) + body


def encode_control_batch(marker, *, producer_id: int, producer_epoch: int, timestamp: int,
                         base_offset: int = 0, partition_leader_epoch: int = -1) -> bytes:
    """The Kafka control batch of one transaction marker (raftlog/txn_markers.py), as
    Kafka's brokers write it: transactional and control bits, sequence -1, one record."""
    from raftlog.txn_markers import encode_marker

    key, value = encode_marker(marker)
    return encode_batch([value], [key], timestamps=[timestamp], base_offset=base_offset,
                        partition_leader_epoch=partition_leader_epoch,
                        producer_id=producer_id, producer_epoch=producer_epoch,
                        control=True)


def read_control_marker(buf, pos: int, h: KafkaBatchHeader):
    """The :class:`~raftlog.txn_markers.EndTxnMarker` of the (CRC-checked) Kafka
    control batch at ``buf[pos:]``.

    Raises:
        CorruptRecordError: not a control batch, or its record is not a marker.
    """
    from raftlog.txn_markers import decode_marker

    if not h.attributes & CONTROL:
        raise CorruptRecordError(f"batch at offset {h.base_offset} is not a control batch")
    r = decode_records(buf, pos, h)
    if len(r.keys) != 1 or r.offset_deltas[0] != 0:
        raise CorruptRecordError("a control batch holds one record at offset delta 0")
    return decode_marker(r.keys[0], r.values[0])


# --------------------------------------------------------------------------- conversion


def _walk(data, n: int) -> tuple[int, int] | None:
    """Check a plain records section of ``n`` ordinary records byte for byte -- offset
    deltas 0..n-1, no headers -- without building anything. Returns the (lowest,
    highest) timestamp delta, or None for any other shape or any damage: the full
    parser (:func:`_parse_records`) then decides, and names the fault.

    This is the whole per-record cost of a Kafka produce: the section is stored as sent.
    Varints of one and two bytes are inlined; longer ones (offset deltas past 8191)
    take the general reader.
    """
    zz, rv = _ZZ1, _read_varint
    pos, end = 0, len(data)
    lo = hi = None
    try:
        for i in range(n):
            b = data[pos]
            if b < 0x80:
                length = zz[b]
                pos += 1
            elif data[pos + 1] < 0x80:
                length = (b & 0x7F) | (data[pos + 1] << 7)
                length = (length >> 1) ^ -(length & 1)
                pos += 2
            else:
                length, pos = rv(data, pos)
            stop = pos + length
            if length < 6 or stop > end:
                return None
            p = pos + 1  # (record attributes: unused, as in Kafka)
            b = data[p]
            if b < 0x80:
                t = zz[b]
                p += 1
            else:
                t, p = rv(data, p)
            if lo is None:
                lo = hi = t
            elif t < lo:
                lo = t
            elif t > hi:
                hi = t
            b = data[p]
            if b < 0x80:
                od = zz[b]
                p += 1
            elif data[p + 1] < 0x80:
                od = (b & 0x7F) | (data[p + 1] << 7)
                od = (od >> 1) ^ -(od & 1)
                p += 2
            else:
                od, p = rv(data, p)
            if od != i:
                return None
            for _field in (0, 1):  # key, then value: varint length (-1 null) and bytes
                b = data[p]
                if b < 0x80:
                    fl = zz[b]
                    p += 1
                elif data[p + 1] < 0x80:
                    fl = (b & 0x7F) | (data[p + 1] << 7)
                    fl = (fl >> 1) ^ -(fl & 1)
                    p += 2
                else:
                    fl, p = rv(data, p)
                if fl > 0:
                    p += fl
                elif fl < -1:
                    return None
            if p + 1 != stop or data[p] != 0:  # no headers, and the record ends here
                return None
            pos = stop
    except (IndexError, CorruptRecordError):
        return None
    if pos != end or lo is None:
        return None
    return lo, hi


_I64_MIN, _I64_MAX = -(2**63), 2**63 - 1
#: raftlog's header without its first five fields, and those five (records.HEADER split
#: at the CRC): a verbatim Kafka section gets a raftlog header without re-encoding
_RL_TAIL = struct.Struct("<hiqqqhii")
_RL_HEAD = struct.Struct("<qiibI")
_K_TAIL = struct.Struct(">hiqqqhii")
_K_HEAD = struct.Struct(">qiibI")
assert _RL_HEAD.size + _RL_TAIL.size == rl.HEADER_SIZE == HEADER_SIZE


def to_raftlog(buf, *, require_sequential: bool = True,
               allow_transactional: bool = False) -> tuple[bytes, int]:
    """Every Kafka batch in ``buf`` (a Produce request's records) as raftlog batches.

    Returns (raftlog batches concatenated, record count). Empty batches are dropped.
    A batch with offset deltas 0..n-1 (what producers send) keeps its records section
    verbatim, compressed or not, under a raftlog header with
    ``records.ATTR_KAFKA_RECORDS``: it is validated record by record (as a Kafka
    broker does) but not re-encoded, and a Kafka consumer gets it back byte for byte.
    Other batches (``require_sequential=False``) are converted to raftlog's layout.

    ``allow_transactional`` keeps a transactional batch (its bit survives; it must carry
    a producer id, epoch and sequence). It is off by default: the caller that sets it
    must first have verified the producer's ongoing transaction (KIP-890). A control
    batch is always refused: only a transaction coordinator writes markers (through
    WriteTxnMarkers, never Produce), as in Kafka.

    Raises:
        CorruptRecordError: not valid Kafka batches, a control batch, a transactional
            one unless allowed, or an unknown codec.
    """
    out, count = [], 0
    with memoryview(buf) as view:
        for pos, h in iter_batches(buf):
            if h.attributes & CONTROL:
                raise CorruptRecordError("clients may not write control batches: markers come "
                                         "from the transaction coordinator")
            txn = h.attributes & TRANSACTIONAL
            if txn:
                if not allow_transactional:
                    raise CorruptRecordError("transactional batches are not accepted here")
                if h.base_sequence < 0:
                    raise CorruptRecordError(
                        f"transactional batch at {pos} has sequence {h.base_sequence}: a "
                        "transactional producer is idempotent")
            n = h.record_count
            if n == 0:
                continue
            codec = h.attributes & COMPRESSION_MASK
            if codec not in _TO_RAFTLOG_CODEC:
                raise CorruptRecordError(f"unknown compression codec {codec}")
            section = view[pos + HEADER_SIZE : pos + h.size]
            plain = _decompress(codec, section) if codec else section
            span = _walk(plain, n)
            if span is None:  # an uncommon shape, or damage: the full parser decides
                r = decode_records(buf, pos, h)
                deltas = r.offset_deltas
                sequential = deltas[0] == 0 and deltas[-1] == n - 1 and all(
                    map(int.__lt__, deltas, deltas[1:]))
                if not sequential:
                    out.append(_converted(buf, pos, h, r, require_sequential))
                    count += n
                    continue
                ts = r.timestamps
                span = (min(ts) - h.base_timestamp, max(ts) - h.base_timestamp)
            if h.last_offset_delta != n - 1:
                raise CorruptRecordError(f"last offset delta {h.last_offset_delta} does not "
                                         f"match the records' {n - 1}")
            first = h.base_timestamp
            if not (_I64_MIN <= first + span[0] and first + span[1] <= _I64_MAX):
                raise CorruptRecordError(f"batch at {pos}: a record timestamp overflows int64")
            log_append = h.attributes & TIMESTAMP_TYPE
            tail = _RL_TAIL.pack(rl.ATTR_KAFKA_RECORDS | codec | log_append | txn, n - 1, first,
                                 h.max_timestamp if log_append else first + span[1],
                                 h.producer_id, h.producer_epoch, h.base_sequence, n)
            crc = _crc32c.crc32c(section, _crc32c.crc32c(tail))
            # (offset and leader epoch: the leader stamps both)
            out.append(_RL_HEAD.pack(0, rl.HEADER_SIZE + len(section) - rl.LOG_OVERHEAD, -1,
                                     rl.MAGIC, crc))
            out.append(tail)
            out.append(section)
            count += n
        return b"".join(out), count


def _converted(buf, pos: int, h: KafkaBatchHeader, r: KafkaRecords,
               require_sequential: bool) -> bytes:
    """One Kafka batch re-encoded in raftlog's own layout (offset deltas with gaps)."""
    deltas = r.offset_deltas
    if require_sequential or deltas[0] != 0 or not all(map(int.__lt__, deltas, deltas[1:])):
        raise CorruptRecordError("record offset deltas are not 0..n-1")
    if deltas[-1] != h.last_offset_delta:
        raise CorruptRecordError(f"last offset delta {h.last_offset_delta} does not "
                                 f"match the records' {deltas[-1]}")
    log_append = bool(h.attributes & TIMESTAMP_TYPE)
    transactional = bool(h.attributes & TRANSACTIONAL)
    ts = r.timestamps
    uniform = log_append or ts.count(ts[0]) == len(ts)
    try:
        return rl.encode_batch(
            r.values, r.keys if r.keys.count(None) != len(r.keys) else None,
            timestamp=h.max_timestamp if log_append else ts[0],
            timestamps=None if uniform else ts,
            headers=r.headers if any(r.headers) else None,
            compression=_TO_RAFTLOG_CODEC[h.attributes & COMPRESSION_MASK],
            base_offset=0, leader_epoch=-1,  # (the leader stamps both)
            producer_id=h.producer_id, producer_epoch=h.producer_epoch,
            base_sequence=h.base_sequence, offset_deltas=deltas,
            timestamp_type=rl.LOG_APPEND_TIME if log_append else rl.CREATE_TIME,
            transactional=transactional)
    except (struct.error, OverflowError, ValueError) as e:  # timestamps past int64 ...
        raise CorruptRecordError(f"batch at {pos} does not fit a raftlog batch: {e}") from None


def section_records(region, header, topic: str = "", partition: int = 0,
                    decompressed_max: int | None = None) -> list:
    """The records of a raftlog batch whose region is a verbatim Kafka records section
    (``records.ATTR_KAFKA_RECORDS``; its compression bits are Kafka's codec numbers).
    ``records.decode_records`` calls this for such batches (``records.check_records``
    with its own ``decompressed_max``).

    Raises:
        CorruptRecordError: the section does not parse.
    """
    codec = header.attributes & COMPRESSION_MASK
    n = header.record_count
    if n > RECORDS_PER_BATCH_MAX:
        raise CorruptRecordError(f"batch of {n} records: more than the limit of "
                                 f"{RECORDS_PER_BATCH_MAX} (raftlog/limits.py)")
    data = _decompress(codec, region, decompressed_max) if codec else bytes(region)
    if n * 7 > len(data):
        raise CorruptRecordError(f"record count {n} does not fit {len(data)} bytes")
    try:
        r = _parse_records(data, n, header.first_timestamp)
    except CorruptRecordError:
        raise
    except (IndexError, ValueError, UnicodeDecodeError) as e:
        raise CorruptRecordError(
            f"records of batch at offset {header.base_offset}: {e}") from None
    deltas = r.offset_deltas
    if n and deltas[-1] != header.last_offset_delta:
        raise CorruptRecordError(f"last offset delta {header.last_offset_delta} does not "
                                 f"match the records' {deltas[-1]}")
    base = header.base_offset
    ts = ([header.max_timestamp] * n if header.attributes & rl.ATTR_LOG_APPEND_TIME
          else r.timestamps)
    return [rl.Record(topic, partition, base + od, t, k, v, hs)
            for od, t, k, v, hs in zip(deltas, ts, r.keys, r.values, r.headers)]


def from_raftlog(buf, *, compression: int | None = None, start_offset: int = 0,
                 verify: bool = True) -> bytes:
    """raftlog batches (a fetch slice, maybe ending in a partial batch, which is
    dropped) as Kafka batches, joined: :func:`from_raftlog_pieces`."""
    return b"".join(from_raftlog_pieces(buf, compression=compression,
                                        start_offset=start_offset, verify=verify))


def from_raftlog_pieces(buf, *, compression: int | None = None, start_offset: int = 0,
                        verify: bool = True) -> list:
    """raftlog batches (a fetch slice, maybe ending in a partial batch, which is
    dropped) as Kafka batches: a list of bytes-like pieces whose concatenation is the
    Kafka record batches. ``compression`` None keeps each batch's codec.
    Batches wholly below ``start_offset`` are skipped (a fetch may start mid-batch; the
    client drops the earlier records of a batch it gets, as with Kafka). A batch
    written by the Kafka listener (a verbatim section) only gets its Kafka header back:
    its pieces are that 61-byte header and a memoryview of the section in ``buf`` (no
    copy; the caller keeps ``buf`` unchanged while the pieces live).
    ``verify=False`` skips the raftlog CRCs of bytes the log already checked (a fetch
    slice: raftlog/segment.py checks every batch once before serving it).

    Raises:
        CorruptRecordError: the raftlog bytes fail their checks (never served).
    """
    out: list = []
    view = memoryview(buf)
    for pos, h in rl.iter_batches(buf, verify=verify, allow_partial=True):
        if h.record_count == 0 or h.last_offset < start_offset:
            continue
        attrs = h.attributes
        if attrs & rl.ATTR_KAFKA_RECORDS and (
                compression is None or compression == attrs & COMPRESSION_MASK):
            section = view[pos + rl.HEADER_SIZE : pos + h.size]
            # Kafka's bits 0-5 (codec, timestamp type, transactional, control) are
            # raftlog's for these batches
            tail = _K_TAIL.pack(attrs & (COMPRESSION_MASK | TIMESTAMP_TYPE | TRANSACTIONAL
                                         | CONTROL),
                                h.last_offset_delta, h.first_timestamp, h.max_timestamp,
                                h.producer_id, h.producer_epoch, h.base_sequence,
                                h.record_count)
            crc = _crc32c.crc32c(section, _crc32c.crc32c(tail))
            out.append(_K_HEAD.pack(h.base_offset, HEADER_SIZE + len(section) - LOG_OVERHEAD,
                                    h.leader_epoch, MAGIC, crc) + tail)
            out.append(section)
            continue
        recs = rl.decode_records(buf, pos, h)
        base = h.base_offset
        if compression is not None:
            codec = compression
        elif attrs & rl.ATTR_KAFKA_RECORDS:
            codec = attrs & COMPRESSION_MASK
        else:
            codec = _FROM_RAFTLOG_CODEC[h.compression]
        offsets = [r[2] for r in recs]
        log_append = attrs & rl.ATTR_LOG_APPEND_TIME
        out.append(encode_batch(
            [r[5] for r in recs], [r[4] for r in recs],
            timestamps=([r[3] for r in recs] if not log_append
                        else [h.first_timestamp] * len(recs)),
            headers=[r[6] for r in recs],
            offset_deltas=[o - base for o in offsets],
            base_offset=base, partition_leader_epoch=h.leader_epoch, compression=codec,
            log_append_time=h.max_timestamp if log_append else None,
            producer_id=h.producer_id, producer_epoch=h.producer_epoch,
            base_sequence=h.base_sequence, transactional=bool(attrs & rl.ATTR_TRANSACTIONAL),
            control=bool(attrs & rl.ATTR_CONTROL)))
    return out


__all__ = [
    "MAGIC", "KafkaBatchHeader", "KafkaRecords", "read_header", "iter_batches",
    "decode_records", "encode_batch", "to_raftlog", "from_raftlog", "from_raftlog_pieces",
    "section_records", "encode_control_batch", "read_control_marker",
    "NONE", "GZIP", "SNAPPY", "LZ4", "ZSTD",
]
