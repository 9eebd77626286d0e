"""Failover as a producer sees it: a partition leader's crash or hang -> the first
acknowledged write after it (3 real node processes, an RF3 topic, SDK defaults).

    python bench/failover.py [--json] [--kills 10] [--pauses 1] [--rate 500] [--set K=V]

A producer thread sends one record every 1/``--rate`` s with the SDK's defaults
(acks=all, idempotence) and stamps each acknowledgement. For each of ``--kills`` rounds
the partition's leader is SIGKILLed; the figure is the time from the kill to the first
acknowledgement of a record sent after it; the node is then restarted and the cluster
left to settle (all three in the ISR) before the next round. ``--pauses`` rounds
SIGSTOP the leader instead (a hang: only the session timeout may fence it), SIGCONT it
once the write went through. Prints rec/s, the kill/pause figures (median, max) and
``--json``.
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
import threading
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

from raftlog.client import Admin, Producer  # noqa: E402
from raftlog.localnode import free_ports, node_command, spawn, wait_listening  # noqa: E402

TOPIC = "failover"
#: Longest wait for the first acknowledged write after a fault before the round fails.
ROUND_TIMEOUT_S = 60.0


class Cluster:
    def __init__(self, n: int = 3, extra: dict | None = None):
        self.dir = tempfile.mkdtemp(prefix="raftlog-bench-failover-")
        ports = free_ports(2 * n)
        self.ports = {i: ports[i - 1] for i in range(1, n + 1)}
        raft = {i: ports[n + i - 1] for i in self.ports}
        voters = ",".join(f"{i}@127.0.0.1:{p}" for i, p in raft.items())
        self.procs: dict[int, subprocess.Popen] = {}
        password = os.path.join(self.dir, "raft.properties")
        fd = os.open(password, os.O_WRONLY | os.O_CREAT, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(f"controller.quorum.voters={voters}\nraft.password=bench-failover-0123456\n"
                    + "".join(f"{k}={v}\n" for k, v in (extra or {}).items()))
        self.config = password
        for i in self.ports:
            self.start(i)

    @property
    def bootstrap(self) -> str:
        return ",".join(f"127.0.0.1:{p}" for p in self.ports.values())

    def start(self, i: int) -> None:
        argv = node_command(config=self.config, node_id=i, port=self.ports[i],
                            data_dir=os.path.join(self.dir, f"node-{i}"))
        self.procs[i] = spawn(argv, os.path.join(self.dir, f"node-{i}.log"))
        if not wait_listening("127.0.0.1", self.ports[i], 30, self.procs[i]):
            raise SystemExit(f"node {i} did not start; see {self.dir}/node-{i}.log")

    def stop(self) -> None:
        for p in self.procs.values():
            if p.poll() is None:
                p.send_signal(signal.SIGCONT)
                p.terminate()
        for p in self.procs.values():
            try:
                p.wait(30)
            except subprocess.TimeoutExpired:
                p.kill()
        if not getattr(self, "dir_keep", False):
            shutil.rmtree(self.dir, ignore_errors=True)


class Stamps:
    """A paced producer thread: (send time, acknowledgement time) of every record."""

    def __init__(self, bootstrap: str, rate: int):
        self.acks: list[tuple[float, float]] = []
        self.errors = 0
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._run, args=(bootstrap, rate), daemon=True)
        self._thread.start()

    def _run(self, bootstrap: str, rate: int) -> None:
        with Producer(bootstrap) as p:
            interval, nxt = 1.0 / rate, time.monotonic()
            while not self._stop.is_set():
                sent = time.monotonic()
                fut = p.send(TOPIC, b"x" * 100, partition=0)
                fut.add_done_callback(lambda f, sent=sent: self._done(f, sent))
                nxt += interval
                time.sleep(max(0.0, nxt - time.monotonic()))

    def _done(self, fut, sent: float) -> None:
        now = time.monotonic()
        with self._lock:
            if fut.exception() is None:
                self.acks.append((sent, now))
            else:
                self.errors += 1

    def first_ack_after(self, t: float, timeout_s: float = ROUND_TIMEOUT_S) -> float:
        """Seconds from ``t`` to the first acknowledgement of a record sent after it (an
        answer the old leader wrote just before the fault is not a failover)."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            with self._lock:
                later = [a for sent, a in self.acks[-5000:] if sent > t]
            if later:
                return min(later) - t
            time.sleep(0.005)
        raise SystemExit(f"no acknowledged write {timeout_s:.0f} s after the fault "
                         f"({self.errors} sends failed)")

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(30)


def _views(c: Cluster) -> set:
    """(leader, leader epoch, ISR, preferred replica) of the partition as each node
    reports it (one Admin per node: a node that was just paused or restarted may
    answer from a stale copy for a moment, and must not pick a round's victim)."""
    out = set()
    for port in c.ports.values():
        with Admin(f"127.0.0.1:{port}") as admin:
            p = admin.describe_topic(TOPIC).partitions[0]
            out.add((p.leader, p.leader_epoch, tuple(sorted(p.isr)), p.replicas[0]))
    return out


def _settle(c: Cluster, timeout_s: float = 60.0) -> int:
    """Wait until every node reports one view: three in-sync replicas, led by the
    preferred replica; returns that leader."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            views = _views(c)
            # (led by its preferred replica: the automatic rebalance moves it back there
            # after a restart, and a round must kill the leader, not a follower)
            if len(views) == 1:
                leader, _epoch, isr, preferred = next(iter(views))
                if len(isr) == 3 and leader == preferred:
                    return leader
        except Exception:  # noqa: BLE001 -- nodes restarting
            pass
        time.sleep(0.1)
    raise SystemExit("the cluster did not settle (3 in-sync replicas) after a round")


def bench(kills: int, pauses: int, rate: int, extra: dict | None = None) -> dict:
    c = Cluster(extra=extra)
    try:
        admin = Admin(c.bootstrap)
        deadline = time.monotonic() + 30
        while len(admin.describe_cluster().brokers) < 3 and time.monotonic() < deadline:
            time.sleep(0.1)
        admin.create_topic(TOPIC, partitions=1, replication_factor=3)
        admin.close()
        leader = _settle(c)
        s = Stamps(c.bootstrap, rate)
        s.first_ack_after(time.monotonic())
        kill_s, pause_s = [], []
        for _ in range(kills):
            t = time.monotonic()
            c.procs[leader].send_signal(signal.SIGKILL)
            kill_s.append(s.first_ack_after(t))
            print(f"failover: kill of node {leader}: first ack after {kill_s[-1]:.3f} s",
                  file=sys.stderr, flush=True)
            c.procs[leader].wait()
            c.start(leader)
            leader = _settle(c)
            s.first_ack_after(time.monotonic())  # the producer writes to that leader again
        pause_controller = []  # was the paused leader also the controller?
        for _ in range(pauses):
            with Admin(c.bootstrap) as admin:
                pause_controller.append(admin.describe_cluster().controller_id == leader)
            t = time.monotonic()
            c.procs[leader].send_signal(signal.SIGSTOP)
            try:
                pause_s.append(s.first_ack_after(t))
                role = " (the controller)" if pause_controller[-1] else ""
                print(f"failover: pause of node {leader}{role}: first ack after "
                      f"{pause_s[-1]:.3f} s", file=sys.stderr, flush=True)
            finally:
                c.procs[leader].send_signal(signal.SIGCONT)
            leader = _settle(c)
            s.first_ack_after(time.monotonic())
        s.stop()
        out = {"rate": rate, "acks": len(s.acks), "errors": s.errors, "kills": kills,
               "kill_to_ack_s": [round(x, 3) for x in kill_s],
               "pause_to_ack_s": [round(x, 3) for x in pause_s],
               "pause_was_controller": pause_controller}
        if kill_s:
            out["kill_to_ack_s_median"] = round(statistics.median(kill_s), 3)
            out["kill_to_ack_s_max"] = round(max(kill_s), 3)
        if pause_s:
            out["pause_to_ack_s_max"] = round(max(pause_s), 3)
        return out
    except SystemExit:
        print(f"failover: node logs kept in {c.dir}", file=sys.stderr)
        c.dir_keep = True
        raise
    finally:
        c.stop()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--kills", type=int, default=10)
    ap.add_argument("--pauses", type=int, default=1)
    ap.add_argument("--rate", type=int, default=500)
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                    help="a node config key for every node, e.g. broker.disconnect.grace.ms=0 "
                         "(session expiry only: the behaviour before crash detection)")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    extra = dict(kv.split("=", 1) for kv in args.set)
    out = bench(args.kills, args.pauses, args.rate, extra)
    if args.json:
        print(json.dumps(out))
        return
    print(f"producer: {args.rate} rec/s (SDK defaults), {out['acks']} acknowledged, "
          f"{out['errors']} failed")
    if "kill_to_ack_s_median" in out:
        print(f"leader SIGKILL -> first ack: median {out['kill_to_ack_s_median']} s, "
              f"max {out['kill_to_ack_s_max']} s ({out['kill_to_ack_s']})")
    if "pause_to_ack_s_max" in out:
        print(f"leader SIGSTOP -> first ack: {out['pause_to_ack_s']} s")


if __name__ == "__main__":
    main()
