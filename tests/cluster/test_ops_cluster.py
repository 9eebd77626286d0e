"""Operator views of a real 3-node cluster: every node's metrics endpoint, ``raftlog
cluster status`` and ``raftlog log-dirs describe`` (run as a user would), before and
while a follower is paused."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys

import pytest

from raftlog.client import Producer

from ..client.test_metrics_e2e import scrape
from ..conftest import free_ports
from ..node.test_metrics import value
from .cluster import LocalCluster, until


def _cli(*argv) -> tuple[int, str]:
    p = subprocess.run([sys.executable, "-m", "raftlog.client.cli", *argv],
                       capture_output=True, text=True, timeout=60)
    return p.returncode, p.stdout


def _cluster_with_metrics(tmp_path, **settings) -> tuple[LocalCluster, list]:
    """A started 3-node cluster whose nodes serve metrics, and their metrics ports."""
    c = LocalCluster(tmp_path, 3, **settings)
    ports = free_ports(3)
    for n, port in zip(c.nodes, ports):
        n.extra["metrics.listener"] = f"127.0.0.1:{port}"
    c.start()
    return c, ports


@pytest.mark.slow
def test_metrics_status_and_log_dirs_of_a_cluster(tmp_path):
    c, ports = _cluster_with_metrics(tmp_path)
    try:
        with c.admin() as a:
            a.create_topic("r", partitions=1, replication_factor=3)
        part = c.wait_isr("r", 0, {1, 2, 3})
        with Producer(c.bootstrap, acks="all") as p:
            for _ in range(200):
                p.send("r", b"x" * 50, partition=0)
            p.flush()

        # metrics: one active controller; the leader counted the records; every replica
        # reports the same log end offset; the quorum's commits were timed
        scraped = {i + 1: scrape(port) for i, port in enumerate(ports)}
        assert sum(value(s, "raftlog_controller_active") for s in scraped.values()) == 1
        leader = scraped[part.leader]
        assert value(leader, "raftlog_topic_records_in_total", topic="r") == 200
        assert value(leader, "raftlog_replication_bytes_out_total") > 200 * 50
        until(lambda: all(value(scrape(port), "raftlog_log_end_offset", topic="r", partition=0)
                          == 200 for port in ports))
        assert sum(value(s, "raftlog_metadata_commit_seconds_count")
                   for s in scraped.values()) >= 1
        assert all(value(s, "raftlog_pysyncobj_critical_log_lines_total") == 0
                   for s in scraped.values())

        rc, out = _cli("cluster", "status", "--json", "--bootstrap-server", c.bootstrap)
        s = json.loads(out)
        assert rc == 0 and s["under_replicated"] == 0 and s["offline"] == 0
        assert [n["id"] for n in s["nodes"]] == [1, 2, 3]
        assert all(n["roles"] == ["broker", "controller"] and n["size_bytes"] > 0
                   for n in s["nodes"])
        rc, text = _cli("cluster", "status", "--bootstrap-server", c.bootstrap)
        assert rc == 0 and "every partition is fully replicated" in text and "ROLES" in text

        rc, out = _cli("log-dirs", "describe", "--json", "--topic-list", "r",
                       "--bootstrap-server", c.bootstrap)
        doc = json.loads(out)
        assert rc == 0 and len(doc["brokers"]) == 3
        for b in doc["brokers"]:
            (row,) = b["logDirs"][0]["partitions"]
            assert row["partition"] == "r-0" and row["logEndOffset"] == 200
            assert row["size"] > 200 * 50 and row["offsetLag"] == 0

        # a paused follower falls behind: its lag shows, then the ISR shrinks
        follower = next(i for i in (1, 2, 3) if i != part.leader)
        os.kill(c.node(follower).proc.pid, signal.SIGSTOP)
        try:
            with Producer(c.node(part.leader).bootstrap, acks=1) as p:
                for _ in range(100):
                    p.send("r", b"y", partition=0)
                p.flush()
            def lagging():
                rc, out = _cli("cluster", "status", "--json", "--bootstrap-server",
                               c.node(part.leader).bootstrap)
                s = json.loads(out)
                return rc == 0 and any(x["follower"] == follower and x["lag"] >= 100
                                       for x in s["lag"]) and s
            s = until(lagging, timeout_s=20)
            until(lambda: value(scrape(ports[part.leader - 1]),
                                "raftlog_under_replicated_partitions") == 1, timeout_s=30)
            assert value(scrape(ports[part.leader - 1]), "raftlog_isr_shrinks_total") >= 1
        finally:
            os.kill(c.node(follower).proc.pid, signal.SIGCONT)
        until(lambda: value(scrape(ports[part.leader - 1]), "raftlog_isr_expands_total") >= 1,
              timeout_s=30)
    finally:
        c.stop()


@pytest.mark.slow
def test_new_partitions_join_parked_followers_without_new_fetch_sessions(tmp_path):
    """Followers park long fetches on their leaders (replica.lag.time.max.ms 30 s: 5 s
    waits). Topics created meanwhile are replicated at once, and no follower drops its
    connection to do it: the leaders open no new fetch session (a new one is a full
    fetch naming every partition the follower has from that leader)."""
    c, ports = _cluster_with_metrics(tmp_path, replica_lag_time_max_ms=30_000)
    try:
        with c.admin() as a:
            for i in range(3):
                a.create_topic(f"base{i}", partitions=3, replication_factor=3)
        for i in range(3):
            for p in range(3):
                c.wait_isr(f"base{i}", p, {1, 2, 3})

        def sessions():
            return sum(value(scrape(port), "raftlog_fetch_sessions_created_total")
                       for port in ports)

        def pairs(topics) -> set:  # (follower, leader): one fetcher, one session each
            with c.admin() as a:
                return {(r, p.leader) for t in topics for p in a.describe_topic(t).partitions
                        for r in p.replicas if r != p.leader}

        base = pairs([f"base{i}" for i in range(3)])
        until(lambda: sessions() >= len(base))  # every fetcher connected
        before = sessions()
        with c.admin() as a:
            for i in range(5):
                a.create_topic(f"new{i}", partitions=3, replication_factor=3)
        with Producer(c.bootstrap, acks="all") as p:  # replicated to all three: acked
            for i in range(5):
                for part in range(3):
                    p.send(f"new{i}", b"v", partition=part).result(10)
        # only a follower that had no fetcher for a new partition's leader opens one
        new_pairs = pairs([f"new{i}" for i in range(5)]) - base
        assert sessions() == before + len(new_pairs)
    finally:
        c.stop()
