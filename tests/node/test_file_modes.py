"""Data dirs are private (issue 35 item 7): under umask 022 a node process still
creates every dir 0700 and every file 0600, and tightens what an older version left
readable (records, the metadata log with SCRAM StoredKey/ServerKey)."""

from __future__ import annotations

import os
import stat

import pytest

from raftlog.client import Admin, Producer
from raftlog.filemodes import make_private, make_private_dir, open_entries
from tests.conftest import NodeProcess, free_port


@pytest.fixture
def umask_022():
    old = os.umask(0o022)
    yield
    os.umask(old)


def test_make_private_tightens_a_tree_and_leaves_symlinks(tmp_path, umask_022):
    d = tmp_path / "data"
    (d / "t-0").mkdir(parents=True)
    (d / "t-0" / "00.log").write_bytes(b"x")
    os.chmod(d / "t-0" / "00.log", 0o664)
    os.symlink("/etc/passwd", d / "link")
    assert open_entries(str(d))  # 0755 dirs, 0664 file
    assert make_private(str(d)) == 3
    assert open_entries(str(d)) == []
    assert stat.S_IMODE(os.stat(d).st_mode) == 0o700
    assert stat.S_IMODE(os.stat(d / "t-0" / "00.log").st_mode) == 0o600
    assert stat.S_IMODE(os.stat("/etc/passwd").st_mode) & stat.S_IROTH  # not followed
    assert make_private(str(d)) == 0


def test_a_node_under_umask_022_keeps_every_file_private(tmp_path, umask_022):
    data = tmp_path / "node-1"
    # what an older version left: a readable data dir and file
    (data / "old-topic-0").mkdir(parents=True)
    (data / "old-topic-0" / "leftover.txt").write_text("records")
    os.chmod(data, 0o755)
    node = NodeProcess(str(data), free_port())
    node.start()
    try:
        with Admin(node.bootstrap) as admin:
            admin.create_topic("secret", partitions=2)
        with Producer(node.bootstrap, acks=1) as p:
            for i in range(20):
                p.send("secret", f"r{i}".encode(), partition=i % 2).result(10)
    finally:
        assert node.stop() == 0
    created = [os.path.relpath(os.path.join(r, n), data)
               for r, ds, fs in os.walk(data) for n in ds + fs]
    assert any(p.startswith("__raft") for p in created), created  # the metadata log
    assert any(p.startswith("secret-0") for p in created), created
    assert open_entries(str(data)) == []
    assert "data_dir_tightened" in node.log_text()


def test_make_private_dir_closes_the_dir_only(tmp_path, umask_022):
    d = tmp_path / "up"
    d.mkdir()
    (d / "notes.txt").write_text("the user's own file")
    assert make_private_dir(str(d))
    assert stat.S_IMODE(os.stat(d).st_mode) == 0o700
    assert stat.S_IMODE(os.stat(d / "notes.txt").st_mode) == 0o644  # not ours: left
    assert not make_private_dir(str(d))
    assert make_private_dir(str(tmp_path / "new" / "dir")) is False  # created 0700
    assert stat.S_IMODE(os.stat(tmp_path / "new" / "dir").st_mode) == 0o700
