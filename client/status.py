"""``raftlog cluster status``: the cluster as an operator reads it, built from three
answers (DescribeCluster, Metadata, each broker's DescribeLogDirs) by pure functions.

:func:`build_status` turns them into one JSON-ready dict (the ``--json`` output; the
keys older versions printed -- ``cluster_id``, ``controller_id``, ``controller_epoch``,
``brokers``, ``partitions``, ``under_replicated``, ``offline`` -- are kept as they
were, since deploy/ and scripts read them); :func:`format_status` draws it as
aligned text tables. Replica lag is what a partition's leader knows: its log end
offset minus each follower's as last fetched.
"""

from __future__ import annotations

#: Rows of the partition and lag tables in the text form (the JSON has them all).
MAX_TEXT_ROWS = 50


def human_bytes(n: int | None) -> str:
    if n is None or n < 0:
        return "-"
    size = float(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if size < 1024 or unit == "TiB":
            return f"{int(size)} B" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    raise AssertionError("unreachable")


def table(headers: list[str], rows: list[list]) -> str:
    """Left-aligned columns, two spaces apart; None shows as "-"."""
    cells = [headers] + [["-" if c is None else str(c) for c in r] for r in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in cells)


def _partition_json(t, p) -> dict:
    return {"topic": t.name, "partition": p.partition, "leader": p.leader,
            "replicas": list(p.replicas), "isr": list(p.isr), "leader_epoch": p.leader_epoch,
            "offline_replicas": list(p.offline_replicas),
            "under_replicated": p.under_replicated, "offline": p.offline}


def replica_lags(log_dirs, topics) -> list[dict]:
    """Follower replicas behind their leader or out of the ISR: one ``{topic, partition,
    leader, follower, lag, in_isr}`` per follower, largest lag first.

    ``lag`` is from the leaders' DescribeLogDirs rows: the leader's log end offset minus
    the follower's as last fetched; -1: the follower has not fetched since this leader
    took over, or no leader reported it (an offline partition, or its leader did not
    answer DescribeLogDirs). ``in_isr`` is from the Metadata (``topics``: Admin.describe_topics()).

    One definition with the summary's ``under_replicated`` (ISR smaller than the
    replicas, as Kafka's): every replica missing from an ISR has a row (even when it
    has caught up since, lag 0), so the partitions with an ``in_isr`` False row are
    exactly the under-replicated ones; an in-sync follower has a row only while it lags."""
    described = {(t.name, p.partition): p for t in topics for p in t.partitions}
    rows: dict = {}
    for d in log_dirs:
        for r in d.partitions:
            part = described.get((r.topic, r.partition))
            if r.leader != d.node_id or part is None:
                continue
            for follower, leo in r.followers:
                lag = -1 if leo < 0 else max(0, r.log_end_offset - leo)
                in_isr = follower in part.isr
                if lag or not in_isr:
                    rows[(r.topic, r.partition, follower)] = {
                        "topic": r.topic, "partition": r.partition, "leader": d.node_id,
                        "follower": follower, "lag": lag, "in_isr": in_isr}
    for (topic, partition), part in described.items():
        for b in part.replicas:
            if b not in part.isr and (topic, partition, b) not in rows:
                rows[(topic, partition, b)] = {
                    "topic": topic, "partition": partition, "leader": part.leader,
                    "follower": b, "lag": -1, "in_isr": False}
    out = list(rows.values())
    out.sort(key=lambda x: (x["lag"] >= 0, x["lag"]), reverse=True)
    return out


def build_status(cluster, topics, log_dirs) -> dict:
    """The status dict. ``cluster``: Admin.describe_cluster(); ``topics``:
    Admin.describe_topics(); ``log_dirs``: Admin.describe_log_dirs()."""
    parts = [(t, p) for t in topics for p in t.partitions]
    leaders: dict[int, int] = {}
    replicas: dict[int, int] = {}
    for _t, p in parts:
        if p.leader >= 0:
            leaders[p.leader] = leaders.get(p.leader, 0) + 1
        for r in p.replicas:
            replicas[r] = replicas.get(r, 0) + 1
    dirs = {d.node_id: d for d in log_dirs}
    nodes = []
    for b in cluster.brokers:
        d = dirs.get(b.id)
        nodes.append({
            "id": b.id, "host": b.host, "port": b.port, "rack": b.rack, "fenced": b.fenced,
            "controller": b.id == cluster.controller_id,
            "roles": list(d.roles) if d is not None and not d.error else None,
            "leaders": leaders.get(b.id, 0), "replicas": replicas.get(b.id, 0),
            "size_bytes": d.size_bytes if d is not None and not d.error else None,
            "usable_bytes": d.usable_bytes if d is not None and not d.error else None,
            "log_dir": d.log_dir if d is not None and not d.error else None,
            "error": d.error if d is not None else "",
        })
    return {
        "cluster_id": cluster.cluster_id,
        "controller_id": cluster.controller_id,
        "controller_epoch": cluster.controller_epoch,
        "brokers": [{"id": b.id, "host": b.host, "port": b.port, "fenced": b.fenced}
                    for b in cluster.brokers],
        "partitions": [_partition_json(t, p) for t, p in parts],
        "under_replicated": sum(p.under_replicated for _t, p in parts),
        "offline": sum(p.offline for _t, p in parts),
        "nodes": nodes,
        "lag": replica_lags(log_dirs, topics),
    }


def format_status(s: dict) -> str:
    """The status dict as text: a summary line, the nodes, the partitions that are
    not fully replicated, and the followers that lag."""
    brokers_in = [b["id"] for b in s["brokers"]]
    controller = s["controller_id"]
    where = "" if controller in brokers_in or controller < 0 else " (controller-only node)"
    fenced = sum(b["fenced"] for b in s["brokers"])
    lines = [
        f"cluster {s['cluster_id']}  controller {controller if controller >= 0 else 'none'}"
        f"{where}  epoch {s['controller_epoch']}  brokers {len(brokers_in)} ({fenced} fenced)  "
        f"partitions {len(s['partitions'])}  under-replicated {s['under_replicated']}  "
        f"offline {s['offline']}",
        "",
        table(["NODE", "ADDRESS", "ROLES", "STATE", "LEADERS", "REPLICAS", "LOG SIZE", "DISK FREE"],
              [[f"{n['id']}{'*' if n['controller'] else ''}", f"{n['host']}:{n['port']}",
                ",".join(n["roles"]) if n["roles"] else None,
                ",".join(x for x, on in (("fenced", n["fenced"]), ("unreachable", n["error"]))
                         if on) or "active",
                n["leaders"], n["replicas"], human_bytes(n["size_bytes"]),
                human_bytes(n["usable_bytes"])] for n in s["nodes"]]),
        "(* active controller)",
    ]
    bad = [p for p in s["partitions"] if p["under_replicated"] or p["offline"]]
    lines.append("")
    if bad:
        lines.append(f"{len(bad)} partition(s) not fully replicated:")
        lines.append(table(
            ["PARTITION", "STATE", "LEADER", "REPLICAS", "ISR", "OFFLINE REPLICAS"],
            [[f"{p['topic']}-{p['partition']}",
              "OFFLINE" if p["offline"] else "UNDER-REPLICATED",
              p["leader"] if p["leader"] >= 0 else "none", _ids(p["replicas"]), _ids(p["isr"]),
              _ids(p["offline_replicas"]) or None] for p in bad[:MAX_TEXT_ROWS]]))
        if len(bad) > MAX_TEXT_ROWS:
            lines.append(f"... and {len(bad) - MAX_TEXT_ROWS} more (--json lists all)")
    else:
        lines.append("every partition is fully replicated")
    lines.append("")
    lag = s["lag"]
    if lag:
        out_of_isr = sum(not x["in_isr"] for x in lag)
        lines.append(f"{len(lag)} follower replica(s) behind their leader or out of the ISR "
                     f"({out_of_isr} out of the ISR, in the {s['under_replicated']} "
                     "under-replicated partition(s)):")
        lines.append(table(["PARTITION", "LEADER", "FOLLOWER", "LAG (records)", "IN ISR"],
                           [[f"{x['topic']}-{x['partition']}",
                             x["leader"] if x["leader"] >= 0 else "none", x["follower"],
                             x["lag"] if x["lag"] >= 0 else "not fetching",
                             "yes" if x["in_isr"] else "no"]
                            for x in lag[:MAX_TEXT_ROWS]]))
        if len(lag) > MAX_TEXT_ROWS:
            lines.append(f"... and {len(lag) - MAX_TEXT_ROWS} more (--json lists all)")
    else:
        lines.append("no follower lags its leader")
    unreachable = [n for n in s["nodes"] if n["error"]]
    for n in unreachable:
        lines.append(f"node {n['id']}: log dirs not read: {n['error']}")
    return "\n".join(lines)


def _ids(ids) -> str:
    return ",".join(str(i) for i in ids)
