"""``raftlog up``: a local cluster on loopback, honest about whether it is up.

Each node gets its own ``DATA_DIR/node-I/server.properties`` (mode 0600: the Raft
password is in it, never in a command line) and runs as ``python -m raftlog.node
--config`` on it, so one node is restarted by hand with ``raftlog node --config
DATA_DIR/node-I/server.properties``. ``up`` holds ``DATA_DIR``'s lock (a second ``up``
on it is refused before it writes anything) and each node holds its own dir's.

"up" is printed only when every node serves: it listens, answers Metadata itself (a
node answers BROKER_NOT_AVAILABLE until it has registered, i.e. replayed the
metadata log: on a restart the others' replayed view still shows the old incarnation
as registered) and the cluster lists every node registered and unfenced. A node that
exits during the start makes ``up`` print that node's error and exit 1 at once.

Node output goes to ``DATA_DIR/node-I/node.log`` and is echoed on this terminal's
stderr while ``up`` runs (a file rather than a pipe: a node outlives a killed ``up``
without write errors).
"""

from __future__ import annotations

import collections
import os
import signal
import sys
import threading
import time

from raftlog import filemodes, localnode
from raftlog.dirlock import DataDirInUse, DirLock

#: Lines of each node's output kept to report why it failed to start.
TAIL_LINES_MAX = 40
#: Pause of the thread that echoes node logs when nothing new arrived.
ECHO_POLL_S = 0.05
#: ... and at most this long when the nodes have been quiet.
ECHO_IDLE_S = 0.5
#: The largest port number.
PORT_MAX = 65535


def validate(args) -> str | None:
    """What is wrong with ``up``'s arguments (one sentence), or None."""
    n = args.nodes
    if n < 1 or n > 9:
        return "--nodes must be between 1 and 9"
    controllers = n if args.controllers is None else args.controllers
    if not 1 <= controllers <= n or (args.controllers is not None and controllers % 2 == 0):
        return (f"--controllers must be an odd number between 1 and --nodes ({n}), "
                f"not {controllers}")
    ranges = [("--port", args.port, n)]
    if n > 1:
        ranges.append(("--port (its Raft ports are PORT+100..)", args.port + 100, controllers))
    if args.metrics_port is not None:
        ranges.append(("--metrics-port", args.metrics_port, n))
    if args.kafka_port is not None:
        ranges.append(("--kafka-port", args.kafka_port, n))
    for flag, first, count in ranges:
        if not 1 <= first <= PORT_MAX - count + 1:
            return (f"{flag} must leave room for {count} port(s) between 1 and {PORT_MAX}, "
                    f"not start at {first}")
    if not args.wait_timeout >= 0:  # (also NaN)
        return f"--wait-timeout must be 0 or more seconds, not {args.wait_timeout}"
    try:
        extra_properties(args)
    except ValueError as e:
        return str(e)
    return None


#: Node config keys ``up`` sets itself, and the flag that chooses each instead.
OWNED_KEYS = {
    "node.id": "--nodes", "broker.id": "--nodes", "listeners": "--host/--port",
    "log.dirs": "--data-dir", "log.dir": "--data-dir", "data.dir": "--data-dir",
    "controller.quorum.voters": "--nodes/--controllers", "process.roles": "--controllers",
    "raft.password": "DATA_DIR/raft.password (made by up)",
    "metrics.listener": "--metrics-port", "kafka.listener": "--kafka-port",
    "kafka.brokers": "--kafka-port",
}


def extra_properties(args) -> dict[str, str]:
    """``--set KEY=VALUE`` items as properties (ValueError: one sentence saying what to
    do). The values themselves are checked with each node's whole config (check_config)."""
    from .cli_configs import parse_additions

    props = parse_additions(getattr(args, "set", None), "--set", "write.caching.default=true")
    for key in props:
        if key in OWNED_KEYS:
            raise ValueError(f"--set {key}: raftlog up sets {key} itself; use "
                             f"{OWNED_KEYS[key]}")
    return props


def check_config(props: dict[str, str]) -> str | None:
    """What is wrong with one node's properties (the node's own check), or None."""
    from raftlog.errors import ConfigError
    from raftlog.node.config import NodeConfig

    try:
        NodeConfig.from_properties(props)
    except ConfigError as e:
        return str(e)
    return None


def node_properties(args, i: int, node_dir: str, controllers: int,
                    password: str | None) -> dict[str, str]:
    """Node ``i``'s server.properties (1-based), as ``key: value``."""
    props = {"node.id": str(i), "listeners": f"{args.host}:{args.port + i - 1}",
             "log.dirs": node_dir}
    if args.nodes > 1:
        props["controller.quorum.voters"] = ",".join(
            f"{v}@{args.host}:{args.port + 100 + v - 1}" for v in range(1, controllers + 1))
        props["raft.password"] = password or ""
        if i > controllers:
            props["process.roles"] = "broker"
    if args.metrics_port is not None:
        props["metrics.listener"] = f"{args.host}:{args.metrics_port + i - 1}"
    if args.kafka_port is not None:  # node i: Kafka clients on KAFKA_PORT+i-1
        props["kafka.listener"] = f"{args.host}:{args.kafka_port + i - 1}"
    return props


def write_properties(path: str, props: dict[str, str]) -> None:
    lines = ["# Written by `raftlog up` (rewritten at each start); restart this node alone",
             f"# with: raftlog node --config {path}"]
    lines += [f"{k}={v}" for k, v in props.items()]
    filemodes.write_private(path, "\n".join(lines) + "\n")


def password(data_dir: str) -> str:
    """The local cluster's Raft password: created once, readable by the owner only."""
    import secrets

    return filemodes.stored_secret(os.path.join(data_dir, "raft.password"),
                                   lambda: secrets.token_hex(16))


class NodeOutput:
    """Echoes one node's log file to ``out`` from where it ended at spawn, keeping
    the last TAIL_LINES_MAX lines for an error report."""

    def __init__(self, path: str, out=None):
        self.path, self.out = path, out if out is not None else sys.stderr
        self.tail: collections.deque[str] = collections.deque(maxlen=TAIL_LINES_MAX)
        self._pos = os.path.getsize(path) if os.path.exists(path) else 0
        self._partial = b""
        self._file = None
        self._lock = threading.Lock()  # (the echo thread and an error report pump)

    def pump(self) -> bool:
        """Echo what was appended since the last call; True if anything was."""
        with self._lock:
            return self._pump()

    def _pump(self) -> bool:
        try:
            if self._file is None:
                self._file = open(self.path, "rb")  # noqa: SIM115 -- kept open: polled
                self._file.seek(self._pos)
            data = self._file.read(1 << 20)
        except OSError:
            return False
        if not data:
            return False
        data, self._partial = self._partial + data, b""
        lines = data.split(b"\n")
        self._partial = lines.pop()
        for raw in lines:
            line = raw.decode("utf-8", "replace")
            self.tail.append(line)
            try:
                self.out.write(line + "\n")
            except (OSError, ValueError):  # (our terminal is gone: keep the tail only)
                pass
        try:
            self.out.flush()
        except (OSError, ValueError):
            pass
        return True

    def close(self) -> None:
        with self._lock:
            self._close()

    def _close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None

    def error(self) -> str:
        """The node's own start-up error line if it printed one, else its last lines."""
        self.pump()
        mine = [t for t in self.tail if t.startswith("raftlog node:")]
        if mine:
            return mine[-1]
        last = [t for t in self.tail if t.strip()][-3:]
        return " | ".join(last) if last else "(no output)"


def _echo_loop(outputs: list[NodeOutput], stop: threading.Event) -> None:
    """Echo the nodes' output: every ECHO_POLL_S while lines arrive, backing off to
    ECHO_IDLE_S when the nodes are quiet (``up`` must cost nothing beside a busy node)."""
    pause = ECHO_POLL_S
    while not stop.is_set():
        if any([o.pump() for o in outputs]):
            pause = ECHO_POLL_S
        else:
            pause = min(ECHO_IDLE_S, pause * 2)
        stop.wait(pause)
    for o in outputs:
        o.pump()
        o.close()


def node_ready(host: str, port: int, timeout_s: float, security=None) -> str | None:
    """None when the node at ``host:port`` answers Metadata itself (it has registered,
    i.e. replayed the metadata log), else why not."""
    from raftlog.protocol import Api

    from .conn import BrokerConnection

    try:
        conn = BrokerConnection(host, port, timeout_s=max(0.1, timeout_s), security=security)
    except Exception as e:  # noqa: BLE001 -- starting: say what we saw
        return f"cannot connect: {e}"
    try:
        conn.request(Api.METADATA, {"topics": []}, timeout_s=max(0.1, timeout_s))
        return None
    except Exception as e:  # noqa: BLE001
        return str(e) or type(e).__name__
    finally:
        conn.close()


def unready_brokers(expected: int, brokers) -> list[str]:
    """Why a local cluster of node ids 1..expected is not ready yet, one phrase per node
    (empty: every node is registered and unfenced). ``brokers``: describe_cluster()'s."""
    seen = {b.id: b for b in brokers}
    out = []
    for i in range(1, expected + 1):
        b = seen.get(i)
        if b is None:
            out.append(f"node {i} is not registered")
        elif b.fenced:
            out.append(f"node {i} is fenced")
    return out


class Starting:
    """The start-up wait: every node listening, answering, registered and unfenced;
    fails at once when a node exits."""

    def __init__(self, args, procs, outputs, deadline: float, stopped, security=None,
                 admin_options: dict | None = None):
        self.args, self.procs, self.outputs = args, procs, outputs
        self.deadline, self.stopped, self.security = deadline, stopped, security
        self.admin_options = admin_options or {}

    def _exited(self) -> str | None:
        for i, p in enumerate(self.procs, 1):
            if p.poll() is not None:
                return (f"node {i} exited with code {p.returncode} during start: "
                        f"{self.outputs[i - 1].error()}")
        return None

    def wait(self) -> tuple[str | None, bool]:
        """(None, _) when up; else (why, fatal): fatal when a node exited."""
        a = self.args
        servers = ",".join(f"{a.host}:{a.port + i}" for i in range(a.nodes))
        why = "no node answered yet"
        while True:
            dead = self._exited()
            if dead is not None:
                return dead, True
            why = self._why_not_ready(servers)
            if why is None:
                return None, False
            if time.monotonic() >= self.deadline or self.stopped():
                return why, False
            time.sleep(0.1)

    def _why_not_ready(self, servers: str) -> str | None:
        a = self.args
        left = max(0.2, min(2.0, self.deadline - time.monotonic()))
        for i in range(1, a.nodes + 1):
            problem = node_ready(a.host, a.port + i - 1, left, self.security)
            if problem is not None:
                return f"node {i} ({a.host}:{a.port + i - 1}) does not serve yet: {problem}"
        from .admin import Admin

        try:
            with Admin(servers, request_timeout_ms=2000, **self.admin_options) as admin:
                why = unready_brokers(a.nodes, admin.describe_cluster().brokers)
        except Exception as e:  # noqa: BLE001 -- still starting: say what the last try saw
            return f"DescribeCluster failed: {e}"
        return "; ".join(why) if why else None


def cmd_up(args) -> int:
    """Run a local cluster of ``--nodes`` nodes on loopback until Ctrl-C / SIGTERM.

    Node i serves clients on PORT+i-1; with more than one node, nodes 1..C (C =
    ``--controllers``, default every node) are also metadata-quorum voters on Raft port
    PORT+100+i-1 (process.roles=controller,broker) and the others are broker-only nodes
    that follow the metadata log without voting; a random Raft password is kept in
    DATA_DIR/raft.password.
    """
    problem = validate(args)
    if problem is not None:
        print(f"raftlog up: {problem}", file=sys.stderr)
        return 2
    data_dir = os.path.abspath(args.data_dir)
    filemodes.restrict_umask()  # server.properties, raft.password, logs: this user's only
    try:
        filemodes.make_private_dir(data_dir)  # (each node tightens its own node-I dir)
        lock = DirLock.acquire(data_dir, "raftlog up")
    except DataDirInUse as e:
        print(f"raftlog up: {e}", file=sys.stderr)
        return 1
    except OSError as e:
        print(f"raftlog up: cannot use {data_dir}: {e}", file=sys.stderr)
        return 1
    with lock:
        return _run(args, data_dir)


def _spawn_nodes(args, data_dir: str, security: dict,
                 extra: dict[str, str]) -> tuple[list, list[NodeOutput]]:
    controllers = args.nodes if args.controllers is None else args.controllers
    secret = password(data_dir) if args.nodes > 1 else None
    procs, outputs = [], []
    for i in range(1, args.nodes + 1):
        node_dir = os.path.join(data_dir, f"node-{i}")
        os.makedirs(node_dir, mode=0o700, exist_ok=True)
        config = os.path.join(node_dir, "server.properties")
        props = node_properties(args, i, node_dir, controllers, secret)
        props.update(security.get(i, {}))  # (up --security: SASL_SSL, the admin's secret)
        props.update(extra)  # (up --set)
        write_properties(config, props)
        log_path = os.path.join(node_dir, "node.log")
        out = NodeOutput(log_path)
        proc = localnode.spawn(localnode.node_command(config=config), log_path,
                               banner=f"raftlog up: node {i} starting", new_session=True)
        procs.append(proc)
        outputs.append(out)
    return procs, outputs


def _run(args, data_dir: str) -> int:
    security, client_props, client_security, admin_options = {}, None, None, {}
    if getattr(args, "security", False):  # SASL_SSL, SCRAM admin, ACLs
        from .cli_up_security import security_overrides
        from .security import ClientSecurity, load_command_config

        security, client_props = security_overrides(data_dir, args.nodes, host=args.host,
                                                    port=args.port, kafka_port=args.kafka_port)
        admin_options = load_command_config(client_props)
        client_security = ClientSecurity.from_options(**admin_options)
    extra = extra_properties(args)
    first = {**node_properties(args, 1, os.path.join(data_dir, "node-1"), args.nodes,
                               "x" * 16), **security.get(1, {}), **extra}
    problem = check_config(first)
    if problem is not None:  # (before any node starts: a wrong --set value)
        print(f"raftlog up: --set: {problem}", file=sys.stderr)
        return 2
    procs, outputs = _spawn_nodes(args, data_dir, security, extra)
    stop_echo = threading.Event()
    echo = threading.Thread(target=_echo_loop, args=(outputs, stop_echo), daemon=True,
                            name="raftlog-up-echo")
    echo.start()
    stopping = []

    def forward(signum, _frame):
        stopping.append(signum)
        for proc in procs:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)

    signal.signal(signal.SIGTERM, forward)
    signal.signal(signal.SIGINT, forward)
    try:
        deadline = time.monotonic() + args.wait_timeout
        why, fatal = Starting(args, procs, outputs, deadline, lambda: bool(stopping),
                              client_security, admin_options).wait()
        if why is not None and not stopping:
            print(f"raftlog up: {why}" if fatal else
                  f"raftlog up: not up after {args.wait_timeout:g} s: {why}",
                  file=sys.stderr, flush=True)
            print("raftlog up: stopping the nodes (their logs: "
                  f"{os.path.join(data_dir, 'node-*', 'node.log')})", file=sys.stderr, flush=True)
            forward(signal.SIGTERM, None)
            for p in procs:
                p.wait()
            return 1
        if not stopping:  # (Ctrl-C during the start-up wait: just stop)
            print(_banner(args, data_dir, client_props), flush=True)
        _watch(procs, stopping, data_dir)
        rcs = [p.wait() for p in procs]
    finally:
        stop_echo.set()
        echo.join(2.0)
    bad = [rc for rc in rcs if rc not in (0, -signal.SIGTERM, -signal.SIGINT)]
    return bad[0] if bad else 0


#: How often `up` looks whether a node has exited while it serves.
WATCH_INTERVAL_S = 0.2


def _watch(procs, stopping: list, data_dir: str) -> None:
    """Until every node has exited: say so when one exits on its own (a crash, a kill,
    a fatal error) -- the others keep serving -- and how to start it again."""
    told: set[int] = set()
    while True:
        running = False
        for i, proc in enumerate(procs, 1):
            rc = proc.poll()
            if rc is None:
                running = True
            elif i not in told and not stopping:
                told.add(i)
                how = (f"killed by {signal.Signals(-rc).name}" if rc < 0 and
                       -rc in signal.valid_signals() else f"exit status {rc}")
                others = ("the other nodes keep serving; " if len(procs) > 1 else "")
                print(f"raftlog up: node {i} exited ({how}); {others}its log: "
                      f"{os.path.join(data_dir, f'node-{i}', 'node.log')}; start it again: "
                      f"raftlog node --config "
                      f"{os.path.join(data_dir, f'node-{i}', 'server.properties')}",
                      file=sys.stderr, flush=True)
        if not running:
            return
        time.sleep(WATCH_INTERVAL_S)


def _banner(args, data_dir: str, client_props: str | None = None) -> str:
    servers = ",".join(f"{args.host}:{args.port + i}" for i in range(args.nodes))
    return (
        f"raftlog is up: bootstrap servers {servers}, data in {data_dir}\n"
        f"  raftlog topics create demo --bootstrap-server {args.host}:{args.port}"
        + (f" --command-config {client_props}\n  client properties (SASL_SSL, user "
           f"admin): {client_props}\n" if client_props else "\n")
        + (f'  Producer("{servers}", **load_command_config("{client_props}"))  '
           "# from raftlog.client.security\n" if client_props else
           f'  Producer(bootstrap_servers="{servers}")\n')
        + (f"  metrics: http://{args.host}:{args.metrics_port}/metrics"
           f"{f' .. port {args.metrics_port + args.nodes - 1}' if args.nodes > 1 else ''}\n"
           if args.metrics_port is not None else "")
        + ("Kafka clients: bootstrap.servers="
           + ",".join(f"{args.host}:{args.kafka_port + i}" for i in range(args.nodes)) + "\n"
           if args.kafka_port is not None else "")
        + (f"  restart the node: raftlog node --config {data_dir}/node-1/server.properties\n"
           if args.nodes == 1 else
           f"  restart one node (I = 1..{args.nodes}): raftlog node --config "
           f"{data_dir}/node-I/server.properties\n")
        + "Ctrl-C stops it."
    )
