"""deploy/: the ansible role and playbooks (issue #10).

Fast: ``ansible-playbook --syntax-check`` and ``ansible-lint``. Slow: a real run of
site.yml against localhost (``ansible_connection=local``): three nodes as three
"hosts" on 127.0.0.1-3 with their own ports, prefixes and data dirs under a temp
dir, in the role's plain-process mode (these machines have no systemd as PID 1),
then a produce/consume round trip, then rolling_restart.yml, with no acknowledged
record lost.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys

import pytest

from raftlog.client import Admin, Consumer, Producer, TopicPartition

from ..conftest import free_port

DEPLOY = os.path.join(os.path.dirname(__file__), "..", "..", "deploy")
REPO = os.path.abspath(os.path.join(DEPLOY, ".."))


def _tool(name: str) -> str:
    path = shutil.which(name) or shutil.which(name, path=os.path.dirname(sys.executable))
    if path is None:
        if os.environ.get("CI"):
            pytest.fail(f"{name} is not installed (pip install -e '.[deploy]')")
        pytest.skip(f"{name} is not installed")
    return path


def _run(cmd, timeout=600, **kw):
    env = {**os.environ, "ANSIBLE_CONFIG": os.path.join(DEPLOY, "ansible.cfg"),
           "ANSIBLE_NOCOLOR": "1", "ANSIBLE_HOST_KEY_CHECKING": "False"}
    return subprocess.run(cmd, cwd=DEPLOY, capture_output=True, text=True, timeout=timeout,
                          env=env, **kw)


@pytest.mark.parametrize("playbook", ["site.yml", "rolling_restart.yml", "stop.yml"])
def test_playbooks_pass_syntax_check(playbook):
    p = _run([_tool("ansible-playbook"), "--syntax-check", "-i", "inventory.example.ini", playbook])
    assert p.returncode == 0, p.stdout + p.stderr


def test_ansible_lint_is_clean():
    p = _run([_tool("ansible-lint"), "--offline", "--nocolor"], timeout=300)
    assert p.returncode == 0, p.stdout[-4000:] + p.stderr[-4000:]


def _inventory(tmp_path, wheel: str) -> tuple[str, str]:
    """A YAML inventory (typed values); returns (path, bootstrap servers)."""
    hosts, servers = {}, []
    for i in (1, 2, 3):
        port = free_port(f"127.0.0.{i}")
        servers.append(f"127.0.0.{i}:{port}")
        hosts[f"node{i}"] = {
            "ansible_host": f"127.0.0.{i}", "raftlog_node_id": i,
            "raftlog_listen_host": f"127.0.0.{i}", "raftlog_port": port,
            "raftlog_raft_port": free_port(f"127.0.0.{i}"),
            "raftlog_prefix": f"{tmp_path}/opt-{i}",
        }
    group_vars = {
        "ansible_connection": "local",
        "ansible_python_interpreter": sys.executable,
        "raftlog_python": sys.executable,
        "raftlog_wheel": wheel,
        "raftlog_data_root": f"{tmp_path}/data",
        "raftlog_log_dir": f"{tmp_path}/log",
        "raftlog_raft_password": "deploy-test-secret",
        "raftlog_create_user": False,
        "raftlog_become": False,
        "raftlog_service_mode": "process",
        "raftlog_install_os_packages": False,
        "raftlog_venv_system_site_packages": True,
        "raftlog_wait_timeout_s": 120,
        "raftlog_extra_config": {"broker.session.timeout.ms": 3000,
                                 "broker.heartbeat.interval.ms": 300,
                                 "replica.lag.time.max.ms": 3000},
    }
    path = tmp_path / "inventory.json"  # JSON is YAML
    path.write_text(json.dumps({"raftlog": {"hosts": hosts, "vars": group_vars}}, indent=1))
    return str(path), ",".join(servers)


def _kill_all(tmp_path):
    for i in (1, 2, 3):
        try:
            with open(tmp_path / "data" / f"node-{i}" / "node.pid") as f:
                os.kill(int(f.read().strip()), signal.SIGKILL)
        except (OSError, ValueError):
            pass


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_deploy_roundtrip_and_rolling_restart_lose_nothing(tmp_path):
    playbook = _tool("ansible-playbook")
    wheel_dir = tmp_path / "dist"
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "-w",
                    str(wheel_dir), REPO], check=True, capture_output=True, timeout=300)
    wheel = str(next(wheel_dir.glob("raftlog-*.whl")))
    inv, bootstrap = _inventory(tmp_path, wheel)
    try:
        p = _run([playbook, "-i", inv, "site.yml"])
        assert p.returncode == 0, p.stdout[-6000:] + p.stderr[-3000:]
        with Admin(bootstrap) as admin:
            assert len(admin.describe_cluster().brokers) == 3
            admin.create_topic("deployed", partitions=3, replication_factor=3)
        acked = {}
        with Producer(bootstrap, acks="all") as prod:
            futs = [(b"r%d" % i, prod.send("deployed", b"r%d" % i)) for i in range(300)]
            for v, f in futs:
                m = f.result(60)
                acked[(m.partition, m.offset)] = v
        # a second run changes nothing and leaves the nodes running
        p = _run([playbook, "-i", inv, "site.yml"])
        assert p.returncode == 0, p.stdout[-6000:]
        assert "changed=0" in p.stdout, p.stdout[-3000:]
        p = _run([playbook, "-i", inv, "rolling_restart.yml"])
        assert p.returncode == 0, p.stdout[-6000:] + p.stderr[-3000:]
        assert p.stdout.count("Restart this node") == 3
        got = {}
        c = Consumer(bootstrap, auto_offset_reset="earliest")
        c.assign([TopicPartition("deployed", i) for i in range(3)])
        for _ in range(200):
            for r in c.poll(timeout_ms=100, max_records=10_000):
                got[(r.partition, r.offset)] = r.value
            if len(got) >= len(acked):
                break
        c.close()
        assert got == acked
        p = _run([playbook, "-i", inv, "stop.yml"])
        assert p.returncode == 0, p.stdout[-4000:]
    finally:
        _kill_all(tmp_path)
