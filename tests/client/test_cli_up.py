"""`raftlog up`: a local node that stops cleanly and keeps its data."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

import pytest

from raftlog.client import Admin, Producer

from ..conftest import free_port, free_port_block, free_ports, wait_for_port


def _up(data_dir: str, port: int, *more: str) -> subprocess.Popen:
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
            *more,
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


def test_up_with_metrics_port_serves_prometheus_text(tmp_path):
    import urllib.request

    port, metrics_port = free_ports(2)
    proc = _up(str(tmp_path / "data"), port, "--metrics-port", str(metrics_port))
    try:
        assert proc.stdout.readline().startswith(b"raftlog is up")
        with urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/metrics", timeout=10) as r:
            text = r.read().decode()
        assert 'raftlog_node_info{node_id="1"' in text and "raftlog_controller_active 1" in text
    finally:
        proc.send_signal(signal.SIGTERM)
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


def _up_args(data_dir: str, port: int, *extra: str) -> list[str]:
    return [sys.executable, "-m", "raftlog.client.cli", "up", "--data-dir", data_dir,
            "--port", str(port), *extra]


def test_unready_brokers_names_every_node_not_registered_or_fenced():
    from raftlog.client.admin import BrokerDescription
    from raftlog.client.cli import unready_brokers

    brokers = [BrokerDescription(1, "h", 1), BrokerDescription(3, "h", 3, fenced=True)]
    assert unready_brokers(3, brokers) == ["node 2 is not registered", "node 3 is fenced"]
    assert unready_brokers(1, brokers) == []


def test_up_rejects_a_negative_wait_timeout(tmp_path):
    r = subprocess.run(_up_args(str(tmp_path / "d"), free_port(), "--wait-timeout", "-1"),
                       capture_output=True, timeout=60)
    assert r.returncode == 2 and b"--wait-timeout must be 0 or more" in r.stderr


def test_up_rejects_an_even_or_too_large_controller_count(tmp_path):
    for count in ("2", "4", "0"):
        r = subprocess.run(_up_args(str(tmp_path / "d"), free_port(), "--nodes", "3",
                                    "--controllers", count),
                           capture_output=True, timeout=30)
        assert r.returncode == 2 and b"--controllers must be an odd number" in r.stderr, r.stderr


def test_up_that_cannot_get_ready_in_time_says_why_and_stops(tmp_path):
    r = subprocess.run(_up_args(str(tmp_path / "d"), free_port(), "--wait-timeout", "0"),
                       capture_output=True, timeout=60)
    assert r.returncode == 1
    assert b"not up after 0 s" in r.stderr and b"does not serve yet" in r.stderr
    assert b"raftlog is up" not in r.stdout


@pytest.mark.slow
def test_up_with_three_nodes_is_up_only_when_a_replication_factor_3_topic_can_be_created(
        tmp_path):
    port = free_port_block()  # node i listens on PORT+i-1 and PORT+100+i-1
    proc = subprocess.Popen(_up_args(str(tmp_path / "d"), port, "--nodes", "3"),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        assert proc.stdout.readline().startswith(b"raftlog is up")
        # at once, as the message suggests: every broker is registered already
        Admin(f"127.0.0.1:{port}").create_topic("demo", replication_factor=3)
    finally:
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err.decode()[-2000:]


def test_up_set_gives_every_node_a_config_key_and_refuses_a_wrong_one(tmp_path):
    """`up --set KEY=VALUE`: into every node's server.properties (the node runs it); a
    wrong key or value, or a key `up` sets itself, is refused before any node starts."""
    data_dir, port = str(tmp_path / "data"), free_port()
    for bad, says in [("retention.hours=5", "did you mean 'log.retention.ms'?"),
                      ("write.caching.default=maybe", "is not a boolean"),
                      ("listeners=127.0.0.1:1", "raftlog up sets listeners itself; use "
                                                "--host/--port"),
                      ("novalue", "is not KEY=VALUE")]:
        r = subprocess.run(_up_args(data_dir, port, "--set", bad), capture_output=True,
                           timeout=30)
        assert r.returncode == 2 and says in r.stderr.decode(), r.stderr.decode()
        assert not os.path.exists(os.path.join(data_dir, "node-1", "node.log"))
    proc = _up(data_dir, port, "--set", "write.caching.default=true",
               "--set", "log.retention.ms=3600000")
    try:
        assert proc.stdout.readline().startswith(b"raftlog is up")
        props = open(os.path.join(data_dir, "node-1", "server.properties")).read()
        assert "write.caching.default=true\n" in props
        with Admin(f"127.0.0.1:{port}") as admin:
            admin.create_topic("t")
            config = {c.name: (c.value, c.source) for c in admin.describe_configs(topic="t")}
        assert config["write.caching"] == ("true", "static")
        assert config["retention.ms"] == ("3600000", "static")
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.communicate(timeout=30)
    assert proc.returncode == 0
