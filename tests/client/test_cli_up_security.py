"""`raftlog up --security`: a real local SASL_SSL node with the TLS material of
`raftlog tls init`, the admin user and the client properties file it prints."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

import pytest

from raftlog.client import Admin, Consumer, Producer, TopicPartition
from raftlog.client.security import AuthenticationError, load_command_config

from ..conftest import free_port


def _up(data_dir: str, port: int, *more: str) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "raftlog.client.cli", "up", "--data-dir", data_dir,
         "--port", str(port), "--security", *more],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _stop(proc: subprocess.Popen) -> str:
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    return err


def _cli(*args: str, stdin: str = "") -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "raftlog.client.cli", *args], input=stdin,
                          capture_output=True, text=True, timeout=60)


@pytest.mark.slow
def test_up_security_serves_sasl_ssl_only_to_the_admin_it_prints(tmp_path):
    data, port, kport = str(tmp_path / "data"), free_port(), free_port()
    boot = f"127.0.0.1:{port}"
    props = os.path.join(data, "client.properties")
    proc = _up(data, port, "--kafka-port", str(kport))
    try:
        banner = [proc.stdout.readline() for _ in range(4)]
        assert banner[0].startswith("raftlog is up"), (banner, proc.poll())
        assert f"--command-config {props}" in banner[1]
        assert f"client properties (SASL_SSL, user admin): {props}" in banner[2]
        # the Python line logs in too (a bare Producer(...) would fail the handshake)
        assert f'**load_command_config("{props}")' in banner[3]
        login = load_command_config(props)
        assert login["security_protocol"] == "SASL_SSL"
        # the CLI with the printed file
        r = _cli("topics", "create", "payments", "--bootstrap-server", boot,
                 "--command-config", props)
        assert r.returncode == 0, r.stderr
        r = _cli("produce", "--topic", "payments", "--bootstrap-server", boot,
                 "--command-config", props, stdin="paid\n")
        assert r.returncode == 0, r.stderr
        for ops in (["cluster", "status", "--json"], ["log-dirs", "describe", "--json"]):
            r = _cli(*ops, "--bootstrap-server", boot, "--command-config", props)
            assert r.returncode == 0 and "payments" in r.stdout, (ops, r.stderr)
        # the SDK with the same settings
        c = Consumer(boot, auto_offset_reset="earliest", **login)
        try:
            c.assign([TopicPartition("payments", 0)])
            assert [r.value for r in c.poll(timeout_ms=10_000)] == [b"paid"]
        finally:
            c.close()
        printed = banner[3].split("#")[0].strip()  # (as a user pastes it)
        with eval(printed, {"Producer": Producer, "load_command_config": load_command_config}) as p:
            assert p.send("payments", b"from the banner").result(timeout=30).offset == 1
        # a Kafka client on the Kafka listener: SASL_SSL too, same user
        confluent_kafka = pytest.importorskip("confluent_kafka")
        kp = confluent_kafka.Producer({
            "bootstrap.servers": f"127.0.0.1:{kport}", "security.protocol": "SASL_SSL",
            "ssl.ca.location": login["ssl_cafile"], "sasl.mechanism": "SCRAM-SHA-512",
            "sasl.username": "admin", "sasl.password": login["sasl_plain_password"]})
        delivered = []
        kp.produce("payments", b"from librdkafka", on_delivery=lambda e, m: delivered.append(e))
        assert kp.flush(30) == 0 and delivered == [None]
        # nobody else: no TLS, or a wrong password, gets nothing
        assert _cli("topics", "list", "--bootstrap-server", boot).returncode == 1
        bad = {**login, "sasl_plain_password": "wrong-password-123"}
        with pytest.raises(AuthenticationError), Admin(boot, request_timeout_ms=5000,
                                                       **bad) as a:
            a.list_topics()
    finally:
        _stop(proc)
    # a restart keeps the CA, the password and so the stored credential
    ca = open(os.path.join(data, "tls", "ca.pem")).read()
    proc = _up(data, port)
    try:
        assert proc.stdout.readline().startswith("raftlog is up")
        assert open(os.path.join(data, "tls", "ca.pem")).read() == ca
        with Producer(boot, **load_command_config(props)) as p:
            assert p.send("payments", b"again").result(timeout=10).offset == 3  # (after paid, the banner's, librdkafka's)
    finally:
        _stop(proc)
