"""`raftlog up` keeps its data dir private (issue 35 item 7): started from a shell with
umask 022, a 3-node `up` (raft.password file, pid files, every node's logs and
metadata) leaves nothing readable by group or others."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

import pytest

from raftlog.client import Admin, Producer
from raftlog.filemodes import open_entries

from ..conftest import free_port

pytestmark = pytest.mark.slow


def test_up_under_umask_022_leaves_every_file_private(tmp_path):
    data_dir, port = str(tmp_path / "data"), free_port()
    old = os.umask(0o022)
    try:
        proc = subprocess.Popen(
            [sys.executable, "-m", "raftlog.client.cli", "up", "--data-dir", data_dir,
             "--port", str(port), "--nodes", "3"],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    finally:
        os.umask(old)
    try:
        assert proc.stdout.readline().startswith(b"raftlog is up")
        bootstrap = f"127.0.0.1:{port}"
        with Admin(bootstrap) as a:
            a.create_topic("private", partitions=3, replication_factor=3)
        with Producer(bootstrap, acks="all") as p:
            for i in range(30):
                p.send("private", b"r%d" % i).result(20)
    finally:
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err.decode()[-2000:]
    assert os.path.exists(os.path.join(data_dir, "raft.password"))
    assert os.path.isdir(os.path.join(data_dir, "node-3", "__raft"))
    assert open_entries(data_dir) == []
