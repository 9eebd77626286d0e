"""``raftlog dump-log FILE``: what a segment file holds, batch by batch, CRC checked (as
Kafka's kafka-dump-log). Reads the file only; never changes it; needs no node.

A ``.log`` segment is scanned from position 0: each batch header is parsed
(``raftlog.records.read_header``), the whole batch is read (at most
``records.MAX_BATCH_BYTES`` at a time) and its CRC32C recomputed. A batch whose CRC
does not match is reported and the scan goes on (its length is still known); a
header that does not parse, or a batch running past the end of the file, ends the
scan there (nothing after it can be located) and is reported with the bytes left.
``.index`` and ``.timeindex`` files are listed entry by entry. A segment's index files
exist once it is closed (rolled) or its node stopped cleanly: the active segment's live in
memory (raftlog/log.py flush writes only closed segments' indexes), which a missing index
file next to its ``.log`` is reported as.
"""

from __future__ import annotations

import os
import struct
from collections.abc import Iterator
from dataclasses import dataclass

from raftlog import records
from raftlog.errors import CorruptRecordError
from raftlog.segment import INDEX_SUFFIX, LOG_SUFFIX, TIMEINDEX_SUFFIX

_INDEX_ENTRY = struct.Struct("<II")  # relative offset, position
_TIMEINDEX_ENTRY = struct.Struct("<qI")  # max timestamp, position


@dataclass(frozen=True, slots=True)
class BatchInfo:
    """One batch of a segment file: where it is, its header, whether its CRC holds."""

    position: int
    header: records.BatchHeader
    crc_ok: bool
    computed_crc: int
    data: bytes | None = None  # the whole batch, when records are wanted


@dataclass(frozen=True, slots=True)
class Problem:
    """Something wrong in the file at ``position``; ``fatal``: the scan stopped there."""

    position: int
    message: str
    fatal: bool = False


def base_offset_of(path: str) -> int | None:
    """The base offset in a segment file's name (``00000000000000000042.log``), or None."""
    stem = os.path.basename(path).split(".", 1)[0]
    return int(stem) if len(stem) == 20 and stem.isdigit() else None


def scan_segment(path: str, keep_data: bool = False) -> Iterator[BatchInfo | Problem]:
    """Every batch of the ``.log`` file at ``path``, then any problem that ended the scan.

    Raises:
        OSError: the file cannot be opened.
    """
    with open(path, "rb") as f:
        size = os.fstat(f.fileno()).st_size
        pos, last = 0, None
        while pos < size:
            if size - pos < records.HEADER_SIZE:
                yield Problem(pos, f"partial batch header: {size - pos} trailing byte(s)", True)
                return
            head = os.pread(f.fileno(), records.HEADER_SIZE, pos)
            try:
                h = records.read_header(head)
            except CorruptRecordError as e:
                yield Problem(pos, f"unreadable batch header ({e}); {size - pos} byte(s) "
                                   "from here not scanned", True)
                return
            if pos + h.size > size:
                yield Problem(pos, f"batch at offset {h.base_offset} claims {h.size} bytes, "
                                   f"the file has {size - pos} from here (torn write?)", True)
                return
            data = os.pread(f.fileno(), h.size, pos)
            crc = records.batch_crc(data, 0, h)
            if last is not None and h.base_offset <= last:
                yield Problem(pos, f"base offset {h.base_offset} is not above the previous "
                                   f"batch's last offset {last}")
            yield BatchInfo(pos, h, crc == h.crc, crc, data if keep_data else None)
            last = h.last_offset
            pos += h.size


#: codec numbers of a batch whose records section came verbatim from the Kafka listener
_KAFKA_CODECS = {0: "none", 1: "gzip", 2: "snappy", 3: "lz4", 4: "zstd"}


def describe_batch(b: BatchInfo) -> dict:
    """One batch as a flat dict (the JSON form; the text form prints the same keys)."""
    h = b.header
    kafka = bool(h.attributes & records.ATTR_KAFKA_RECORDS)
    names = _KAFKA_CODECS if kafka else {v: k for k, v in records.COMPRESSION_NAMES.items()}
    codec = names.get(h.compression, str(h.compression))
    return {
        "baseOffset": h.base_offset, "lastOffset": h.last_offset, "count": h.record_count,
        "position": b.position, "size": h.size, "partitionLeaderEpoch": h.leader_epoch,
        "magic": h.magic, "compresscodec": codec,
        "recordsFormat": "kafka" if kafka else "raftlog",
        "timestampType": "LogAppendTime" if h.timestamp_type == records.LOG_APPEND_TIME
        else "CreateTime",
        "firstTimestamp": h.first_timestamp, "maxTimestamp": h.max_timestamp,
        "producerId": h.producer_id, "producerEpoch": h.producer_epoch,
        "baseSequence": h.base_sequence, "lastSequence": h.last_sequence,
        "crc": f"{h.crc:#010x}", "isValid": b.crc_ok,
        **({} if b.crc_ok else {"computedCrc": f"{b.computed_crc:#010x}"}),
    }


def _show(v: bytes | None) -> str:
    return "null" if v is None else bytes(v).decode("utf-8", errors="backslashreplace")


def describe_records(b: BatchInfo) -> list[dict]:
    """The records of a batch whose CRC holds (its data kept); [] otherwise."""
    if not b.crc_ok or b.data is None:
        return []
    out = []
    for r in records.decode_batch(b.data):
        out.append({"offset": r.offset, "timestamp": r.timestamp,
                    "keySize": -1 if r.key is None else len(r.key),
                    "valueSize": -1 if r.value is None else len(r.value),
                    "headerKeys": [k for k, _ in r.headers],
                    "key": _show(r.key), "payload": _show(r.value)})
    return out


class IndexNotWrittenError(ValueError):
    """An index file that does not exist (yet) next to its segment's ``.log``."""


def read_index(path: str) -> tuple[list[tuple[int, int]], int]:
    """(entries, trailing bytes) of an ``.index`` (absolute offset, position) or
    ``.timeindex`` (timestamp, position) file.

    Raises:
        IndexNotWrittenError: the file is missing but its ``.log`` is there: the
            active segment's indexes live in memory until it rolls or the node stops
            cleanly (the message says so, and to dump the ``.log``).
        OSError: the file cannot be read.
    """
    entry = _TIMEINDEX_ENTRY if path.endswith(TIMEINDEX_SUFFIX) else _INDEX_ENTRY
    try:
        with open(path, "rb") as f:
            data = f.read()
    except FileNotFoundError:
        suffix = TIMEINDEX_SUFFIX if entry is _TIMEINDEX_ENTRY else INDEX_SUFFIX
        log = path[: -len(suffix)] + LOG_SUFFIX
        if not os.path.exists(log):
            raise
        raise IndexNotWrittenError(
            "no such file yet: the index files of the active segment, "
            f"{os.path.basename(log)}, are kept in memory and written when it rolls or "
            "the node stops cleanly (a missing index is rebuilt from the log on open); "
            f"dump {log} instead") from None
    whole = len(data) - len(data) % entry.size
    rows = list(entry.iter_unpack(data[:whole]))
    if entry is _INDEX_ENTRY:
        base = base_offset_of(path) or 0
        rows = [(base + rel, pos) for rel, pos in rows]
    return rows, len(data) - whole


def file_kind(path: str) -> str:
    """"log", "index" or "timeindex" by the file's suffix.

    Raises:
        ValueError: another kind of file.
    """
    for suffix, kind in ((LOG_SUFFIX, "log"), (TIMEINDEX_SUFFIX, "timeindex"),
                         (INDEX_SUFFIX, "index")):
        if path.endswith(suffix):
            return kind
    raise ValueError(f"{path}: not a segment file (expected a name ending in "
                     f"{LOG_SUFFIX}, {INDEX_SUFFIX} or {TIMEINDEX_SUFFIX})")
