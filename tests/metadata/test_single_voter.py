"""A quorum of one voter (what a node without controller.quorum.voters runs): it elects
itself at once and commits without waiting for a heartbeat period (raft_rules rule 5)."""

from __future__ import annotations

import os
import statistics
import time

from raftlog.metadata import records as R
from raftlog.metadata.quorum import HEARTBEAT_S, MetadataQuorum


def _wait_leader(q, timeout_s=5.0) -> float:
    started = time.monotonic()
    while not q.is_leader:
        assert time.monotonic() - started < timeout_s, "a lone voter did not elect itself"
        time.sleep(0.002)
    return time.monotonic() - started


def test_a_lone_voter_elects_itself_at_once_and_commits_without_waiting(tmp_path):
    started = time.monotonic()
    q = MetadataQuorum(1, {1: ("127.0.0.1", 0)}, str(tmp_path / "raft"), listen=False)
    try:
        _wait_leader(q)
        # no election timeout (0.2-0.4 s) and no 0.1 s sleep before the first tick:
        # ~10 ms here (the bound leaves room for a loaded machine)
        assert time.monotonic() - started < 0.25
        assert q.leader_id == 1
        took = []
        for i in range(20):
            t = time.monotonic()
            assert q.propose(R.AllocateProducerIds(1, 10)).value == 10 * i
            took.append(time.monotonic() - t)
        # before rule 5 every write waited for the next heartbeat tick (~60 ms)
        assert statistics.median(took) < HEARTBEAT_S / 2, took
    finally:
        q.close()


def test_a_lone_voter_keeps_its_state_across_restarts(tmp_path):
    q = MetadataQuorum(1, {1: ("127.0.0.1", 0)}, str(tmp_path / "raft"), listen=False)
    try:
        _wait_leader(q)
        assert q.propose(R.AllocateProducerIds(1, 1000)).ok
        term = q.term
    finally:
        q.close()
    q = MetadataQuorum(1, {1: ("127.0.0.1", 0)}, str(tmp_path / "raft"), listen=False)
    try:
        _wait_leader(q)
        assert q.read_linearizable().next_producer_id == 1000  # (replayed once its term commits)
        assert q.term > term
        assert q.propose(R.AllocateProducerIds(1, 1)).value == 1000
    finally:
        q.close()


def _listening_sockets() -> set:
    """Inodes of this process's listening TCP sockets (Linux /proc)."""
    mine = set()
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue
        if target.startswith("socket:["):
            mine.add(target[8:-1])
    out = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with open(table) as f:
            for line in f.readlines()[1:]:
                cols = line.split()
                if cols[3] == "0A" and cols[9] in mine:  # 0A: LISTEN
                    out.add(cols[9])
    return out


def test_a_lone_voter_that_nobody_joins_binds_no_port(tmp_path):
    """(a node without controller.quorum.voters: an ephemeral Raft port could take the
    port just picked for the node's own listener)"""
    before = _listening_sockets()
    q = MetadataQuorum(1, {1: ("127.0.0.1", 0)}, str(tmp_path / "raft"), listen=False)
    try:
        _wait_leader(q)
        assert _listening_sockets() == before
    finally:
        q.close()
