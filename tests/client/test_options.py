"""Misspelt SDK options and topic configs are named with the nearest valid name (pure:
no node; the clients raise before any I/O)."""

from __future__ import annotations

import pytest

from raftlog.client import Admin, Consumer, Producer
from raftlog.client.options import InvalidOptionError, UnknownOptionError, option_names
from raftlog.config import LogConfig
from raftlog.errors import ConfigError, did_you_mean

NOWHERE = "127.0.0.1:1"


@pytest.mark.parametrize("make, kw, message", [
    (Producer, {"lingr_ms": 5}, "Producer: unknown option 'lingr_ms' (did you mean 'linger_ms'?)"),
    (Producer, {"sasl_username": "u"},
     "Producer: unknown option 'sasl_username' (did you mean 'sasl_plain_username'?)"),
    (Consumer, {"max_poll_record": 5},
     "Consumer: unknown option 'max_poll_record' (did you mean 'max_poll_records'?)"),
    (Consumer, {"group": "g"}, "Consumer: unknown option 'group' (did you mean 'group_id'?)"),
    (Admin, {"request_timeout": 5},
     "Admin: unknown option 'request_timeout' (did you mean 'request_timeout_ms'?)"),
    (Admin, {"zzz": 1}, "Admin: unknown option 'zzz'"),
])
def test_an_unknown_option_is_named_with_the_nearest_valid_one(make, kw, message):
    with pytest.raises(UnknownOptionError) as e:
        make(NOWHERE, **kw)
    assert str(e.value) == message
    assert "security option" not in str(e.value)
    assert isinstance(e.value, TypeError)  # as Python's own unexpected keyword argument


@pytest.mark.parametrize("make, kw", [
    (Consumer, {"fetch_sessions": "yes"}),
    (Consumer, {"enable_auto_commit": "false"}),  # a truthy string: would commit
    (Producer, {"enable_idempotence": "false"}),
    (Producer, {"enable_idempotence": "yes"}),
])
def test_a_yes_no_option_takes_true_or_false_only(make, kw):
    ((name, value),) = kw.items()
    with pytest.raises(InvalidOptionError) as e:
        make(NOWHERE, **kw)
    assert str(e.value) == (f"{make.__name__}: option {name!r} takes True or False, "
                            f"not {value!r}")
    assert isinstance(e.value, TypeError)


def test_a_yes_no_option_takes_bools_and_0_or_1():
    for v in (True, False, 0, 1):
        Consumer(NOWHERE, fetch_sessions=v, enable_auto_commit=v).close()
    Producer(NOWHERE, enable_idempotence=None).close()  # None: chosen from acks


def test_every_unknown_option_is_named_at_once():
    with pytest.raises(UnknownOptionError, match=r"unknown option 'acksx' \(did you mean 'acks'\?\); "
                                                 r"unknown option 'lingr_ms'"):
        Producer(NOWHERE, lingr_ms=5, acksx=1)


def test_option_names_are_the_parameters_and_the_security_options():
    names = option_names(Consumer)
    assert {"group_id", "max_poll_records", "client_id", "ssl_cafile",
            "sasl_plain_password"} <= names
    assert "self" not in names and "security_options" not in names
    assert "linger_ms" in option_names(Producer) and "linger_ms" not in option_names(Admin)


def test_max_poll_records_is_checked():
    for bad in (0, -1, "5", 1.5):
        with pytest.raises(ValueError, match="max_poll_records"):
            Consumer(NOWHERE, max_poll_records=bad)


def test_an_unknown_topic_config_suggests_the_nearest_key():
    with pytest.raises(ConfigError, match=r"unknown topic config 'retention.hours' "
                                          r"\(did you mean 'retention.ms'\?\); known: "):
        LogConfig.from_dict({"retention.hours": "1"})
    with pytest.raises(ConfigError, match=r"'min.insync.replica' \(did you mean "
                                          r"'min.insync.replicas'\?\)"):
        LogConfig.from_dict({"min.insync.replica": "2"})
    with pytest.raises(ConfigError) as e:
        LogConfig.from_dict({"nothing.like.it": "2"})
    assert "did you mean" not in str(e.value)


def test_did_you_mean():
    assert did_you_mean("lingr_ms", ["linger_ms", "acks"]) == " (did you mean 'linger_ms'?)"
    assert did_you_mean("q", ["linger_ms", "acks"]) == ""
    assert did_you_mean("x", []) == ""


def test_the_readme_names_every_consumer_option():
    import inspect
    import pathlib

    text = (pathlib.Path(__file__).parents[2] / "README.md").read_text()
    start = text.index("`Consumer(bootstrap_servers, **options)`")
    paragraph = text[start:text.index("\n\n", start)]
    names = [n for n in inspect.signature(Consumer.__init__).parameters
             if n not in ("self", "bootstrap_servers", "security_options")]
    assert "fetch_sessions" in names
    assert [n for n in names if f"`{n}`" not in paragraph] == []
