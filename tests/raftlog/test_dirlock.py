"""raftlog/dirlock.py: one process per data dir, released by the kernel on death."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap

import pytest

from raftlog.dirlock import LOCK_FILE, DataDirInUse, DirLock

HOLDER = textwrap.dedent("""
    import sys, time
    from raftlog.dirlock import DirLock
    lock = DirLock.acquire(sys.argv[1], "node 7")
    print("held", flush=True)
    time.sleep(60)
""")


def _holder(path: str) -> subprocess.Popen:
    p = subprocess.Popen([sys.executable, "-c", HOLDER, path], stdout=subprocess.PIPE)
    assert p.stdout.readline() == b"held\n"
    return p


def test_a_second_process_is_refused_with_the_owner_named(tmp_path):
    d = str(tmp_path / "data")
    holder = _holder(d)
    try:
        with pytest.raises(DataDirInUse) as e:
            DirLock.acquire(d, "node 1")
        assert str(e.value).startswith(f"data dir {d} is in use by pid {holder.pid} (node 7)")
    finally:
        holder.kill()
        holder.wait()


def test_the_kernel_releases_the_lock_of_a_killed_process(tmp_path):
    d = str(tmp_path / "data")
    holder = _holder(d)
    holder.send_signal(signal.SIGKILL)
    holder.wait()
    assert os.path.exists(os.path.join(d, LOCK_FILE))  # a stale file is no obstacle
    with DirLock.acquire(d, "node 1") as lock:
        assert lock.held
    assert not lock.held


def test_the_lock_file_is_private_and_names_this_process(tmp_path):
    d = str(tmp_path / "fresh")
    old = os.umask(0o022)
    try:
        lock = DirLock.acquire(d, "raftlog up")
    finally:
        os.umask(old)
    try:
        path = os.path.join(d, LOCK_FILE)
        assert os.stat(path).st_mode & 0o777 == 0o600
        assert os.stat(d).st_mode & 0o077 == 0
        assert open(path).read() == f"pid={os.getpid()} owner=raftlog up\n"
    finally:
        lock.release()
        lock.release()  # idempotent
