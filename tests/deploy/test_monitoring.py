"""deploy/monitoring (Prometheus scrape config, Grafana dashboard) and the role's
``raftlog_metrics_port``: every metric the dashboard queries is one a node exports,
and the rendered node config turns the listener on only when asked."""

from __future__ import annotations

import json
import os
import re

import pytest

from raftlog.node.config import NodeConfig, read_properties
from raftlog.node.metrics import HISTOGRAM, METRICS

DEPLOY = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", "deploy"))
MONITORING = os.path.join(DEPLOY, "monitoring")
#: What the issue asks an operator to see; each must be on the dashboard.
MUST_SHOW = {
    "raftlog_topic_bytes_in_total", "raftlog_topic_records_in_total",
    "raftlog_topic_bytes_out_total", "raftlog_topic_records_out_total",
    "raftlog_request_duration_seconds", "raftlog_purgatory_waiters",
    "raftlog_under_replicated_partitions", "raftlog_under_min_isr_partitions",
    "raftlog_offline_partitions", "raftlog_isr_shrinks_total", "raftlog_isr_expands_total",
    "raftlog_leader_elections_total", "raftlog_controller_active",
    "raftlog_metadata_commit_seconds", "raftlog_pysyncobj_critical_log_lines_total",
    "raftlog_log_size_bytes", "raftlog_log_segments", "raftlog_consumer_group_lag_records",
    "raftlog_consumer_group_lag_seconds",
}


def _family(series: str) -> str:
    for suffix in ("_bucket", "_sum", "_count"):
        base = series[: -len(suffix)]
        if series.endswith(suffix) and METRICS.get(base, ("",))[0] == HISTOGRAM:
            return base
    return series


def _dashboard() -> dict:
    with open(os.path.join(MONITORING, "grafana-dashboard.json")) as f:
        return json.load(f)


def test_dashboard_queries_only_exported_metrics_and_shows_the_required_ones():
    d = _dashboard()
    panels = [p for p in d["panels"] if p["type"] != "row"]
    assert len({p["id"] for p in d["panels"]}) == len(d["panels"])
    used = set()
    for p in panels:
        assert p["targets"], p["title"]
        for t in p["targets"]:
            names = re.findall(r"\braftlog_[a-z_]+", t["expr"])
            assert names, (p["title"], t["expr"])
            for n in names:
                family = _family(n)
                assert family in METRICS, f"panel {p['title']!r} queries unknown {n}"
                used.add(family)
            assert t["expr"].count("(") == t["expr"].count(")"), t["expr"]
    assert MUST_SHOW <= used, sorted(MUST_SHOW - used)
    for v in d["templating"]["list"]:
        for n in re.findall(r"\braftlog_[a-z_]+", v.get("query", "")):
            assert n in METRICS


def test_dashboard_panels_do_not_overlap():
    cells = set()
    for p in _dashboard()["panels"]:
        g = p["gridPos"]
        assert 0 <= g["x"] and g["x"] + g["w"] <= 24, p["title"]
        for x in range(g["x"], g["x"] + g["w"]):
            for y in range(g["y"], g["y"] + g["h"]):
                assert (x, y) not in cells, f"{p['title']} overlaps another panel"
                cells.add((x, y))


def test_prometheus_config_scrapes_the_metrics_path():
    yaml = pytest.importorskip("yaml")
    with open(os.path.join(MONITORING, "prometheus.yml")) as f:
        conf = yaml.safe_load(f)
    (job,) = [j for j in conf["scrape_configs"] if j["job_name"] == "raftlog"]
    assert job["metrics_path"] == "/metrics"
    (files,) = [s["files"] for s in job["file_sd_configs"]]
    assert files == ["raftlog-targets.json"]
    with open(os.path.join(MONITORING, "raftlog-targets.example.json")) as f:
        groups = json.load(f)
    assert all(re.fullmatch(r"[\w.-]+:\d+", t) for g in groups for t in g["targets"])


@pytest.mark.parametrize("metrics_port", [0, 9404])
def test_role_template_sets_metrics_listener_only_when_a_port_is_given(tmp_path, metrics_port):
    jinja2 = pytest.importorskip("jinja2")
    templates = os.path.join(DEPLOY, "roles", "raftlog", "templates")
    env = jinja2.Environment(loader=jinja2.FileSystemLoader(templates),
                             undefined=jinja2.StrictUndefined)
    text = env.get_template("node.properties.j2").render(
        ansible_managed="test", raftlog_node_id=1, raftlog_cluster_id="c",
        raftlog_listen_host="127.0.0.1", raftlog_port=9092, raftlog_advertised_host="127.0.0.1",
        raftlog_advertised_port=9092, raftlog_data_dir=str(tmp_path / "d"),
        raftlog_voters="1@127.0.0.1:9192", raftlog_raft_listener="", raftlog_raft_password="",
        raftlog_metrics_port=metrics_port, raftlog_default_replication_factor=1,
        raftlog_min_insync_replicas=1, raftlog_num_partitions=1,
        raftlog_log_retention_ms=1000, raftlog_extra_config={})
    path = tmp_path / "node.properties"
    path.write_text(text)
    config = NodeConfig.from_properties(read_properties(str(path)))
    if metrics_port:
        assert (config.metrics_host, config.metrics_port) == ("127.0.0.1", 9404)
    else:
        assert config.metrics_port is None and "metrics.listener" not in text
