"""The SDK after the node closed an idle connection (connections.max.idle.ms): the
next request goes out on a new connection, a write included (writes are not retried,
so reusing the dead connection would lose it). A real node process."""

from __future__ import annotations

import select
import time

from raftlog.client import Admin


def test_admin_write_after_the_node_closed_its_idle_connection(node_factory):
    node = node_factory(**{"connections.max.idle.ms": "500"})
    with Admin(node.bootstrap) as admin:
        admin.create_topic("a")
        conn = admin._cluster.any_connection()
        deadline = time.monotonic() + 10  # the node closes it after 0.5 s idle
        while not select.select([conn.sock], [], [], 0.1)[0]:
            assert time.monotonic() < deadline, "the node kept an idle connection open"
        admin.create_topic("b")  # a write: sent once, on a new connection
        assert {"a", "b"} <= {t if isinstance(t, str) else t.name for t in admin.list_topics()}
