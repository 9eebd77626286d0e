"""One log segment: ``<base_offset:020d>.log`` plus its sparse ``.index`` and ``.timeindex``.

The ``.log`` file is a sequence of record batches (records.py). A segment's file
descriptor lives in a :class:`SegmentFile` that closes itself when the last
reference goes: a :class:`FileSlice` handed to a server for ``os.sendfile`` keeps
it open, so retention, compaction or truncation may drop the segment while a
fetch response is still being sent.

Every batch read back from disk is CRC-checked once per process before it is
served (``verified_position``); batches appended by this process were checked on
the way in. A corrupt batch is never served: reads raise CorruptRecordError.

File lifetime (for ``os.sendfile``): segment files are never closed explicitly while
the log runs. Closing, deleting or compacting a segment only drops the segment's
reference to its :class:`SegmentFile`; the descriptor closes when the last
:class:`FileSlice` holding it is gone (CPython reference counting), so a slice stays
readable and its fd number can never be reused for another file under a sender.

Index files are written without fsync (they are disposable and validated on load:
structure, bounds, and a sample of entries checked against the batches they point
to); the ``.log`` file is fsynced by the log's flush.
"""

from __future__ import annotations

import itertools
import os
from collections import deque, namedtuple

from raftlog import records
from raftlog.checkpoint import atomic_write, fsync_dir, write_file
from raftlog.errors import CorruptRecordError, StorageError
from raftlog.index import OffsetIndex, TimeIndex
from raftlog.records import HEADER_SIZE, BatchHeader

LOG_SUFFIX = ".log"
INDEX_SUFFIX = ".index"
TIMEINDEX_SUFFIX = ".timeindex"
CLEANED_SUFFIX = ".cleaned"
#: Bytes read at once when scanning batch headers.
SCAN_CHUNK_BYTES = 1024 * 1024
#: Most recent batches whose positions a segment remembers, so reads at the tail (every
#: caught-up consumer and follower) find their bytes without scanning batch headers.
RECENT_BATCHES = 256
#: The latest append of a segment stays in memory when at most this big: tailing
#: consumers and followers read it without a pread (one per partition, so bounded).
TAIL_CACHE_MAX_BYTES = 64 * 1024
#: Relative offsets are u32 in the index: roll before a segment spans more offsets.
MAX_RELATIVE_OFFSET = 2**31 - 1
#: Index entries checked against the log when an index is loaded (evenly spaced).
INDEX_SAMPLE_ENTRIES = 16


def segment_name(base_offset: int, suffix: str = LOG_SUFFIX) -> str:
    return f"{base_offset:020d}{suffix}"


def parse_segment_name(name: str) -> int | None:
    stem, dot, ext = name.partition(".")
    if dot and "." + ext == LOG_SUFFIX and len(stem) == 20 and stem.isdigit():
        return int(stem)
    return None


class SegmentFile:
    """An fd that closes when unreferenced (or on explicit close)."""

    __slots__ = ("fd", "__weakref__")

    def __init__(self, path: str):
        self.fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)

    def close(self) -> None:
        fd, self.fd = self.fd, -1
        if fd >= 0:
            os.close(fd)

    def __del__(self) -> None:
        try:
            self.close()
        except OSError:
            pass

    @classmethod
    def closed(cls) -> SegmentFile:
        """A placeholder with fd -1 for a segment that was closed or deleted."""
        f = cls.__new__(cls)
        f.fd = -1
        return f


class FileSlice(namedtuple("FileSlice", "file position length first_offset next_offset cached",
                           defaults=(None,))):
    """Bytes ``[position, position + length)`` of an open segment file.

    Hand ``fileno``/``position``/``length`` to ``os.sendfile``; ``file`` keeps the
    descriptor open as long as the slice lives. ``next_offset`` is the offset
    after the last batch in the slice. ``cached``: the same bytes still in memory
    (the segment's latest append, see LogSegment.tail), so a tail read skips pread.
    A tuple: one C-level call to build, several per fetch.
    """

    __slots__ = ()

    @property
    def fileno(self) -> int:
        return self.file.fd if self.file is not None else -1

    def read_bytes(self) -> bytes:
        if not self.length:
            return b""
        if self.cached is not None:
            return bytes(self.cached)
        return _pread_exact(self.file.fd, self.length, self.position)


EMPTY_SLICE_FILE = None


def _pread_exact(fd: int, n: int, pos: int) -> bytes:
    data = os.pread(fd, n, pos)
    if len(data) != n:
        raise CorruptRecordError(
            f"expected {n} bytes at position {pos}, file ended after {len(data)}"
        )
    return data


class LogSegment:
    """A segment of a partition log. Not thread-safe: the log serialises access.

    ``path`` defaults to ``<directory>/<base_offset:020d>.log``; compaction opens a
    side file (``.log.cleaned``) as a segment to build its indexes off the lock.
    """

    def __init__(
        self, directory: str, base_offset: int, index_interval_bytes: int, path: str | None = None
    ):
        self.directory = directory
        self.base_offset = base_offset
        self.index_interval_bytes = index_interval_bytes
        self.path = path or os.path.join(directory, segment_name(base_offset))
        try:
            self.file = SegmentFile(self.path)
            self.size = os.fstat(self.file.fd).st_size
        except OSError as e:
            raise StorageError(f"cannot open segment {self.path}: {e}", e.errno) from e
        self.index = OffsetIndex()
        self.time_index = TimeIndex()
        self.next_offset = base_offset
        #: Largest batch max_timestamp in the segment, and the position of that batch.
        self.max_timestamp = -1
        self._max_ts_position = 0
        self.created_ms: int | None = None
        self.verified_position = 0
        self._bytes_since_index = 0
        self.dirty = False  # .log appended or cut since the last fsync
        self.indexes_dirty = False  # in-memory indexes differ from the index files
        #: Bumped whenever the bytes of the file change other than by append (truncation,
        #: compaction swap): compaction checks it before swapping its rewrite in.
        self.generation = 0
        # (base_offset, next_offset, position, size) of the latest batches, oldest first
        self._recent: deque = deque(maxlen=RECENT_BATCHES)
        #: (position, bytes) of the latest append while small; None otherwise. The
        #: bytes are the log's own stamped buffer, never changed after the write.
        self.tail: tuple[int, bytes] | None = None
        #: (leader epoch, start offset) of each epoch increase seen by :meth:`recover`,
        #: to rebuild a lost leader-epoch cache.
        self.epoch_starts: list[tuple[int, int]] = []

    # ------------------------------------------------------------------ paths

    @property
    def index_path(self) -> str:
        return os.path.join(self.directory, segment_name(self.base_offset, INDEX_SUFFIX))

    @property
    def timeindex_path(self) -> str:
        return os.path.join(self.directory, segment_name(self.base_offset, TIMEINDEX_SUFFIX))

    # ------------------------------------------------------------------ append

    def append(self, data: bytes, headers: list[tuple[int, BatchHeader]]) -> None:
        """Write validated, stamped batches with one write; update indexes.

        Durable when it returns: in the OS page cache only (the log fsyncs on flush).

        Raises:
            StorageError: the write failed; the file is cut back to its old size.
        """
        assert headers and headers[0][1].base_offset >= self.next_offset
        assert headers[-1][0] + headers[-1][1].size == len(data)
        start = self.size
        try:
            view = memoryview(data)
            written = 0
            while written < len(data):
                n = os.pwrite(self.file.fd, view[written:], start + written)
                if n <= 0:
                    raise OSError(f"pwrite returned {n}")
                written += n
        except OSError as e:
            self._cut_back(start)
            raise StorageError(f"append to {self.path} failed: {e}", e.errno) from e
        for pos, h in headers:
            self._index_batch(start + pos, h)
        self.tail = (start, data) if len(data) <= TAIL_CACHE_MAX_BYTES else None
        self.size = start + len(data)
        self.verified_position = self.size
        self.dirty = True

    def _cut_back(self, size: int) -> None:
        try:
            os.ftruncate(self.file.fd, size)
        except OSError:
            pass

    def _index_batch(self, position: int, h: BatchHeader) -> None:
        """Account for the batch at ``position``: sparse index entries, tail memory.

        The time index maps the largest timestamp so far to the position of the batch
        holding it (as Kafka's): every batch before that position has a smaller or equal
        max timestamp, so a lookup may start scanning there.
        """
        if h.max_timestamp > self.max_timestamp:
            self.max_timestamp, self._max_ts_position = h.max_timestamp, position
        if self._bytes_since_index >= self.index_interval_bytes or not len(self.index):
            self.index.append(h.base_offset - self.base_offset, position)
            self._bytes_since_index = 0
            self._maybe_time_entry()
        self._bytes_since_index += h.size
        self._recent.append((h.base_offset, h.next_offset, position, h.size))
        self.next_offset = h.next_offset
        self.indexes_dirty = True

    def _maybe_time_entry(self) -> None:
        if self.max_timestamp > self.time_index.max_timestamp:
            self.time_index.append(self.max_timestamp, self._max_ts_position)

    def seal(self) -> None:
        """The segment stops being active: record its final max timestamp (as Kafka)."""
        if self.size and self.max_timestamp > self.time_index.max_timestamp:
            self._maybe_time_entry()
            self.indexes_dirty = True

    # ------------------------------------------------------------------ scanning

    def iter_headers(self, position: int = 0, end: int | None = None):
        """Yield (position, header) of batches from ``position`` (a batch start).

        Raises CorruptRecordError on an unparseable header or a batch running
        past ``end`` (default: the segment size).
        """
        return iter_file_headers(
            self.file.fd, self.path, position, self.size if end is None else end
        )

    def recover(self) -> int:
        """Scan every batch, verify CRCs, cut a torn or corrupt tail, rebuild indexes.

        Returns the bytes truncated. Durable when it returns (the file is fsynced if cut).
        """
        self.index, self.time_index = OffsetIndex(), TimeIndex()
        self._bytes_since_index = 0
        self._recent.clear()
        self.tail = None
        self.next_offset, self.max_timestamp, self._max_ts_position = self.base_offset, -1, 0
        self.epoch_starts = []
        valid, size = 0, self.size
        while valid < size:
            chunk = os.pread(self.file.fd, min(SCAN_CHUNK_BYTES, size - valid), valid)
            consumed = self._scan_chunk(chunk, valid)
            if consumed == 0:
                consumed = self._scan_big_batch(valid, size)
                if consumed == 0:
                    break
            valid += consumed
        self.indexes_dirty = True
        return self._finish_recovery(valid, size)

    def _scan_chunk(self, chunk: bytes, offset_in_file: int) -> int:
        """Index the valid whole batches at the start of ``chunk``; bytes consumed."""
        consumed = 0
        try:
            for pos, h in records.iter_batches(chunk, verify=True, allow_partial=True):
                self._check_contiguous(h)
                self._index_batch(offset_in_file + pos, h)
                self._note_epoch(h)
                consumed = pos + h.size
        except CorruptRecordError:
            pass
        return consumed

    def _scan_big_batch(self, position: int, size: int) -> int:
        """A batch larger than one scan chunk: read it whole. 0 if torn or invalid."""
        try:
            h = records.read_header(os.pread(self.file.fd, HEADER_SIZE, position))
            if position + h.size > size:
                return 0
            data = os.pread(self.file.fd, h.size, position)
            records.verify_crc(data, 0, h)
            self._check_contiguous(h)
        except CorruptRecordError:
            return 0
        self._index_batch(position, h)
        self._note_epoch(h)
        return h.size

    def _note_epoch(self, h: BatchHeader) -> None:
        if not self.epoch_starts or h.leader_epoch > self.epoch_starts[-1][0]:
            self.epoch_starts.append((h.leader_epoch, h.base_offset))

    def _check_contiguous(self, h: BatchHeader) -> None:
        if (
            h.base_offset < self.next_offset
            or h.last_offset - self.base_offset > MAX_RELATIVE_OFFSET
        ):
            raise CorruptRecordError(f"{self.path}: batch offset {h.base_offset} out of order")

    def _finish_recovery(self, valid: int, size: int) -> int:
        truncated = size - valid
        if truncated:
            try:
                os.ftruncate(self.file.fd, valid)
                os.fsync(self.file.fd)
            except OSError as e:
                raise StorageError(f"cannot truncate {self.path} to {valid}: {e}", e.errno) from e
            self.size = valid
            self.generation += 1
        self.verified_position = valid
        return truncated

    def load_indexes(self) -> bool:
        """Trust the on-disk indexes of a segment if they pass validation.

        Validation: fixed-width entries, both columns strictly increasing, positions
        inside the file, a sample of offset-index entries pointing at batch headers with
        the offset they claim, and the tail after the last entry parsing as whole batches.
        False if unusable (the caller rebuilds them with :meth:`recover`).
        """
        try:
            with open(self.index_path, "rb") as f:
                index = OffsetIndex.decode(f.read(), self.size)
            with open(self.timeindex_path, "rb") as f:
                tindex = TimeIndex.decode(f.read(), self.size)
        except OSError:
            return False
        if index is None or tindex is None or (self.size and not len(index)):
            return False
        if self.size and (index.positions[0] != 0 or not self._sample_ok(index, tindex)):
            return False
        tail = self._tail_batches(index)
        if tail is None:
            return False
        self.index, self.time_index = index, tindex
        self.next_offset = tail[-1][1].next_offset if tail else self.base_offset
        self.max_timestamp = tindex.max_timestamp
        self._max_ts_position = tindex.positions[-1] if len(tindex) else 0
        for pos, h in tail:
            if h.max_timestamp > self.max_timestamp:
                self.max_timestamp, self._max_ts_position = h.max_timestamp, pos
        self._bytes_since_index = self.index_interval_bytes  # next append gets an entry
        self.indexes_dirty = False
        return True

    def _sample_ok(self, index: OffsetIndex, tindex: TimeIndex) -> bool:
        """Evenly spaced entries point at batch headers that agree with them: the offset
        index's relative offset, the time index's max timestamp."""
        return self._sample(
            index, lambda h, k: h.base_offset == self.base_offset + k
        ) and self._sample(tindex, lambda h, k: h.max_timestamp == k)

    def _sample(self, index, agrees) -> bool:
        n = len(index)
        if not n:
            return True
        step = max(1, n // INDEX_SAMPLE_ENTRIES)
        for i in itertools.chain(range(0, n, step), (n - 1,)):
            try:
                h = records.read_header(os.pread(self.file.fd, HEADER_SIZE, index.positions[i]))
            except CorruptRecordError:
                return False
            if not agrees(h, index.keys[i]):
                return False
        return True

    def _tail_batches(self, index: OffsetIndex) -> list[tuple[int, BatchHeader]] | None:
        """Headers from the last index entry to the end (bounded by the index interval
        unless the index is stale, which then fails or costs one scan); None if torn."""
        if not self.size:
            return []
        try:
            return list(self.iter_headers(index.positions[-1]))
        except CorruptRecordError:
            return None

    # ------------------------------------------------------------------ reads

    def position_of(self, offset: int) -> tuple[int, BatchHeader] | None:
        """Position and header of the first batch whose last offset is >= ``offset``
        (the batch holding it, or the next one across a compaction gap); None: past the end."""
        entry = self.index.floor(offset - self.base_offset)
        start = entry[1] if entry else 0
        for pos, h in self.iter_headers(start):
            if h.last_offset >= offset:
                return pos, h
        return None

    def _recent_slice(
        self, offset: int, max_bytes: int, max_offset: int | None
    ) -> FileSlice | None:
        """The slice for a read among the latest batches, from memory; None if older."""
        recent = self._recent
        if not recent or offset < recent[0][0] or offset >= self.next_offset:
            return None
        i = len(recent) - 1
        while recent[i][0] > offset:  # scan back from the tail: tail reads stop at once
            i -= 1
        if offset >= recent[i][1]:  # a gap left by compaction: the next batch holds it
            i += 1
            if i == len(recent):
                return None
        base, nxt, start, size = recent[i]
        if max_offset is not None and base >= max_offset:
            return FileSlice(None, 0, 0, offset, offset)
        end, next_offset = start + size, nxt
        for b, n, pos, sz in itertools.islice(recent, i + 1, None):
            if pos + sz - start > max_bytes or (max_offset is not None and b >= max_offset):
                break
            end, next_offset = pos + sz, n
        self._verify_or_raise(start, end, base)
        tail = self.tail
        if tail is not None and tail[0] <= start and end <= tail[0] + len(tail[1]):
            cached = memoryview(tail[1])[start - tail[0]:end - tail[0]]
            return FileSlice(self.file, start, end - start, base, next_offset, cached)
        return FileSlice(self.file, start, end - start, base, next_offset)

    def slice(self, offset: int, max_bytes: int, max_offset: int | None) -> FileSlice:
        """Whole batches from the one holding ``offset``: at least one batch (below
        ``max_offset``), then more while they fit in ``max_bytes``."""
        fast = self._recent_slice(offset, max_bytes, max_offset)
        if fast is not None:
            return fast
        found = self.position_of(offset)
        if found is None:
            return FileSlice(None, 0, 0, offset, offset)
        start, first = found
        if max_offset is not None and first.base_offset >= max_offset:
            return FileSlice(None, 0, 0, offset, offset)
        end, next_offset = start + first.size, first.next_offset
        for pos, h in self.iter_headers(end):
            if pos + h.size - start > max_bytes or (
                max_offset is not None and h.base_offset >= max_offset
            ):
                break
            end, next_offset = pos + h.size, h.next_offset
        self._verify_or_raise(start, end, first.base_offset)
        return FileSlice(self.file, start, end - start, first.base_offset, next_offset)

    def _verify_or_raise(self, start: int, end: int, near_offset: int) -> None:
        try:
            self._verify(start, end)
        except CorruptRecordError as e:
            raise CorruptRecordError(
                f"{self.path}: batch near offset {near_offset} is corrupt and is not served: {e}"
            ) from None

    def _verify(self, start: int, end: int) -> None:
        """CRC-check bytes not yet verified in [start, end) before serving them."""
        if end <= self.verified_position:
            return
        if start > self.verified_position:
            self._verify_range(start, end)
            return
        self._verify_range(self.verified_position, end)
        self.verified_position = end

    def _verify_range(self, start: int, end: int) -> None:
        """Raise CorruptRecordError unless [start, end) is whole batches with good CRCs
        and offsets inside this segment, increasing (the CRC does not cover offsets)."""
        pos, prev_next = start, self.base_offset
        while pos < end:
            data = os.pread(self.file.fd, min(SCAN_CHUNK_BYTES, end - pos), pos)
            done, found = 0, list(records.iter_batches(data, verify=True, allow_partial=True))
            if not found:  # one batch bigger than a chunk
                h = records.read_header(os.pread(self.file.fd, HEADER_SIZE, pos))
                records.verify_crc(_pread_exact(self.file.fd, h.size, pos), 0, h)
                found = [(0, h)]
            for p, h in found:
                if h.base_offset < prev_next or h.last_offset >= self.next_offset:
                    raise CorruptRecordError(
                        f"batch at position {pos + p} has offsets {h.base_offset}..{h.last_offset} "
                        f"outside [{prev_next}, {self.next_offset})"
                    )
                prev_next, done = h.next_offset, p + h.size
            pos += done

    # ------------------------------------------------------------------ lifecycle

    def truncate_to_position(self, position: int, next_offset: int) -> None:
        """Cut the file at ``position`` (a batch start); the segment ends at ``next_offset``.

        Durable when it returns: not yet (call :meth:`flush`).
        """
        assert 0 <= position <= self.size
        while self._recent and self._recent[-1][2] >= position:
            self._recent.pop()
        self.tail = None
        try:
            os.ftruncate(self.file.fd, position)
        except OSError as e:
            raise StorageError(f"cannot truncate {self.path}: {e}", e.errno) from e
        self.size = position
        self.generation += 1
        self.index.truncate_to_position(position)
        self.time_index.truncate_to_position(position)
        self.next_offset = next_offset
        self.verified_position = min(self.verified_position, position)
        self._rescan_max_timestamp()
        self._bytes_since_index = self.index_interval_bytes
        self.dirty = self.indexes_dirty = True

    def _rescan_max_timestamp(self) -> None:
        """After a cut: the max timestamp of what is left (time index, then the headers
        after the last offset-index entry -- at most ``index.interval.bytes`` of them)."""
        t = self.time_index
        self.max_timestamp = t.max_timestamp
        self._max_ts_position = t.positions[-1] if len(t) else 0
        start = self.index.positions[-1] if len(self.index) else 0
        for pos, h in self.iter_headers(start):
            if h.max_timestamp > self.max_timestamp:
                self.max_timestamp, self._max_ts_position = h.max_timestamp, pos

    def adopt(self, cleaned: LogSegment) -> None:
        """Replace this segment's bytes with ``cleaned`` (a compacted rewrite of it, already
        scanned and indexed). Quick: unlink old indexes, rename, fsync the directory.
        Readers holding a FileSlice of the old file keep reading the old bytes."""
        assert cleaned.base_offset == self.base_offset and cleaned.size <= self.size
        for p in (self.index_path, self.timeindex_path):
            try:
                os.unlink(p)  # a crash before the rename then rebuilds the old indexes
            except FileNotFoundError:
                pass
        os.replace(cleaned.path, self.path)
        fsync_dir(self.directory)
        self.file, cleaned.file = cleaned.file, SegmentFile.closed()
        self.size = cleaned.size
        self.index, self.time_index = cleaned.index, cleaned.time_index
        self.max_timestamp, self._max_ts_position = cleaned.max_timestamp, cleaned._max_ts_position
        self.verified_position = cleaned.verified_position
        self._recent.clear()  # positions moved
        self.tail = None
        self.generation += 1
        self.indexes_dirty = True

    def write_indexes(self, *, sync: bool = False) -> None:
        """Write the index files if they changed (fsynced only when ``sync``)."""
        if not self.indexes_dirty:
            return
        write = atomic_write if sync else write_file
        write(self.index_path, self.index.encode())
        write(self.timeindex_path, self.time_index.encode())
        self.indexes_dirty = False

    def flush(self) -> None:
        """fsync the log file and write the indexes (fsynced). Durable when it returns."""
        try:
            os.fsync(self.file.fd)
        except OSError as e:
            raise StorageError(f"flush of {self.path} failed: {e}", e.errno) from e
        self.dirty = False
        self.write_indexes(sync=True)

    def close(self) -> None:
        """Drop this segment's reference to its file; the fd closes when no FileSlice
        holds it any more (never under a sender)."""
        self.file = SegmentFile.closed()

    def delete(self) -> None:
        """Unlink the files; the fd closes when the last FileSlice is gone."""
        txnindex = self.path[: -len(LOG_SUFFIX)] + ".txnindex"
        for p in (self.path, self.index_path, self.timeindex_path, txnindex):
            try:
                os.unlink(p)
            except FileNotFoundError:
                pass
            except OSError as e:
                raise StorageError(f"cannot delete {p}: {e}") from e
        self.close()


def iter_file_headers(fd: int, path: str, position: int, end: int):
    """Yield (position, header) of the batches in ``fd`` from ``position`` to ``end``.

    Raises CorruptRecordError on an unparseable header or a batch running past ``end``.
    """
    while position < end:
        if end - position < HEADER_SIZE:
            raise CorruptRecordError(f"{path}: partial batch header at position {position}")
        h = records.read_header(os.pread(fd, HEADER_SIZE, position))
        if position + h.size > end:
            raise CorruptRecordError(f"{path}: batch at position {position} runs past the end")
        yield position, h
        position += h.size
