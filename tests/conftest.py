"""Shared fixtures: real node processes on 127.0.0.1 with their own data dirs."""

from __future__ import annotations

import os
import signal
import subprocess
from dataclasses import dataclass, field

import pytest

from raftlog.localnode import (
    free_port,
    free_port_block,
    free_ports,
    node_command,
    spawn,
    wait_listening,
)

#: Each pytest-xdist worker picks ports from its own span (raftlog/localnode.py
#: free_ports), below the kernel's ephemeral range: two workers never pick the same port
#: while one's node is starting, and no outgoing connection takes a port meant for a node.
_WORKER = os.environ.get("PYTEST_XDIST_WORKER", "")
if _WORKER.startswith("gw") and _WORKER[2:].isdigit():
    _lo = 10000 + 5000 * (int(_WORKER[2:]) % 4)
    os.environ.setdefault("RAFTLOG_PORT_SPAN", f"{_lo}-{_lo + 4999}")

#: (free_port and free_ports are imported by the test modules from here)
__all__ = ["free_port", "free_port_block", "free_ports", "wait_for_port", "NodeProcess",
           "kafka_python_read", "kafka_node"]


def kafka_node(directory: str, offsets_partitions: int = 4) -> NodeProcess:
    """A started node with the Kafka listener on (``node.kafka``: its host:port), one
    replica of the offsets topic and no initial rebalance delay: for module fixtures."""
    port, kport = free_ports(2)
    n = NodeProcess(directory, port, extra={
        "kafka.listener": f"127.0.0.1:{kport}",
        "offsets.topic.replication.factor": "1",
        "offsets.topic.num.partitions": str(offsets_partitions),
        "group.initial.rebalance.delay.ms": "0",
    })
    n.start()
    n.kafka = f"127.0.0.1:{kport}"
    return n


def kafka_python_read(consumer, n: int, timeout_s: float = 60.0) -> list:
    """The first ``n`` messages a kafka-python ``consumer`` polls, waiting for them up to
    ``timeout_s`` (not ``consumer_timeout_ms``: on a loaded machine a consumer's join and
    first fetch can take longer than its idle timeout, and it then returns nothing)."""
    import time

    got, deadline = [], time.monotonic() + timeout_s
    while len(got) < n and time.monotonic() < deadline:
        for recs in consumer.poll(timeout_ms=200).values():
            got += recs
    return got


def wait_for_port(host: str, port: int, timeout_s: float = 20.0, proc=None) -> None:
    if wait_listening(host, port, timeout_s, proc):
        return
    if proc is not None and proc.poll() is not None:
        raise RuntimeError(f"node exited with {proc.returncode} before listening")
    raise TimeoutError(f"nothing listens on {host}:{port} after {timeout_s}s")


@dataclass
class NodeProcess:
    """A real `python -m raftlog.node` process. ``bootstrap`` is "host:port"."""

    data_dir: str
    port: int
    host: str = "127.0.0.1"
    extra: dict = field(default_factory=dict)
    proc: subprocess.Popen | None = None
    log_path: str = ""

    @property
    def bootstrap(self) -> str:
        return f"{self.host}:{self.port}"

    node_id: int = 1

    def start(self, timeout_s: float = 20.0) -> NodeProcess:
        STARTED.append(self)
        argv = node_command(node_id=self.node_id, host=self.host, port=self.port,
                            data_dir=self.data_dir, overrides=self.extra)
        self.log_path = os.path.join(self.data_dir, "node.log")
        self.proc = spawn(argv, self.log_path)
        wait_for_port(self.host, self.port, timeout_s, self.proc)
        kafka = self.extra.get("kafka.listener")
        if kafka:  # (bound after the native port: a raw socket must not find it closed)
            host, _, port = kafka.rpartition("://")[2].rpartition(":")
            wait_for_port(self.host if host in ("", "0.0.0.0") else host, int(port),
                          timeout_s, self.proc)
        return self

    def stop(self, sig: int = signal.SIGTERM, timeout_s: float = 20.0) -> int:
        if self.proc is None or self.proc.poll() is not None:
            return self.proc.returncode if self.proc else 0
        self.proc.send_signal(sig)
        try:
            return self.proc.wait(timeout_s)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            return self.proc.wait()

    def kill(self) -> None:
        self.stop(signal.SIGKILL)

    def restart(self) -> NodeProcess:
        self.stop()
        return self.start()

    def log_text(self) -> str:
        try:
            with open(self.log_path, encoding="utf-8", errors="replace") as f:
                return f.read()
        except OSError:
            return ""


#: Node processes started by the running test (checked by no_critical_log_lines).
STARTED: list[NodeProcess] = []


def critical_lines(text: str) -> list[str]:
    """The lines of a node log at CRITICAL level (pysyncobj's, the quorum's, ours)."""
    return [line for line in text.splitlines()
            if "level=CRITICAL" in line or "level=critical" in line]


@pytest.fixture(autouse=True)
def no_critical_log_lines():
    """Fails any test that started a node whose log has a CRITICAL line (for example
    pysyncobj's "state machine may have diverged"): such a line is never expected."""
    STARTED.clear()
    yield
    found = [(n.data_dir, line) for n in {id(n): n for n in STARTED}.values()
             for line in critical_lines(n.log_text())]
    STARTED.clear()
    if found:
        pytest.fail("CRITICAL lines in node logs:\n" + "\n".join(f"{d}: {line}"
                                                                 for d, line in found[:20]))


@pytest.fixture
def lazyfs_mount(tmp_path):
    """A lazyfs mount (the harness's power-loss filesystem) on tmp_path/mnt over
    tmp_path/back; the test is skipped, saying why, where FUSE cannot mount."""
    from raftlog.jepsen.lazyfs import LazyFSUnavailable, Mount

    m = Mount(str(tmp_path / "mnt"), str(tmp_path / "back"))
    try:
        m.start()
    except LazyFSUnavailable as e:
        pytest.skip(f"FUSE cannot mount here: {e}")
    yield m
    m.stop()


@pytest.fixture
def node(tmp_path):
    """One node process with a fresh data dir; stopped (SIGTERM) after the test."""
    n = NodeProcess(str(tmp_path / "node-1"), free_port())
    n.start()
    yield n
    n.stop()


@pytest.fixture
def node_factory(tmp_path):
    """Start nodes with extra config: ``node_factory(**{"auto.create.topics.enable": "true"})``."""
    started: list[NodeProcess] = []

    def make(**extra) -> NodeProcess:
        n = NodeProcess(str(tmp_path / f"factory-node-{len(started) + 1}"), free_port(),
                        extra=extra)  # (not node-1: the `node` fixture's data dir)
        started.append(n.start())
        return n

    yield make
    for n in started:
        n.stop()


#: Tests that run one after another on one pytest-xdist worker (the README's test command
#: runs two workers): multi-process clusters, Spark, the harness, ansible and the README's
#: own blocks (which use the README's fixed ports), so that at most one of them loads the
#: machine at a time while the other worker takes the many short tests.
SERIAL_DIRS = ("jepsen", "deploy", "docs")
#: Slow tests that run beside the serial group, each file (or test) as a group of its own
#: (one Spark session, one node): the serial group alone took 1439 s of a 1471-s CI run
#: while the other worker was done after 673 s. xdist's loadgroup hands a worker another
#: group only when it is nearly out of work, so these go to the worker without the serial
#: group. They use free ports (the README blocks, with their fixed ports, stay serial).
APART = {
    "tests/client/test_spark.py": "spark",
    "tests/deploy/test_ansible.py::test_deploy_roundtrip_and_rolling_restart_lose_nothing":
        "ansible",
}


@pytest.hookimpl(tryfirst=True)  # before xdist's own hook, which reads the groups
def pytest_collection_modifyitems(config, items):
    for item in items:
        parts = item.nodeid.split("/")
        apart = APART.get(item.nodeid.split("[")[0]) or APART.get(item.nodeid.split("::")[0])
        if apart is not None:
            item.add_marker(pytest.mark.xdist_group(apart))
        elif item.get_closest_marker("slow") or (len(parts) > 1 and parts[1] in SERIAL_DIRS):
            item.add_marker(pytest.mark.xdist_group("serial"))


def ungrouped(ids: list[str]) -> list[str]:
    """The collected ids (as an xdist worker reports them) that belong to the serial group
    but carry no "@group" suffix: loadgroup would hand them to any worker."""
    return [i for i in ids
            if len(i.split("/")) > 2 and i.split("/")[1] in SERIAL_DIRS
            and i.rfind("@") <= i.rfind("]")]


@pytest.hookimpl(optionalhook=True)  # (an xdist hook: run on the controller)
def pytest_xdist_node_collection_finished(node, ids):
    if node.config.getvalue("dist") != "loadgroup":
        return
    lost = ungrouped(ids)
    if lost:
        # Seen on pytest 9.2 with xdist 3.8 (pytest-dev/pytest-xdist#1386): the README
        # blocks then ran on both workers, each with a node of its own on the same ports.
        pytest.exit(f"pytest-xdist's --dist loadgroup did not group {len(lost)} serial test(s) "
                    f"(e.g. {lost[0]}) on worker {node.gateway.id}: this pytest "
                    f"({pytest.__version__}) and pytest-xdist do not work together; install "
                    f"the versions pyproject.toml's dev extra names (pip install -e '.[dev]')",
                    returncode=4)


#: Seconds of test time per xdist worker and group (the suite's wall time is about the
#: busiest worker's): printed at the end so the CI log shows the critical path.
_WORKER_SECONDS: dict = {}


def pytest_runtest_logreport(report):
    node = getattr(report, "node", None)  # (set on the controller's copy under xdist)
    worker = getattr(getattr(node, "gateway", None), "id", "main")
    # (xdist appends "@group"; a parameter id may hold an "@" too)
    tail = report.nodeid.rsplit("@", 1)[-1] if "@" in report.nodeid else ""
    group = tail if tail.replace("-", "").replace("_", "").isalnum() else ""
    key = (worker, group)
    _WORKER_SECONDS[key] = _WORKER_SECONDS.get(key, 0.0) + report.duration


def pytest_terminal_summary(terminalreporter):
    if not _WORKER_SECONDS:
        return
    parts = []
    for w in sorted({w for w, _ in _WORKER_SECONDS}):
        mine = {g: t for (w2, g), t in _WORKER_SECONDS.items() if w2 == w}
        groups = ", ".join(f"{g} {t:.0f}s" for g, t in sorted(mine.items()) if g)
        parts.append(f"{w} {sum(mine.values()):.0f}s" + (f" (groups: {groups})" if groups else ""))
    terminalreporter.write_line("test seconds per worker: " + "; ".join(parts))
