"""Private data dirs: records and the metadata snapshot (SCRAM StoredKey/ServerKey)
are readable by the node's own user only.

A node (and ``raftlog up``) calls :func:`restrict_umask` first thing, so every file
it creates is 0600 and every directory 0700 whatever the umask of the shell that
started it; :func:`make_private` then tightens what an older version left behind
(0755 dirs, 0644 files) when the data dir is opened. No other module sets modes.
A node's data dir is its own: everything under it is tightened.
"""

from __future__ import annotations

import os
import stat

#: The umask of a node process: no bits for group and others.
PRIVATE_UMASK = 0o077
PRIVATE_DIR_MODE = 0o700
#: Group and other permission bits: none may be set under a data dir.
OPEN_BITS = stat.S_IRWXG | stat.S_IRWXO
#: Entries of one data dir looked at, at most (a tree larger than this is a bug or
#: not a data dir: the walk stops and says so rather than spending minutes).
MAX_ENTRIES = 10_000_000


def restrict_umask() -> int:
    """Set the process umask to :data:`PRIVATE_UMASK`; returns the previous one.
    Process-wide: call it at process start, not from a library or a test."""
    return os.umask(PRIVATE_UMASK)


def make_private_dir(path: str) -> bool:
    """Create the directory ``path`` if missing, and make it 0700 (what is inside is
    left as it is, but no other user can reach it). Returns True if the mode changed.
    For a directory a tool was pointed at (``raftlog up --data-dir``), which may hold
    files that are not its own; a node's data dir gets :func:`make_private`."""
    os.makedirs(path, mode=PRIVATE_DIR_MODE, exist_ok=True)
    return bool(_tighten(path))


def make_private(path: str) -> int:
    """Create ``path`` (a directory) if missing, and remove group and other bits from
    it and everything under it (symlinks are neither followed nor changed).

    Returns:
        How many entries were tightened (0 for a data dir that was private already).
    Raises:
        OSError: the directory cannot be created or a mode cannot be changed.
    """
    os.makedirs(path, mode=PRIVATE_DIR_MODE, exist_ok=True)
    changed = _tighten(path)
    seen = 0
    for root, dirs, files in os.walk(path):
        for name in dirs + files:
            seen += 1
            assert seen <= MAX_ENTRIES, f"{path}: more than {MAX_ENTRIES} entries"
            changed += _tighten(os.path.join(root, name))
    return changed


def _tighten(p: str) -> int:
    try:
        st = os.lstat(p)
    except FileNotFoundError:  # removed meanwhile (retention, a temp file renamed)
        return 0
    if stat.S_ISLNK(st.st_mode) or not st.st_mode & OPEN_BITS:
        return 0
    try:
        os.chmod(p, stat.S_IMODE(st.st_mode) & ~OPEN_BITS)
    except FileNotFoundError:
        return 0
    return 1


def open_entries(path: str) -> list[tuple[str, int]]:
    """(path, mode) of every entry under ``path`` (itself included) with a group or
    other bit set: what an operator (or a test) checks."""
    paths = [path]
    for root, dirs, files in os.walk(path):
        paths.extend(os.path.join(root, name) for name in dirs + files)
    out = []
    for p in paths:
        st = os.lstat(p)
        if not stat.S_ISLNK(st.st_mode) and st.st_mode & OPEN_BITS:
            out.append((p, stat.S_IMODE(st.st_mode)))
    return out


def write_private(path: str, text: str) -> None:
    """Replace ``path`` with ``text``, readable by the owner only (it may hold secrets):
    written to a 0600 temp file, then renamed over it (an older file's mode goes too)."""
    tmp = path + ".tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        f.write(text)
    os.chmod(tmp, 0o600)  # (an older temp file keeps its mode through O_TRUNC)
    os.replace(tmp, path)


def stored_secret(path: str, make) -> str:
    """The secret in ``path``: created once from ``make()`` (mode 0600), then read back,
    so a restart keeps what was stored with it (a Raft password, a SCRAM credential)."""
    if not os.path.exists(path):
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(make())
    with open(path, encoding="utf-8") as f:
        secret = f.read().strip()
    assert secret, path
    return secret


def world_readable(path: str) -> bool:
    """Whether every user may read ``path``. Raises OSError (it cannot be stat'ed)."""
    return bool(os.stat(path).st_mode & stat.S_IROTH)
