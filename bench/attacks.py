"""Hostile clients and neighbours against a 3-node SASL_SSL cluster, one after another,
while another client keeps asking METADATA (issue #35).

    python bench/attacks.py [--json] [--only NAME,NAME]

The cluster is what a user starts: ``raftlog up --security --nodes 3 --kafka-port K
--metrics-port M`` (SASL_SSL on every listener, SCRAM, ACLs). Users: ``alice`` may read
and write topic ``t``; ``mallory`` has no ACL at all. Every attack comes from 127.0.0.2
(another host, as far as per-address limits go) at node 1; the bystander is the admin on
its own Kafka connection to node 1, asking METADATA in a loop. Per attack the table
shows the bystander's answers (p50/p99/max ms, failures), node 1's peak RSS growth, the
longest event-loop step of node 1 (``raftlog_event_loop_step_max_seconds``), fenced
brokers and controller elections (the controller epoch's growth) after it. Attacks:

  fetch-1m        alice: a Kafka Fetch naming partition 0 of ``t`` 1,000,000 times
  fetch-300k      mallory: 300,000 entries of a topic she may not read
  lz4-bomb        mallory: a produce whose LZ4 batch decompresses to 2.7 GB
  raft-stream     no password: 24 MB to node 1's Raft port, then 40 MB to every voter
  half-open       4,200 TCP connections to the Kafka port that never send a TLS hello
  preauth-frames  8 connections (native and Kafka) sending 95 MB frames before login
  malformed       malformed requests before login, both listeners
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import socket
import ssl
import statistics
import struct
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

import crc32c  # noqa: E402
import lz4.frame  # noqa: E402

from raftlog import scram  # noqa: E402
from raftlog.client import Admin  # noqa: E402
from raftlog.client.security import load_command_config  # noqa: E402
from raftlog.kafka import batch as kb  # noqa: E402
from raftlog.kafka.wire import FrameDecoder, decode_response, encode_request  # noqa: E402
from raftlog.localnode import free_port  # noqa: E402

TOPIC = "t"
ATTACKER = "127.0.0.2"
#: Longest an attack may run before the bench moves on (each one is bounded).
ATTACK_S_MAX = 60.0
MiB = 1 << 20


# --------------------------------------------------------------------------- the cluster


class Cluster:
    def __init__(self):
        self.dir = tempfile.mkdtemp(prefix="raftlog-bench-attacks-")
        while True:
            self.port = free_port()
            if self.port + 150 < 65000:
                break
        self.kport, self.mport = self.port + 20, self.port + 40
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "raftlog.client.cli", "up", "--security", "--nodes", "3",
             "--data-dir", self.dir, "--port", str(self.port), "--kafka-port", str(self.kport),
             "--metrics-port", str(self.mport)],
            stdout=subprocess.PIPE, stderr=open(os.path.join(self.dir, "up.log"), "wb"))
        line = self.proc.stdout.readline()
        if not line.startswith(b"raftlog is up"):
            raise SystemExit(f"raftlog up failed: {line!r}; see {self.dir}/up.log")
        self.login = load_command_config(os.path.join(self.dir, "client.properties"))
        self.cafile = os.path.join(self.dir, "tls", "ca.pem")
        with open(os.path.join(self.dir, "admin.password")) as f:
            self.admin_password = f.read().strip()

    def admin(self) -> Admin:
        return Admin(f"127.0.0.1:{self.port}", **self.login)

    def pid(self, node: int) -> int:
        with open(os.path.join(self.dir, f"node-{node}", "node.pid")) as f:
            return int(f.read())

    def hwm(self, node: int) -> int:
        """Peak RSS of node ``node`` (bytes)."""
        with open(f"/proc/{self.pid(node)}/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024
        return 0

    def step_max_s(self, node: int = 1) -> float:
        url = f"http://127.0.0.1:{self.mport + node - 1}/metrics"
        for line in urllib.request.urlopen(url, timeout=10).read().decode().splitlines():
            if line.startswith("raftlog_event_loop_step_max_seconds "):
                return float(line.split()[1])
        return float("nan")

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
        shutil.rmtree(self.dir, ignore_errors=True)


# --------------------------------------------------------------------------- Kafka bytes


def _connect(port: int, cafile: str | None, src: str = "127.0.0.1") -> socket.socket:
    raw = socket.create_connection(("127.0.0.1", port), timeout=30, source_address=(src, 0))
    if cafile is None:
        return raw
    return ssl.create_default_context(cafile=cafile).wrap_socket(raw,
                                                                 server_hostname="127.0.0.1")


def _call(s, key: int, version: int, cid: int, body: dict):
    s.sendall(encode_request(key, version, cid, body))
    return _answer(s, key, version)


def _answer(s, key: int, version: int):
    dec = FrameDecoder()
    while (frame := dec.next_frame()) is None:
        data = s.recv(65536)
        if not data:
            return None
        dec.receive_data(data)
    return decode_response(key, version, frame)


def _authed(c: Cluster, user: str, password: str, src: str = "127.0.0.1"):
    mech = "SCRAM-SHA-512" if user == "admin" else "SCRAM-SHA-256"
    s = _connect(c.kport, c.cafile, src)
    assert _call(s, 17, 1, 1, {"mechanism": mech})[1]["error_code"] == 0
    client = scram.ScramClient(mech, user, password)
    _, body = _call(s, 36, 2, 2, {"auth_bytes": client.first()})
    _, body = _call(s, 36, 2, 3, {"auth_bytes": client.final(body["auth_bytes"])})
    assert body["error_code"] == 0, body
    return s


def _fetch_v4(entries: int) -> bytes:
    name = TOPIC.encode()
    body = (struct.pack(">hhi", 1, 4, 7) + struct.pack(">h", 1) + b"x"
            + struct.pack(">iiiib", -1, 0, 0, MiB, 0)
            + struct.pack(">i", 1) + struct.pack(">h", len(name)) + name
            + struct.pack(">i", entries) + struct.pack(">iqi", 0, 0, MiB) * entries)
    return struct.pack(">i", len(body)) + body


def _lz4_bomb_produce(total_mib: int) -> bytes:
    one = lz4.frame.compress(bytes(4 * MiB), block_size=lz4.frame.BLOCKSIZE_MAX4MB,
                             block_linked=False, content_checksum=False, store_size=False)
    section = one[:7] + one[7:-4] * (total_mib // 4) + one[-4:]
    out = bytearray(kb.encode_batch([b"v"], timestamps=[1], compression=kb.LZ4)[:kb.HEADER_SIZE])
    out += section
    struct.pack_into(">i", out, 8, len(out) - kb.LOG_OVERHEAD)
    struct.pack_into(">I", out, 17, crc32c.crc32c(bytes(out[kb.ATTRIBUTES_OFFSET:])))
    return encode_request(0, 3, 21, {
        "transactional_id": None, "acks": 1, "timeout_ms": 10_000,
        "topic_data": [{"name": TOPIC, "partition_data": [{"index": 0, "records": bytes(out)}]}]})


def _send_until_closed(s, data: bytes) -> None:
    with contextlib.suppress(OSError):
        s.sendall(data)
        s.settimeout(30)
        while s.recv(65536):
            pass


# --------------------------------------------------------------------------- attacks


def fetch_huge(c: Cluster, user: str, password: str, entries: int) -> None:
    s = _authed(c, user, password, ATTACKER)
    _send_until_closed(s, _fetch_v4(entries))
    s.close()


def lz4_bomb(c: Cluster) -> None:
    s = _authed(c, "mallory", "mallory-pw-0123", ATTACKER)
    with contextlib.suppress(OSError):
        s.sendall(_lz4_bomb_produce(2700))
        _answer(s, 0, 3)
    s.close()


def raft_stream(c: Cluster) -> None:
    def stream(port: int, total: int) -> None:
        with contextlib.suppress(OSError):
            with socket.create_connection(("127.0.0.1", port), timeout=30,
                                          source_address=(ATTACKER, 0)) as s:
                s.sendall(struct.pack(">i", total))
                chunk = os.urandom(64 * 1024)
                for _ in range(total // len(chunk)):
                    s.sendall(chunk)
    stream(c.port + 100, 24 * MiB)
    threads = [threading.Thread(target=stream, args=(c.port + 100 + i, 40 * MiB))
               for i in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(ATTACK_S_MAX)


def half_open(c: Cluster, n: int = 4200) -> None:
    socks = []
    try:
        for _ in range(n):
            with contextlib.suppress(OSError):
                socks.append(socket.create_connection(("127.0.0.1", c.kport), timeout=5,
                                                      source_address=(ATTACKER, 0)))
        time.sleep(2.0)  # held: the bystander keeps asking meanwhile
    finally:
        for s in socks:
            s.close()


def preauth_frames(c: Cluster) -> None:
    def one(port: int, header: bytes) -> None:
        with contextlib.suppress(OSError):
            with _connect(port, c.cafile, ATTACKER) as s:
                s.sendall(header)
                chunk = bytes(MiB)
                for _ in range(95):
                    s.sendall(chunk)
    threads = [threading.Thread(target=one, args=(c.port, struct.pack("<II", 95 * MiB, 8)))
               for _ in range(4)]
    threads += [threading.Thread(target=one, args=(c.kport, struct.pack(">ihhi", 95 * MiB, 17,
                                                                        1, 1)))
                for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(ATTACK_S_MAX)


def malformed(c: Cluster) -> None:
    cases = [(c.kport, struct.pack(">ihhi", 10, 17, 1, 1) + b"\xff\xff"),
             (c.kport, struct.pack(">ihhi", 7 * MiB, 36, 2, 1) + bytes(7 * MiB)),
             (c.port, struct.pack("<II", 12, 8) + b"\xa1\x63api\x19\x27\x0f")]
    for _ in range(3):
        for port, data in cases:
            with contextlib.suppress(OSError), _connect(port, c.cafile, ATTACKER) as s:
                _send_until_closed(s, data)


ATTACKS = {
    "fetch-1m": lambda c: fetch_huge(c, "alice", "alice-pw-0123", 1_000_000),
    "fetch-300k": lambda c: fetch_huge(c, "mallory", "mallory-pw-0123", 300_000),
    "lz4-bomb": lz4_bomb,
    "raft-stream": raft_stream,
    "half-open": half_open,
    "preauth-frames": preauth_frames,
    "malformed": malformed,
}


# --------------------------------------------------------------------------- measuring


class Bystander:
    """The admin asking METADATA on its own Kafka connection to node 1, in a loop."""

    def __init__(self, c: Cluster):
        self.sock = _authed(c, "admin", c.admin_password)
        self.sock.settimeout(ATTACK_S_MAX)
        self.latencies: list[float] = []
        self.failures = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        cid = 100
        while not self._stop.is_set():
            cid += 1
            t0 = time.monotonic()
            try:
                got = _call(self.sock, 3, 1, cid, {"topics": [{"name": TOPIC}]})
            except OSError:
                got = None
            if got is None or got[0] != cid:
                self.failures += 1
                return
            self.latencies.append(time.monotonic() - t0)
            time.sleep(0.002)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(ATTACK_S_MAX)
        self.sock.close()


def _pct(xs: list[float], q: float) -> float:
    return sorted(xs)[min(len(xs) - 1, int(q * len(xs)))] * 1000 if xs else float("nan")


def run_one(c: Cluster, name: str) -> dict:
    with c.admin() as a:
        epoch = a.describe_cluster().controller_epoch
    c.step_max_s()  # a new window starts
    hwm = c.hwm(1)
    b = Bystander(c)
    t0 = time.monotonic()
    done = threading.Thread(target=ATTACKS[name], args=(c,), daemon=True)
    done.start()
    done.join(ATTACK_S_MAX)
    took = time.monotonic() - t0
    time.sleep(0.5)  # the bystander's answers right after the attack count too
    b.stop()
    step = c.step_max_s()
    with c.admin() as a:
        d = a.describe_cluster()
    return {"attack": name, "seconds": round(took, 2), "metadata_answers": len(b.latencies),
            "metadata_failures": b.failures,
            "metadata_p50_ms": round(_pct(b.latencies, 0.5), 2),
            "metadata_p99_ms": round(_pct(b.latencies, 0.99), 2),
            "metadata_max_ms": round(max(b.latencies) * 1000, 2) if b.latencies else None,
            "rss_growth_mb": round((c.hwm(1) - hwm) / MiB, 1),
            "loop_step_max_ms": round(step * 1000, 1),
            "fenced": sorted(x.id for x in d.brokers if x.fenced),
            "elections": d.controller_epoch - epoch}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--only", help="comma list of attacks (default: all)")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    names = args.only.split(",") if args.only else list(ATTACKS)
    unknown = [n for n in names if n not in ATTACKS]
    if unknown:
        raise SystemExit(f"unknown attack(s) {unknown}; known: {', '.join(ATTACKS)}")
    c = Cluster()
    try:
        with c.admin() as a:
            a.create_topic(TOPIC, partitions=1, replication_factor=3)
            a.create_user("alice", "alice-pw-0123", "SCRAM-SHA-256")
            a.create_user("mallory", "mallory-pw-0123", "SCRAM-SHA-256")
            a.create_acls([("User:alice", "topic", TOPIC, "literal", "write", "allow"),
                           ("User:alice", "topic", TOPIC, "literal", "read", "allow")])
        rows = [run_one(c, n) for n in names]
    finally:
        c.stop()
    if args.json:
        print(json.dumps({"attacks": rows}))
        return
    print(f"{'attack':<15} {'s':>6} {'answers':>8} {'fail':>5} {'p50 ms':>7} {'p99 ms':>7} "
          f"{'max ms':>7} {'RSS+MB':>7} {'step ms':>8} {'fenced':>7} {'elect':>5}")
    for r in rows:
        print(f"{r['attack']:<15} {r['seconds']:>6} {r['metadata_answers']:>8} "
              f"{r['metadata_failures']:>5} {r['metadata_p50_ms']:>7} {r['metadata_p99_ms']:>7} "
              f"{r['metadata_max_ms']!s:>7} {r['rss_growth_mb']:>7} {r['loop_step_max_ms']:>8} "
              f"{len(r['fenced']):>7} {r['elections']:>5}")
    print(f"(median METADATA p99 over the attacks: "
          f"{statistics.median(r['metadata_p99_ms'] for r in rows):.2f} ms)")


if __name__ == "__main__":
    main()
