"""Atomic, checksummed checkpoint files.

``atomic_write`` is the one way raftlog replaces a small file: write a temp file,
fsync it, rename it over the target, fsync the directory. Durable when it returns;
a crash leaves either the old or the new file, never a mix.

A partition's checkpoint (``partition.checkpoint``) holds its recovery point, log
start offset, high watermark and leader-epoch cache as CBOR, followed by a CRC32C
of that CBOR. A damaged checkpoint reads as ``None``: the caller falls back to a
full recovery scan rather than trusting it.
"""

from __future__ import annotations

import os
import struct
from dataclasses import dataclass, field

import cbor2
import crc32c

from raftlog.errors import StorageError

CHECKPOINT_VERSION = 1
_CRC = struct.Struct("<I")


def fsync_dir(path: str) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def makedirs_durable(path: str) -> bool:
    """Create the directory ``path`` and its missing parents so that each new name
    survives a power loss: every directory created is followed by an fsync of its
    parent (a new directory entry is durable only once its directory is fsynced).
    Returns True if anything was created. Durable when it returns.

    Raises:
        OSError: a directory cannot be created or synced.
    """
    path = os.path.abspath(path)
    if os.path.isdir(path):
        return False
    parent = os.path.dirname(path)
    if parent != path:
        makedirs_durable(parent)
    try:
        os.mkdir(path)
    except FileExistsError:
        if not os.path.isdir(path):
            raise
    fsync_dir(parent)
    return True


def write_all(fd: int, data) -> None:
    """os.write until every byte is written (short writes happen)."""
    view = memoryview(data)
    while view:
        n = os.write(fd, view)
        if n <= 0:  # never for regular files; keeps the loop bounded if it happens
            raise OSError(f"write returned {n}")
        view = view[n:]


def write_file(path: str, data: bytes) -> None:
    """Replace ``path`` with ``data`` via a temp file and rename, without fsync.

    For disposable files (indexes): a crash may leave the old file, the new one, or
    (after power loss) a damaged one, which the reader validates and rebuilds.

    Raises:
        StorageError: the write or rename failed.
    """
    _replace(path, data, durable=False)


def atomic_write(path: str, data: bytes) -> None:
    """Replace ``path`` with ``data`` atomically and durably.

    Raises:
        StorageError: the write, fsync or rename failed (the old file is intact).
    """
    _replace(path, data, durable=True)


def _replace(path: str, data: bytes, durable: bool) -> None:
    """Write a temp file and rename it over ``path``; with ``durable``, fsync the file
    before and the directory after the rename."""
    tmp = path + ".tmp"
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            write_all(fd, data)
            if durable:
                os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, path)
        if durable:
            fsync_dir(os.path.dirname(os.path.abspath(path)))
    except OSError as e:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise StorageError(f"cannot write {path}: {e}", e.errno) from e


@dataclass
class PartitionCheckpoint:
    recovery_point: int = 0
    log_start_offset: int = 0
    high_watermark: int = 0
    #: leader-epoch cache: [(epoch, start_offset)], both strictly increasing.
    epochs: list = field(default_factory=list)
    #: offset ranges [(start, end)] that recovery found damaged below the recovery
    #: point (data once fsynced): gaps between segments, never served
    #: (raftlog/log.py, ``PartitionLog.lost``); absent from older checkpoints
    lost: list = field(default_factory=list)

    def encode(self) -> bytes:
        body = cbor2.dumps(
            {
                "v": CHECKPOINT_VERSION,
                "recovery_point": self.recovery_point,
                "log_start_offset": self.log_start_offset,
                "high_watermark": self.high_watermark,
                "epochs": [list(e) for e in self.epochs],
                **({"lost": [list(r) for r in self.lost]} if self.lost else {}),
            }
        )
        return body + _CRC.pack(crc32c.crc32c(body))

    @classmethod
    def decode(cls, data: bytes) -> PartitionCheckpoint | None:
        """Parse a checkpoint; None if it is damaged or of an unknown version."""
        if len(data) < 5:
            return None
        body, (crc,) = data[:-4], _CRC.unpack(data[-4:])
        if crc32c.crc32c(body) != crc:
            return None
        try:
            d = cbor2.loads(body)
            if d.get("v") != CHECKPOINT_VERSION:
                return None
            cp = cls(
                int(d["recovery_point"]),
                int(d["log_start_offset"]),
                int(d["high_watermark"]),
                [(int(e), int(o)) for e, o in d["epochs"]],
                [(int(a), int(b)) for a, b in d.get("lost", ())],
            )
        except Exception:
            return None
        if min(cp.recovery_point, cp.log_start_offset, cp.high_watermark) < 0:
            return None
        if any(not 0 <= a < b for a, b in cp.lost):
            return None
        return cp

    @classmethod
    def read(cls, path: str) -> PartitionCheckpoint | None:
        try:
            with open(path, "rb") as f:
                return cls.decode(f.read())
        except FileNotFoundError:
            return None
        except OSError as e:
            raise StorageError(f"cannot read {path}: {e}") from e

    def write(self, path: str) -> None:
        atomic_write(path, self.encode())
