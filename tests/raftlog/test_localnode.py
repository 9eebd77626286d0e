"""raftlog.localnode: the one way local node processes are started (real processes)."""

from __future__ import annotations

import os
import socket
import sys

from raftlog.localnode import free_ports, node_command, spawn, wait_listening


def test_node_command_spells_every_option():
    assert node_command(node_id=2, host="h", port=5, data_dir="d", config="c.properties",
                        overrides={"a.b": 1}) == [
        sys.executable, "-m", "raftlog.node", "--config", "c.properties", "--node-id", "2",
        "--host", "h", "--port", "5", "--data-dir", "d", "--set", "a.b=1"]
    assert node_command()[3:] == []


def test_a_node_starts_listens_and_stops_cleanly(tmp_path):
    (port,) = free_ports(1)
    log = str(tmp_path / "n" / "node.log")
    proc = spawn(node_command(port=port, data_dir=str(tmp_path / "n")), log, banner="start")
    try:
        assert wait_listening("127.0.0.1", port, 20, proc)
    finally:
        proc.terminate()
        assert proc.wait(20) == 0
    assert "--- start ---" in open(log).read()


def test_a_node_that_cannot_start_is_reported_at_once(tmp_path):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        log = str(tmp_path / "node.log")
        proc = spawn(node_command(port=port, data_dir=str(tmp_path / "n")), log)
        # the port is bound by someone else: the node exits, and the wait says so
        # without waiting out its timeout (the held socket would accept connections)
        proc.wait(20)
        assert not wait_listening("127.0.0.1", port, 20, proc)
    assert proc.returncode != 0 and os.path.getsize(log) > 0


def test_free_ports_never_hands_out_the_readmes_ports(monkeypatch):
    """The README's blocks run on its literal ports (tests/docs/test_readme_blocks.py) while
    the other test worker starts nodes: free_ports keeps off them, even when they are all
    its span holds besides one port."""
    from raftlog.localnode import RESERVED_PORTS

    assert 19092 in RESERVED_PORTS
    lo = min(RESERVED_PORTS)
    monkeypatch.setenv("RAFTLOG_PORT_SPAN", f"{lo}-{lo + len(RESERVED_PORTS)}")
    ports = {free_ports(1)[0] for _ in range(3)}
    assert not ports & RESERVED_PORTS


def test_free_port_block_stays_below_the_ephemeral_range_and_its_ports_are_free(monkeypatch):
    """`raftlog up --nodes 3` blocks (B..B+2, B+100..B+102) come from the span below the
    kernel's ephemeral range, as free_ports do: a block picked inside it lost a port to an
    outgoing connection once ("cannot listen on 127.0.0.1:36628")."""
    from raftlog.localnode import free_port_block

    monkeypatch.delenv("RAFTLOG_PORT_SPAN", raising=False)
    with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
        ephemeral_lo = int(f.read().split()[0])
    for _ in range(20):
        base = free_port_block()
        assert 10000 <= base and base + 102 < ephemeral_lo
        for d in (0, 1, 2, 100, 101, 102):
            with socket.socket() as sk:
                sk.bind(("127.0.0.1", base + d))  # free: binds
    monkeypatch.setenv("RAFTLOG_PORT_SPAN", "20000-20150")
    assert 20000 <= free_port_block() <= 20048
