"""Small data disks that the ``diskfull`` nemesis fills and frees.

As root, each node's data dir (``log.dirs``: partition logs, checkpoints, the metadata
quorum's journal) is a tmpfs of DISK_MB mounted at ``<node home>/disk``; its node.log
and server.properties stay outside, on the run's own disk, as an operator's logs
usually are (the node's ``log_dir_unwritable`` line must be readable while the data
disk is full). Filling writes one file, FILLER, of every free byte
(``posix_fallocate``, then 4 KiB writes until ENOSPC for the last pages), so every
write that needs a new block fails with ENOSPC, exactly as on a full disk; freeing
deletes it. A node restarted meanwhile starts on the full disk.

Without root (or where mounting is refused) the data dir is a plain directory and
"full" is the node's RLIMIT_FSIZE soft limit set to 1 byte (``prlimit`` on the running
process; the hard limit is left alone so it can be raised again): every write that
grows a file fails with EFBIG ("file too large") instead of ENOSPC -- the same failed
``pwrite`` path in the node, but the node's own log cannot grow meanwhile either, and a
node restarted meanwhile starts with the limit gone. The run says which mode it used
(results.json warnings, ``Disks.kind``).

Mounts are removed by :meth:`Disks.release` (the runner calls it once the replicas'
files were read) and at interpreter exit, whatever happened.
"""

from __future__ import annotations

import atexit
import errno
import os
import resource
import shutil
import subprocess

#: Size of each node's tmpfs data disk. A 60 s run writes a few MiB per node; filling
#: costs this much memory per full node while it lasts.
DISK_MB = 64
#: The file that fills a data disk.
FILLER = ".jepsen-filler"
_CHUNK = 4096


class Disks:
    """One small data disk per node (see the module docstring)."""

    def __init__(self, homes: dict[int, str], size_mb: int = DISK_MB, log=print):
        """``homes``: {node id: the node's home dir}; each node's data dir is
        :meth:`data_dir` of it. Mounts when it can, else falls back (``kind``)."""
        self.size_mb = size_mb
        self.log = log
        self.dirs = {i: os.path.join(h, "disk") for i, h in homes.items()}
        self.mounted: list[str] = []
        self.kind = "tmpfs"
        #: why the tmpfs mode is not used (None: it is)
        self.error: str | None = None
        self._limited: set[int] = set()
        for d in self.dirs.values():
            os.makedirs(d, exist_ok=True)
        try:
            self._mount_all()
        except OSError as e:
            self.error = str(e)
            self.kind = "rlimit"
        atexit.register(self.release)

    def data_dir(self, node_id: int) -> str:
        return self.dirs[node_id]

    def _mount_all(self) -> None:
        if os.geteuid() != 0:
            raise OSError("not root: cannot mount a small tmpfs per node")
        if shutil.which("mount") is None:
            raise OSError("no mount command")
        for d in self.dirs.values():
            r = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={self.size_mb}m,mode=0700",
                                "tmpfs", d], capture_output=True, text=True, timeout=20)
            if r.returncode != 0:
                self.release()
                raise OSError(f"mount -t tmpfs refused: {r.stderr.strip()}")
            self.mounted.append(d)

    # ------------------------------------------------------------------ fill / free

    def fill(self, node) -> str:
        """Fill ``node``'s data disk; a description of what was done."""
        if self.kind == "tmpfs":
            return self._fill_tmpfs(self.dirs[node.id])
        if not node.alive():
            raise RuntimeError(f"node {node.id} is not running (rlimit mode needs it)")
        resource.prlimit(node.proc.pid, resource.RLIMIT_FSIZE, (1, resource.RLIM_INFINITY))
        self._limited.add(node.id)
        return f"node {node.id}: RLIMIT_FSIZE 1 byte (every growing write fails: EFBIG)"

    def free(self, node) -> None:
        """Give ``node``'s data disk its space back."""
        if self.kind == "tmpfs":
            try:
                os.remove(os.path.join(self.dirs[node.id], FILLER))
            except FileNotFoundError:
                pass
            return
        self._limited.discard(node.id)
        if node.alive():
            resource.prlimit(node.proc.pid, resource.RLIMIT_FSIZE,
                             (resource.RLIM_INFINITY, resource.RLIM_INFINITY))

    def free_bytes(self, node_id: int) -> int:
        st = os.statvfs(self.dirs[node_id])
        return st.f_bavail * st.f_frsize

    @staticmethod
    def _fill_tmpfs(d: str) -> str:
        path = os.path.join(d, FILLER)
        st = os.statvfs(d)
        before = st.f_bavail * st.f_frsize
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        try:
            try:
                if before > _CHUNK:
                    os.posix_fallocate(fd, 0, before - _CHUNK)
            except OSError as e:
                if e.errno != errno.ENOSPC:
                    raise
            block = b"\0" * _CHUNK
            while True:  # the last pages (the node may have taken some meanwhile)
                try:
                    if os.write(fd, block) == 0:
                        break
                except OSError as e:
                    if e.errno in (errno.ENOSPC, errno.EFBIG):
                        break
                    raise
        finally:
            os.close(fd)
        st = os.statvfs(d)
        return (f"{os.path.basename(os.path.dirname(d))}: filled "
                f"{os.path.getsize(path) >> 20} MiB of {st.f_blocks * st.f_frsize >> 20} MiB, "
                f"{st.f_bavail * st.f_frsize} bytes free")

    # ------------------------------------------------------------------ release

    def release(self, keep: bool = False) -> None:
        """Unmount every data disk (the nodes must be stopped). ``keep``: copy each
        disk's files to ``<home>/disk.kept`` first (tmpfs contents vanish)."""
        while self.mounted:
            d = self.mounted.pop()
            try:
                os.remove(os.path.join(d, FILLER))
            except OSError:
                pass
            if keep:
                try:
                    shutil.copytree(d, d + ".kept", dirs_exist_ok=True)
                except OSError as e:
                    self.log(f"disks: could not keep {d}: {e}")
            r = subprocess.run(["umount", d], capture_output=True, text=True, timeout=20)
            if r.returncode != 0:
                subprocess.run(["umount", "-l", d], capture_output=True, timeout=20)
