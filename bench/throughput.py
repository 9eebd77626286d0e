"""End-to-end benchmark: produce, consume and latency through real node and client processes.

    python bench/throughput.py [--bootstrap HOST:PORT] [--json] [--n 1000000] [--acks all]
                               [--mode send_many|send] [--chunk 2000]
                               [--rate 1000[,5000,...]] [--secs 10]
                               [--replication-factor 1] [--nodes 1]
                               [--client raftlog|confluent-kafka|both]
                               [--write-caching default|false|true|both]

Without --bootstrap it starts its own node (or ``--nodes N``: a local N-node cluster with a
Raft metadata quorum, all on this machine) in a temp dir. Replicated figures:
``--nodes 3 --replication-factor 3``. Every client is the SDK with its defaults except
``--acks`` (default "all", the SDK's default: idempotence on). Workloads (100-byte records):
1. produce N records and wait for every ack (this process);
2. consume them all from offset 0 (a separate process);
3. end-to-end latency at each --rate (records/s, a comma list) for --secs seconds: a
   producer process sends on a fixed schedule and stamps each record with its *scheduled*
   CLOCK_MONOTONIC time (open loop: a producer that falls behind shows as latency, not as
   a lower rate); a consumer process long-polls and measures arrival. Besides the overall
   percentiles it reports the p99 of the first and the last 10 s (quarters of the run when
   --secs < 20), so latency that grows during a run shows: ``last10_over_first10_p99``.

``--client confluent-kafka`` runs the same workloads with confluent-kafka (librdkafka)
through the nodes' Kafka listeners (bench/kafka_clients.py); ``--client both`` runs the
SDK and then confluent-kafka against the same nodes, one table each.

``--write-caching false|true`` creates the bench topics with that ``write.caching``
(default: the nodes' default, false: durable acknowledgement, #34); ``both`` runs every
workload on ``write.caching=false`` topics, then on ``write.caching=true`` ones, against
the same nodes in the same run, one table each (the cost of durability).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import uuid

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

from pacing import paced, precise_timers  # noqa: E402  (bench/, beside this file)
from reassign import cpu_seconds  # noqa: E402

from raftlog.client import Admin, Consumer, Producer, TopicPartition  # noqa: E402
from raftlog.localnode import free_port, node_command, spawn, wait_listening  # noqa: E402

VALUE_BYTES = 100
CHUNK = 2000


class _Scraper:
    """GETs every node's /metrics every ``interval`` seconds in a thread (a Prometheus
    server's view of the run); stop() returns how many scrapes succeeded."""

    def __init__(self, ports: list, interval: float):
        import threading

        self.ports, self.interval, self.count = ports, interval, 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        import urllib.request

        while not self._stop.wait(self.interval):
            for port in self.ports:
                try:
                    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics",
                                                timeout=5) as r:
                        r.read()
                    self.count += 1
                except OSError:
                    pass

    def stop(self) -> int:
        self._stop.set()
        self._thread.join(10)
        return self.count


def start_node(kafka_port: int | None = None, security=None,
               metrics_port: int | None = None,
               extra: dict | None = None) -> tuple[subprocess.Popen, str, str]:
    """One real node process in a temp dir (its log: node.log there); ``extra``: more
    node config."""
    d = tempfile.mkdtemp(prefix="raftlog-bench-")
    port = free_port()
    settings = dict(extra or {})
    if kafka_port:
        settings["kafka.listener"] = f"127.0.0.1:{kafka_port}"
    if metrics_port:
        settings["metrics.listener"] = f"127.0.0.1:{metrics_port}"
    if security:
        settings.update(security.node_config(1, "127.0.0.1", port))
    proc = spawn(node_command(port=port, data_dir=os.path.join(d, "data"), overrides=settings),
                 os.path.join(d, "node.log"))
    if not wait_listening("127.0.0.1", port, 20, proc):
        proc.kill()
        raise SystemExit(f"node did not start; see {d}/node.log")
    return proc, f"127.0.0.1:{port}", d


def start_cluster(n: int, kafka_ports: list | None = None, security=None,
                  client_options: dict | None = None,
                  metrics_ports: list | None = None,
                  extra: dict | None = None) -> tuple[list, str, str]:
    """N real node processes, every one a voter, on loopback (with Kafka listeners on
    ``kafka_ports`` when given; TLS + SCRAM on every listener with ``security``); their
    logs are node-N.log in the temp dir."""
    d = tempfile.mkdtemp(prefix="raftlog-bench-")
    ports = [free_port() for _ in range(2 * n)]
    voters = ",".join(f"{i}@127.0.0.1:{ports[n + i - 1]}" for i in range(1, n + 1))
    kafka_brokers = ",".join(f"{i}@127.0.0.1:{p}" for i, p in enumerate(kafka_ports or [], 1))
    procs = []
    for i in range(1, n + 1):
        settings = {"controller.quorum.voters": voters,
                    "raft.password": "bench-password-0123456789", **(extra or {})}
        if kafka_ports:
            settings.update({"kafka.listener": f"127.0.0.1:{kafka_ports[i - 1]}",
                             "kafka.brokers": kafka_brokers})
        if security:
            settings.update(security.node_config(i, "127.0.0.1", ports[i - 1]))
        if metrics_ports:
            settings["metrics.listener"] = f"127.0.0.1:{metrics_ports[i - 1]}"
        argv = node_command(node_id=i, port=ports[i - 1],
                            data_dir=os.path.join(d, f"node-{i}"), overrides=settings)
        procs.append(spawn(argv, os.path.join(d, f"node-{i}.log")))
    bootstrap = ",".join(f"127.0.0.1:{p}" for p in ports[:n])
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            with Admin(bootstrap, **(client_options or {})) as a:
                brokers = a.describe_cluster().brokers
            if len(brokers) == n and not any(b.fenced for b in brokers):
                return procs, bootstrap, d
        except Exception:
            pass
        time.sleep(0.2)
    for p in procs:
        p.kill()
    raise SystemExit(f"cluster did not start; see {d}/node-*.log")


#: pids of the nodes this run started (their CPU per produced record is reported)
NODE_PIDS: list[int] = []


#: security options of every SDK client of the run (``--security-protocol`` /
#: ``--command-config``): kafka-python's names, as the SDK takes them
CLIENT_OPTIONS: dict = {}


def produce(bootstrap: str, topic: str, n: int, acks, mode: str, chunk: int = CHUNK) -> dict:
    value = b"x" * VALUE_BYTES
    p = Producer(bootstrap, acks=acks, **CLIENT_OPTIONS)  # the SDK's defaults otherwise
    start = time.perf_counter()
    if mode == "send_many":
        values = [value] * chunk
        futures = [
            p.send_many(topic, values[: min(chunk, n - i)], partition=0) for i in range(0, n, chunk)
        ]
    else:
        futures = [p.send(topic, value, partition=0) for _ in range(n)]
    p.flush()
    secs = time.perf_counter() - start
    failed = [f.exception() for f in futures if f.exception() is not None]
    p.close()
    if failed:
        raise SystemExit(f"{len(failed)} of {len(futures)} sends failed, first: {failed[0]!r}")
    return {"produce_rec_s": n / secs, "produce_mb_s": n * VALUE_BYTES / secs / 1e6}


def consume(bootstrap: str, topic: str, n: int) -> dict:
    c = Consumer(bootstrap, auto_offset_reset="earliest", fetch_max_wait_ms=100,
                 **CLIENT_OPTIONS)
    c.assign([TopicPartition(topic, 0)])
    c.seek(TopicPartition(topic, 0), 0)
    got = 0
    start = time.perf_counter()
    while got < n:
        got += len(c.poll(timeout_ms=5000, max_records=1_000_000))
    secs = time.perf_counter() - start
    c.close()
    return {"consume_rec_s": got / secs, "consume_mb_s": got * VALUE_BYTES / secs / 1e6}


def latency_producer(bootstrap: str, topic: str, rate: int, secs: float, acks) -> None:
    precise_timers()
    p = Producer(bootstrap, acks=acks, **CLIENT_OPTIONS)  # the SDK's defaults otherwise
    pad = b"x" * (VALUE_BYTES - 8)
    for _i, due_ns in paced(rate, int(rate * secs)):
        p.send(topic, due_ns.to_bytes(8, "little") + pad, partition=0)
    p.flush()
    p.close()


def latency_consumer(bootstrap: str, topic: str, total: int, secs: float,
                     ready_file: str) -> dict:
    c = Consumer(bootstrap, auto_offset_reset="latest", fetch_max_wait_ms=500,
                 **CLIENT_OPTIONS)
    tp = TopicPartition(topic, 0)
    c.assign([tp])
    c.seek_to_end(tp)
    c.poll(timeout_ms=0)
    open(ready_file, "w").close()
    samples: list[tuple[int, float]] = []  # (scheduled send time ns, latency ms)
    deadline = time.monotonic() + secs + 60
    while len(samples) < total and time.monotonic() < deadline:
        recs = c.poll(timeout_ms=1000, max_records=10_000)
        now = time.monotonic_ns()
        for r in recs:
            sent = int.from_bytes(r.value[:8], "little")
            samples.append((sent, (now - sent) / 1e6))
    c.close()
    return {**latency_summary([lat for _, lat in samples]), **growth(samples, secs)}


def growth(samples: list[tuple[int, float]], secs: float) -> dict:
    """p99 of the first and the last window of the run (10 s, or a quarter of runs
    shorter than 20 s) and their ratio: latency that grows during a run shows here."""
    if not samples:
        return {}
    window_ns = int((10.0 if secs >= 20 else secs / 4) * 1e9)
    first_t = min(t for t, _ in samples)
    last_t = max(t for t, _ in samples)
    first = latency_summary([lat for t, lat in samples if t < first_t + window_ns])
    last = latency_summary([lat for t, lat in samples if t > last_t - window_ns])
    return {
        "window_s": window_ns / 1e9,
        "first10_p99_ms": first["lat_p99_ms"],
        "last10_p99_ms": last["lat_p99_ms"],
        "last10_over_first10_p99": last["lat_p99_ms"] / first["lat_p99_ms"],
    }


def latency_summary(lat_ms: list[float]) -> dict:
    """lat_records, lat_p50_ms, lat_p99_ms, lat_p999_ms, lat_max_ms of the samples."""
    lat_ms = sorted(lat_ms)

    def pct(q: float) -> float:
        return lat_ms[min(len(lat_ms) - 1, int(q * len(lat_ms)))] if lat_ms else float("nan")

    return {
        "lat_records": len(lat_ms),
        "lat_p50_ms": pct(0.5),
        "lat_p99_ms": pct(0.99),
        "lat_p999_ms": pct(0.999),
        "lat_max_ms": lat_ms[-1] if lat_ms else float("nan"),
    }


def _run_role(args) -> None:
    if args.client == "confluent-kafka":
        import kafka_clients as kc

        if args.role == "consume":
            print(json.dumps(kc.consume(args.bootstrap, args.topic, args.n)))
        elif args.role == "latency-consumer":
            rate = int(args.rate)
            samples = kc.latency_consumer(args.bootstrap, args.topic, int(rate * args.secs),
                                          args.secs, args.ready)
            print(json.dumps({**latency_summary([lat for _, lat in samples]),
                              **growth(samples, args.secs)}))
        elif args.role == "latency-producer":
            kc.latency_producer(args.bootstrap, args.topic, int(args.rate), args.secs, args.acks)
        return
    if args.role == "consume":
        print(json.dumps(consume(args.bootstrap, args.topic, args.n)))
    elif args.role == "latency-consumer":
        rate = int(args.rate)
        print(json.dumps(latency_consumer(args.bootstrap, args.topic, int(rate * args.secs),
                                          args.secs, args.ready)))
    elif args.role == "latency-producer":
        latency_producer(args.bootstrap, args.topic, int(args.rate), args.secs, args.acks)


def _child(args, role: str, topic: str, extra: list[str] | None = None) -> subprocess.Popen:
    cmd = [
        sys.executable,
        __file__,
        "--role",
        role,
        "--bootstrap",
        args.bootstrap,
        "--topic",
        topic,
        "--n",
        str(args.n),
        "--rate",
        str(args.rate),
        "--secs",
        str(args.secs),
        "--acks",
        str(args.acks),
        "--client",
        args.client,
        "--client-options-json",
        json.dumps(CLIENT_OPTIONS),
    ] + (extra or [])
    return subprocess.Popen(cmd, stdout=subprocess.PIPE)


def run(args) -> dict:
    """Every workload with the SDK, confluent-kafka, or both (one after the other, each
    on its own topics), per ``--write-caching`` setting; the first run's figures also at
    the top level."""
    clients = ["raftlog", "confluent-kafka"] if args.client == "both" else [args.client]
    cachings = ["false", "true"] if args.write_caching == "both" else [args.write_caching]
    runs = {}
    for caching in cachings:
        for client in clients:
            one = argparse.Namespace(**{**vars(args), "client": client,
                                        "write_caching": caching})
            if client == "confluent-kafka":
                if not args.kafka_bootstrap:
                    raise SystemExit("--client confluent-kafka with --bootstrap needs "
                                     "--kafka-bootstrap")
                one.bootstrap = args.kafka_bootstrap
            name = client if len(cachings) == 1 else f"{client} write.caching={caching}"
            runs[name] = run_client(one, Admin(args.bootstrap, **CLIENT_OPTIONS))
    return {**next(iter(runs.values())), "clients": runs}


def _topic_config(args) -> dict | None:
    caching = getattr(args, "write_caching", "default")
    return None if caching == "default" else {"write.caching": caching}


def run_client(args, admin) -> dict:
    topic = f"bench-{uuid.uuid4().hex[:8]}"
    admin.create_topic(topic, partitions=1, replication_factor=args.replication_factor,
                       config=_topic_config(args))
    _wait_full_isr(admin, topic, args.replication_factor)
    result = {
        "write_caching": args.write_caching,
        "nodes": args.nodes,
        "n": args.n,
        "acks": args.acks,
        "mode": args.mode,
        "chunk": args.chunk,
        "replication_factor": args.replication_factor,
        "client": args.client,
        "security_protocol": CLIENT_OPTIONS.get("security_protocol", "PLAINTEXT"),
    }
    if args.client == "confluent-kafka":
        import kafka_clients

        result.update(kafka_clients.produce(args.bootstrap, topic, args.n, args.acks))
    else:
        # CPU per record of the flood: this process (the producer, its I/O thread
        # included) and each node this run started
        node0, client0 = [cpu_seconds(p) for p in NODE_PIDS], time.process_time()
        result.update(produce(args.bootstrap, topic, args.n, args.acks, args.mode, args.chunk))
        client1, node1 = time.process_time(), [cpu_seconds(p) for p in NODE_PIDS]
        result["produce_client_cpu_us_per_rec"] = (client1 - client0) / args.n * 1e6
        if NODE_PIDS:
            result["produce_node_cpu_us_per_rec"] = [
                (b - a) / args.n * 1e6 for a, b in zip(node0, node1)]
    proc = _child(args, "consume", topic)
    out, _ = proc.communicate(timeout=300)
    result.update(json.loads(out))

    result["latency"] = []
    for rate in parse_rates(args.rate):
        lat_topic = f"{topic}-lat{rate}"
        admin.create_topic(lat_topic, partitions=1, replication_factor=args.replication_factor,
                           config=_topic_config(args))
        _wait_full_isr(admin, lat_topic, args.replication_factor)
        ready = tempfile.mktemp(prefix="raftlog-bench-ready-")
        one = argparse.Namespace(**{**vars(args), "rate": str(rate)})
        cons = _child(one, "latency-consumer", lat_topic, ["--ready", ready])
        deadline = time.monotonic() + 30
        while not os.path.exists(ready) and time.monotonic() < deadline:
            time.sleep(0.01)
        prod = _child(one, "latency-producer", lat_topic)
        prod.wait(timeout=args.secs + 120)
        out, _ = cons.communicate(timeout=args.secs + 120)
        os.unlink(ready)
        result["latency"].append({"rate": rate, **json.loads(out)})
    result.update(result["latency"][0])  # the first rate's figures at the top level, too
    admin.close()
    return result


def parse_rates(text) -> list[int]:
    """``--rate``: one rate or a comma list ("1000,5000,20000"), records per second."""
    rates = [int(x) for x in str(text).split(",") if x.strip()]
    if not rates or any(r <= 0 for r in rates):
        raise SystemExit(f"--rate needs positive records/s, not {text!r}")
    return rates


def _wait_full_isr(admin, topic: str, rf: int) -> None:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            p = admin.describe_topic(topic).partitions[0]
            if len(p.isr) == rf and p.leader >= 0:
                return
        except Exception:
            pass
        time.sleep(0.1)
    raise SystemExit(f"{topic}: the ISR did not fill up")


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--bootstrap", help="HOST:PORT of a running node (default: start one)")
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--n", type=int, default=1_000_000,
                    help="records produced and consumed (default 1,000,000: a run long enough "
                    "that connection set-up and the first fetch do not dominate)")
    ap.add_argument("--acks", default="all", help='"all" (the SDK default), 1 or 0')
    ap.add_argument("--mode", choices=["send_many", "send"], default="send_many")
    ap.add_argument("--chunk", type=int, default=CHUNK,
                    help=f"records per send_many call (default {CHUNK}; 10: many small calls)")
    ap.add_argument("--rate", default="1000",
                    help="latency rate(s), records/s: 1000 or a list like 1000,5000,20000")
    ap.add_argument("--secs", type=float, default=10,
                    help="seconds of each latency run (60 shows growth: first vs last 10 s)")
    ap.add_argument("--replication-factor", type=int, default=1)
    ap.add_argument("--nodes", type=int, default=1, help="start a local cluster of N nodes")
    ap.add_argument("--write-caching", choices=["default", "false", "true", "both"],
                    default="default", help="write.caching of the bench topics (default: "
                    "the nodes' default, false); both: false then true, same nodes, same run")
    ap.add_argument("--client", choices=["raftlog", "confluent-kafka", "both"],
                    default="raftlog", help="the SDK (native listener), confluent-kafka "
                    "(Kafka listener), or both in one run")
    ap.add_argument("--kafka-bootstrap",
                    help="HOST:PORT of the running nodes' Kafka listeners (with --bootstrap)")
    ap.add_argument("--security-protocol", choices=["PLAINTEXT", "SASL_SSL"],
                    default="PLAINTEXT",
                    help="SASL_SSL: the nodes it starts get TLS + SCRAM-SHA-512 on every "
                    "listener (a throwaway CA, as the harness's) and every SDK client uses it")
    ap.add_argument("--command-config", metavar="FILE",
                    help="client security properties for a running cluster (--bootstrap), "
                    "as the CLI's --command-config")
    ap.add_argument("--metrics", action="store_true",
                    help="the nodes it starts serve Prometheus metrics (metrics.listener), "
                    "scraped every --scrape-interval seconds during the run (what the "
                    "endpoint costs: compare with a run without)")
    ap.add_argument("--scrape-interval", type=float, default=1.0)
    ap.add_argument("--role", help=argparse.SUPPRESS)
    ap.add_argument("--client-options-json", default="{}", help=argparse.SUPPRESS)
    ap.add_argument("--topic", help=argparse.SUPPRESS)
    ap.add_argument("--ready", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.chunk < 1:
        ap.error(f"--chunk must be at least 1 (records per send_many call), not {args.chunk}")
    CLIENT_OPTIONS.update(json.loads(args.client_options_json))
    if args.role:
        _run_role(args)
        return
    security = scraper = None
    if args.command_config:
        from raftlog.client.security import load_command_config

        CLIENT_OPTIONS.update(load_command_config(args.command_config))
    if args.security_protocol != "PLAINTEXT" or CLIENT_OPTIONS:
        if args.client != "raftlog":
            raise SystemExit("--security-protocol / --command-config: the Kafka listener has "
                             "no TLS or SASL; use --client raftlog")
    nodes = []
    if not args.bootstrap:
        kports = [free_port() for _ in range(args.nodes)] if args.client != "raftlog" else None
        if args.security_protocol == "SASL_SSL":
            from raftlog.jepsen.security import SaslSslMaterial

            security = SaslSslMaterial(tempfile.mkdtemp(prefix="raftlog-bench-tls-"))
            CLIENT_OPTIONS.update(security.client_options())
        mports = [free_port() for _ in range(args.nodes)] if args.metrics else None
        if args.nodes > 1:
            nodes, args.bootstrap, data_dir = start_cluster(args.nodes, kports, security,
                                                            CLIENT_OPTIONS, mports)
        else:
            node, args.bootstrap, data_dir = start_node(kports[0] if kports else None, security,
                                                        mports[0] if mports else None)
            nodes = [node]
        NODE_PIDS[:] = [n.pid for n in nodes]
        if mports:
            scraper = _Scraper(mports, args.scrape_interval)
        if kports:
            args.kafka_bootstrap = ",".join(f"127.0.0.1:{p}" for p in kports)
    try:
        res = run(args)
        if scraper is not None:
            res["metrics_scrapes"] = scraper.stop()
    finally:
        for node in nodes:
            node.terminate()
        for node in nodes:
            node.wait(30)
        if nodes:
            shutil.rmtree(data_dir, ignore_errors=True)
        if security:
            shutil.rmtree(security.dir, ignore_errors=True)
    if args.json:
        print(json.dumps(res))
    else:
        for client_res in res["clients"].values():
            print_table(client_res)


#: (result key, label, issue-16 target, direction) for the readable table.
TABLE = [
    ("produce_rec_s", "produce rec/s", 1_500_000, ">="),
    ("produce_mb_s", "produce MB/s", None, ">="),
    ("consume_rec_s", "consume rec/s", 1_000_000, ">="),
    ("consume_mb_s", "consume MB/s", None, ">="),
]
LATENCY_TARGETS = {"lat_p50_ms": 0.33, "lat_p99_ms": 0.7}

#: Issue #16: 3 nodes, replication factor 3, acks=all.
TABLE_REPLICATED = [
    ("produce_rec_s", "produce rec/s", 500_000, ">="),
    ("produce_mb_s", "produce MB/s", None, ">="),
    ("consume_rec_s", "consume rec/s", None, ">="),
    ("consume_mb_s", "consume MB/s", None, ">="),
]
LATENCY_TARGETS_REPLICATED = {"lat_p50_ms": 0.8, "lat_p99_ms": 2.0,
                              "last10_over_first10_p99": 1.5}


def print_table(res: dict) -> None:
    print(
        f"client={res.get('client', 'raftlog')} write_caching={res.get('write_caching', 'default')} "
        f"security_protocol={res.get('security_protocol', 'PLAINTEXT')} "
        f"nodes={res['nodes']} n={res['n']} "
        f"acks={res['acks']} mode={res['mode']} replication_factor={res['replication_factor']}"
    )
    replicated = res["replication_factor"] > 1
    print(f"{'metric':<18} {'measured':>14} {'target':>12}")
    for key, label, target, op in TABLE_REPLICATED if replicated else TABLE:
        v = res[key]
        shown = f"{v:,.0f}" if v >= 1000 else f"{v:.3f}"
        goal = "" if target is None else f"{op} {target:,}"
        print(f"{label:<18} {shown:>14} {goal:>12}")
    if "produce_client_cpu_us_per_rec" in res:
        nodes = res.get("produce_node_cpu_us_per_rec")
        print(f"produce CPU us/record: producer {res['produce_client_cpu_us_per_rec']:.2f}"
              + (f", nodes {', '.join(f'{x:.2f}' for x in nodes)}" if nodes else ""))
    targets = LATENCY_TARGETS_REPLICATED if replicated else LATENCY_TARGETS
    print(f"latency (acks={res['acks']}, SDK defaults; first/last window "
          f"{res['latency'][0].get('window_s', 0):g} s)")
    print(f"{'rate/s':>8} {'p50 ms':>8} {'p99 ms':>8} {'p99.9':>8} {'max':>8} "
          f"{'first p99':>10} {'last p99':>9} {'last/first':>10}")
    for r in res["latency"]:
        print(f"{r['rate']:>8} {r['lat_p50_ms']:>8.3f} {r['lat_p99_ms']:>8.3f} "
              f"{r['lat_p999_ms']:>8.3f} {r['lat_max_ms']:>8.2f} "
              f"{r.get('first10_p99_ms', float('nan')):>10.3f} "
              f"{r.get('last10_p99_ms', float('nan')):>9.3f} "
              f"{r.get('last10_over_first10_p99', float('nan')):>10.2f}")
    print("targets: " + ", ".join(f"{k} <= {v}" for k, v in targets.items()))


if __name__ == "__main__":
    main()
