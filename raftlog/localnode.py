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

import collections
import os
import random
import socket
import subprocess
import sys
import time

#: Pause between connection attempts while waiting for a node to listen.
POLL_S = 0.05


def free_port(host: str = "127.0.0.1") -> int:
    return free_ports(1, host)[0]


def free_ports(n: int, host: str = "127.0.0.1") -> list[int]:
    """``n`` distinct free ports (all bound at once, so none is handed out twice).

    Taken below the kernel's ephemeral range (``ip_local_port_range``), not from it:
    a port picked in that range may meanwhile become the local port of some process's
    outgoing connection, and the node meant to listen there then fails to start. The
    environment variable ``RAFTLOG_PORT_SPAN`` (``lo-hi``) narrows the span (the test
    suite gives each pytest-xdist worker its own); ports handed out lately by this
    process are not handed out again. Where no span is left below the ephemeral range,
    the kernel picks (bind to port 0)."""
    lo, hi = _port_span()
    socks: list[socket.socket] = []
    try:
        if hi - lo >= 4 * n:
            rnd = random.Random()
            for _ in range(50 * n):
                if len(socks) == n:
                    break
                port = rnd.randint(lo, hi)
                if (port in _RECENT or port in RESERVED_PORTS
                        or any(sk.getsockname()[1] == port for sk in socks)):
                    continue
                sk = socket.socket()
                try:
                    sk.bind((host, port))
                except OSError:
                    sk.close()
                    continue
                socks.append(sk)
        while len(socks) < n:  # (no span: the kernel's choice)
            sk = socket.socket()
            sk.bind((host, 0))
            socks.append(sk)
        ports = [sk.getsockname()[1] for sk in socks]
        _RECENT.extend(ports)
        return ports
    finally:
        for sk in socks:
            sk.close()


def free_port_block(offsets=(0, 1, 2, 100, 101, 102), host: str = "127.0.0.1") -> int:
    """A base port B with every ``B + offset`` free, from the same span as
    :func:`free_ports` (below the ephemeral range, the worker's own span in the tests):
    ``raftlog up --nodes 3 --port B`` listens on B..B+2 and its Raft ports on B+100..B+102.
    A base picked in the ephemeral range could lose a port to an outgoing connection
    before the node binds it (a test run failed so: "cannot listen on 127.0.0.1:36628")."""
    lo, hi = _port_span()
    top = hi - max(offsets)
    rnd = random.Random()
    if top - lo >= 10:
        for _ in range(200):
            base = rnd.randint(lo, top)
            ports = [base + d for d in offsets]
            if any(p in _RECENT or p in RESERVED_PORTS for p in ports):
                continue
            if all(_bindable(host, p) for p in ports):
                _RECENT.extend(ports)
                return base
    raise RuntimeError(f"no free block of ports {list(offsets)} in {lo}-{hi}")


def _bindable(host: str, port: int) -> bool:
    with socket.socket() as sk:
        try:
            sk.bind((host, port))
        except OSError:
            return False
    return True


#: Ports never handed out: the README's literal ones in the span (its Kafka listener,
#: ``--kafka-port 19092`` for up to nine nodes), which tests/docs/test_readme_blocks.py
#: needs free while the other test worker starts nodes on ports from here.
RESERVED_PORTS = frozenset(range(19092, 19101))

#: Ports this process handed out lately (not handed out again while here).
_RECENT: collections.deque = collections.deque(maxlen=2000)


def _port_span() -> tuple[int, int]:
    """(lo, hi) to pick ports from: ``RAFTLOG_PORT_SPAN`` or below the ephemeral range."""
    env = os.environ.get("RAFTLOG_PORT_SPAN", "")
    if env:
        lo, _, hi = env.partition("-")
        return int(lo), int(hi)
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range", encoding="ascii") as f:
            ephemeral_lo = int(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        ephemeral_lo = 32768  # Linux's default
    return 10000, ephemeral_lo - 1


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
