"""Metadata quorum benchmark on a local 3-node cluster (real node processes).

    python bench/metadata.py [--json] [--topics 200] [--failovers 5]

* ``topic_creations_s``: CreateTopics requests per second, one at a time, through one node
  (each is a Raft commit: journal msync on a majority, then applied);
* ``failover_s_median``: SIGKILL of the controller -> the next successful metadata write
  (a topic creation through a survivor), median over ``--failovers`` runs.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

from raftlog.client import Admin  # noqa: E402


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Cluster:
    def __init__(self, n: int = 3):
        self.dir = tempfile.mkdtemp(prefix="raftlog-bench-meta-")
        self.ports = {i: _free_port() for i in range(1, n + 1)}
        raft = {i: _free_port() for i in self.ports}
        self.voters = ",".join(f"{i}@127.0.0.1:{p}" for i, p in raft.items())
        self.procs: dict[int, subprocess.Popen] = {}
        for i in self.ports:
            self.start(i)

    def start(self, i: int) -> None:
        self.procs[i] = subprocess.Popen(
            [sys.executable, "-m", "raftlog.node", "--node-id", str(i), "--port", str(self.ports[i]),
             "--data-dir", os.path.join(self.dir, f"node-{i}"),
             "--set", f"controller.quorum.voters={self.voters}", "--set", "raft.password=bench"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            try:
                socket.create_connection(("127.0.0.1", self.ports[i]), timeout=0.5).close()
                return
            except OSError:
                time.sleep(0.05)
        raise SystemExit(f"node {i} did not start")

    def bootstrap(self, i: int) -> str:
        return f"127.0.0.1:{self.ports[i]}"

    def stop(self) -> None:
        for p in self.procs.values():
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
        for p in self.procs.values():
            p.wait(30)
        shutil.rmtree(self.dir, ignore_errors=True)


def _retry(fn, timeout_s: float = 30.0):
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            return fn()
        except Exception:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.01)


def bench(topics: int, failovers: int) -> dict:
    c = Cluster()
    try:
        admin = Admin(c.bootstrap(1))
        _retry(lambda: admin.create_topic("warmup"))
        t = time.perf_counter()
        for i in range(topics):
            admin.create_topic(f"t{i}")
        creations_s = topics / (time.perf_counter() - t)
        times = []
        for k in range(failovers):
            controller = _retry(lambda: (cid := Admin(c.bootstrap(1)).describe_cluster().controller_id) > 0 and cid or 1 / 0)
            survivor = next(i for i in c.ports if i != controller)
            c.procs[controller].send_signal(signal.SIGKILL)
            c.procs[controller].wait()
            start = time.perf_counter()
            a = Admin(c.bootstrap(survivor), request_timeout_ms=5000)
            _retry(lambda a=a, k=k: a.create_topic(f"after-failover-{k}"))
            times.append(time.perf_counter() - start)
            c.start(controller)
            _retry(lambda k=k, i=controller: f"after-failover-{k}" in Admin(c.bootstrap(i)).list_topics() or 1 / 0)
        return {"nodes": 3, "topics": topics, "topic_creations_s": creations_s,
                "failover_s": times, "failover_s_median": statistics.median(times)}
    finally:
        c.stop()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--topics", type=int, default=200)
    ap.add_argument("--failovers", type=int, default=5)
    args = ap.parse_args()
    res = bench(args.topics, args.failovers)
    if args.json:
        print(json.dumps(res))
    else:
        for k, v in res.items():
            print(f"{k:>20}  {v}")


if __name__ == "__main__":
    main()
