"""A userspace per-link TCP proxy for Raft traffic (the portable network nemesis).

pysyncobj keeps one TCP connection per pair of voters, opened by the voter whose
address string is greater, which then sends its own address as its identity; the
acceptor looks that string up among its partners. So a link can be routed through a
proxy: the initiator ``i`` lists its peer ``j`` at a proxy address (on ``SUBNET.1``,
which sorts below every node address, so ``i`` still initiates), while ``j`` lists ``i``
at ``i``'s real address (which is what ``i`` announces). Every node then has its own
``controller.quorum.voters`` string.

Only Raft goes through the proxies: client traffic, broker heartbeats (sent to the
controller's client listener) and replica fetches go straight to the advertised
listeners, which every node shares. A proxy partition is therefore a *Raft-only*
partition; the kernel-level one (:class:`raftlog.jepsen.cluster.IptablesNet`) cuts
everything.

Per direction a link can pass, stall (bytes stay queued, as a blackholed TCP path:
delivered if healed in time), or be delayed; ``reset`` closes every connection of the
link and ``refuse`` rejects new ones.
"""

from __future__ import annotations

import socket
import threading
import time


class LinkProxy:
    def __init__(self, listen_host: str, target: tuple[str, int], a: int, b: int):
        """A link from node ``a`` (the initiator) to node ``b`` (listening at target)."""
        self.a, self.b = a, b
        self.target = target
        self.srv = socket.socket()
        self.srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.srv.bind((listen_host, 0))
        self.srv.listen(16)
        self.addr = self.srv.getsockname()
        self.cond = threading.Condition()
        self.stalled: set[int] = set()  # source node ids whose bytes are held
        self.delay_s = 0.0
        self.refuse = False
        self.conns: list[socket.socket] = []
        self.closed = False
        self.bytes = {a: 0, b: 0}
        threading.Thread(target=self._accept, daemon=True, name=f"proxy-{a}-{b}").start()

    def _accept(self) -> None:
        while not self.closed:
            try:
                c, _ = self.srv.accept()
            except OSError:
                return
            if self.refuse:
                c.close()
                continue
            try:
                t = socket.create_connection(self.target, timeout=2)
                t.settimeout(None)
            except OSError:
                c.close()
                continue
            for s in (c, t):
                s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            with self.cond:
                self.conns += [c, t]
            threading.Thread(target=self._pump, args=(c, t, self.a), daemon=True).start()
            threading.Thread(target=self._pump, args=(t, c, self.b), daemon=True).start()

    def _pump(self, src: socket.socket, dst: socket.socket, source_node: int) -> None:
        try:
            while True:
                with self.cond:
                    while source_node in self.stalled and not self.closed:
                        self.cond.wait(0.5)
                data = src.recv(65536)
                if not data:
                    break
                if self.delay_s:
                    time.sleep(self.delay_s)
                with self.cond:  # a stall that began while we read holds these bytes too
                    while source_node in self.stalled and not self.closed:
                        self.cond.wait(0.5)
                dst.sendall(data)
                self.bytes[source_node] += len(data)
        except OSError:
            pass
        finally:
            for s in (src, dst):
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass
                s.close()

    def stall(self, source_node: int) -> None:
        with self.cond:
            self.stalled.add(source_node)

    def reset(self) -> None:
        with self.cond:
            conns, self.conns = self.conns, []
        for s in conns:
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def heal(self) -> None:
        with self.cond:
            self.stalled.clear()
            self.delay_s = 0.0
            self.refuse = False
            self.cond.notify_all()

    def close(self) -> None:
        self.closed = True
        self.srv.close()
        self.reset()
        with self.cond:
            self.cond.notify_all()


class ProxyNet:
    """One LinkProxy per pair of voters; the same block/partition/heal API as IptablesNet."""

    kind = "proxy (Raft links only)"

    def __init__(self, subnet: str):
        self.subnet = subnet
        self.links: dict[frozenset, LinkProxy] = {}
        self.nodes = []
        self.blocked: set = set()

    def cgroup_procs(self, node):
        return None

    def setup(self, nodes) -> None:
        self.nodes = nodes
        for a in nodes:
            for b in nodes:
                if self._initiates(a, b):
                    self.links[frozenset((a.id, b.id))] = LinkProxy(
                        f"{self.subnet}.1", (b.host, b.raft_port), a.id, b.id)

    @staticmethod
    def _initiates(a, b) -> bool:
        return a.id != b.id and f"{a.host}:{a.raft_port}" > f"{b.host}:{b.raft_port}"

    def voters_for(self, node) -> str:
        out = []
        for n in self.nodes:
            if n.id != node.id and self._initiates(node, n):
                h, p = self.links[frozenset((node.id, n.id))].addr
                out.append(f"{n.id}@{h}:{p}")
            else:
                out.append(f"{n.id}@{n.host}:{n.raft_port}")
        return ",".join(out)

    def block(self, src: int, dst: int) -> None:
        self.links[frozenset((src, dst))].stall(src)
        self.blocked.add((src, dst))

    def partition(self, groups) -> None:
        side = {n: i for i, g in enumerate(groups) for n in g}
        for a in side:
            for b in side:
                if side[a] != side[b]:
                    self.block(a, b)

    def heal(self) -> None:
        for link in self.links.values():
            link.heal()
        self.blocked.clear()

    def teardown(self) -> None:
        for link in self.links.values():
            link.close()
