"""lazyfs: a FUSE filesystem that loses, on command, what a power loss would lose.

Written for raftlog's safety harness (the idea is LazyFS's, the code our own): the
``powerloss`` nemesis runs each node's data directory on its own lazyfs mount, kills
the node and tells the mount to ``crash``. Afterwards the files hold what they held
at their last fsync/fdatasync, and each directory holds the entries it had at its
last fsync -- whatever the node *thinks* it synced.

Design: the backing directory always holds the live state (reads and writes pass
straight through; what it holds when lazyfs starts counts as durable), and an
in-memory undo ledger (:mod:`.ledger`) records, before each
change, what that change destroys of the durable state:

- a file's first change since its last fsync records its durable size; a write or
  truncate below that size first saves the original 4 KiB pages it touches;
  fsync/fdatasync of the file forgets them (the backing file itself is never
  fsynced: only the ledger models durability, so a sync costs no disk flush);
- a directory's first create, rename or unlink since its last fsync records its
  listing (name -> inode); unlinked files and removed directories move to a trash
  beside the backing directory (``<BACKING>.lazyfs``) instead of being deleted;
  fsync of the directory forgets its listing and empties the trash it alone kept;
- ``crash``: files are cut back to their durable size and their saved pages written
  back; then, if the durable tree (saved listings, else current entries, from the
  root) differs from the live one, the backing directory is rebuilt to exactly the
  durable tree. Every open file handle goes stale (EIO): its process is dead, as
  after a power loss. The mount then **keeps serving**, so the node restarts on it.

Every bound is named (:class:`~.ledger.Limits`, :data:`~.fs.HANDLES_MAX`); an
operation that would pass one fails with ENOSPC (logged, counted in ``status``
``full_errors``) and is not made. A clean unmount keeps every change (no power was
lost) and removes the trash. Not modelled: hard links (EPERM), metadata other than
size and names (modes, times are passed through and kept), rename flags.

:class:`Mount` starts and drives one lazyfs process from the harness.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time


class LazyFSUnavailable(RuntimeError):
    """FUSE cannot mount here (the message says why)."""


def control(sock_path: str, command: str, timeout_s: float = 30.0) -> dict:
    """Send one control command to a lazyfs process; its JSON answer."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        s.settimeout(timeout_s)
        s.connect(sock_path)
        s.sendall(command.encode() + b"\n")
        buf = b""
        while not buf.endswith(b"\n"):
            chunk = s.recv(65536)
            if not chunk:
                break
            buf += chunk
    out = json.loads(buf)
    if not out.get("ok"):
        raise RuntimeError(f"lazyfs {command}: {out.get('error')}")
    return out


class Mount:
    """One lazyfs process: ``backing`` mounted on ``mountpoint``.

    Args:
        mountpoint, backing: directories (created when missing).
        control_path: the Unix socket (default ``<backing>.sock``; keep it short:
            a socket path has at most 107 bytes).
        log_path: the process's stderr (default ``<backing>.log``).
    """

    def __init__(self, mountpoint: str, backing: str, control_path: str | None = None,
                 log_path: str | None = None):
        self.mountpoint = os.path.abspath(mountpoint)
        self.backing = os.path.abspath(backing)
        self.control_path = control_path or self.backing + ".sock"
        self.log_path = log_path or self.backing + ".log"
        self.proc: subprocess.Popen | None = None
        #: more command-line options of the process (e.g. its ledger bounds)
        self.extra_args: list[str] = []

    @property
    def mounted(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def start(self, timeout_s: float = 20.0) -> None:
        """Mount; LazyFSUnavailable (naming the error) when FUSE cannot."""
        if shutil.which("fusermount3") is None:
            raise LazyFSUnavailable("fusermount3 not found (apt-get install -y fuse3)")
        if not os.path.exists("/dev/fuse"):
            raise LazyFSUnavailable("/dev/fuse does not exist")
        try:
            import mfusepy  # noqa: F401
        except (ImportError, OSError) as e:
            raise LazyFSUnavailable(f"mfusepy: {e!r} (pip install mfusepy; "
                                    f"apt-get install -y libfuse3-dev)") from e
        os.makedirs(self.mountpoint, exist_ok=True)
        os.makedirs(self.backing, exist_ok=True)
        if os.path.exists(self.control_path):
            os.unlink(self.control_path)
        log = open(self.log_path, "ab")
        try:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "raftlog.jepsen.lazyfs", self.mountpoint,
                 self.backing, "--control", self.control_path, "--exit-with-parent",
                 *self.extra_args],
                stdin=subprocess.DEVNULL, stdout=log, stderr=log)
        finally:
            log.close()
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                break
            if os.path.ismount(self.mountpoint) and os.path.exists(self.control_path):
                try:
                    control(self.control_path, "ping", 2.0)
                    return
                except OSError:
                    pass
            time.sleep(0.05)
        self.stop()
        with open(self.log_path, encoding="utf-8", errors="replace") as f:
            tail = f.read()[-2000:].strip()
        raise LazyFSUnavailable(f"lazyfs did not mount {self.mountpoint}: {tail or 'no output'}")

    def crash(self) -> dict:
        """Power loss: drop every unsynced change (the users must be dead already)."""
        return control(self.control_path, "crash")

    def status(self) -> dict:
        return control(self.control_path, "status")

    def stop(self, timeout_s: float = 15.0) -> None:
        """Unmount cleanly (every change kept)."""
        if self.proc is None:
            return
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout_s)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        if os.path.ismount(self.mountpoint):  # killed, or the kernel still holds it
            subprocess.run(["fusermount3", "-u", "-z", self.mountpoint],
                           capture_output=True, timeout=20)
        self.proc = None
