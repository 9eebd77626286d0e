"""Starting local node processes: the one place that knows how.

``raftlog up``, the tests, the benches, the examples and the safety harness all run
real ``python -m raftlog.node`` processes on this machine. They differ in how they
keep them (a CLI that forwards Ctrl-C, a harness that pauses them, a fixture that
restarts them), not in how one is started: the command line (:func:`node_command`),
the spawn with its output in a log file (:func:`spawn`), the wait until its client
port accepts connections (:func:`wait_listening`) and free ports (:func:`free_ports`).

Imports nothing from the node: the client SDK (the CLI) uses it too.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time

#: Pause between connection attempts while waiting for a node to listen.
POLL_S = 0.05


def free_port(host: str = "127.0.0.1") -> int:
    return free_ports(1, host)[0]


def free_ports(n: int, host: str = "127.0.0.1") -> list[int]:
    """``n`` distinct free ports (all bound at once, so the OS cannot hand one out twice)."""
    socks = [socket.socket() for _ in range(n)]
    try:
        for s in socks:
            s.bind((host, 0))
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def node_command(*, node_id: int | None = None, host: str | None = None,
                 port: int | None = None, data_dir: str | None = None,
                 config: str | None = None, overrides: dict | None = None) -> list[str]:
    """The argv of one node: ``python -m raftlog.node`` with the given options (each
    left out when None) and ``--set key=value`` per override."""
    argv = [sys.executable, "-m", "raftlog.node"]
    if config is not None:
        argv += ["--config", config]
    for flag, value in (("--node-id", node_id), ("--host", host), ("--port", port),
                        ("--data-dir", data_dir)):
        if value is not None:
            argv += [flag, str(value)]
    for key, value in (overrides or {}).items():
        argv += ["--set", f"{key}={value}"]
    return argv


def spawn(argv: list[str], log_path: str | None = None, *, banner: str | None = None,
          new_session: bool = False) -> subprocess.Popen:
    """Start ``argv`` with stdin closed; stdout and stderr appended to ``log_path`` (or
    inherited when None), after a ``banner`` line if given."""
    if log_path is None:
        return subprocess.Popen(argv, stdin=subprocess.DEVNULL, start_new_session=new_session)
    os.makedirs(os.path.dirname(os.path.abspath(log_path)), exist_ok=True)
    with open(log_path, "ab") as log:
        if banner:
            log.write(f"\n--- {banner} ---\n".encode())
            log.flush()
        return subprocess.Popen(argv, stdout=log, stderr=log, stdin=subprocess.DEVNULL,
                                start_new_session=new_session)


def wait_listening(host: str, port: int, timeout_s: float = 20.0,
                   proc: subprocess.Popen | None = None) -> bool:
    """True once ``host:port`` accepts a TCP connection; False after ``timeout_s`` or
    as soon as ``proc`` (the node, if given) has exited."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            return False
        try:
            with socket.create_connection((host, port), timeout=0.5):
                return True
        except OSError:
            time.sleep(POLL_S)
    return False
