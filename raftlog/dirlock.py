"""Exclusive ownership of a data directory (Kafka's ``.lock`` in every log dir).

Two processes writing one data dir lose acknowledged records: each keeps its own idea
of a segment's end, index and producer state, and the later write wins. So every
process that writes a data dir -- a node, a metadata quorum, a tool that repairs
files -- first takes :class:`DirLock` on it and holds it for its life. The lock is
``flock(LOCK_EX | LOCK_NB)`` on ``DIR/.lock``: the kernel drops it when the process
dies, however it dies, so a crashed node restarts without any manual clean-up, and a
second process is refused at once instead of waiting.

The file holds the owner's pid and what it is (``pid=123 owner=node 2``), written
after the lock is held, so the refusal names who has the dir. Nothing else reads it:
the lock, not the file's existence, is the truth (a stale file from a dead process
is simply locked again).
"""

from __future__ import annotations

import errno
import fcntl
import os

from .errors import RaftlogError

#: The lock file's name inside the directory it guards.
LOCK_FILE = ".lock"
#: At most this many bytes of a lock file are read to name its owner.
OWNER_BYTES_MAX = 256


class DataDirInUse(RaftlogError):
    """Another live process holds the directory's lock."""

    def __init__(self, path: str, owner: str):
        self.path, self.owner = path, owner
        super().__init__(f"data dir {path} is in use by {owner}; stop that process first "
                         "(or give this one another data dir)")


def _describe(fields: dict[str, str]) -> str:
    pid, owner = fields.get("pid", "?"), fields.get("owner", "")
    return f"pid {pid} ({owner})" if owner else f"pid {pid}"


def _read_owner(fd: int) -> dict[str, str]:
    try:
        raw = os.pread(fd, OWNER_BYTES_MAX, 0).decode("utf-8", "replace")
    except OSError:
        return {}
    head, _, owner = raw.strip().partition(" owner=")
    out = {"owner": owner} if owner else {}
    key, sep, pid = head.partition("=")
    if sep and key == "pid":
        out["pid"] = pid
    return out


class DirLock:
    """The exclusive lock of one directory, held from :meth:`acquire` to :meth:`release`.

    Use ``with DirLock.acquire(path, "node 1"):`` or keep the object and release it when
    the owner stops. The directory is created (mode 0700) when missing.
    """

    def __init__(self, path: str, fd: int):
        self.path, self._fd = path, fd

    @classmethod
    def acquire(cls, path: str, owner: str) -> DirLock:
        """Lock ``path`` for this process; ``owner`` names it in a refusal (``node 2``).

        Raises:
            DataDirInUse: another process holds the lock.
            OSError: the directory or its lock file cannot be created or opened.
        """
        path = os.path.abspath(path)
        os.makedirs(path, mode=0o700, exist_ok=True)
        fd = os.open(os.path.join(path, LOCK_FILE), os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as e:
            held = e.errno in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES)
            fields = _read_owner(fd) if held else {}
            os.close(fd)
            if held:
                raise DataDirInUse(path, _describe(fields)) from None
            raise
        try:
            text = f"pid={os.getpid()} owner={owner}\n".encode()
            assert len(text) <= OWNER_BYTES_MAX, owner
            os.ftruncate(fd, 0)
            os.pwrite(fd, text, 0)
        except OSError:
            pass  # (the lock holds without its label: a full disk must not stop a restart)
        return cls(path, fd)

    @property
    def held(self) -> bool:
        return self._fd is not None

    def release(self) -> None:
        """Drop the lock (the file stays: the next owner locks it again). Idempotent."""
        if self._fd is None:
            return
        fd, self._fd = self._fd, None
        try:
            fcntl.flock(fd, fcntl.LOCK_UN)
        finally:
            os.close(fd)

    def __enter__(self) -> DirLock:
        return self

    def __exit__(self, *exc) -> None:
        self.release()
