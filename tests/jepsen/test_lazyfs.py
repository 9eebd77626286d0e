"""lazyfs on a real FUSE mount: what survives a crash is exactly what was synced."""

from __future__ import annotations

import os

import pytest

from raftlog.jepsen.lazyfs import LazyFSUnavailable, Mount


@pytest.fixture
def fs(lazyfs_mount):
    return lazyfs_mount


def _write(path, data: bytes, *, sync: bool = False, mode: str = "wb") -> None:
    with open(path, mode) as f:
        f.write(data)
        f.flush()
        if sync:
            os.fsync(f.fileno())


def _fsync_dir(path) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _read(path) -> bytes:
    with open(path, "rb") as f:
        return f.read()


def _durable_file(fs, name: str, data: bytes) -> str:
    """A file whose content and directory entry are both synced."""
    p = os.path.join(fs.mountpoint, name)
    _write(p, data, sync=True)
    _fsync_dir(fs.mountpoint)
    return p


def test_fsync_keeps(fs):
    p = _durable_file(fs, "a", b"hello")
    assert fs.crash()["bytes_dropped"] == 0
    assert _read(p) == b"hello"
    assert _read(os.path.join(fs.backing, "a")) == b"hello"


def test_no_fsync_loses_the_writes(fs):
    p = _durable_file(fs, "a", b"hello")
    _write(p, b"HELLO world")  # overwrite and extend, no fsync
    assert _read(p) == b"HELLO world"
    out = fs.crash()
    assert out["bytes_dropped"] == 11 and out["files_reverted"] == 1
    assert _read(p) == b"hello"


def test_new_file_without_dir_fsync_is_gone_even_if_fsynced(fs):
    p = os.path.join(fs.mountpoint, "new")
    _write(p, b"data", sync=True)  # the file's data is synced, its name is not
    fs.crash()
    assert not os.path.exists(p)
    assert os.listdir(fs.backing) == []


def test_created_entry_synced_but_data_not_is_empty(fs):
    p = os.path.join(fs.mountpoint, "new")
    _write(p, b"data")
    _fsync_dir(fs.mountpoint)
    fs.crash()
    assert _read(p) == b""


def test_rename_without_dir_fsync_is_undone(fs):
    target = _durable_file(fs, "cp", b"old")
    tmp = os.path.join(fs.mountpoint, "cp.tmp")
    _write(tmp, b"new", sync=True)
    os.replace(tmp, target)
    assert _read(target) == b"new"
    fs.crash()
    assert _read(target) == b"old"
    assert sorted(os.listdir(fs.mountpoint)) == ["cp"]


def test_rename_with_dir_fsync_is_kept(fs):
    target = _durable_file(fs, "cp", b"old")
    tmp = os.path.join(fs.mountpoint, "cp.tmp")
    _write(tmp, b"new", sync=True)
    os.replace(tmp, target)
    _fsync_dir(fs.mountpoint)
    fs.crash()
    assert _read(target) == b"new"
    assert sorted(os.listdir(fs.mountpoint)) == ["cp"]


def test_unlink_without_dir_fsync_comes_back(fs):
    p = _durable_file(fs, "seg", b"x" * 10_000)
    os.unlink(p)
    assert not os.path.exists(p)
    assert os.listdir(fs.mountpoint) == []  # the trash is not visible
    fs.crash()
    assert _read(p) == b"x" * 10_000


def test_unlink_with_dir_fsync_is_gone(fs):
    p = _durable_file(fs, "seg", b"x")
    os.unlink(p)
    _fsync_dir(fs.mountpoint)
    assert fs.status()["trash"] == 0
    fs.crash()
    assert not os.path.exists(p)


def test_fdatasync_keeps(fs):
    p = _durable_file(fs, "a", b"")
    fd = os.open(p, os.O_WRONLY)
    try:
        os.write(fd, b"synced by fdatasync")
        os.fdatasync(fd)
        os.write(fd, b" and this is not")
    finally:
        os.close(fd)
    fs.crash()
    assert _read(p) == b"synced by fdatasync"


def test_truncate_without_fsync_is_undone(fs):
    data = bytes(range(256)) * 64  # 16 KiB: several pages
    p = _durable_file(fs, "seg", data)
    os.truncate(p, 5000)
    _write(p, b"Z" * 100, mode="ab")
    assert os.path.getsize(p) == 5100
    fs.crash()
    assert _read(p) == data


def test_truncate_with_fsync_is_kept(fs):
    p = _durable_file(fs, "seg", b"a" * 9000)
    with open(p, "r+b") as f:
        f.truncate(100)
        os.fsync(f.fileno())
    fs.crash()
    assert _read(p) == b"a" * 100


def test_append_after_fsync_loses_only_the_tail(fs):
    p = _durable_file(fs, "log", b"A" * 5000)
    with open(p, "ab") as f:
        f.write(b"B" * 3000)
        f.flush()
        os.fsync(f.fileno())
        f.write(b"C" * 7000)  # not synced
        f.flush()
    assert os.path.getsize(p) == 15000
    fs.crash()
    assert _read(p) == b"A" * 5000 + b"B" * 3000


def test_partial_page_overwrite_restores_the_page(fs):
    data = b"0123456789" * 1000
    p = _durable_file(fs, "f", data)
    with open(p, "r+b") as f:
        f.seek(4090)
        f.write(b"XXXXXXXXXXXXXXXXXXXX")  # across a page boundary
    fs.crash()
    assert _read(p) == data


def test_new_directory_needs_its_parent_synced(fs):
    d = os.path.join(fs.mountpoint, "topic-0")
    os.mkdir(d)
    _write(os.path.join(d, "00.log"), b"rec", sync=True)
    _fsync_dir(d)  # the directory's own entries are synced, its name is not
    fs.crash()
    assert not os.path.exists(d)
    os.mkdir(d)
    _write(os.path.join(d, "00.log"), b"rec", sync=True)
    _fsync_dir(d)
    _fsync_dir(fs.mountpoint)
    fs.crash()
    assert _read(os.path.join(d, "00.log")) == b"rec"


def test_open_handles_go_stale_and_the_mount_keeps_serving(fs):
    p = _durable_file(fs, "a", b"1")
    f = open(p, "r+b")
    try:
        fs.crash()
        with pytest.raises(OSError):
            f.write(b"2")
            f.flush()
    finally:
        try:
            f.close()
        except OSError:
            pass
    _write(p, b"after", sync=True)
    fs.crash()
    assert _read(p) == b"after"


def test_a_full_ledger_is_an_error(tmp_path):
    m = Mount(str(tmp_path / "mnt"), str(tmp_path / "back"))
    m.extra_args = ["--unsynced-bytes-max", "10000"]
    try:
        m.start()
    except LazyFSUnavailable as e:
        pytest.skip(f"FUSE cannot mount here: {e}")
    try:
        p = os.path.join(m.mountpoint, "big")
        with pytest.raises(OSError) as e:
            _write(p, b"x" * 20_000)
        assert e.value.errno == 28  # ENOSPC
        assert m.status()["full_errors"] >= 1
        _write(p, b"y" * 5000, sync=True)  # room again after a sync
    finally:
        m.stop()
    with open(m.log_path) as f:
        assert "ledger full" in f.read()


def test_clean_unmount_keeps_everything(tmp_path):
    m = Mount(str(tmp_path / "mnt"), str(tmp_path / "back"))
    try:
        m.start()
    except LazyFSUnavailable as e:
        pytest.skip(f"FUSE cannot mount here: {e}")
    _write(os.path.join(m.mountpoint, "a"), b"unsynced")
    os.mkdir(os.path.join(m.mountpoint, "d"))
    m.stop()
    assert sorted(os.listdir(m.backing)) == ["a", "d"]
    assert not os.path.exists(m.backing + ".lazyfs")  # the trash is gone
    assert _read(os.path.join(m.backing, "a")) == b"unsynced"


class _Model:
    """What one directory should hold: live names and contents, and what a crash keeps
    (each file's content at its last fsync, the names at the directory's last fsync)."""

    def __init__(self):
        self.live: dict[str, int] = {}
        self.content: dict[int, bytes] = {}
        self.durable: dict[int, bytes] = {}
        self.listing: dict[str, int] = {}
        self.next_id = 0

    def crash(self) -> None:
        self.live = dict(self.listing)
        self.content = {i: self.durable[i] for i in self.live.values()}


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_random_operations_agree_with_the_model(fs, seed):
    import random

    rnd = random.Random(seed)
    m = _Model()
    root = fs.mountpoint
    names = ["a", "b", "c", "d"]
    for step in range(400):
        name = rnd.choice(names)
        p = os.path.join(root, name)
        op = rnd.choice(["create", "write", "write", "write", "truncate", "fsync", "fsync",
                         "rename", "unlink", "fsync_dir", "fsync_dir", "crash"])
        if op == "create" and name not in m.live:
            open(p, "wb").close()
            m.live[name] = m.next_id
            m.content[m.next_id] = m.durable[m.next_id] = b""
            m.next_id += 1
        elif op == "write" and name in m.live:
            off = rnd.randrange(0, 12_000)
            data = bytes([rnd.randrange(256)]) * rnd.randrange(1, 9000)
            with open(p, "r+b") as f:
                f.seek(off)
                f.write(data)
            old = m.content[m.live[name]]
            old = old + b"\0" * max(0, off - len(old))
            m.content[m.live[name]] = old[:off] + data + old[off + len(data):]
        elif op == "truncate" and name in m.live:
            size = rnd.randrange(0, 15_000)
            os.truncate(p, size)
            old = m.content[m.live[name]]
            m.content[m.live[name]] = old[:size] + b"\0" * max(0, size - len(old))
        elif op == "fsync" and name in m.live:
            with open(p, "rb") as f:
                os.fsync(f.fileno())
            m.durable[m.live[name]] = m.content[m.live[name]]
        elif op == "rename" and name in m.live:
            to = rnd.choice(names)
            os.replace(p, os.path.join(root, to))
            m.live[to] = m.live.pop(name)
        elif op == "unlink" and name in m.live:
            os.unlink(p)
            del m.live[name]
        elif op == "fsync_dir":
            _fsync_dir(root)
            m.listing = dict(m.live)
        elif op == "crash":
            fs.crash()
            m.crash()
        assert sorted(os.listdir(root)) == sorted(m.live), (seed, step, op)
        for n, i in m.live.items():
            assert _read(os.path.join(root, n)) == m.content[i], (seed, step, op, n)
    fs.crash()
    m.crash()
    assert sorted(os.listdir(fs.backing)) == sorted(m.live)
    for n, i in m.live.items():
        assert _read(os.path.join(fs.backing, n)) == m.content[i], (seed, n)
