"""Node config: properties files, flags, and one clear line for every mistake."""

from __future__ import annotations

import subprocess
import sys

import pytest

from raftlog.errors import ConfigError
from raftlog.node.config import NodeConfig, parse_voters, read_properties


def _write(tmp_path, text: str) -> str:
    p = tmp_path / "server.properties"
    p.write_text(text)
    return str(p)


def test_properties_file_and_overrides(tmp_path):
    path = _write(tmp_path, """
# a comment
node.id=3
listeners=PLAINTEXT://127.0.0.1:9500
advertised.listeners=10.0.0.3:9500
log.dirs=/tmp/rl
log.retention.ms=1000
auto.create.topics.enable=true
broker.rack=eu-west-1a
""")
    cfg = NodeConfig.load(path, {"listeners": "127.0.0.1:9600"})
    assert cfg.broker_rack == "eu-west-1a" and NodeConfig().broker_rack is None
    assert (cfg.node_id, cfg.host, cfg.port) == (3, "127.0.0.1", 9600)
    assert cfg.advertised == ("10.0.0.3", 9500)
    assert cfg.data_dir == "/tmp/rl" and cfg.auto_create_topics_enable
    assert cfg.log_defaults == {"retention.ms": "1000"}


@pytest.mark.parametrize(
    "text, message",
    [
        ("nodeid=1", "unknown config key 'nodeid'"),
        ("listner=127.0.0.1:9092", r"unknown config key 'listner' \(did you mean 'listeners'\?\)"),
        ("node.id=x", "node.id: 'x' is not an integer"),
        ("listeners=localhost", "is not host:port"),
        ("listeners=999.1.1.1:9092", "not a valid IP address"),
        ("listeners=127.0.0.1:99999", "above the maximum"),
        ("log.retention.ms=soon", "retention.ms"),
        ("log.no.such=1", "unknown config key 'log.no.such'"),
        # a topic config without its log. prefix (Kafka's broker keys have it)
        ("retention.hours=5", r"unknown config key 'retention.hours' "
                              r"\(did you mean 'log.retention.ms'\?\)"),
        ("log.retension.ms=5", r"did you mean 'log.retention.ms'\?"),
        ("auto.create.topics.enable=maybe", "not a boolean"),
        ("broker.rack=", "broker.rack: must not be empty"),
        ("broker.rack=" + "r" * 256, "1-255 printable characters"),
        ("node.id=1\nnode.id=2", "set twice"),
        ("just a line", "expected key=value"),
        ("controller.quorum.voters=1@127.0.0.1:9100,1@127.0.0.2:9100", "appears twice"),
        ("node.id=1\ncontroller.quorum.voters=1@127.0.0.1:9100,2@127.0.0.2:9100",
         "raft.password is required"),
        ("node.id=5\ncontroller.quorum.voters=1@127.0.0.1:9100", "not among controller.quorum.voters"),
        ("process.roles=broker", "needs controller.quorum.voters"),
        ("process.roles=broker,sidecar", "unknown role 'sidecar'"),
        ("process.roles=broker,broker", "appears twice"),
        ("process.roles=", "must name at least one"),
        ("node.id=1\nprocess.roles=broker\ncontroller.quorum.voters=1@127.0.0.1:9100",
         "must include controller"),
        ("raft.listener=0.0.0.0:9100", "this node binds no Raft port"),
        ("node.id=5\nprocess.roles=broker\ncontroller.quorum.voters=1@127.0.0.1:9100\n"
         "raft.listener=0.0.0.0:9100", "only a voter"),
        ("raft.listener=nowhere", "raft.listener: 'nowhere' is not host:port"),
        ("broker.session.timeout.ms=800", r"broker.heartbeat.interval.ms=500 is more than "
         r"half of broker.session.timeout.ms=800"),
        ("broker.heartbeat.interval.ms=2000", "Lower the interval or raise the timeout"),
    ],
)
def test_invalid_configs_name_the_problem(tmp_path, text, message):
    with pytest.raises(ConfigError, match=message):
        NodeConfig.load(_write(tmp_path, text))


def test_missing_file():
    with pytest.raises(ConfigError, match="cannot read config file"):
        read_properties("/nonexistent/raftlog.properties")


def test_broker_only_node_outside_the_voters(tmp_path):
    cfg = NodeConfig.load(_write(tmp_path, "node.id=5\nprocess.roles=broker\n"
                                           "controller.quorum.voters=1@127.0.0.1:9100"))
    assert cfg.process_roles == ("broker",) and not cfg.is_voter
    assert NodeConfig.load(_write(tmp_path, "process.roles=controller, broker")).is_voter
    assert NodeConfig.load(_write(tmp_path, "node.id=1\nprocess.roles=controller\n"
                                            "controller.quorum.voters=1@127.0.0.1:9100")).is_voter


def test_voters():
    assert parse_voters("k", "1@127.0.0.1:9100, 2@[::1]:9101") == {1: ("127.0.0.1", 9100), 2: ("::1", 9101)}


def test_node_exits_with_one_clear_line(tmp_path):
    path = _write(tmp_path, "retention.ms=5\n")
    r = subprocess.run([sys.executable, "-m", "raftlog.node", "--config", path],
                       capture_output=True, timeout=30)
    assert r.returncode == 2
    lines = r.stderr.decode().strip().splitlines()
    assert len(lines) == 1 and "unknown config key 'retention.ms'" in lines[0]
    assert "did you mean 'log.retention.ms'?" in lines[0]


def test_node_port_in_use_is_a_clear_error(node):
    r = subprocess.run([sys.executable, "-m", "raftlog.node", "--port", str(node.port),
                        "--data-dir", node.data_dir + "-2"], capture_output=True, timeout=30)
    assert r.returncode == 1 and b"cannot start" in r.stderr


def test_raft_listener_binds_a_voter_elsewhere(tmp_path):
    cfg = NodeConfig.load(_write(tmp_path, "node.id=1\nraft.listener=0.0.0.0:9100\n"
                                           "controller.quorum.voters=1@127.0.0.1:9100"))
    assert (cfg.raft_host, cfg.raft_port) == ("0.0.0.0", 9100)
    assert cfg.metadata_voters == {1: ("127.0.0.1", 9100)}  # what the others dial
