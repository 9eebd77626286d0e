"""Real node processes, each on its own loopback address, and the network between them.

Node i (1-based) listens on ``SUBNET.(i+1)`` for clients and Raft. The subnet is a /24 of
127/8 chosen per run, so two runs on one machine never share addresses or rules.

Network faults (:class:`IptablesNet`): each node runs in its own cgroup v2 group; an
iptables nat rule gives the node's outgoing connections inside the subnet its own
address as source (by default every loopback connection comes from 127.0.0.1), so the
receiver sees who is talking; a DROP rule in OUTPUT matching (cgroup of node a,
destination address of node b) then stops every packet a sends to b, on connections
either side opened. One such rule per blocked direction gives isolations, bridges,
majority/minority splits and one-way partitions. The harness's own clients are in no
node cgroup and keep reaching every node (as Jepsen's clients do). All rules live in two
chains named after the run and are removed on heal and at exit.

Power loss (``lazyfs=True``): each node's log directory is its own lazyfs mount
(:mod:`raftlog.jepsen.lazyfs`: ``node-i/data`` over ``node-i/data.backing``), so
:meth:`Node.power_loss` can SIGKILL the node and drop everything its filesystem has
not synced -- files as of their last fsync, directory entries as of their
directory's last fsync -- whatever the node believes it synced.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import time

from raftlog.localnode import free_port, node_command, spawn, wait_listening

CGROUP_ROOT = "/sys/fs/cgroup/unified"


def pick_subnet() -> str:
    pid = os.getpid()
    return f"127.{100 + (pid >> 8) % 100}.{pid % 256}"



class Node:
    def __init__(self, cluster: Cluster, node_id: int):
        self.cluster = cluster
        self.id = node_id
        self.host = f"{cluster.subnet}.{node_id + 1}"
        self.port = free_port(self.host)
        self.raft_port = free_port(self.host)
        #: server.properties and node.log; also the data dir unless the run has small
        #: data disks (jepsen/disks.py), which are mounted below it
        self.home = os.path.join(cluster.base_dir, f"node-{node_id}")
        self.data_dir = (cluster.disks.data_dir(node_id) if cluster.disks is not None
                         else self.home)
        self.config_path = os.path.join(self.home, "server.properties")
        self.log_path = os.path.join(self.home, "node.log")
        self.proc: subprocess.Popen | None = None
        self.paused = False
        self.mount = None  # a lazyfs Mount when the cluster runs on lazyfs
        self.mount_dir = self.data_dir
        if cluster.lazyfs:
            from .lazyfs import Mount

            self.mount_dir = os.path.join(self.data_dir, "data")
            self.mount = Mount(self.mount_dir, os.path.join(self.data_dir, "data.backing"),
                               control_path=os.path.join(self.data_dir, "lazyfs.sock"),
                               log_path=os.path.join(self.data_dir, "lazyfs.log"))

    @property
    def log_dir(self) -> str:
        """Where the node's partition directories are now: its log.dirs, or (lazyfs
        unmounted, e.g. after the cluster closed) the backing directory."""
        if self.mount is not None and not self.mount.mounted:
            return self.mount.backing
        return self.mount_dir

    @property
    def bootstrap(self) -> str:
        return f"{self.host}:{self.port}"

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def write_config(self) -> None:
        os.makedirs(self.data_dir, exist_ok=True)
        os.makedirs(self.home, exist_ok=True)
        c = self.cluster
        props = {
            "node.id": self.id,
            "listeners": f"{self.host}:{self.port}",
            "log.dirs": self.mount_dir,
            "controller.quorum.voters": c.net.voters_for(self) if hasattr(c.net, "voters_for")
            else ",".join(f"{n.id}@{n.host}:{n.raft_port}" for n in c.nodes),
            "raft.password": c.password,
            "broker.session.timeout.ms": 2000,
            "broker.heartbeat.interval.ms": 200,
            "replica.lag.time.max.ms": 3000,
            "min.insync.replicas": c.min_isr,
            **c.extra_config,
            **(c.security.node_config(self.id, self.host, self.port) if c.security else {}),
        }
        # it holds raft.password: readable by the owner only (the node refuses otherwise)
        fd = os.open(self.config_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        os.fchmod(fd, 0o600)
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write("# written by raftlog.jepsen\n")
            for k, v in props.items():
                f.write(f"{k}={v}\n")

    def start(self) -> None:
        if self.alive():
            return
        self.write_config()
        if self.mount is not None and not self.mount.mounted:
            self.mount.start()
        cmd = node_command(config=self.config_path)
        if self.cluster.clocks is not None:
            cmd = self.cluster.clocks.wrap(self.id, cmd)
        cg = self.cluster.net.cgroup_procs(self) if self.cluster.net else None
        if cg:
            # join the node's cgroup before exec, so every socket it opens is in it
            cmd = ["sh", "-c", f'echo $$ > "{cg}" && exec "$@"', "sh", *cmd]
        self.proc = spawn(cmd, self.log_path, banner=f"start {time.strftime('%H:%M:%S')}")
        self.paused = False

    def wait_listening(self, timeout_s: float = 30.0) -> bool:
        return self.proc is not None and wait_listening(self.host, self.port, timeout_s, self.proc)

    def kill(self) -> None:
        if self.alive():
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait()
        self.paused = False

    def power_loss(self) -> dict:
        """SIGKILL the node, then drop what its filesystem has not synced (lazyfs
        only). Returns what the filesystem dropped."""
        if self.mount is None:
            raise RuntimeError("power loss needs the cluster on lazyfs (Cluster(lazyfs=True))")
        self.kill()
        return self.mount.crash()

    def unmount(self) -> None:
        if self.mount is not None:
            self.mount.stop()

    def stop(self, timeout_s: float = 15.0) -> None:
        if not self.alive():
            return
        if self.paused:
            self.resume()
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout_s)
        except subprocess.TimeoutExpired:
            self.kill()

    def pause(self) -> None:
        if self.alive():
            self.proc.send_signal(signal.SIGSTOP)
            self.paused = True

    def resume(self) -> None:
        if self.alive():
            self.proc.send_signal(signal.SIGCONT)
        self.paused = False


class Cluster:
    def __init__(self, n: int, base_dir: str, *, password: str = "jepsen-secret-0123456789",
                 min_isr: int = 1, extra_config: dict | None = None,
                 net: str = "auto", subnet: str | None = None, log=print,
                 security_protocol: str = "PLAINTEXT", lazyfs: bool = False,
                 disk_mb: int | None = None, clocks: bool = False):
        """``security_protocol`` SASL_SSL: every listener is TLS + SCRAM (jepsen/security.py);
        harness clients take :attr:`client_options`. ``lazyfs``: every node's log
        directory on its own lazyfs mount (the powerloss nemesis needs it). ``disk_mb``:
        every node's data dir is a small disk of its own (jepsen/disks.py), for the
        diskfull nemesis. ``clocks``: every node runs under libfaketime, its wall clock
        movable (jepsen/clock.py); :attr:`clock_error` says why not when it cannot."""
        self.base_dir = os.path.abspath(base_dir)
        self.lazyfs = lazyfs
        self.clocks = None
        self.clock_error: str | None = None
        if clocks:
            from .clock import Clocks

            try:
                self.clocks = Clocks({i: os.path.join(self.base_dir, f"node-{i}")
                                      for i in range(1, n + 1)})
            except RuntimeError as e:
                self.clock_error = str(e)
        self.disks = None
        if disk_mb:
            from .disks import Disks

            self.disks = Disks({i: os.path.join(self.base_dir, f"node-{i}")
                                for i in range(1, n + 1)}, disk_mb, log)
        self.security = None
        #: TLS/SASL options for every harness client (empty: PLAINTEXT)
        self.client_options: dict = {}
        if security_protocol == "SASL_SSL":
            from .security import SaslSslMaterial

            self.security = SaslSslMaterial(os.path.join(self.base_dir, "tls"))
            self.client_options = self.security.client_options()
        elif security_protocol != "PLAINTEXT":
            raise ValueError(f"security_protocol {security_protocol!r}: PLAINTEXT or SASL_SSL")
        self.subnet = subnet or pick_subnet()
        self.password = password
        self.min_isr = min_isr
        self.extra_config = dict(extra_config or {})
        self.log = log
        self.nodes: list[Node] = []
        self.net: IptablesNet | None = None
        self.net_error: str | None = None
        if net in ("auto", "iptables"):
            try:
                self.net = IptablesNet(self.subnet)
            except NetUnavailable as e:
                self.net_error = str(e)
                if net == "iptables":
                    raise
        if net == "proxy" or (net == "auto" and self.net is None):
            from .proxy import ProxyNet

            self.net = ProxyNet(self.subnet)
        self.nodes = [Node(self, i) for i in range(1, n + 1)]
        if self.net:
            self.net.setup(self.nodes)

    @property
    def bootstrap(self) -> str:
        return ",".join(n.bootstrap for n in self.nodes)

    def node(self, node_id: int) -> Node:
        return self.nodes[node_id - 1]

    def start(self, timeout_s: float = 60.0) -> None:
        for n in self.nodes:
            n.start()
        for n in self.nodes:
            if not n.wait_listening(timeout_s):
                raise RuntimeError(f"node {n.id} did not start; see {n.log_path}")
        self.wait_registered(timeout_s)

    def wait_registered(self, timeout_s: float = 60.0) -> bool:
        from raftlog.client import Admin

        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            try:
                with Admin(self.bootstrap, request_timeout_ms=2000, **self.client_options) as a:
                    brokers = a.describe_cluster().brokers
                if len(brokers) == len(self.nodes) and not any(b.fenced for b in brokers):
                    return True
            except Exception:
                pass
            time.sleep(0.2)
        return False

    def heal(self) -> None:
        if self.net:
            self.net.heal()
        if self.clocks:
            self.clocks.reset()
        for n in self.nodes:
            if n.paused:
                n.resume()

    def restart_all(self, timeout_s: float = 60.0) -> None:
        for n in self.nodes:
            n.stop()
        self.start(timeout_s)

    def stop(self) -> None:
        for n in self.nodes:
            if n.paused:
                n.resume()
        for n in self.nodes:
            n.stop()

    def close(self) -> None:
        try:
            self.stop()
        finally:
            for n in self.nodes:
                try:
                    n.unmount()
                except Exception as e:
                    self.log(f"lazyfs of node {n.id}: unmount failed: {e!r}")
            if self.net:
                self.net.teardown()

    def lazyfs_status(self) -> dict:
        """{node id: the ledger counters of its lazyfs} (mounted nodes only)."""
        out = {}
        for n in self.nodes:
            if n.mount is not None and n.mount.mounted:
                try:
                    out[n.id] = n.mount.status()
                except Exception as e:
                    out[n.id] = {"error": repr(e)}
        return out


# ----------------------------------------------------------------------------- network


class NetUnavailable(RuntimeError):
    pass


def _run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(list(args), capture_output=True, text=True, timeout=20)


class IptablesNet:
    """Kernel-level link faults on loopback (root, iptables and cgroup v2 needed)."""

    kind = "iptables+cgroup (all traffic between nodes)"

    def __init__(self, subnet: str):
        if os.geteuid() != 0:
            raise NetUnavailable("not root")
        if shutil.which("iptables") is None:
            raise NetUnavailable("iptables is not installed (apt-get install -y iptables)")
        if not os.path.isdir(CGROUP_ROOT) or not os.access(CGROUP_ROOT, os.W_OK):
            raise NetUnavailable(f"no writable cgroup v2 hierarchy at {CGROUP_ROOT}")
        r = _run("iptables", "-S", "OUTPUT")
        if r.returncode != 0:
            raise NetUnavailable(f"iptables does not work here: {r.stderr.strip()}")
        self.subnet = subnet
        tag = subnet.replace("127.", "").replace(".", "-")
        self.chain = f"RLJ-{tag}"
        self.cg_dir = os.path.join(CGROUP_ROOT, f"raftlog-jepsen-{tag}")
        self.nodes: list[Node] = []
        self.blocked: set[tuple[int, int]] = set()
        self._ready = False

    def cgroup_procs(self, node: Node) -> str:
        return os.path.join(self.cg_dir, f"n{node.id}", "cgroup.procs")

    def _cg_path(self, node: Node) -> str:
        return os.path.relpath(os.path.join(self.cg_dir, f"n{node.id}"), CGROUP_ROOT)

    def _ok(self, *args: str) -> None:
        r = _run(*args)
        if r.returncode != 0:
            raise NetUnavailable(f"{' '.join(args)}: {r.stderr.strip()}")

    def setup(self, nodes: list[Node]) -> None:
        self.nodes = nodes
        try:
            for n in nodes:
                os.makedirs(os.path.join(self.cg_dir, f"n{n.id}"), exist_ok=True)
            for table, parent in (("filter", "OUTPUT"), ("nat", "POSTROUTING")):
                _run("iptables", "-t", table, "-N", self.chain)
                self._ok("iptables", "-t", table, "-F", self.chain)
                if _run("iptables", "-t", table, "-C", parent, "-j", self.chain).returncode:
                    self._ok("iptables", "-t", table, "-I", parent, "-j", self.chain)
            for n in nodes:
                self._ok("iptables", "-t", "nat", "-A", self.chain, "-m", "cgroup", "--path",
                         self._cg_path(n), "-d", f"{self.subnet}.0/24", "-j", "SNAT",
                         "--to-source", n.host)
            self._ready = True
        except (NetUnavailable, OSError) as e:
            self.teardown()
            raise NetUnavailable(str(e)) from e

    def block(self, src: int, dst: int) -> None:
        """Drop every packet node ``src`` sends to node ``dst`` (one direction)."""
        if (src, dst) in self.blocked:
            return
        a, b = self.nodes[src - 1], self.nodes[dst - 1]
        self._ok("iptables", "-A", self.chain, "-m", "cgroup", "--path", self._cg_path(a),
                 "-d", b.host, "-j", "DROP")
        self.blocked.add((src, dst))

    def partition(self, groups: list[list[int]]) -> None:
        """Nodes talk only within their group (both directions blocked across groups)."""
        side = {n: i for i, g in enumerate(groups) for n in g}
        for a in side:
            for b in side:
                if side[a] != side[b]:
                    self.block(a, b)

    def heal(self) -> None:
        if self._ready:
            _run("iptables", "-F", self.chain)
        self.blocked.clear()

    def teardown(self) -> None:
        for table, parent in (("filter", "OUTPUT"), ("nat", "POSTROUTING")):
            while _run("iptables", "-t", table, "-D", parent, "-j", self.chain).returncode == 0:
                pass
            _run("iptables", "-t", table, "-F", self.chain)
            _run("iptables", "-t", table, "-X", self.chain)
        for d in (os.listdir(self.cg_dir) if os.path.isdir(self.cg_dir) else []):
            if d.startswith("n") and d[1:].isdigit():
                try:
                    os.rmdir(os.path.join(self.cg_dir, d))
                except OSError:
                    pass
        try:
            os.rmdir(self.cg_dir)
        except OSError:
            pass
        self._ready = False
