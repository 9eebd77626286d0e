"""Aborted-transaction index of one segment (Kafka's ``.txnindex``). Pure: bytes in, bytes
out; not wired yet (issue #33).

Every abort marker appended to a segment adds one entry there, in offset order: the
producer id, the first offset of its aborted transaction, the marker's offset
(``last_offset``) and the partition's last stable offset right after the marker
(:class:`raftlog.producer_state.CompletedTxn`). A read_committed fetch of
``[fetch_offset, upper)`` answers, besides the records, the (producer id, first offset)
of every aborted transaction overlapping that range (:func:`collect_aborted`): the
client drops those producers' records from the first offset until their abort marker,
without the broker scanning the log.

File ``<base_offset:020d>.txnindex``: entries of 38 bytes, appended, no header::

    offset  size  field                (big-endian: bytes 0-33 are Kafka's entry)
    0       2     version              i16  0
    2       8     producer_id          i64
    10      8     first_offset         i64
    18      8     last_offset          i64  the abort marker's offset
    26      8     last_stable_offset   i64
    34      4     crc                  u32  CRC-32C of bytes 0-33

Reading checks every CRC and every invariant (:func:`decode`): a version-0 entry, a
producer id, ``0 <= first_offset <= last_offset``, ``last_stable_offset <=
last_offset + 1``, markers inside the segment (``base_offset <= last_offset <
next_offset``) and strictly increasing. A file that fails is not trusted: like the other
indexes it is rebuilt from the segment (replaying its batches through the producer
state), never patched up.
"""

from __future__ import annotations

import struct
from bisect import bisect_left
from collections.abc import Iterable
from typing import NamedTuple

import crc32c as _crc32c

from raftlog.errors import RaftlogError

TXN_INDEX_SUFFIX = ".txnindex"
ENTRY_VERSION = 0
_ENTRY = struct.Struct(">hqqqq")
_CRC = struct.Struct(">I")
ENTRY_SIZE = _ENTRY.size + _CRC.size  # 38
assert _ENTRY.size == 34


class CorruptTxnIndexError(RaftlogError):
    """A ``.txnindex`` file that fails its checks: rebuild it from the segment."""


class AbortedTxn(NamedTuple):
    producer_id: int
    first_offset: int
    last_offset: int  # the abort marker
    last_stable_offset: int


def txn_index_name(base_offset: int) -> str:
    return f"{base_offset:020d}{TXN_INDEX_SUFFIX}"


def encode_entry(e: AbortedTxn) -> bytes:
    body = _ENTRY.pack(ENTRY_VERSION, *e)
    return body + _CRC.pack(_crc32c.crc32c(body))


def _check(e: AbortedTxn, base_offset: int, next_offset: int | None, prev_last: int,
           where: str) -> None:
    if e.producer_id < 0:
        raise CorruptTxnIndexError(f"{where}: producer id {e.producer_id}")
    if not 0 <= e.first_offset <= e.last_offset:
        raise CorruptTxnIndexError(f"{where}: first offset {e.first_offset}, last offset "
                                   f"{e.last_offset}")
    if not 0 <= e.last_stable_offset <= e.last_offset + 1:
        raise CorruptTxnIndexError(f"{where}: last stable offset {e.last_stable_offset} "
                                   f"past its marker at {e.last_offset}")
    if e.last_offset < base_offset or (next_offset is not None and e.last_offset >= next_offset):
        raise CorruptTxnIndexError(f"{where}: marker offset {e.last_offset} outside the "
                                   f"segment [{base_offset}, {next_offset})")
    if e.last_offset <= prev_last:
        raise CorruptTxnIndexError(f"{where}: marker offset {e.last_offset} not after "
                                   f"the previous entry's {prev_last}")


class TxnIndex:
    """The aborted transactions whose abort markers are in one segment, in offset order."""

    def __init__(self, base_offset: int, entries: Iterable[AbortedTxn] = ()):
        self.base_offset = base_offset
        self.entries: list[AbortedTxn] = []
        self._lasts: list[int] = []  # last_offset column, for bisect
        for e in entries:
            self.append(e)

    def __len__(self) -> int:
        return len(self.entries)

    def append(self, e: AbortedTxn) -> bytes:
        """Add an entry (its marker after every other); returns the bytes to append to
        the file. Raises CorruptTxnIndexError for an entry breaking the invariants."""
        _check(e, self.base_offset, None, self._lasts[-1] if self._lasts else -1,
               f"aborted transaction {tuple(e)}")
        self.entries.append(e)
        self._lasts.append(e.last_offset)
        return encode_entry(e)

    def to_bytes(self) -> bytes:
        return b"".join(map(encode_entry, self.entries))

    def truncate_to(self, offset: int) -> None:
        """The log was cut to end at ``offset``: drop the entries of markers at or after."""
        i = bisect_left(self._lasts, offset)
        del self.entries[i:], self._lasts[i:]

    def collect(self, fetch_offset: int, upper: int) -> tuple[list[AbortedTxn], bool]:
        """Entries overlapping ``[fetch_offset, upper)`` (marker at or after the fetch
        offset, first offset before ``upper``), and whether the search is complete: an
        entry whose last stable offset reaches ``upper`` ends it (Kafka's rule: every
        transaction touching the range was decided before that marker), else the next
        segment's index is to be searched too."""
        out = []
        for e in self.entries[bisect_left(self._lasts, fetch_offset):]:
            if e.first_offset < upper:
                out.append(e)
            if e.last_stable_offset >= upper:
                return out, True
        return out, False


def decode(data: bytes, base_offset: int, next_offset: int | None = None) -> TxnIndex:
    """A ``.txnindex`` file's bytes as a checked :class:`TxnIndex`. ``next_offset`` (the
    segment's end, when known) bounds the markers.

    Raises:
        CorruptTxnIndexError: a partial entry, a CRC mismatch, an unknown version or a
            broken invariant (the message names the entry).
    """
    if len(data) % ENTRY_SIZE:
        raise CorruptTxnIndexError(f"txn index of {len(data)} bytes is not whole "
                                   f"{ENTRY_SIZE}-byte entries (a torn write?)")
    idx = TxnIndex(base_offset)
    prev = -1
    with memoryview(data) as view:
        for i in range(0, len(data), ENTRY_SIZE):
            body = view[i : i + _ENTRY.size]
            (crc,) = _CRC.unpack_from(view, i + _ENTRY.size)
            where = f"txn index entry {i // ENTRY_SIZE} of segment {base_offset}"
            if _crc32c.crc32c(body) != crc:
                raise CorruptTxnIndexError(f"{where}: CRC mismatch")
            version, *fields = _ENTRY.unpack_from(view, i)
            if version != ENTRY_VERSION:
                raise CorruptTxnIndexError(f"{where}: unknown version {version}")
            e = AbortedTxn(*fields)
            _check(e, base_offset, next_offset, prev, where)
            idx.entries.append(e)
            idx._lasts.append(e.last_offset)
            prev = e.last_offset
    return idx


def collect_aborted(indexes: Iterable[TxnIndex], fetch_offset: int,
                    upper: int) -> list[tuple[int, int]]:
    """What a read_committed fetch of ``[fetch_offset, upper)`` answers as
    ``aborted_transactions``: (producer id, first offset) of every aborted transaction
    overlapping the range. ``indexes``: those of the segment holding ``fetch_offset``
    and every later one, in order (consumed only as far as needed)."""
    if upper <= fetch_offset:
        return []
    out: list[tuple[int, int]] = []
    for idx in indexes:
        found, complete = idx.collect(fetch_offset, upper)
        out.extend((e.producer_id, e.first_offset) for e in found)
        if complete:
            break
    return out


class AbortedFilter:
    """The consumer side of read_committed (Kafka's fetcher): fed the batch headers of a
    fetch in offset order, says which to drop -- every control batch, and every batch of
    a producer from the first offset of one of its aborted transactions up to that
    transaction's abort marker. ``aborted``: the fetch's ``aborted_transactions``."""

    def __init__(self, aborted: Iterable[tuple[int, int]]):
        self._pending = sorted(((first, pid) for pid, first in aborted), reverse=True)
        self._open: set[int] = set()  # producers inside an aborted transaction

    def skip(self, producer_id: int, base_offset: int, transactional: bool,
             control: bool) -> bool:
        while self._pending and self._pending[-1][0] <= base_offset:
            self._open.add(self._pending.pop()[1])
        if control:
            # (any marker of the producer ends the aborted range; Kafka also checks the
            # marker is an abort, which it is when the index is right)
            self._open.discard(producer_id)
            return True
        return transactional and producer_id in self._open


__all__ = ["AbortedFilter", "AbortedTxn", "TxnIndex", "CorruptTxnIndexError", "decode", "encode_entry",
           "collect_aborted", "txn_index_name", "TXN_INDEX_SUFFIX", "ENTRY_SIZE"]
