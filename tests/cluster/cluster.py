"""A local cluster of real node processes for the cluster tests."""

from __future__ import annotations

import os
import threading
import time

from raftlog.client import Admin, Producer
from raftlog.config import LogConfig
from raftlog.log import PartitionLog

from ..conftest import NodeProcess, free_ports

SESSION_MS = 2000


class LocalCluster:
    def __init__(self, tmp_path, n: int = 3, voters: int | None = None,
                 roles: dict | None = None, **extra):
        """``n`` nodes; nodes 1..``voters`` (default all) vote, the rest are broker-only;
        ``roles`` {node id: process.roles} overrides that per node."""
        ports = free_ports(2 * n)
        n_voters = n if voters is None else voters
        voters = ",".join(f"{i}@127.0.0.1:{ports[n + i - 1]}" for i in range(1, n_voters + 1))
        settings = {"controller.quorum.voters": voters, "raft.password": "test-secret-0123456789",
                    "broker.session.timeout.ms": str(SESSION_MS),
                    "broker.heartbeat.interval.ms": "200",
                    "replica.lag.time.max.ms": "3000",
                    "leader.imbalance.check.interval.ms": "1000"}
        settings.update({k.replace("_", "."): str(v) for k, v in extra.items()})
        self.nodes = [NodeProcess(str(tmp_path / f"node-{i}"), ports[i - 1], node_id=i,
                                  extra={**settings, **({"process.roles": "broker"}
                                                        if i > n_voters else {}),
                                         **({"process.roles": roles[i]}
                                            if roles and i in roles else {})})
                      for i in range(1, n + 1)]
        self.serving = [i for i in range(1, n + 1)
                        if "broker" in (roles or {}).get(i, "broker")]

    @property
    def bootstrap(self) -> str:
        return ",".join(n.bootstrap for n in self.nodes)

    def start(self) -> LocalCluster:
        for n in self.nodes:
            n.start()
        until(lambda: self._all_registered(), timeout_s=60)
        return self

    def _all_registered(self) -> bool:
        with self.admin() as a:
            brokers = a.describe_cluster().brokers
        return ([b.id for b in brokers] == self.serving
                and not any(b.fenced for b in brokers))

    def stop(self) -> None:
        for n in self.nodes:
            n.stop()

    def node(self, node_id: int) -> NodeProcess:
        return self.nodes[node_id - 1]

    def alive(self) -> list[NodeProcess]:
        return [n for n in self.nodes if n.proc is not None and n.proc.poll() is None]

    def admin(self, via: NodeProcess | None = None) -> Admin:
        targets = [via] if via else self.alive()
        return Admin(",".join(n.bootstrap for n in targets))

    def partition(self, topic: str, partition: int = 0, via: NodeProcess | None = None):
        with self.admin(via) as a:
            return a.describe_topic(topic).partitions[partition]

    def wait_isr(self, topic: str, partition: int, isr: set, timeout_s: float = 30.0,
                 via: NodeProcess | None = None):
        """Wait until ``via`` (default: any live node) reports this ISR. A node that has
        just restarted answers from its own, possibly stale, copy: pass ``via``."""
        return until(lambda: (p := self.partition(topic, partition, via)) and set(p.isr) == isr
                     and p.leader in isr and p, timeout_s=timeout_s)

    def read_replica(self, node_id: int, topic: str, partition: int = 0) -> list:
        """Every record of one replica's log, read from its files (node stopped)."""
        path = os.path.join(self.node(node_id).data_dir, f"{topic}-{partition}")
        log = PartitionLog.open(path, LogConfig())
        try:
            out, offset = [], log.log_start_offset
            while offset < log.log_end_offset:
                recs = log.read_records(offset, 1 << 20)
                if not recs:
                    break
                out += [(r.offset, r.key, r.value) for r in recs]
                offset = recs[-1].offset + 1
            return out
        finally:
            log.close()


def until(fn, timeout_s: float = 15.0, interval_s: float = 0.1):
    deadline = time.monotonic() + timeout_s
    last = None
    while time.monotonic() < deadline:
        try:
            last = fn()
            if last:
                return last
        except Exception as e:  # nodes may be electing or restarting
            last = e
        time.sleep(interval_s)
    raise AssertionError(f"condition not met in {timeout_s}s: {last!r}")


class AckedWrites:
    """A thread writing numbered records to one partition with the SDK's defaults
    (acks=all, idempotence), one at a time: each acknowledged offset in ``acked``,
    each error in ``errors`` (the failover tests expect none)."""

    def __init__(self, bootstrap: str, topic: str, partition: int = 0):
        self.acked: list[int] = []
        self.errors: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, args=(bootstrap, topic, partition),
                                        daemon=True)

    def start(self) -> AckedWrites:
        self._thread.start()
        return self

    def _run(self, bootstrap: str, topic: str, partition: int) -> None:
        with Producer(bootstrap) as p:
            i = 0
            while not self._stop.is_set():
                try:
                    self.acked.append(p.send(topic, b"%d" % i, partition=partition)
                                      .result(60).offset)
                except Exception as e:  # counted
                    self.errors.append(repr(e))
                i += 1

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(60)

    def in_order(self) -> bool:
        """Every acknowledged offset once, in order, without a gap."""
        return self.acked == list(range(self.acked[0], self.acked[0] + len(self.acked)))
