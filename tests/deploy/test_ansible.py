"""deploy/: the ansible role and playbooks.

Fast: ``ansible-playbook --syntax-check`` on the playbooks and ``ansible-lint`` on deploy/.
Slow: a real run of site.yml against this machine (``ansible_connection=local``): three
nodes as three inventory hosts on 127.0.0.1-3 with their own ports, prefixes and data dirs
under tmp_path, in the role's plain-process mode (no systemd as PID 1 here, and no root
needed); then a produce (acks=all) / consume round trip, a second site.yml run that must
change nothing, rolling_restart.yml (every node gets a new process), and a check that every
acknowledged record is still readable; finally stop.yml (and, whatever happened, a
SIGKILL to every pid file's process).

Without ansible the tests skip, except under CI=true where they fail.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time

import pytest

from raftlog.client import Admin, Consumer, Producer, TopicPartition

from ..conftest import free_ports

DEPLOY = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", "deploy"))
REPO = os.path.dirname(DEPLOY)
HOSTS = ("127.0.0.1", "127.0.0.2", "127.0.0.3")
TOPIC = "deployed"


def _ci() -> bool:
    return os.environ.get("CI", "").strip().lower() in ("true", "1", "yes")


def _tool(name: str) -> str:
    path = shutil.which(name) or shutil.which(name, path=os.path.dirname(sys.executable))
    if path is None:
        if _ci():
            pytest.fail(f"{name} is not installed (pip install -e '.[deploy]')")
        pytest.skip(f"{name} is not installed (pip install -e '.[deploy]')")
    return path


def _run(cmd, timeout=600):
    env = {**os.environ, "ANSIBLE_CONFIG": os.path.join(DEPLOY, "ansible.cfg"),
           "ANSIBLE_NOCOLOR": "1", "ANSIBLE_FORCE_COLOR": "0",
           "ANSIBLE_HOST_KEY_CHECKING": "False", "ANSIBLE_RETRY_FILES_ENABLED": "False"}
    return subprocess.run(cmd, cwd=DEPLOY, capture_output=True, text=True, timeout=timeout,
                          env=env)


def _out(p, n=6000, logs=None) -> str:
    """A failed playbook's output; with ``logs`` (the inventory's log dir) each node's
    warnings and errors too, so a failure in CI can be explained afterwards."""
    text = f"rc={p.returncode}\n--- stdout\n{p.stdout[-n:]}\n--- stderr\n{p.stderr[-3000:]}"
    return text + (_node_warnings(logs) if logs is not None else "")


def _node_warnings(log_dir, limit: int = 25) -> str:
    out = []
    for path in sorted(log_dir.glob("node-*.log")):
        lines = [ln for ln in path.read_text(errors="replace").splitlines()
                 if "level=warn" in ln or "level=error" in ln or "WARNING" in ln
                 or "ERROR" in ln or "event=registered" in ln
                 or "event=metadata_leader" in ln]
        out.append(f"--- {path.name}: {len(lines)} warnings/errors, the last {limit}")
        out.extend(ln[:400] for ln in lines[-limit:])
    return "\n" + "\n".join(out)


# --------------------------------------------------------------------------- fast


@pytest.mark.parametrize("playbook", ["site.yml", "rolling_restart.yml", "stop.yml"])
def test_playbook_passes_syntax_check(playbook):
    p = _run([_tool("ansible-playbook"), "--syntax-check", "-i", "inventory.example.ini",
              playbook], timeout=120)
    assert p.returncode == 0, _out(p)


def test_ansible_lint_is_clean():
    p = _run([_tool("ansible-lint"), "--offline", "--nocolor"], timeout=300)
    assert p.returncode == 0, _out(p)


# --------------------------------------------------------------------------- slow


def _bindable(host: str) -> bool:
    try:
        with socket.socket() as s:
            s.bind((host, 0))
        return True
    except OSError:
        return False


def _inventory(tmp_path, wheel: str) -> tuple[str, str]:
    """A YAML (here: JSON) inventory; returns (path, bootstrap servers).

    Everything is a host variable: those outrank deploy/group_vars/all, which holds the
    example settings (the vault reference for the Raft password among them).
    """
    common = {
        "ansible_connection": "local",
        "ansible_python_interpreter": sys.executable,
        "raftlog_python": sys.executable,
        "raftlog_wheel": wheel,
        "raftlog_data_root": f"{tmp_path}/data",
        "raftlog_log_dir": f"{tmp_path}/log",
        "raftlog_raft_password": "deploy-test-secret",
        "raftlog_cluster_id": "deploy-test",
        "raftlog_create_user": False,
        "raftlog_become": False,
        "raftlog_service_mode": "process",
        "raftlog_install_os_packages": False,
        "raftlog_venv_system_site_packages": True,
        "raftlog_default_replication_factor": 3,
        "raftlog_min_insync_replicas": 2,
        "raftlog_wait_timeout_s": 90,
        "raftlog_extra_config": {"broker.session.timeout.ms": 3000,
                                 "broker.heartbeat.interval.ms": 300,
                                 "replica.lag.time.max.ms": 3000,
                                 "leader.imbalance.check.interval.ms": 1000,
                                 "offsets.topic.num.partitions": 3},
    }
    hosts, servers = {}, []
    for i, host in enumerate(HOSTS, start=1):
        port, raft_port = free_ports(2, host)
        servers.append(f"{host}:{port}")
        hosts[f"node{i}"] = {
            **common,
            "ansible_host": "localhost", "raftlog_node_id": i,
            "raftlog_listen_host": host, "raftlog_port": port, "raftlog_raft_port": raft_port,
            "raftlog_prefix": f"{tmp_path}/opt-{i}",
        }
    path = tmp_path / "inventory.json"  # JSON is YAML: typed values, unlike INI
    path.write_text(json.dumps({"raftlog": {"hosts": hosts}}, indent=1))
    return str(path), ",".join(servers)


def _pids(tmp_path) -> dict[int, int]:
    out = {}
    for i in range(1, len(HOSTS) + 1):
        try:
            with open(tmp_path / "data" / f"node-{i}" / "node.pid") as f:
                out[i] = int(f.read().strip())
        except (OSError, ValueError):
            pass
    return out


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
        return True
    except OSError:
        return False


def _kill_all(tmp_path) -> None:
    for pid in _pids(tmp_path).values():
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                if str(tmp_path).encode() not in f.read():
                    continue  # a reused pid: not ours
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass


def _assert_unchanged(stdout: str) -> None:
    recap = re.findall(r"^(node\d+)\s*:\s*ok=\d+\s+changed=(\d+)", stdout, re.M)
    assert sorted(h for h, _ in recap) == ["node1", "node2", "node3"], stdout[-3000:]
    assert all(c == "0" for _, c in recap), stdout[-6000:]


def _read_all(bootstrap: str, want: dict, timeout_s: float = 60.0) -> dict:
    """(partition, offset) -> value for every record of TOPIC, until ``want`` is covered."""
    got: dict = {}
    c = Consumer(bootstrap, auto_offset_reset="earliest")
    try:
        c.assign([TopicPartition(TOPIC, p) for p in range(3)])
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline and not want.keys() <= got.keys():
            for r in c.poll(timeout_ms=200, max_records=10_000):
                got[(r.partition, r.offset)] = r.value
    finally:
        c.close()
    return got


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_deploy_roundtrip_and_rolling_restart_lose_nothing(tmp_path):
    playbook = _tool("ansible-playbook")
    unbindable = [h for h in HOSTS if not _bindable(h)]
    if unbindable:
        pytest.skip(f"cannot bind {unbindable} on this machine (Linux binds all of 127/8)")
    try:
        import ensurepip  # noqa: F401  (the role's `python -m venv` needs it)
    except ImportError:
        msg = f"{sys.executable} cannot create a venv (Debian: apt-get install python3-venv)"
        pytest.fail(msg) if _ci() else pytest.skip(msg)
    t0 = time.monotonic()
    wheel_dir = tmp_path / "dist"
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps",
                    "--disable-pip-version-check", "-w", str(wheel_dir), REPO],
                   check=True, capture_output=True, timeout=300)
    wheel = str(next(wheel_dir.glob("raftlog-*.whl")))
    inv, bootstrap = _inventory(tmp_path, wheel)
    try:
        p = _run([playbook, "-i", inv, "site.yml"])
        assert p.returncode == 0, _out(p, logs=tmp_path / "log")
        print(f"site.yml done at {time.monotonic() - t0:.0f}s")
        with Admin(bootstrap) as admin:
            brokers = admin.describe_cluster().brokers
            assert sorted(b.id for b in brokers) == [1, 2, 3]
            assert not any(b.fenced for b in brokers)
            admin.create_topic(TOPIC, partitions=3, replication_factor=3)

        acked: dict = {}
        with Producer(bootstrap, acks="all") as prod:
            futs = [(b"r%d" % i, prod.send(TOPIC, b"r%d" % i)) for i in range(300)]
            for v, f in futs:
                m = f.result(60)
                acked[(m.partition, m.offset)] = v
        assert len(acked) == 300
        got = _read_all(bootstrap, acked)
        assert {k: got.get(k) for k in acked} == acked

        # a second run changes nothing and leaves the same processes running
        before = _pids(tmp_path)
        p = _run([playbook, "-i", inv, "site.yml"])
        assert p.returncode == 0, _out(p, logs=tmp_path / "log")
        _assert_unchanged(p.stdout)
        assert _pids(tmp_path) == before
        print(f"second site.yml done at {time.monotonic() - t0:.0f}s")

        # rolling restart, one node at a time; then every acknowledged record is still there
        p = _run([playbook, "-i", inv, "rolling_restart.yml"])
        assert p.returncode == 0, _out(p, logs=tmp_path / "log")
        assert p.stdout.count("TASK [Restart this node]") == 3, _out(p, logs=tmp_path / "log")
        after = _pids(tmp_path)
        assert sorted(after) == [1, 2, 3]
        assert all(after[i] != before[i] and _alive(after[i]) for i in after), (before, after)
        print(f"rolling restart done at {time.monotonic() - t0:.0f}s")
        got = _read_all(bootstrap, acked)
        lost = {k: v for k, v in acked.items() if got.get(k) != v}
        assert not lost, f"{len(lost)} acknowledged records lost, e.g. {list(lost.items())[:5]}"
        with Admin(bootstrap) as admin:  # and the cluster is whole again
            assert not any(b.fenced for b in admin.describe_cluster().brokers)
            assert all(set(p.isr) == {1, 2, 3} for p in admin.describe_topic(TOPIC).partitions)

        p = _run([playbook, "-i", inv, "stop.yml"])
        assert p.returncode == 0, _out(p, logs=tmp_path / "log")
        assert not any(_alive(pid) for pid in after.values())
        print(f"stop.yml done at {time.monotonic() - t0:.0f}s")
    finally:
        _kill_all(tmp_path)
