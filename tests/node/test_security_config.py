"""Security keys of the node config: listeners, TLS files, SASL, ACLs, the Raft password."""

from __future__ import annotations

import os

import pytest

from raftlog.errors import ConfigError
from raftlog.listeners import SecurityProtocol
from raftlog.node.config import NodeConfig

VOTERS = "1@127.0.0.1:9100,2@127.0.0.2:9100"


def _write(tmp_path, text: str, mode: int = 0o600) -> str:
    p = tmp_path / "server.properties"
    p.write_text(text)
    os.chmod(p, mode)
    return str(p)


def test_named_listeners(tmp_path):
    cfg = NodeConfig.load(_write(tmp_path, """
listeners=CLIENT://127.0.0.1:9500,REPL://127.0.0.1:9501
listener.security.protocol.map=CLIENT:SASL_SSL,REPL:SSL
inter.broker.listener.name=REPL
ssl.keystore.location=/etc/raftlog/node.pem
super.users=User:admin;User:broker
authorizer.enable=true
"""))
    lc = cfg.listener_config
    assert [(x.name, x.protocol) for x in lc.listeners] == [
        ("CLIENT", SecurityProtocol.SASL_SSL), ("REPL", SecurityProtocol.SSL)]
    assert lc.inter_broker == "REPL" and (cfg.host, cfg.port) == ("127.0.0.1", 9500)
    assert cfg.super_users == {"User:admin", "User:broker"} and cfg.security_enabled


def test_legacy_listener_is_plaintext():
    cfg = NodeConfig.load(None, {"listeners": "127.0.0.1:9092"})
    assert cfg.listener_config.listeners[0].protocol is SecurityProtocol.PLAINTEXT
    assert not cfg.security_enabled


@pytest.mark.parametrize("props, message", [
    ({"listeners": "PLAINTEXT://10.1.2.3:9092"}, "allow.plaintext.listeners=true"),
    ({"listeners": "SSL://127.0.0.1:9092"}, "ssl.keystore.location"),
    ({"ssl.client.auth": "sometimes"}, "ssl.client.auth"),
    ({"ssl.client.auth": "required"}, "ssl.truststore.location"),
    ({"sasl.enabled.mechanisms": "GSSAPI"}, "not one of"),
    ({"super.users": "admin"}, "super.users"),
    ({"listeners": "SASL_PLAINTEXT://127.0.0.1:1", "node.id": "1",
      "controller.quorum.voters": VOTERS, "raft.password": "x" * 16}, "inter.broker.sasl"),
    ({"node.id": "1", "controller.quorum.voters": VOTERS, "raft.password": "short"},
     "shorter than 16 bytes"),
])
def test_errors(props, message):
    with pytest.raises(ConfigError, match=message) as e:
        NodeConfig.load(None, props)
    assert "\n" not in str(e.value)


def test_plaintext_allowed_when_asked():
    cfg = NodeConfig.load(None, {"listeners": "PLAINTEXT://10.1.2.3:9092",
                                 "allow.plaintext.listeners": "true"})
    assert cfg.host == "10.1.2.3"


def test_secrets_in_a_world_readable_file_are_refused(tmp_path):
    text = f"node.id=1\ncontroller.quorum.voters={VOTERS}\nraft.password={'s' * 20}\n"
    with pytest.raises(ConfigError, match="world-readable: chmod o-r"):
        NodeConfig.load(_write(tmp_path, text, 0o644))
    assert NodeConfig.load(_write(tmp_path, text, 0o640)).raft_password == "s" * 20
    NodeConfig.load(_write(tmp_path, "node.id=1\n", 0o644))  # no secret: fine
