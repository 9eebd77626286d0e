"""Listener keys: parsing, protocol map, advertised names, inter-broker name, plaintext rule."""

from __future__ import annotations

import pytest

from raftlog.errors import ConfigError
from raftlog.listeners import SecurityProtocol, resolve


def test_defaults_and_legacy_form():
    lc = resolve("127.0.0.1:9092")
    (x,) = lc.listeners
    assert (x.name, x.protocol, x.host, x.port) == ("PLAINTEXT", SecurityProtocol.PLAINTEXT,
                                                    "127.0.0.1", 9092)
    assert lc.advertised == lc.listeners and lc.inter_broker == "PLAINTEXT"


def test_named_listeners_with_map():
    lc = resolve("CLIENTS://0.0.0.0:9093,REPL://10.0.0.1:9094",
                 "CLIENTS://node1.example:9093",
                 "CLIENTS:SASL_SSL,REPL:SSL", "repl")
    assert [x.name for x in lc.listeners] == ["CLIENTS", "REPL"]
    assert lc.advertised_by_name("CLIENTS").host == "node1.example"
    assert lc.advertised_by_name("REPL").host == "10.0.0.1"  # not advertised: as bound
    assert lc.inter_broker == "REPL" and lc.inter_broker_protocol is SecurityProtocol.SSL
    assert lc.by_name("CLIENTS").protocol.sasl and lc.by_name("CLIENTS").protocol.tls
    assert str(lc.by_name("REPL")) == "REPL://10.0.0.1:9094"


@pytest.mark.parametrize("args,match", [
    (("PLAINTEXT://10.0.0.1:9092",), "unencrypted"),
    (("SASL_PLAINTEXT://0.0.0.0:9092",), "allow.plaintext.listeners"),
    (("FOO://127.0.0.1:1",), "no security protocol"),
    (("SSL://127.0.0.1:1,SSL://127.0.0.1:2",), "appears twice"),
    (("SSL://127.0.0.1:1,SASL_SSL://127.0.0.1:1",), "share one address"),
    (("SSL://127.0.0.1:99999",), "outside"),
    (("SSL://127.0.0.1:x",), "not an integer"),
    (("SSL://999.1.1.1:1",), "not a valid IP"),
    (("",), "names no listener"),
    (("SSL://127.0.0.1:1", "SASL_SSL://h:1"), "not in listeners"),
    (("SSL://0.0.0.0:1", "SSL://0.0.0.0:1"), "not an address peers can reach"),
    (("SSL://127.0.0.1:1", None, None, "OTHER"), "inter.broker.listener.name"),
    (("A://127.0.0.1:1", None, "A:TLS"), "not one of"),
    (("A://127.0.0.1:1", None, "A"), "NAME:PROTOCOL"),
])
def test_errors_are_one_line_naming_the_key(args, match):
    with pytest.raises(ConfigError, match=match) as e:
        resolve(*args)
    assert "\n" not in str(e.value)


def test_plaintext_allowed_on_loopback_or_when_asked():
    resolve("PLAINTEXT://127.0.0.2:9092,PLAINTEXT://[::1]:9093".replace(
        "PLAINTEXT://[::1]", "LOCAL6://[::1]"), None, "PLAINTEXT:PLAINTEXT,LOCAL6:PLAINTEXT")
    resolve("localhost:9092")
    lc = resolve("PLAINTEXT://10.0.0.1:9092", allow_plaintext=True)
    assert lc.listeners[0].host == "10.0.0.1"
    resolve("SSL://10.0.0.1:9092")  # encrypted: fine anywhere
