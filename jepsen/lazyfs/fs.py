"""The FUSE side of lazyfs: a pass-through to the backing directory that tells the
:class:`~raftlog.jepsen.lazyfs.ledger.Ledger` about every change before making it.

One thread serves FUSE (``-s``); the control socket runs on another, and every
operation holds :attr:`LazyFS.mutex`, so a crash never meets a half-done operation.
The kernel caches nothing across a crash: entry, attribute and negative timeouts are
0, and files are opened without ``keep_cache`` (the page cache of a file is dropped
at each open). Writes are write-through (no ``writeback_cache``), so a write() has
reached the ledger when it returns. Open-but-unlinked files stay usable
(``hard_remove``: no ``.fuse_hidden`` renames; the ledger keeps them in its trash).
"""

from __future__ import annotations

import errno
import os
import sys
import threading
from dataclasses import dataclass

import mfusepy as fuse

from .ledger import Ledger, LedgerFull

#: Open files at once (each holds one descriptor of the backing file).
HANDLES_MAX = 4096
_STRIP_FLAGS = os.O_CREAT | os.O_EXCL | os.O_TRUNC | os.O_APPEND | os.O_NOCTTY


@dataclass
class Handle:
    fd: int  # -1 once a crash made it stale
    ino: int


def _locked(fn):
    def wrapper(self, *args):
        with self.mutex:
            try:
                return fn(self, *args)
            except LedgerFull as e:
                print(f"lazyfs: {fn.__name__}: {e.strerror}", file=sys.stderr, flush=True)
                raise fuse.FuseOSError(errno.ENOSPC) from e

    wrapper.__name__ = fn.__name__
    return wrapper


class LazyFS(fuse.Operations):
    use_ns = True

    def __init__(self, ledger: Ledger):
        self.ledger = ledger
        self.mutex = threading.RLock()
        self.handles: dict[int, Handle] = {}
        self.dir_handles: dict[int, tuple[str, int]] = {}  # fh -> (path, inode)
        self._next_fh = 1

    # ------------------------------------------------------------------ helpers

    def _b(self, path: str) -> str:
        return self.ledger.backing(path)

    def _parent(self, path: str) -> str:
        return os.path.dirname(self._b(path).rstrip("/")) or "/"

    def _handle(self, fh) -> Handle:
        h = self.handles.get(fh)
        if h is None or h.fd < 0:
            raise fuse.FuseOSError(errno.EIO)  # stale: opened before a crash
        return h

    def _new_handle(self, fd: int) -> int:
        if len(self.handles) >= HANDLES_MAX:
            os.close(fd)
            raise fuse.FuseOSError(errno.EMFILE)
        fh, self._next_fh = self._next_fh, self._next_fh + 1
        self.handles[fh] = Handle(fd, os.fstat(fd).st_ino)
        return fh

    # ------------------------------------------------------------------ lifecycle

    def init_with_config(self, conn_info, config) -> None:
        if config is not None:
            config.hard_remove = 1
            config.entry_timeout = 0.0
            config.negative_timeout = 0.0
            config.attr_timeout = 0.0
            config.kernel_cache = 0
            config.auto_cache = 0
            config.direct_io = 0

    def crash(self) -> dict:
        """Power loss: every handle goes stale, the ledger drops what was not synced."""
        with self.mutex:
            for h in self.handles.values():
                if h.fd >= 0:
                    os.close(h.fd)
                    h.fd = -1
            self.dir_handles.clear()
            return self.ledger.crash()

    def destroy(self, path) -> None:
        with self.mutex:
            for h in self.handles.values():
                if h.fd >= 0:
                    os.close(h.fd)
                    h.fd = -1
            self.ledger.close()

    # ------------------------------------------------------------------ metadata

    @_locked
    def getattr(self, path, fh=None):
        st = os.fstat(self._handle(fh).fd) if fh is not None else os.lstat(self._b(path))
        return {"st_mode": st.st_mode, "st_nlink": st.st_nlink, "st_size": st.st_size,
                "st_uid": st.st_uid, "st_gid": st.st_gid, "st_blocks": st.st_blocks,
                "st_blksize": st.st_blksize, "st_atime": st.st_atime_ns,
                "st_mtime": st.st_mtime_ns, "st_ctime": st.st_ctime_ns}

    @_locked
    def access(self, path, amode):
        if not os.access(self._b(path), amode):
            raise fuse.FuseOSError(errno.EACCES)
        return 0

    @_locked
    def chmod(self, path, mode):
        os.chmod(self._b(path), mode)
        return 0

    @_locked
    def chown(self, path, uid, gid):
        os.lchown(self._b(path), uid, gid)
        return 0

    @_locked
    def utimens(self, path, times=None):
        os.utime(self._b(path), ns=times, follow_symlinks=False)
        return 0

    @_locked
    def statfs(self, path):
        sv = os.statvfs(self.ledger.root)
        return {k: getattr(sv, k) for k in ("f_bsize", "f_frsize", "f_blocks", "f_bfree",
                                            "f_bavail", "f_files", "f_ffree", "f_favail",
                                            "f_flag", "f_namemax")}

    @_locked
    def readlink(self, path):
        return os.readlink(self._b(path))

    # ------------------------------------------------------------------ directories

    @_locked
    def opendir(self, path):
        if len(self.dir_handles) >= HANDLES_MAX:
            raise fuse.FuseOSError(errno.EMFILE)
        fh, self._next_fh = self._next_fh, self._next_fh + 1
        self.dir_handles[fh] = (path, os.lstat(self._b(path)).st_ino)
        return fh

    @_locked
    def releasedir(self, path, fh):
        self.dir_handles.pop(fh, None)
        return 0

    @_locked
    def readdir(self, path, fh):
        if path is None:
            path = self.dir_handles.get(fh, ("/", 0))[0]
        b = self._b(path)
        return [".", "..", *os.listdir(b)]

    @_locked
    def fsyncdir(self, path, datasync, fh):
        d = self.dir_handles.get(fh)
        if d is None:
            raise fuse.FuseOSError(errno.EIO)  # stale: opened before a crash
        self.ledger.dir_synced(d[1])
        return 0

    @_locked
    def mkdir(self, path, mode):
        b = self._b(path)
        self.ledger.before_dir_change(self._parent(path))
        os.mkdir(b, mode)
        return 0

    @_locked
    def rmdir(self, path):
        b = self._b(path)
        if not os.path.isdir(b) or os.path.islink(b):
            raise fuse.FuseOSError(errno.ENOTDIR)
        if os.listdir(b):
            raise fuse.FuseOSError(errno.ENOTEMPTY)
        self.ledger.before_dir_change(self._parent(path))
        self.ledger.remove(b)
        return 0

    @_locked
    def unlink(self, path):
        b = self._b(path)
        if os.path.isdir(b) and not os.path.islink(b):
            raise fuse.FuseOSError(errno.EISDIR)
        self.ledger.before_dir_change(self._parent(path))
        self.ledger.remove(b)
        return 0

    @_locked
    def symlink(self, target, source):
        b = self._b(target)
        self.ledger.before_dir_change(self._parent(target))
        os.symlink(source, b)
        return 0

    @_locked
    def link(self, target, source):
        raise fuse.FuseOSError(errno.EPERM)  # hard links: not modelled (one name per inode)

    @_locked
    def mknod(self, path, mode, dev):
        raise fuse.FuseOSError(errno.EPERM)

    @_locked
    def rename(self, old, new):
        bo, bn = self._b(old), self._b(new)
        st = os.lstat(bo)
        self.ledger.before_dir_change(self._parent(old))
        self.ledger.before_dir_change(self._parent(new))
        try:
            tn = os.lstat(bn)
        except FileNotFoundError:
            tn = None
        if tn is not None and tn.st_ino != st.st_ino:
            if os.path.isdir(bn) and not os.path.islink(bn):
                if not os.path.isdir(bo):
                    raise fuse.FuseOSError(errno.EISDIR)
                if os.listdir(bn):
                    raise fuse.FuseOSError(errno.ENOTEMPTY)
            elif os.path.isdir(bo) and not os.path.islink(bo):
                raise fuse.FuseOSError(errno.ENOTDIR)
            self.ledger.remove(bn)  # the replaced one, kept for a crash
        os.rename(bo, bn)
        return 0

    # ------------------------------------------------------------------ files

    @_locked
    def create(self, path, mode, flags=0):
        b = self._b(path)
        self.ledger.before_dir_change(self._parent(path))
        fd = os.open(b, os.O_RDWR | os.O_CREAT | (flags & os.O_EXCL), mode)
        return self._new_handle(fd)

    @_locked
    def open(self, path, flags):
        b = self._b(path)
        fd = os.open(b, os.O_RDWR if os.path.isfile(b) else flags & ~_STRIP_FLAGS)
        fh = self._new_handle(fd)
        if flags & os.O_TRUNC:
            h = self.handles[fh]
            self.ledger.before_truncate(fd, h.ino, 0)
            os.ftruncate(fd, 0)
        return fh

    @_locked
    def read(self, path, size, offset, fh):
        return os.pread(self._handle(fh).fd, size, offset)

    @_locked
    def write(self, path, data, offset, fh):
        h = self._handle(fh)
        self.ledger.before_write(h.fd, h.ino, offset, len(data))
        return os.pwrite(h.fd, data, offset)

    @_locked
    def truncate(self, path, length, fh=None):
        if fh is not None:
            h = self._handle(fh)
            self.ledger.before_truncate(h.fd, h.ino, length)
            os.ftruncate(h.fd, length)
            return 0
        fd = os.open(self._b(path), os.O_RDWR)
        try:
            self.ledger.before_truncate(fd, os.fstat(fd).st_ino, length)
            os.ftruncate(fd, length)
        finally:
            os.close(fd)
        return 0

    @_locked
    def fsync(self, path, datasync, fh):
        # fsync and fdatasync alike make the data durable (the size with it); the
        # backing file itself is never fsynced: only this ledger models durability
        self.ledger.synced(self._handle(fh).ino)
        return 0

    @_locked
    def flush(self, path, fh):
        return 0

    @_locked
    def release(self, path, fh):
        h = self.handles.pop(fh, None)
        if h is not None and h.fd >= 0:
            os.close(h.fd)
        return 0
