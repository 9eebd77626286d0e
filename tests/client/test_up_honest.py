"""#32: an honest `raftlog up` -- it refuses a data dir in use, says "up" only when every
node serves (restarts included), names the address it could not take, and keeps the
Raft password out of every command line and log."""

from __future__ import annotations

import os
import signal
import socket
import stat
import subprocess
import sys
import time

import pytest

from raftlog.client import Admin, Producer

from ..conftest import free_port, free_port_block


def _up_args(data_dir: str, port: int, *more: str) -> list[str]:
    return [sys.executable, "-m", "raftlog.client.cli", "up", "--data-dir", data_dir,
            "--port", str(port), *more]


def _start(data_dir: str, port: int, *more: str) -> subprocess.Popen:
    proc = subprocess.Popen(_up_args(data_dir, port, *more), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE)
    line = proc.stdout.readline()
    if not line.startswith(b"raftlog is up"):
        proc.kill()
        raise AssertionError(f"not up: {line!r} {proc.stderr.read()[-3000:]!r}")
    return proc


def _stop(proc: subprocess.Popen) -> bytes:
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err.decode()[-3000:]
    return err


def test_a_second_up_on_a_data_dir_in_use_is_refused_before_it_writes(tmp_path):
    data_dir, port = str(tmp_path / "d"), free_port()
    first = _start(data_dir, port)
    try:
        props = open(os.path.join(data_dir, "node-1", "server.properties")).read()
        pid_before = open(os.path.join(data_dir, "node-1", "node.pid")).read()
        t0 = time.monotonic()
        r = subprocess.run(_up_args(data_dir, free_port()), capture_output=True, timeout=60)
        assert r.returncode == 1
        assert f"data dir {data_dir} is in use by pid {first.pid} (raftlog up)".encode() \
            in r.stderr, r.stderr
        assert time.monotonic() - t0 < 30  # refused at once, not after the wait timeout
        assert b"raftlog is up" not in r.stdout
        # nothing of the running cluster was touched
        assert open(os.path.join(data_dir, "node-1", "server.properties")).read() == props
        assert open(os.path.join(data_dir, "node-1", "node.pid")).read() == pid_before
        Admin(f"127.0.0.1:{port}").create_topic("still-served")
    finally:
        _stop(first)


def test_up_on_a_taken_port_fails_at_once_naming_the_address(tmp_path):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        r = subprocess.run(_up_args(str(tmp_path / "d"), port, "--wait-timeout", "60"),
                           capture_output=True, timeout=120)
    assert r.returncode == 1
    err = r.stderr.decode()
    assert "node 1 exited with code 1 during start" in err, err
    assert f"cannot listen on 127.0.0.1:{port}" in err and "Address already in use" in err
    assert "not up after" not in err  # (it did not wait for the 60 s timeout)
    assert b"raftlog is up" not in r.stdout


def test_up_refuses_a_port_out_of_range(tmp_path):
    r = subprocess.run(_up_args(str(tmp_path / "d"), 99999), capture_output=True, timeout=60)
    assert r.returncode == 2 and b"--port must leave room" in r.stderr, r.stderr


def _cmdline(pid: int) -> bytes:
    with open(f"/proc/{pid}/cmdline", "rb") as f:
        return f.read()


@pytest.mark.slow
def test_three_nodes_restart_serve_at_once_and_keep_the_password_secret(tmp_path):
    data_dir, port = str(tmp_path / "d"), free_port_block()
    bootstrap = f"127.0.0.1:{port}"
    for round_ in range(2):  # first start, then a restart on the same data
        proc = _start(data_dir, port, "--nodes", "3")
        try:
            # the command the banner suggests works at once (each node has replayed
            # the metadata and registered before "up" was printed)
            r = subprocess.run([sys.executable, "-m", "raftlog.client.cli", "topics", "create",
                                f"demo{round_}", "--replication-factor", "3",
                                "--bootstrap-server", bootstrap],
                               capture_output=True, timeout=60)
            assert r.returncode == 0, r.stderr
            secret = open(os.path.join(data_dir, "raft.password")).read().strip()
            pids = [int(open(os.path.join(data_dir, f"node-{i}", "node.pid")).read())
                    for i in (1, 2, 3)]
            for i, pid in enumerate(pids, 1):
                assert secret.encode() not in _cmdline(pid)
                assert b"--config" in _cmdline(pid)
                config = os.path.join(data_dir, f"node-{i}", "server.properties")
                assert stat.S_IMODE(os.stat(config).st_mode) == 0o600
                assert f"raft.password={secret}" in open(config).read()
        finally:
            err = _stop(proc)
        assert secret.encode() not in err
        for i in (1, 2, 3):
            assert secret not in open(os.path.join(data_dir, f"node-{i}", "node.log")).read()


@pytest.mark.slow
def test_one_node_of_up_restarts_alone_from_its_server_properties(tmp_path):
    data_dir, port = str(tmp_path / "d"), free_port_block()
    bootstrap = f"127.0.0.1:{port}"
    proc = _start(data_dir, port, "--nodes", "3")
    node2 = None
    try:
        Admin(bootstrap).create_topic("t", replication_factor=3)
        pid2 = int(open(os.path.join(data_dir, "node-2", "node.pid")).read())
        config = os.path.join(data_dir, "node-2", "server.properties")
        # a mistake: a second node 2 while node 2 runs -- refused, nothing lost
        r = subprocess.run([sys.executable, "-m", "raftlog.client.cli", "node", "--config",
                            config], capture_output=True, timeout=60)
        assert r.returncode == 1
        assert f"is in use by pid {pid2} (node 2)".encode() in r.stderr, r.stderr
        os.kill(pid2, signal.SIGKILL)
        # the README's way to restart it
        node2 = subprocess.Popen([sys.executable, "-m", "raftlog.client.cli", "node",
                                  "--config", config], stdout=subprocess.DEVNULL,
                                 stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                if int(open(os.path.join(data_dir, "node-2", "node.pid")).read()) == node2.pid:
                    break
            except (OSError, ValueError):
                pass
            time.sleep(0.1)
        with Producer(f"127.0.0.1:{port + 1}") as p:  # through the restarted node
            p.send("t", b"after-restart").result(30)
    finally:
        if node2 is not None:
            node2.send_signal(signal.SIGTERM)
            node2.wait(60)
        proc.send_signal(signal.SIGTERM)
        proc.communicate(timeout=60)


def test_up_says_when_a_node_exits_and_how_to_start_it_again(tmp_path):
    """A node of `up` that dies while it serves (here: SIGKILL) is reported at once by
    `up` itself, with its log and the command that starts it again."""
    data_dir, port = str(tmp_path / "d"), free_port()
    up = _start(data_dir, port)
    try:
        pid = int(open(os.path.join(data_dir, "node-1", "node.pid")).read())
        os.kill(pid, signal.SIGKILL)
        _, err = up.communicate(timeout=60)  # its only node is gone: `up` ends too
    finally:
        if up.poll() is None:
            up.kill()
    props = os.path.join(data_dir, "node-1", "server.properties")
    assert (f"raftlog up: node 1 exited (killed by SIGKILL); its log: "
            f"{os.path.join(data_dir, 'node-1', 'node.log')}; start it again: "
            f"raftlog node --config {props}").encode() in err, err[-3000:]
