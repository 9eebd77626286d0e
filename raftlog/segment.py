"""One log segment: ``<base_offset:020d>.log`` plus its sparse ``.index`` and ``.timeindex``.

The ``.log`` file is a sequence of record batches (records.py). A segment's file
descriptor lives in a :class:`SegmentFile` that closes itself when the last
reference goes: a :class:`FileSlice` handed to a server for ``os.sendfile`` keeps
it open, so retention, compaction or truncation may drop the segment while a
fetch response is still being sent.

Every batch read back from disk is CRC-checked once per process before it is
served (``verified_position``); batches appended by this process were checked on
the way in. A corrupt batch is never served: reads raise CorruptRecordError.
"""

from __future__ import annotations

import itertools
import os
from collections import deque
from dataclasses import dataclass

from raftlog import records
from raftlog.checkpoint import atomic_write
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
#: Relative offsets are u32 in the index: roll before a segment spans more offsets.
MAX_RELATIVE_OFFSET = 2**31 - 1


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


@dataclass(frozen=True, slots=True)
class FileSlice:
    """Bytes ``[position, position + length)`` of an open segment file.

    Hand ``fileno``/``position``/``length`` to ``os.sendfile``; ``file`` keeps the
    descriptor open as long as the slice lives. ``next_offset`` is the offset
    after the last batch in the slice.
    """

    file: SegmentFile | None
    position: int
    length: int
    first_offset: int
    next_offset: int

    @property
    def fileno(self) -> int:
        return self.file.fd if self.file is not None else -1

    def read_bytes(self) -> bytes:
        if not self.length:
            return b""
        return _pread_exact(self.file.fd, self.length, self.position)


EMPTY_SLICE_FILE = None


def _pread_exact(fd: int, n: int, pos: int) -> bytes:
    data = os.pread(fd, n, pos)
    if len(data) != n:
        raise CorruptRecordError(f"expected {n} bytes at position {pos}, file ended after {len(data)}")
    return data


class LogSegment:
    """A segment of a partition log. Not thread-safe: the log serialises access."""

    def __init__(self, directory: str, base_offset: int, index_interval_bytes: int):
        self.directory = directory
        self.base_offset = base_offset
        self.index_interval_bytes = index_interval_bytes
        self.path = os.path.join(directory, segment_name(base_offset))
        self.file = SegmentFile(self.path)
        self.size = os.fstat(self.file.fd).st_size
        self.index = OffsetIndex()
        self.time_index = TimeIndex()
        self.next_offset = base_offset
        self.max_timestamp = -1
        self.created_ms: int | None = None
        self.verified_position = 0
        self._bytes_since_index = 0
        self.dirty = False  # appended since the last flush
        # (base_offset, next_offset, position, size) of the latest batches, oldest first
        self._recent: deque = deque(maxlen=RECENT_BATCHES)

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

        Raises:
            StorageError: the write failed; the file is cut back to its old size.
        """
        assert headers and headers[0][1].base_offset == self.next_offset
        start = self.size
        try:
            view = memoryview(data)
            written = 0
            while written < len(data):
                written += os.pwrite(self.file.fd, view[written:], start + written)
        except OSError as e:
            self._cut_back(start)
            raise StorageError(f"append to {self.path} failed: {e}") from e
        for pos, h in headers:
            self._index_batch(start + pos, h)
        self.size = start + len(data)
        self.verified_position = self.size
        self.dirty = True

    def _cut_back(self, size: int) -> None:
        try:
            os.ftruncate(self.file.fd, size)
        except OSError:
            pass

    def _index_batch(self, position: int, h: BatchHeader) -> None:
        if self._bytes_since_index >= self.index_interval_bytes or not len(self.index):
            self.index.append(h.base_offset - self.base_offset, position)
            self._bytes_since_index = 0
            if h.max_timestamp > self.time_index.max_timestamp:
                self.time_index.append(h.max_timestamp, position)
        self._bytes_since_index += h.size
        self._recent.append((h.base_offset, h.next_offset, position, h.size))
        if h.max_timestamp > self.max_timestamp:
            self.max_timestamp = h.max_timestamp
        self.next_offset = h.next_offset

    # ------------------------------------------------------------------ scanning

    def iter_headers(self, position: int = 0, end: int | None = None):
        """Yield (position, header) of batches from ``position`` (a batch start).

        Raises CorruptRecordError on an unparseable header or a batch running
        past ``end`` (default: the segment size).
        """
        end = self.size if end is None else end
        fd = self.file.fd
        while position < end:
            if end - position < HEADER_SIZE:
                raise CorruptRecordError(f"{self.path}: partial batch header at position {position}")
            h = records.read_header(os.pread(fd, HEADER_SIZE, position))
            if position + h.size > end:
                raise CorruptRecordError(f"{self.path}: batch at position {position} runs past the end")
            yield position, h
            position += h.size

    def recover(self) -> int:
        """Scan every batch, verify CRCs, cut a torn or corrupt tail, rebuild indexes.

        Returns the bytes truncated. Durable when it returns (the file is fsynced if cut).
        """
        self.index, self.time_index = OffsetIndex(), TimeIndex()
        self._bytes_since_index = 0
        self._recent.clear()
        self.next_offset, self.max_timestamp = self.base_offset, -1
        valid, size = 0, self.size
        while valid < size:
            chunk = os.pread(self.file.fd, min(SCAN_CHUNK_BYTES, size - valid), valid)
            consumed = self._scan_chunk(chunk, valid)
            if consumed == 0:
                consumed = self._scan_big_batch(valid, size)
                if consumed == 0:
                    break
            valid += consumed
        return self._finish_recovery(valid, size)

    def _scan_chunk(self, chunk: bytes, offset_in_file: int) -> int:
        """Index the valid whole batches at the start of ``chunk``; bytes consumed."""
        consumed = 0
        try:
            for pos, h in records.iter_batches(chunk, verify=True, allow_partial=True):
                self._check_contiguous(h)
                self._index_batch(offset_in_file + pos, h)
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
        return h.size

    def _check_contiguous(self, h: BatchHeader) -> None:
        if h.base_offset < self.next_offset or h.base_offset - self.base_offset > MAX_RELATIVE_OFFSET:
            raise CorruptRecordError(f"{self.path}: batch offset {h.base_offset} out of order")

    def _finish_recovery(self, valid: int, size: int) -> int:
        truncated = size - valid
        if truncated:
            os.ftruncate(self.file.fd, valid)
            os.fsync(self.file.fd)
            self.size = valid
        self.verified_position = valid
        return truncated

    def load_indexes(self) -> bool:
        """Trust the on-disk indexes of a cleanly closed segment. False if unusable."""
        try:
            with open(self.index_path, "rb") as f:
                index = OffsetIndex.decode(f.read(), self.size)
            with open(self.timeindex_path, "rb") as f:
                tindex = TimeIndex.decode(f.read(), self.size)
        except OSError:
            return False
        if index is None or tindex is None or (self.size and not len(index)):
            return False
        last = self._last_batch(index)
        if last is None:
            return False
        self.index, self.time_index = index, tindex
        self.next_offset = last.next_offset if self.size else self.base_offset
        self.max_timestamp = tindex.max_timestamp
        self._bytes_since_index = self.index_interval_bytes  # next append gets an entry
        return True

    def _last_batch(self, index: OffsetIndex):
        if not self.size:
            return BatchHeader(self.base_offset, 0, 0, 0, 0, 0, -1, 0, 0, 0, 0, 0, 0)
        last = None
        try:
            for _, h in self.iter_headers(index.positions[-1]):
                last = h
        except CorruptRecordError:
            return None
        return last

    # ------------------------------------------------------------------ reads

    def position_of(self, offset: int) -> tuple[int, BatchHeader] | None:
        """Position and header of the batch holding ``offset`` (None: past the end)."""
        entry = self.index.floor(offset - self.base_offset)
        start = entry[1] if entry else 0
        for pos, h in self.iter_headers(start):
            if h.last_offset >= offset:
                return pos, h
        return None

    def _recent_slice(self, offset: int, max_bytes: int, max_offset: int | None) -> FileSlice | None:
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
            if pos + h.size - start > max_bytes or (max_offset is not None and h.base_offset >= max_offset):
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
        while self._recent and self._recent[-1][2] >= position:
            self._recent.pop()
        os.ftruncate(self.file.fd, position)
        self.size = position
        self.index.truncate_to_position(position)
        self.time_index.truncate_to_position(position)
        self.next_offset = next_offset
        self.verified_position = min(self.verified_position, position)
        self.max_timestamp = self.time_index.max_timestamp
        self._bytes_since_index = self.index_interval_bytes
        self.dirty = True

    def flush(self) -> None:
        """fsync the log file and write the indexes. Durable when it returns."""
        try:
            os.fsync(self.file.fd)
            atomic_write(self.index_path, self.index.encode())
            atomic_write(self.timeindex_path, self.time_index.encode())
        except OSError as e:
            raise StorageError(f"flush of {self.path} failed: {e}") from e
        self.dirty = False

    def close(self) -> None:
        self.file.close()

    def delete(self) -> None:
        """Unlink the files; the fd closes when the last FileSlice is gone."""
        for p in (self.path, self.index_path, self.timeindex_path):
            try:
                os.unlink(p)
            except FileNotFoundError:
                pass
        self.file = SegmentFile.__new__(SegmentFile)
        self.file.fd = -1
