"""The undo ledger of a lazyfs backing directory: what a power loss would take back.

Pure bookkeeping over a real directory (no FUSE here, so it is tested directly):
:class:`Ledger` is told about every change *before* it is made to the backing
directory, saves what that change would destroy of the durable state, and on
:meth:`Ledger.crash` puts the durable state back.

File data. Per regular file (keyed by the backing inode number, which survives
renames), from its first change since its last fsync: the durable size (its size at
that moment: everything before it was durable) and the original bytes of every
4 KiB page below that size that a write or a truncate is about to change. fsync or
fdatasync forgets both (the current content is now the durable one). A crash cuts
the file back to its durable size and writes the saved pages back.

Directory entries. Per directory, from its first change since its last fsync: its
listing (name -> inode) at that moment, which is its durable listing. Unlinked files
and removed directories are not deleted but moved into the trash
(``<BACKING>.lazyfs/trash``, beside the backing directory and on its filesystem,
so the backing directory holds nothing but the files), so a crash can bring them back; fsync of a directory
forgets its listing and deletes the trash that no remaining saved listing names. A
crash walks the durable tree from the root (a directory's saved listing if it has
one, else its current entries), and when that differs from what is there, rebuilds
the backing directory to exactly that tree (files moved by rename, so their inodes
and undo records still match; a file named by two durable listings is copied).

Bounds (:class:`Limits`): the bytes written since the files' last fsync, the bytes
of saved pages, the saved directory entries and the trash entries. A change that
would pass one raises :class:`LedgerFull` (the filesystem answers ENOSPC and logs
it) and is not made: never a silent drop.
"""

from __future__ import annotations

import os
import shutil
import stat
from dataclasses import dataclass, field

PAGE_BYTES = 4096
#: Paths named per kind in what a crash reports.
PATHS_REPORTED = 20


class LedgerFull(OSError):
    """A bound of the ledger would be passed: the change was not made."""


@dataclass(frozen=True)
class Limits:
    unsynced_bytes_max: int = 512 << 20
    saved_bytes_max: int = 128 << 20
    dir_entries_max: int = 200_000
    trash_entries_max: int = 100_000


@dataclass
class FileUndo:
    durable_size: int
    pages: dict[int, bytes] = field(default_factory=dict)  # page index -> durable bytes
    written: int = 0  # bytes written since the last fsync

    @property
    def saved_bytes(self) -> int:
        return sum(len(b) for b in self.pages.values())


class Ledger:
    """Undo bookkeeping for the backing directory ``root`` (absolute path)."""

    def __init__(self, root: str, limits: Limits = Limits(), state_dir: str | None = None):
        """``state_dir`` (default ``<root>.lazyfs``) holds the trash; it must be on
        the backing directory's filesystem (files move there by rename)."""
        self.root = os.path.abspath(root)
        self.limits = limits
        self.state_dir = os.path.abspath(state_dir or self.root.rstrip("/") + ".lazyfs")
        self.trash_dir = os.path.join(self.state_dir, "trash")
        self.files: dict[int, FileUndo] = {}
        self.dirs: dict[int, dict[str, int]] = {}  # dir inode -> durable listing
        self.trashed: dict[int, str] = {}  # inode -> its path in the trash
        self.unsynced_bytes = 0
        self.saved_bytes = 0
        self.dir_entries = 0
        self.full_errors = 0
        self.crashes = 0
        self._trash_seq = 0
        shutil.rmtree(self.state_dir, ignore_errors=True)
        os.makedirs(self.trash_dir)
        if os.stat(self.trash_dir).st_dev != os.stat(self.root).st_dev:
            raise ValueError(f"{self.state_dir} is not on the filesystem of {self.root}")

    def backing(self, path: str) -> str:
        """The backing path of a mount path (``/a/b``)."""
        return os.path.join(self.root, path.lstrip("/"))

    # ------------------------------------------------------------------ file data

    def _full(self, what: str) -> LedgerFull:
        self.full_errors += 1
        import errno

        return LedgerFull(errno.ENOSPC, f"lazyfs ledger full: {what}")

    def _undo_for(self, fd: int, ino: int) -> FileUndo:
        u = self.files.get(ino)
        if u is None:
            u = self.files[ino] = FileUndo(os.fstat(fd).st_size)
        return u

    def _save_pages(self, fd: int, u: FileUndo, start: int, end: int) -> None:
        """Save the durable bytes of every page meeting [start, end) below the durable
        size, unless saved already."""
        end = min(end, u.durable_size)
        if start >= end:
            return
        first, last = start // PAGE_BYTES, (end - 1) // PAGE_BYTES
        missing = [p for p in range(first, last + 1) if p not in u.pages]
        need = sum(min(PAGE_BYTES, u.durable_size - p * PAGE_BYTES) for p in missing)
        if self.saved_bytes + need > self.limits.saved_bytes_max:
            raise self._full(f"saved pages {self.saved_bytes} + {need} > "
                             f"{self.limits.saved_bytes_max} bytes")
        for p in missing:
            n = min(PAGE_BYTES, u.durable_size - p * PAGE_BYTES)
            data = os.pread(fd, n, p * PAGE_BYTES)
            assert len(data) == n, (len(data), n)  # nothing below the durable size moved
            u.pages[p] = data
        self.saved_bytes += need

    def before_write(self, fd: int, ino: int, offset: int, length: int) -> None:
        """Called before ``length`` bytes are written at ``offset`` of the file."""
        if self.unsynced_bytes + length > self.limits.unsynced_bytes_max:
            raise self._full(f"unsynced writes {self.unsynced_bytes} + {length} > "
                             f"{self.limits.unsynced_bytes_max} bytes")
        u = self._undo_for(fd, ino)
        self._save_pages(fd, u, offset, offset + length)
        u.written += length
        self.unsynced_bytes += length

    def before_truncate(self, fd: int, ino: int, size: int) -> None:
        """Called before the file is cut or extended to ``size``."""
        u = self._undo_for(fd, ino)
        self._save_pages(fd, u, size, u.durable_size)

    def synced(self, ino: int) -> None:
        """fsync / fdatasync of the file: its current content is durable."""
        u = self.files.pop(ino, None)
        if u is not None:
            self.unsynced_bytes -= u.written
            self.saved_bytes -= u.saved_bytes

    # ------------------------------------------------------------------ directories

    def before_dir_change(self, dir_path: str) -> None:
        """Called before an entry of the directory (backing path) is created, renamed
        or removed."""
        ino = os.lstat(dir_path).st_ino
        if ino in self.dirs:
            return
        names = os.listdir(dir_path)
        if self.dir_entries + len(names) + 1 > self.limits.dir_entries_max:
            raise self._full(f"saved directory entries {self.dir_entries} + {len(names)} > "
                             f"{self.limits.dir_entries_max}")
        self.dirs[ino] = {n: os.lstat(os.path.join(dir_path, n)).st_ino for n in names}
        self.dir_entries += len(names) + 1

    def remove(self, path: str) -> None:
        """Unlink a file or remove an empty directory (backing path): moved to the trash,
        so a crash can bring it back. The caller saved the parent's listing."""
        if len(self.trashed) >= self.limits.trash_entries_max:
            raise self._full(f"trash entries {len(self.trashed)} >= "
                             f"{self.limits.trash_entries_max}")
        st = os.lstat(path)
        if stat.S_ISDIR(st.st_mode) and os.listdir(path):
            import errno

            raise OSError(errno.ENOTEMPTY, "directory not empty", path)
        self._trash_seq += 1
        dest = os.path.join(self.trash_dir, str(self._trash_seq))
        os.rename(path, dest)
        self.trashed[st.st_ino] = dest

    def dir_synced(self, dir_ino: int) -> None:
        """fsync of the directory (by inode): its current entries are durable."""
        listing = self.dirs.pop(dir_ino, None)
        if listing is None:
            return
        self.dir_entries -= len(listing) + 1
        named = {ino for d in self.dirs.values() for ino in d.values()}
        for ino, p in list(self.trashed.items()):
            if ino not in named:  # in no durable listing any more: gone for good
                del self.trashed[ino]
                self._forget(ino)
                if os.path.isdir(p) and not os.path.islink(p):
                    shutil.rmtree(p, ignore_errors=True)
                else:
                    os.unlink(p)

    def _forget(self, ino: int) -> None:
        self.synced(ino)
        listing = self.dirs.pop(ino, None)
        if listing is not None:
            self.dir_entries -= len(listing) + 1

    # ------------------------------------------------------------------ crash

    def stats(self) -> dict:
        return {"unsynced_bytes": self.unsynced_bytes, "saved_bytes": self.saved_bytes,
                "files": len(self.files), "dirs": len(self.dirs),
                "dir_entries": self.dir_entries, "trash": len(self.trashed),
                "full_errors": self.full_errors, "crashes": self.crashes}

    def _changes(self, where: dict[int, str]) -> dict:
        def rel(ino):
            p = where.get(ino)
            return "?" if p is None else os.path.relpath(p, self.root)

        files = sorted(f"{rel(i)}: {u.written} B" for i, u in self.files.items())
        dirs = []
        for ino, listing in self.dirs.items():
            p = where.get(ino)
            now = ({n: os.lstat(os.path.join(p, n)).st_ino for n in os.listdir(p)}
                   if p is not None and os.path.isdir(p) else {})
            gone = sorted(set(now) - set(listing))
            back = sorted(set(listing) - set(now))
            replaced = sorted(n for n in set(now) & set(listing) if now[n] != listing[n])
            if gone or back or replaced:
                dirs.append(f"{rel(ino)}: gone {gone} back {back} replaced {replaced}")
        return {"files": files, "dirs": sorted(dirs)}

    def describe(self) -> dict:
        """What a crash would take back, by path: {"files": {path: durable size},
        "dirs": {path: durable names}} (paths relative to the root; trash paths as
        they are)."""
        where = self._locate()

        def rel(ino):
            p = where.get(ino)
            return "?" if p is None else os.path.relpath(p, self.root)

        return {"files": {rel(i): u.durable_size for i, u in self.files.items()},
                "dirs": {rel(i): sorted(d) for i, d in self.dirs.items()}}

    def crash(self) -> dict:
        """Drop every unsynced change: the backing directory becomes what a power loss
        would leave. Returns what was dropped. The ledger is empty afterwards."""
        where = self._locate()
        dropped = {"files_reverted": 0, "bytes_dropped": self.unsynced_bytes,
                   "dirs_reverted": len(self.dirs), "rebuilt": False}
        # which ones, for the report (at most PATHS_REPORTED of each)
        dropped.update({k: v[:PATHS_REPORTED] for k, v in self._changes(where).items()})
        for ino, u in self.files.items():
            p = where.get(ino)
            if p is None:
                continue
            with open(p, "r+b") as f:
                f.truncate(u.durable_size)
                for page, data in u.pages.items():
                    f.seek(page * PAGE_BYTES)
                    f.write(data)
            dropped["files_reverted"] += 1
        want = self._durable_tree(where)
        if want != self._current_tree():
            self._rebuild(want, where)
            dropped["rebuilt"] = True
        shutil.rmtree(self.trash_dir, ignore_errors=True)
        os.makedirs(self.trash_dir)
        self.files.clear()
        self.dirs.clear()
        self.trashed.clear()
        self.unsynced_bytes = self.saved_bytes = self.dir_entries = 0
        self.crashes += 1
        return dropped

    def _walk(self):
        """(relative path, lstat) of every entry of the live tree, parents first."""
        stack = [""]
        while stack:
            rel = stack.pop()
            base = os.path.join(self.root, rel)
            for name in sorted(os.listdir(base)):
                r = os.path.join(rel, name)
                st = os.lstat(os.path.join(self.root, r))
                yield r, st
                if stat.S_ISDIR(st.st_mode):
                    stack.append(r)

    def _locate(self) -> dict[int, str]:
        """inode -> backing path, over the live tree and the trash."""
        where = {st.st_ino: os.path.join(self.root, r) for r, st in self._walk()}
        where.update(self.trashed)
        where[os.lstat(self.root).st_ino] = self.root
        return where

    def _current_tree(self) -> dict[str, int]:
        return {r: st.st_ino for r, st in self._walk()}

    def _durable_tree(self, where: dict[int, str]) -> dict[str, int]:
        """relative path -> inode of the durable tree (parents before children)."""
        out: dict[str, int] = {}
        seen_dirs = {os.lstat(self.root).st_ino}
        stack = [("", os.lstat(self.root).st_ino)]
        while stack:
            rel, dino = stack.pop()
            listing = self.dirs.get(dino)
            if listing is None:
                p = where.get(dino)
                listing = {} if p is None else {
                    n: os.lstat(os.path.join(p, n)).st_ino for n in os.listdir(p)}
            for name in sorted(listing):
                ino = listing[name]
                p = where.get(ino)
                if p is None:
                    continue  # deleted for good after another directory's fsync
                r = os.path.join(rel, name)
                if os.path.isdir(p) and not os.path.islink(p):
                    if ino in seen_dirs:
                        continue  # one directory, two durable names: keep the first
                    seen_dirs.add(ino)
                    stack.append((r, ino))
                out[r] = ino
        return out

    def _rebuild(self, want: dict[str, int], where: dict[int, str]) -> None:
        stage = os.path.join(self.state_dir, "stage")
        shutil.rmtree(stage, ignore_errors=True)
        os.makedirs(stage)
        placed: dict[int, str] = {}
        for r in sorted(want, key=lambda r: r.count("/")):
            ino, src, dst = want[r], where[want[r]], os.path.join(stage, r)
            if os.path.isdir(src) and not os.path.islink(src):
                os.mkdir(dst, stat.S_IMODE(os.lstat(src).st_mode))
            elif ino in placed:
                shutil.copy2(placed[ino], dst, follow_symlinks=False)
            else:
                os.rename(src, dst)
                placed[ino] = dst
        for name in os.listdir(self.root):
            p = os.path.join(self.root, name)
            if os.path.isdir(p) and not os.path.islink(p):
                shutil.rmtree(p)
            else:
                os.unlink(p)
        for name in os.listdir(stage):
            os.rename(os.path.join(stage, name), os.path.join(self.root, name))
        os.rmdir(stage)

    def close(self) -> None:
        """A clean unmount (no power loss): every change stays; the trash goes."""
        shutil.rmtree(self.state_dir, ignore_errors=True)
