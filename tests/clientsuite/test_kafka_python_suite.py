"""kafka-python's own integration suite against a 3-node raftlog cluster (Kafka listener
on every node, topics auto-created as on the suite's own broker): every failure must be
listed, with its reason, in expected_failures.py, and every listed test must still fail."""

from __future__ import annotations

import os
import subprocess

import pytest

from raftlog.client import Admin

from ..cluster.cluster import until
from ..conftest import NodeProcess, free_ports
from . import suite
from .expected_failures import EXPECTED, MAY_FAIL

pytestmark = pytest.mark.slow

#: Bound of the whole suite's run (it takes about a minute on 2 busy cores).
SUITE_TIMEOUT_S = 420
#: Where the pinned sdist is kept between runs.
CACHE_DIR = os.path.join(os.path.expanduser("~"), ".cache", "raftlog-clientsuite")


def _cluster(tmp_path) -> tuple[list[NodeProcess], list[str]]:
    """Three nodes, ids 0-2 (the suite's broker is node 0: its tests name it in replica
    assignments), each with a Kafka listener; broker settings as the suite's own broker
    has them (its servers/resources/default/kafka.properties: auto-created topics of 4
    partitions, session timeouts from 1 s, no initial rebalance delay) where raftlog's
    defaults differ."""
    ports = free_ports(9)
    voters = ",".join(f"{i}@127.0.0.1:{ports[3 + i]}" for i in range(3))
    brokers = ",".join(f"{i}@127.0.0.1:{ports[6 + i]}" for i in range(3))
    settings = {"controller.quorum.voters": voters, "raft.password": "clientsuite-0123456789",
                "kafka.brokers": brokers, "offsets.topic.replication.factor": "3",
                "offsets.topic.num.partitions": "4", "group.initial.rebalance.delay.ms": "0",
                "auto.create.topics.enable": "true", "num.partitions": "4",
                "default.replication.factor": "3", "group.min.session.timeout.ms": "1000"}
    nodes = [NodeProcess(str(tmp_path / f"node-{i}"), ports[i], node_id=i,
                         extra={**settings, "kafka.listener": f"127.0.0.1:{ports[6 + i]}"})
             for i in range(3)]
    for n in nodes:
        n.start()

    def registered() -> bool:
        with Admin(",".join(n.bootstrap for n in nodes)) as a:
            brokers = a.describe_cluster().brokers
        return [b.id for b in brokers] == [0, 1, 2] and not any(b.fenced for b in brokers)

    until(registered, timeout_s=30)
    return nodes, [f"127.0.0.1:{p}" for p in ports[6:]]


def _fetch() -> str:
    try:
        return suite.fetch(CACHE_DIR)
    except (subprocess.CalledProcessError, subprocess.TimeoutExpired) as e:
        if os.environ.get("CI"):
            raise
        pytest.skip(f"cannot download {suite.NAME}=={suite.VERSION} from PyPI ({e})")


@pytest.mark.timeout(SUITE_TIMEOUT_S + 180)  # (+ the download and the cluster's start)
def test_kafka_python_integration_suite(tmp_path):
    root = suite.prepare(_fetch(), str(tmp_path / "suite"))
    nodes, kafka = _cluster(tmp_path)
    junit, log = str(tmp_path / "junit.xml"), str(tmp_path / "suite.log")
    traces = str(tmp_path / "traces")
    try:
        suite.run(root, f"PLAINTEXT://{kafka[0]}", junit, SUITE_TIMEOUT_S, log, traces)
    finally:
        for n in nodes:
            n.stop()
    results = suite.outcomes(junit)
    counts = {o: sum(1 for v in results.values() if v == o)
              for o in ("passed", "failed", "skipped")}
    print(f"{suite.NAME} {suite.VERSION} integration suite: {counts}")
    unexpected, stale = suite.compare(
        {t: o for t, o in results.items() if t not in MAY_FAIL}, EXPECTED)
    raced = [t for t in unexpected if suite.lost_subscription(suite.trace(traces, t, None))]
    if raced:  # (the client's own race, whatever the broker: see suite.lost_subscription)
        print(f"failed by kafka-python's metadata race (its trace shows it): {raced}")
    unexpected = [t for t in unexpected if t not in raced]
    with open(log, encoding="utf-8", errors="replace") as f:
        tail = f.read()[-6000:]
    client = "".join(f"\n--- {t}: the client's DEBUG trace (end) ---\n{suite.trace(traces, t)}"
                     f"\n--- {t}: the nodes ---\n"
                     f"{suite.node_lines([n.log_path for n in nodes], t)}"
                     for t in unexpected[:3])
    assert not unexpected, (f"{len(unexpected)} unexpected failure(s) of {suite.NAME}'s "
                            f"suite: {unexpected}; log {log}:\n{tail}{client}")
    assert not stale, (f"expected to fail but did not (drop them from "
                       f"tests/clientsuite/expected_failures.py): {stale}")
