"""Client security options: validation with clear errors, --command-config files."""

from __future__ import annotations

import pytest

from raftlog.client import Admin, Consumer, Producer
from raftlog.client.security import (
    ClientSecurity,
    SecurityConfigError,
    load_command_config,
)


def test_plaintext_is_no_security_object():
    assert ClientSecurity.from_options() is None
    assert ClientSecurity.from_options(security_protocol="plaintext", ssl_cafile="x") is None


@pytest.mark.parametrize("kw, match", [
    ({"security_protocol": "TLS"}, "security_protocol"),
    ({"security_protocol": "SASL_SSL", "sasl_plain_username": "u"}, "sasl_plain_password"),
    ({"security_protocol": "SASL_PLAINTEXT", "sasl_mechanism": "PLAIN",
      "sasl_plain_username": "u", "sasl_plain_password": "p"}, "SASL_SSL"),
    ({"security_protocol": "SASL_SSL", "sasl_mechanism": "GSSAPI", "sasl_plain_username": "u",
      "sasl_plain_password": "p"}, "sasl_mechanism"),
    ({"security_protocol": "SSL", "ssl_cafile": "/no/such/ca.pem"}, "cannot read CA file"),
])
def test_bad_options_are_clear_errors(kw, match):
    with pytest.raises(SecurityConfigError, match=match):
        ClientSecurity.from_options(**kw)


def test_clients_reject_bad_or_unknown_options_at_construction():
    with pytest.raises(SecurityConfigError):
        Admin("127.0.0.1:1", security_protocol="SSL", ssl_cafile="/no/such.pem")
    with pytest.raises(TypeError, match=r"unknown option 'sasl_username' "
                                         r"\(did you mean 'sasl_plain_username'\?\)"):
        Producer("127.0.0.1:1", sasl_username="u")
    with pytest.raises(SecurityConfigError):
        Consumer("127.0.0.1:1", security_protocol="SASL_SSL")


def test_command_config(tmp_path):
    p = tmp_path / "c.properties"
    p.write_text("# comment\nsecurity.protocol=SASL_SSL\nsasl.mechanism=SCRAM-SHA-512\n"
                 "sasl.username=alice\nsasl.password=a=b\n"
                 "ssl.endpoint.identification.algorithm=\n")
    p.chmod(0o600)
    assert load_command_config(str(p)) == {
        "security_protocol": "SASL_SSL", "sasl_mechanism": "SCRAM-SHA-512",
        "sasl_plain_username": "alice", "sasl_plain_password": "a=b",
        "ssl_check_hostname": False}
    p.write_text("sasl.jaas.config=x\n")
    with pytest.raises(SecurityConfigError, match=r"c.properties:1: unknown client setting"):
        load_command_config(str(p))
    with pytest.raises(SecurityConfigError, match="cannot read"):
        load_command_config(str(tmp_path / "missing"))


def test_a_world_readable_command_config_with_a_password_is_refused(tmp_path):
    p = tmp_path / "c.properties"
    p.write_text("security.protocol=SASL_SSL\nsasl.username=alice\nsasl.password=secret\n")
    p.chmod(0o644)
    with pytest.raises(SecurityConfigError, match=rf"holds a password \(sasl.password\) but "
                       rf"every user can read it: chmod 600 {p}"):
        load_command_config(str(p))
    p.write_text("ssl.key.password=k\n")
    with pytest.raises(SecurityConfigError, match=r"\(ssl.key.password\).*chmod 600"):
        load_command_config(str(p))
    p.chmod(0o640)  # group-readable: the node's rule (only "every user" is refused)
    assert load_command_config(str(p)) == {"ssl_password": "k"}
    p.write_text("security.protocol=SSL\n")  # no secret: any mode
    p.chmod(0o644)
    assert load_command_config(str(p)) == {"security_protocol": "SSL"}


def test_the_cli_refuses_a_world_readable_command_config(tmp_path, capsys):
    from raftlog.client.cli import main

    p = tmp_path / "client.properties"
    p.write_text("security.protocol=SASL_PLAINTEXT\nsasl.username=a\nsasl.password=b\n")
    p.chmod(0o604)
    assert main(["topics", "list", "--bootstrap-server", "127.0.0.1:1",
                 "--command-config", str(p)]) != 0
    assert f"chmod 600 {p}" in capsys.readouterr().err
