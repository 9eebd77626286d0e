"""`raftlog up`: a local node that stops cleanly and keeps its data."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

from raftlog.client import Admin, Producer

from ..conftest import free_port, wait_for_port


def _up(data_dir: str, port: int) -> subprocess.Popen:
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "raftlog.client.cli",
            "up",
            "--data-dir",
            data_dir,
            "--port",
            str(port),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )


def test_up_serves_writes_pid_and_stops_cleanly(tmp_path):
    data_dir, port = str(tmp_path / "data"), free_port()
    proc = _up(data_dir, port)
    try:
        assert proc.stdout.readline().startswith(b"raftlog is up")
        bootstrap = f"127.0.0.1:{port}"
        Admin(bootstrap).create_topic("demo")
        with Producer(bootstrap) as p:
            p.send("demo", b"kept").result(10)
        pid = int(open(os.path.join(data_dir, "node-1", "node.pid")).read())
        assert pid > 0
    finally:
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=30)
    assert proc.returncode == 0, err.decode()
    assert b"event=stopped" in err and b"Traceback" not in err
    proc = _up(data_dir, port)
    try:
        wait_for_port("127.0.0.1", port, proc=proc)
        assert Admin(f"127.0.0.1:{port}").list_topics() == ["demo"]
    finally:
        proc.send_signal(signal.SIGINT)
        proc.communicate(timeout=30)
    assert proc.returncode == 0


def test_up_rejects_a_bad_node_count(tmp_path):
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "raftlog.client.cli",
            "up",
            "--nodes",
            "0",
            "--data-dir",
            str(tmp_path),
        ],
        capture_output=True,
        timeout=30,
    )
    assert r.returncode == 2 and b"--nodes" in r.stderr
