"""Shared fixtures: real node processes on 127.0.0.1 with their own data dirs."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field

import pytest


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def free_ports(n: int, host: str = "127.0.0.1") -> list[int]:
    """n distinct free ports (all bound at once, so the OS cannot hand one out twice)."""
    socks = [socket.socket() for _ in range(n)]
    try:
        for s in socks:
            s.bind((host, 0))
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def wait_for_port(host: str, port: int, timeout_s: float = 20.0, proc=None) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            raise RuntimeError(f"node exited with {proc.returncode} before listening")
        try:
            with socket.create_connection((host, port), timeout=0.5):
                return
        except OSError:
            time.sleep(0.05)
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
        args = [sys.executable, "-m", "raftlog.node", "--node-id", str(self.node_id), "--host", self.host,
                "--port", str(self.port), "--data-dir", self.data_dir]
        for k, v in self.extra.items():
            args += ["--set", f"{k}={v}"]
        os.makedirs(self.data_dir, exist_ok=True)
        self.log_path = os.path.join(self.data_dir, "node.log")
        log = open(self.log_path, "ab")
        self.proc = subprocess.Popen(args, stdout=log, stderr=log, stdin=subprocess.DEVNULL)
        log.close()
        wait_for_port(self.host, self.port, timeout_s, self.proc)
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
        n = NodeProcess(str(tmp_path / f"node-{len(started) + 1}"), free_port(), extra=extra)
        started.append(n.start())
        return n

    yield make
    for n in started:
        n.stop()
