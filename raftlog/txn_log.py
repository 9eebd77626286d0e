"""The aborted-transaction indexes of one partition log: one ``.txnindex`` file per segment
(raftlog/txn_index.py is the format), kept beside the segments by :class:`PartitionLog`.

* an abort marker appended (leader or follower) adds its entry to the index of the
  segment holding the marker, appended to that file at once (page cache, like the
  segment's other indexes);
* loaded from the files with the producer state; a file that fails its checks, or a log
  rebuilt from its batches (no producer snapshot, after a truncation or a compaction),
  has every index rebuilt from the batches instead (:func:`rebuild`), never patched;
* a read_committed fetch of ``[fetch_offset, upper)`` asks :meth:`TxnIndexes.aborted`:
  the (producer id, first offset) of the aborted transactions overlapping it, from the
  indexes of the segment holding ``fetch_offset`` on (no log scan).
"""

from __future__ import annotations

import bisect
import os
from collections.abc import Iterable

from raftlog import records
from raftlog.checkpoint import atomic_write
from raftlog.producer_state import CompletedTxn, ProducerStateManager
from raftlog.txn_index import (
    TXN_INDEX_SUFFIX,
    AbortedTxn,
    CorruptTxnIndexError,
    TxnIndex,
    collect_aborted,
    decode,
    txn_index_name,
)


class TxnIndexes:
    """Per-segment indexes of one log directory. Not thread-safe: the log's lock."""

    def __init__(self, directory: str, bases: Iterable[int] = ()):
        self.directory = directory
        self.indexes: dict[int, TxnIndex] = {b: TxnIndex(b) for b in bases}

    def path(self, base: int) -> str:
        return os.path.join(self.directory, txn_index_name(base))

    @classmethod
    def load(cls, directory: str, segments: list[tuple[int, int]]) -> TxnIndexes:
        """Indexes of the segments ``[(base offset, next offset), ...]`` from their files
        (none: empty). Raises CorruptTxnIndexError when a file fails its checks."""
        out = cls(directory)
        for base, nxt in segments:
            try:
                with open(out.path(base), "rb") as f:
                    data = f.read()
            except FileNotFoundError:
                data = b""
            out.indexes[base] = decode(data, base, nxt)
        return out

    def add(self, segment_base: int, done: CompletedTxn) -> None:
        """An abort marker in the segment at ``segment_base`` closed ``done``."""
        idx = self.indexes.get(segment_base)
        if idx is None:
            idx = self.indexes[segment_base] = TxnIndex(segment_base)
        if idx.entries and idx.entries[-1].last_offset >= done.last_offset:
            return  # (already there: replayed after a reload)
        data = idx.append(AbortedTxn(done.producer_id, done.first_offset, done.last_offset,
                                     done.last_stable_offset))
        with open(self.path(segment_base), "ab") as f:
            f.write(data)

    def truncate_to(self, offset: int) -> None:
        """The log ends at ``offset`` now: entries of markers at or after it go."""
        for base in sorted(self.indexes):
            idx = self.indexes[base]
            if base >= offset and base != min(self.indexes):
                del self.indexes[base]
                _unlink(self.path(base))
            elif idx.entries and idx.entries[-1].last_offset >= offset:
                idx.truncate_to(offset)
                atomic_write(self.path(base), idx.to_bytes())

    def forget(self, bases: Iterable[int]) -> None:
        """Segments that are gone (retention, delete_records)."""
        for b in bases:
            self.indexes.pop(b, None)

    def aborted(self, fetch_offset: int, upper: int) -> list[tuple[int, int]]:
        """(producer id, first offset) of the aborted transactions overlapping
        ``[fetch_offset, upper)``."""
        if not any(idx.entries for idx in self.indexes.values()):
            return []  # (the common case, a log without aborts: every read_committed fetch)
        bases = sorted(self.indexes)
        i = max(0, bisect.bisect_right(bases, fetch_offset) - 1)
        return collect_aborted((self.indexes[b] for b in bases[i:]), fetch_offset, upper)

    def write_all(self) -> None:
        """Every file as the memory says (after a rebuild); empty ones removed."""
        for name in os.listdir(self.directory):
            if name.endswith(TXN_INDEX_SUFFIX):
                _unlink(os.path.join(self.directory, name))
        for base, idx in self.indexes.items():
            if idx.entries:
                atomic_write(self.path(base), idx.to_bytes())


def replay_batch(state: ProducerStateManager, h: records.BatchHeader, buf, pos: int
                 ) -> CompletedTxn | None:
    """Apply one batch of the log to ``state``, reading a control batch's marker (its
    coordinator epoch and result). Returns what a marker closed."""
    if h.attributes & records.ATTR_CONTROL:
        m = records.read_control_marker(buf, pos, h)
        return state.apply_header(h, m.coordinator_epoch, not m.committed)
    return state.apply_header(h)


def rebuild(directory: str, bases: list[int], batches) -> tuple[ProducerStateManager, TxnIndexes]:
    """Producer state and aborted-transaction indexes from every batch of the log:
    ``batches`` yields (header, batch bytes) in offset order; ``bases`` are the
    segments' base offsets (an entry goes to the segment holding its marker)."""
    state = ProducerStateManager()
    out = TxnIndexes(directory, bases)
    for h, data in batches:
        if h.producer_id < 0:
            state.end_offset = max(state.end_offset, h.next_offset)
            continue
        done = replay_batch(state, h, data, 0)
        if done is not None and done.aborted:
            base = bases[max(0, bisect.bisect_right(bases, h.base_offset) - 1)]
            out.indexes[base].append(AbortedTxn(done.producer_id, done.first_offset,
                                                done.last_offset, done.last_stable_offset))
    return state, out


def _unlink(path: str) -> None:
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass


__all__ = ["TxnIndexes", "rebuild", "replay_batch", "CorruptTxnIndexError"]
