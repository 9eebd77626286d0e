"""The diskfull nemesis's disks without a cluster: the RLIMIT_FSIZE fallback (what a
run without root uses) on a stand-in process, and a tmpfs fill when root may mount."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from raftlog.jepsen import disks as d


class FakeNode:
    def __init__(self, node_id, proc):
        self.id, self.proc = node_id, proc

    def alive(self):
        return self.proc.poll() is None


def _fsize_soft_limit(pid: int) -> str:
    with open(f"/proc/{pid}/limits", encoding="ascii") as f:
        line = next(x for x in f if x.startswith("Max file size"))
    return line.split()[3]


def test_rlimit_fallback_fills_and_frees_a_running_process(tmp_path, monkeypatch):
    def refuse(self):
        raise OSError("not root: cannot mount a small tmpfs per node")

    monkeypatch.setattr(d.Disks, "_mount_all", refuse)
    disks = d.Disks({1: str(tmp_path / "node-1")})
    assert disks.kind == "rlimit" and "not root" in disks.error
    assert disks.data_dir(1) == str(tmp_path / "node-1" / "disk")
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        node = FakeNode(1, proc)
        assert "RLIMIT_FSIZE" in disks.fill(node)
        assert _fsize_soft_limit(proc.pid) == "1"
        disks.free(node)
        assert _fsize_soft_limit(proc.pid) == "unlimited"
    finally:
        proc.kill()
        proc.wait()


@pytest.mark.skipif(os.geteuid() != 0, reason="mounting a tmpfs needs root")
def test_tmpfs_fill_leaves_no_byte_and_free_gives_them_back(tmp_path):
    disks = d.Disks({1: str(tmp_path / "node-1")}, size_mb=4)
    if disks.kind != "tmpfs":
        pytest.skip(f"mount refused here: {disks.error}")
    try:
        node = FakeNode(1, None)
        what = disks.fill(node)
        assert "0 bytes free" in what, what
        with pytest.raises(OSError):  # ENOSPC
            with open(os.path.join(disks.data_dir(1), "x"), "wb") as f:
                f.write(b"x" * 8192)
                f.flush()
        disks.free(node)
        assert disks.free_bytes(1) > 3 << 20
    finally:
        disks.release()
    assert not os.path.ismount(disks.data_dir(1))
