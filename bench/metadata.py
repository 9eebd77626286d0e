"""Metadata quorum benchmark on a local 3-node cluster (real node processes).

    python bench/metadata.py [--json] [--topics 200] [--failovers 20] [--starts 0] [--rejoins 5]
                             [--leader-pauses 0]

* ``topic_creations_s``: CreateTopics requests per second, one at a time, through one node
  (each is a Raft commit: journal msync on a majority, then applied);
  ``topic_creations_s_concurrent``: the same with ``--clients`` clients at once, spread
  over the nodes;
* ``failover_s_median``, ``failover_s_max``: SIGKILL of the controller -> the next
  successful metadata write (a topic creation through a survivor) over ``--failovers``;
* ``rejoin_elections``: controller elections caused by ``--rejoins`` follower voters
  cut off from the others' Raft traffic for 1.5 s and healed (``rejoin_epoch_growth``:
  the controller epoch's growth per rejoin);
* ``leader_pauses`` (``--leader-pauses N``): N times the controller's process is paused
  (SIGSTOP) for 0.15-0.5 s -- about one election timeout, so a follower's pre-vote is
  granted and the leader is back before its election -- and resumed, 1 s apart;
  ``leader_unknown_warnings``: the nodes' ``metadata_leader_unknown`` warnings (a voter
  that knew no leader for 5 s: before Raft rule 9 a voter whose election ran past the
  leader's term stayed a candidate for good), ``leader_step_downs``: leaders that took a
  voter's higher term (rule 9), ``stuck_voters``: nodes that name no controller (or
  another one) 10 s after the last pause;
* ``critical_lines``: CRITICAL lines (pysyncobj's "state machine may have diverged"
  and any other) in every node log of the run; ``--starts N`` adds N fresh 3-node
  clusters, each started, used for one RF3 topic and stopped.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

from raftlog.client import Admin  # noqa: E402
from raftlog.localnode import free_ports, node_command, spawn, wait_listening  # noqa: E402


class Cluster:
    def __init__(self, n: int = 3):
        self.dir = tempfile.mkdtemp(prefix="raftlog-bench-meta-")
        ports = free_ports(2 * n)
        self.ports = {i: ports[i - 1] for i in range(1, n + 1)}
        raft = {i: ports[n + i - 1] for i in self.ports}
        self.voters = ",".join(f"{i}@127.0.0.1:{p}" for i, p in raft.items())
        self.procs: dict[int, subprocess.Popen] = {}
        for i in self.ports:
            self.start(i)

    def start(self, i: int) -> None:
        argv = node_command(node_id=i, port=self.ports[i],
                            data_dir=os.path.join(self.dir, f"node-{i}"),
                            overrides={"controller.quorum.voters": self.voters,
                                       "raft.password": "bench-password-0123456789"})
        self.procs[i] = spawn(argv, os.path.join(self.dir, f"node-{i}.log"))
        if not wait_listening("127.0.0.1", self.ports[i], 20, self.procs[i]):
            raise SystemExit(f"node {i} did not start; see {self.dir}/node-{i}.log")

    def critical_lines(self) -> list[str]:
        out = []
        for i in self.ports:
            path = os.path.join(self.dir, f"node-{i}.log")
            if os.path.exists(path):
                with open(path, errors="replace") as f:
                    out += [line.strip() for line in f if "CRITICAL" in line or "level=critical" in line]
        return out

    def wait_registered(self, timeout_s: float = 30.0) -> None:
        def ok():
            brokers = Admin(self.bootstrap(1)).describe_cluster().brokers
            return (len(brokers) == len(self.ports) and not any(b.fenced for b in brokers)) or 1 / 0
        _retry(ok, timeout_s)

    def bootstrap(self, i: int) -> str:
        return f"127.0.0.1:{self.ports[i]}"

    def controller(self) -> int:
        """The active controller's node id (retried while none is elected)."""
        def ask():
            with Admin(self.bootstrap(1)) as a:
                return (cid := a.describe_cluster().controller_id) > 0 and cid or 1 / 0
        return _retry(ask)

    def stop(self) -> list[str]:
        """Stop every node; the CRITICAL lines of their logs."""
        for p in self.procs.values():
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
        for p in self.procs.values():
            p.wait(30)
        lines = self.critical_lines()
        shutil.rmtree(self.dir, ignore_errors=True)
        return lines


def _retry(fn, timeout_s: float = 30.0):
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            return fn()
        except Exception:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.01)


def fresh_starts(n: int) -> list[str]:
    """N fresh clusters: start, wait for every broker, one RF3 topic, stop."""
    lines: list[str] = []
    for _ in range(n):
        c = Cluster()
        try:
            c.wait_registered()
            _retry(lambda c=c: Admin(c.bootstrap(1)).create_topic("fresh", replication_factor=3))
        finally:
            lines += c.stop()
    return lines


def _concurrent_creations(c: Cluster, topics: int, clients: int) -> float:
    """Topic creations per second with ``clients`` threads, each its own Admin."""
    import threading

    per = max(1, topics // clients)
    errors: list = []

    def worker(k: int) -> None:
        try:
            with Admin(c.bootstrap(1 + k % len(c.ports))) as a:
                for i in range(per):
                    a.create_topic(f"c{k}-{i}")
        except Exception as e:  # noqa: BLE001 -- reported below
            errors.append(e)

    threads = [threading.Thread(target=worker, args=(k,)) for k in range(clients)]
    t = time.perf_counter()
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    if errors:
        raise SystemExit(f"concurrent creations failed: {errors[0]!r}")
    return per * clients / (time.perf_counter() - t)


def rejoin_elections(rejoins: int, cut_s: float = 1.5) -> list[int]:
    """Controller elections caused by a voter that rejoins after a Raft partition.

    A 3-node cluster whose Raft links run through the harness's proxies
    (``raftlog.jepsen.proxy``); ``rejoins`` times a follower voter is cut off from
    both others for ``cut_s`` (several election timeouts), healed, and given as long
    again. Returns, per rejoin, how much the controller epoch (the Raft term) grew:
    0 when pre-vote and leader stickiness keep the healthy controller."""
    from raftlog.jepsen.cluster import Cluster as ProxiedCluster

    out: list[int] = []
    base = tempfile.mkdtemp(prefix="raftlog-bench-rejoin-")
    c = ProxiedCluster(3, base, net="proxy", log=lambda *a: None)
    try:
        c.start()
        admin = Admin(c.bootstrap, request_timeout_ms=5000)
        _retry(lambda: admin.create_topic("warmup"))
        for _ in range(rejoins):
            before = _retry(lambda: (d := admin.describe_cluster()).controller_id > 0 and d or 1 / 0)
            cut = next(n.id for n in c.nodes if n.id != before.controller_id)
            c.net.partition([[cut], [n.id for n in c.nodes if n.id != cut]])
            time.sleep(cut_s)
            c.heal()
            time.sleep(cut_s)
            _retry(lambda: admin.create_topic(f"after-rejoin-{len(out)}"))
            after = admin.describe_cluster()
            out.append(after.controller_epoch - before.controller_epoch)
        admin.close()
    finally:
        c.close()
        shutil.rmtree(base, ignore_errors=True)
    return out


def leader_pauses(pauses: int, seed: int = 1) -> dict:
    """Pause the controller about one election timeout, again and again (see above)."""
    import random

    rng = random.Random(seed)
    c = Cluster()
    try:
        c.wait_registered()
        for _ in range(pauses):
            controller = c.controller()
            c.procs[controller].send_signal(signal.SIGSTOP)
            time.sleep(rng.uniform(0.15, 0.5))
            c.procs[controller].send_signal(signal.SIGCONT)
            time.sleep(1.0)
        time.sleep(10.0)
        logs, views = "", {}
        for i in c.ports:  # the leader each node last logged it follows (metadata_leader)
            with open(os.path.join(c.dir, f"node-{i}.log"), errors="replace") as f:
                text = f.read()
            logs += text
            follows = [ln for ln in text.splitlines() if "event=metadata_leader " in ln]
            views[i] = follows[-1].split("leader=")[1].split()[0] if follows else "-1"
        agreed = max(set(views.values()), key=list(views.values()).count)
        stuck = [i for i, v in views.items() if v != agreed or v == "-1"]
    finally:
        c.stop()
    return {"leader_pauses": pauses, "leader_unknown_warnings": logs.count("metadata_leader_unknown"),
            "leader_step_downs": logs.count("stepped down as leader"), "stuck_voters": stuck}


def bench(topics: int, failovers: int, starts: int = 0, clients: int = 8) -> dict:
    c = Cluster()
    lines: list[str] = []
    try:
        admin = Admin(c.bootstrap(1))
        _retry(lambda: admin.create_topic("warmup"))
        t = time.perf_counter()
        for i in range(topics):
            admin.create_topic(f"t{i}")
        creations_s = topics / (time.perf_counter() - t)
        concurrent_s = _concurrent_creations(c, topics, clients)
        times = []
        for k in range(failovers):
            controller = c.controller()
            survivor = next(i for i in c.ports if i != controller)
            c.procs[controller].send_signal(signal.SIGKILL)
            c.procs[controller].wait()
            start = time.perf_counter()
            a = Admin(c.bootstrap(survivor), request_timeout_ms=5000)
            _retry(lambda a=a, k=k: a.create_topic(f"after-failover-{k}"))
            times.append(time.perf_counter() - start)
            c.start(controller)
            _retry(lambda k=k, i=controller: f"after-failover-{k}" in Admin(c.bootstrap(i)).list_topics() or 1 / 0)
    finally:
        lines += c.stop()
    lines += fresh_starts(starts)
    res = {"nodes": 3, "topics": topics, "topic_creations_s": creations_s,
           "clients": clients, "topic_creations_s_concurrent": concurrent_s,
           "failover_s": [round(t, 3) for t in times],
           "failover_s_median": statistics.median(times) if times else None,
           "failover_s_max": max(times) if times else None,
           "fresh_starts": starts, "critical_lines": len(lines)}
    if lines:
        res["critical_examples"] = lines[:5]
    return res


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--topics", type=int, default=200)
    ap.add_argument("--failovers", type=int, default=20)
    ap.add_argument("--starts", type=int, default=0, help="fresh 3-node starts to check")
    ap.add_argument("--clients", type=int, default=8, help="clients creating topics at once")
    ap.add_argument("--rejoins", type=int, default=5,
                    help="Raft partitions of a follower voter, healed: elections they cause")
    ap.add_argument("--leader-pauses", type=int, default=0,
                    help="pause the controller ~one election timeout N times (Raft rule 9)")
    args = ap.parse_args()
    res = bench(args.topics, args.failovers, args.starts, args.clients)
    if args.leader_pauses:
        res.update(leader_pauses(args.leader_pauses))
    if args.rejoins:
        grew = rejoin_elections(args.rejoins)
        res.update(rejoins=len(grew), rejoin_elections=sum(grew), rejoin_epoch_growth=grew)
    if args.json:
        print(json.dumps(res))
    else:
        for k, v in res.items():
            print(f"{k:>20}  {v}")


if __name__ == "__main__":
    main()
