"""#38: a leader that loses only its link to the controller is not fenced while its
followers still reach it. Crash detection (a closed heartbeat connection, then a refused
probe of the broker's listener) must not mistake a cut link for a crash.

Four real nodes (voters 1-3, node 4 a broker). Every node advertises its listener
through its own userspace proxy (the harness's ``LinkProxy``), so cutting the
controller's proxy (every connection reset, new ones closed at once) cuts every
broker's heartbeats and AlterPartition requests to the controller, and nothing else:
the test topic's replicas are the three other nodes, and they fetch from each other
through their own, healthy proxies. The session is 60 s, so only a wrong crash
verdict could fence anybody within the test."""

from __future__ import annotations

import pytest

from raftlog.jepsen.proxy import LinkProxy

from .cluster import AckedWrites, LocalCluster, until

pytestmark = pytest.mark.slow

SESSION_MS = 60_000


def test_a_leader_cut_off_from_the_controller_only_is_not_fenced(tmp_path):
    c = LocalCluster(tmp_path, 4, voters=3, broker_session_timeout_ms=SESSION_MS,
                     broker_heartbeat_interval_ms=200)
    proxies = {n.node_id: LinkProxy("127.0.0.1", ("127.0.0.1", n.port), 0, n.node_id)
               for n in c.nodes}
    for n in c.nodes:
        host, port = proxies[n.node_id].addr
        n.extra["advertised.listeners"] = f"{host}:{port}"
    w = None
    try:
        c.start()
        with c.admin() as a:
            controller = a.describe_cluster().controller_id
        others = [n for n in c.nodes if n.node_id != controller]
        via = others[0]
        with c.admin(via) as a:
            a.create_topic("cut", assignments=[[n.node_id for n in others]])
        c.wait_isr("cut", 0, {n.node_id for n in others})
        before = c.partition("cut", 0, via)
        leader = c.node(before.leader)
        assert leader.node_id != controller

        w = AckedWrites(",".join(n.bootstrap for n in others), "cut").start()
        acked = w.acked
        until(lambda: len(acked) > 50, timeout_s=30)

        cut = proxies[controller]
        cut.refuse = True
        cut.reset()
        ctl = c.node(controller)
        # the controller saw the leader's heartbeat connection close, probed its
        # listener, and found it alive: the broker is left to its session
        until(lambda: f"event=broker_disconnect_not_crash broker={leader.node_id}"
              in ctl.log_text(), timeout_s=30)
        during = len(acked)
        until(lambda: len(acked) > during + 100, timeout_s=30)  # writes go on meanwhile
        with c.admin(via) as a:
            assert not [b.id for b in a.describe_cluster().brokers if b.fenced]
        now = c.partition("cut", 0, via)
        assert (now.leader, now.leader_epoch) == (before.leader, before.leader_epoch)

        cut.heal()
        after = len(acked)
        until(lambda: len(acked) > after + 50, timeout_s=30)
        w.stop()
        assert not w.errors, w.errors[:3]
        assert w.in_order()
        logs = "".join(n.log_text() for n in c.nodes)
        assert "event=broker_crash_seen" not in logs
        with c.admin(via) as a:
            assert not [b.id for b in a.describe_cluster().brokers if b.fenced]
        assert c.partition("cut", 0, via).leader_epoch == before.leader_epoch
    finally:
        if w is not None:
            w.stop()
        c.stop()
        for p in proxies.values():
            p.close()
