"""The role's node config template with security variables renders a config the node
accepts: listeners, protocol map, TLS files, broker SCRAM user, ACL switches."""

from __future__ import annotations

import os

import pytest

from raftlog.listeners import SecurityProtocol
from raftlog.node.config import NodeConfig, read_properties

DEPLOY = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", "deploy"))
BASE = dict(ansible_managed="test", raftlog_node_id=1, raftlog_cluster_id="c",
            raftlog_listen_host="10.0.0.1", raftlog_port=9092, raftlog_advertised_host="n1",
            raftlog_advertised_port=9092, raftlog_voters="1@10.0.0.1:9192",
            raftlog_raft_listener="", raftlog_raft_password="", raftlog_metrics_port=0,
            raftlog_default_replication_factor=1, raftlog_min_insync_replicas=1,
            raftlog_num_partitions=1, raftlog_log_retention_ms=1000, raftlog_extra_config={},
            raftlog_conf_dir="/opt/raftlog/etc")


def render(tmp_path, **kw):
    jinja2 = pytest.importorskip("jinja2")
    env = jinja2.Environment(loader=jinja2.FileSystemLoader(
        os.path.join(DEPLOY, "roles", "raftlog", "templates")), undefined=jinja2.StrictUndefined)
    text = env.get_template("node.properties.j2").render(
        **BASE, raftlog_data_dir=str(tmp_path / "d"), **kw)
    path = tmp_path / "node.properties"
    path.write_text(text)
    os.chmod(path, 0o600)
    return NodeConfig.load(str(path)), text


def test_migration_step_with_two_listeners(tmp_path):
    cfg, text = render(
        tmp_path, raftlog_listeners=[
            {"name": "PLAINTEXT", "protocol": "PLAINTEXT", "port": 9092},
            {"name": "SASL_SSL", "protocol": "SASL_SSL", "port": 9094}],
        raftlog_inter_broker_listener="SASL_SSL", raftlog_allow_plaintext_listeners=True,
        raftlog_broker_password="broker-secret", raftlog_authorizer_enable=True)
    lc = cfg.listener_config
    assert [(x.name, x.port) for x in lc.advertised] == [("PLAINTEXT", 9092), ("SASL_SSL", 9094)]
    assert lc.inter_broker_protocol is SecurityProtocol.SASL_SSL
    assert cfg.ssl_keystore_location == "/opt/raftlog/etc/node-1.pem"
    assert cfg.inter_broker_sasl_username == "broker" and cfg.authorizer_enable
    assert cfg.super_users == {"User:broker"}
    assert read_properties(str(tmp_path / "node.properties"))["sasl.mechanism.inter.broker.protocol"] \
        == "SCRAM-SHA-512"


def test_default_plaintext_off_loopback_is_refused_by_the_node(tmp_path):
    from raftlog.errors import ConfigError

    with pytest.raises(ConfigError, match="allow.plaintext.listeners"):
        render(tmp_path)
