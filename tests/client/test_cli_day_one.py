"""The CLI a Kafka user reaches for on day one (issue 32 item 3): the real ``raftlog``
command as a subprocess against a real node process -- topics alter, configs
describe|alter, consume's start positions, groups and formats, produce's headers,
compression and partition, --version, the bootstrap and command-config defaults,
Ctrl-C and closed pipes -- and the pure parsers and renderers without a socket."""

from __future__ import annotations

import json
import os
import select
import signal
import subprocess
import sys
import time

import pytest

from raftlog.client import Admin, Consumer, Producer, TopicPartition
from raftlog.client import cli as cli_module
from raftlog.client.cli_common import UsageError
from raftlog.client.cli_configs import config_changes, parse_additions
from raftlog.client.cli_console import (
    FormatError,
    parse_format,
    parse_headers,
    render_format,
    render_record,
)
from raftlog.client.security import security_kwargs
from raftlog.records import Record
from tests.conftest import NodeProcess, free_port

WAIT_S = 30.0  # a generous bound on what a loaded machine needs


# --------------------------------------------------------------------------- helpers


@pytest.fixture(scope="module")
def node(tmp_path_factory):
    """One node for the module, with a static topic default (log.retention.ms)."""
    n = NodeProcess(str(tmp_path_factory.mktemp("day1") / "node-1"), free_port(),
                    extra={"log.retention.ms": "3600000"})
    n.start()
    yield n
    n.stop()


@pytest.fixture
def home(tmp_path):
    """An empty HOME, so no ~/.config/raftlog/client.properties of the machine counts."""
    h = tmp_path / "home"
    h.mkdir()
    return h


def _env(home, bootstrap: str | None = None, **extra) -> dict:
    env = {k: v for k, v in os.environ.items() if k != "RAFTLOG_BOOTSTRAP_SERVERS"}
    env["HOME"] = str(home)
    if bootstrap is not None:
        env["RAFTLOG_BOOTSTRAP_SERVERS"] = bootstrap
    env.update(extra)
    return env


def _argv(*args) -> list[str]:
    return [sys.executable, "-m", "raftlog.client.cli", *args]


def run(node, home, *args, stdin: bytes | None = None) -> subprocess.CompletedProcess:
    """``raftlog ARGS --bootstrap-server NODE``."""
    return subprocess.run(_argv(*args, "--bootstrap-server", node.bootstrap), input=stdin,
                          capture_output=True, timeout=120, env=_env(home))


def popen(node, home, *args, stdin=subprocess.DEVNULL) -> subprocess.Popen:
    """A CLI process with Ctrl-C as in a terminal (SIGINT at its default, even when this
    test runs in a background job that ignores it)."""
    return subprocess.Popen(
        _argv(*args, "--bootstrap-server", node.bootstrap), stdin=stdin,
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=_env(home),
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))


def read_line(stream, timeout_s: float = WAIT_S) -> bytes:
    """One line of a pipe, or fail after timeout_s."""
    deadline = time.monotonic() + timeout_s
    buf = b""
    fd = stream.fileno()
    while not buf.endswith(b"\n"):
        left = deadline - time.monotonic()
        assert left > 0, f"no whole line within {timeout_s} s (got {buf!r})"
        ready, _, _ = select.select([fd], [], [], left)
        if ready:
            chunk = os.read(fd, 1)
            assert chunk, f"the stream closed (got {buf!r})"
            buf += chunk
    return buf


def wait_until(cond, what: str, timeout_s: float = WAIT_S):
    deadline = time.monotonic() + timeout_s
    while True:
        got = cond()
        if got:
            return got
        assert time.monotonic() < deadline, f"{what}: not within {timeout_s} s"
        time.sleep(0.05)


def records(node, topic: str) -> list:
    """Every record of ``topic`` now (waits until the end offsets are read)."""
    with Consumer(node.bootstrap) as c:
        tps = [TopicPartition(topic, p) for p in sorted(c.partitions_for_topic(topic))]
        c.assign(tps)
        c.seek_to_beginning()
        ends = c.end_offsets(tps)
        want = sum(ends.values()) - sum(c.beginning_offsets(tps).values())
        out: list = []
        deadline = time.monotonic() + WAIT_S
        while len(out) < want and time.monotonic() < deadline:
            out += c.poll(timeout_ms=200)
        assert len(out) == want, (len(out), want)
        return sorted(out, key=lambda r: (r.partition, r.offset))


def _rec(**kw) -> Record:
    base = dict(topic="t", partition=1, offset=7, timestamp=1_700_000_000_000, key=b"k",
                value=b"v", headers=[("a", b"1"), ("b", b"")])
    base.update(kw)
    return Record(**base)


# --------------------------------------------------------------------------- pure


def test_kcat_format_tokens_escapes_and_rendering():
    parts = parse_format(r"%t[%p]@%o %k=%s ts=%T h=%h 100%%\n")
    assert parts[:2] == [("t",), "["]
    assert render_format(parts, _rec()) == b"t[1]@7 k=v ts=1700000000000 h=a=1,b= 100%\n"
    assert render_format(parse_format(r"%K/%S\t%s\n"), _rec(key=None)) == b"-1/1\tv\n"


@pytest.mark.parametrize("bad, says", [
    ("%x", "unknown %x"), ("%s%", "lone '%'"), ("plain", "neither one of text"),
    (r"%s\q", "unknown \\q"), ("", "neither one of text"),
])
def test_bad_kcat_format_is_refused_with_what_is_known(bad, says):
    with pytest.raises(FormatError) as e:
        parse_format(bad)
    assert says in str(e.value) and "%t (topic)" in str(e.value)


def test_print_flags_render_kafka_console_consumer_columns():
    r = _rec(key=None)
    assert render_record(r, "text", print_key=True, print_headers=True,
                         print_timestamp=True) == b"CreateTime:1700000000000\tHeaders:a=1,b=\tnull\tv\n"
    assert render_record(_rec(headers=[]), "text", print_headers=True) == b"Headers:NO_HEADERS\tv\n"
    assert render_record(r, "text") == b"1:7\t\tv\n"  # (unchanged without the flags)


def test_headers_and_config_changes_parse_or_say_what_is_wrong():
    assert parse_headers(["a=1", "b=", "c=x=y"]) == [("a", b"1"), ("b", b""), ("c", b"x=y")]
    for bad in (["novalue"], ["=v"]):
        with pytest.raises(UsageError, match="is not KEY=VALUE"):
            parse_headers(bad)
    assert parse_additions(["retention.ms=5", "cleanup.policy=compact,delete"]) == {
        "retention.ms": "5", "cleanup.policy": "compact,delete"}
    assert config_changes(["segment.ms=9"], ["retention.ms"]) == {
        "segment.ms": "9", "retention.ms": None}
    with pytest.raises(UsageError, match="'retention.ms' is not KEY=VALUE"):
        config_changes(["retention.ms"], None)
    with pytest.raises(UsageError, match="both in --add and in --delete"):
        config_changes(["a=1"], ["a"])
    with pytest.raises(UsageError, match="nothing to change"):
        config_changes(None, None)


def test_bootstrap_env_is_the_default_and_the_flag_wins(monkeypatch):
    monkeypatch.setenv("RAFTLOG_BOOTSTRAP_SERVERS", "envhost:1,envhost:2")
    p = cli_module.build_parser()
    assert p.parse_args(["topics", "list"]).bootstrap_server == "envhost:1,envhost:2"
    assert p.parse_args(["topics", "list", "--bootstrap-server", "h:3"]).bootstrap_server == "h:3"
    monkeypatch.delenv("RAFTLOG_BOOTSTRAP_SERVERS")
    assert (cli_module.build_parser().parse_args(["cluster", "status"]).bootstrap_server
            == cli_module.DEFAULT_BOOTSTRAP)


def test_default_command_config_file_is_used_and_the_flag_wins(tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path))
    args = cli_module.build_parser().parse_args(["topics", "list"])
    assert security_kwargs(args) == {}  # no file: PLAINTEXT
    d = tmp_path / ".config" / "raftlog"
    d.mkdir(parents=True)
    (d / "client.properties").write_text("security.protocol=SSL\nssl.cafile=/ca.pem\n")
    assert security_kwargs(args) == {"security_protocol": "SSL", "ssl_cafile": "/ca.pem"}
    mine = tmp_path / "mine.properties"
    mine.write_text("security.protocol=SASL_PLAINTEXT\n")
    args = cli_module.build_parser().parse_args(["topics", "list", "--command-config", str(mine)])
    assert security_kwargs(args) == {"security_protocol": "SASL_PLAINTEXT"}


def test_bootstrap_env_var_reaches_the_node(node, home):
    Admin(node.bootstrap).create_topic("by-env")
    out = subprocess.run(_argv("topics", "list"), capture_output=True, timeout=120,
                         env=_env(home, node.bootstrap))
    assert out.returncode == 0 and "by-env" in out.stdout.decode().split(), out.stderr


def test_connection_options_may_come_before_the_command():
    """`raftlog --bootstrap-server H topics list`, as Kafka's tools and rpk take their
    options anywhere (argparse alone: "invalid choice: 'H'")."""
    hoist = cli_module.hoist_leading_options
    assert hoist(["--bootstrap-server", "h:1", "topics", "list"]) == [
        "topics", "list", "--bootstrap-server", "h:1"]
    assert hoist(["--command-config=c.properties", "--bootstrap-server", "h:1", "consume",
                  "t"]) == ["consume", "t", "--command-config=c.properties",
                            "--bootstrap-server", "h:1"]
    assert hoist(["topics", "list", "--bootstrap-server", "h:1"]) == [
        "topics", "list", "--bootstrap-server", "h:1"]
    assert hoist(["--bootstrap-server"]) == ["--bootstrap-server"]  # (argparse says why)
    args = cli_module.build_parser().parse_args(hoist(["--bootstrap-server", "h:2", "groups",
                                                       "list"]))
    assert args.bootstrap_server == "h:2"


def test_a_leading_bootstrap_server_reaches_the_node(node, home):
    Admin(node.bootstrap).create_topic("by-leading-flag")
    out = subprocess.run(_argv("--bootstrap-server", node.bootstrap, "topics", "list"),
                         capture_output=True, timeout=120, env=_env(home))
    assert out.returncode == 0 and "by-leading-flag" in out.stdout.decode().split(), out.stderr


def test_version(home):
    from importlib import metadata

    out = subprocess.run(_argv("--version"), capture_output=True, timeout=60, env=_env(home))
    assert out.returncode == 0
    assert out.stdout.decode().strip() == f"raftlog {metadata.version('raftlog')}"


# --------------------------------------------------------------------------- topics, configs


def test_topics_alter_grows_and_refuses_a_decrease(node, home):
    assert run(node, home, "topics", "create", "grow", "--partitions", "2").returncode == 0
    out = run(node, home, "topics", "alter", "grow", "--partitions", "5")
    assert out.returncode == 0, out.stderr
    assert len(Admin(node.bootstrap).describe_topic("grow").partitions) == 5
    down = run(node, home, "topics", "alter", "grow", "--partitions", "3")
    assert down.returncode == 1
    assert b"has 5 partitions; they cannot be decreased to 3" in down.stderr
    assert b"Traceback" not in down.stderr
    assert len(Admin(node.bootstrap).describe_topic("grow").partitions) == 5
    unknown = run(node, home, "topics", "alter", "no-such-topic", "--partitions", "3")
    assert unknown.returncode == 1 and b"unknown topic 'no-such-topic'" in unknown.stderr
    missing = run(node, home, "topics", "alter", "grow")
    assert missing.returncode == 2 and b"needs --partitions N" in missing.stderr


def test_topics_list_json_objects_and_describe_shows_non_default_configs(node, home):
    assert run(node, home, "topics", "create", "listed", "--partitions", "3",
               "--config", "segment.ms=60000").returncode == 0
    out = run(node, home, "topics", "list", "--json")
    assert out.returncode == 0, out.stderr
    by_name = {t["name"]: t for t in json.loads(out.stdout)}
    assert by_name["listed"]["partitions"] == 3
    assert by_name["listed"]["replication_factor"] == 1
    assert by_name["listed"]["topic_id"] and by_name["listed"]["offline_partitions"] == 0
    text = run(node, home, "topics", "describe", "listed").stdout.decode()
    first = text.splitlines()[0]
    # set on the topic, and the node's static log.retention.ms; not the built-in defaults
    assert "Configs: retention.ms=3600000,segment.ms=60000" in first, first
    assert "ReplicationFactor: 1" in first and "segment.bytes" not in first
    doc = json.loads(run(node, home, "topics", "describe", "listed", "--json").stdout)
    assert doc["configs"] == {"retention.ms": "3600000", "segment.ms": "60000"}


def test_configs_describe_and_alter_a_topic(node, home):
    assert run(node, home, "topics", "create", "cfg").returncode == 0
    out = run(node, home, "configs", "alter", "--topic", "cfg", "--add", "retention.ms=1000",
              "--add", "cleanup.policy=compact,delete")
    assert out.returncode == 0, out.stderr
    doc = json.loads(run(node, home, "configs", "describe", "--topic", "cfg", "--json").stdout)
    assert {c["name"]: (c["value"], c["source"]) for c in doc["configs"]} == {
        "retention.ms": ("1000", "topic"), "cleanup.policy": ("compact,delete", "topic")}
    text = run(node, home, "configs", "describe", "--topic", "cfg", "--all").stdout.decode()
    assert "segment.bytes=1073741824\t(default)" in text
    out = run(node, home, "configs", "alter", "--topic", "cfg", "--delete", "retention.ms")
    assert out.returncode == 0, out.stderr
    config = Admin(node.bootstrap).describe_topic("cfg").config
    assert config["retention.ms"] == "3600000"  # back to the node's log.retention.ms
    assert config["cleanup.policy"] == "compact,delete"


def test_configs_bad_input_changes_nothing(node, home):
    assert run(node, home, "topics", "create", "keep", "--config",
               "retention.ms=5000").returncode == 0
    malformed = run(node, home, "configs", "alter", "--topic", "keep", "--add", "segment.ms=1",
                    "--add", "retention.ms")
    assert malformed.returncode == 2
    assert b"--add 'retention.ms' is not KEY=VALUE" in malformed.stderr
    unknown_key = run(node, home, "configs", "alter", "--topic", "keep", "--add", "segment.ms=1",
                      "--add", "retention.hours=3")
    assert unknown_key.returncode == 1 and b"retention.hours" in unknown_key.stderr
    config = Admin(node.bootstrap).describe_topic("keep").config
    assert (config["retention.ms"], config["segment.ms"]) == ("5000", "604800000")
    unknown = run(node, home, "configs", "describe", "--topic", "no-such-topic")
    assert unknown.returncode == 1 and b"unknown topic 'no-such-topic'" in unknown.stderr
    unknown = run(node, home, "configs", "alter", "--topic", "no-such-topic", "--add", "a=b")
    assert unknown.returncode == 1 and b"unknown topic 'no-such-topic'" in unknown.stderr
    both = run(node, home, "configs", "describe", "--topic", "keep", "--broker", "1")
    assert both.returncode == 2 and b"exactly one of --topic T and --broker N" in both.stderr


def test_configs_of_a_broker_are_described_and_read_only(node, home):
    doc = json.loads(run(node, home, "configs", "describe", "--broker", "1", "--json").stdout)
    assert doc["read_only"] is True
    assert [(c["name"], c["value"], c["source"]) for c in doc["configs"]] == [
        ("log.retention.ms", "3600000", "static")]
    alter = run(node, home, "configs", "alter", "--broker", "1", "--add", "log.retention.ms=1")
    assert alter.returncode == 1 and b"broker configs are read-only" in alter.stderr
    assert b"server.properties" in alter.stderr
    absent = run(node, home, "configs", "describe", "--broker", "7")
    assert absent.returncode == 1 and b"no broker 7 in the cluster" in absent.stderr


# --------------------------------------------------------------------------- produce, consume


def test_produce_headers_compression_partition_and_kcat_format(node, home):
    assert run(node, home, "topics", "create", "hdr", "--partitions", "3").returncode == 0
    out = run(node, home, "produce", "--topic", "hdr", "--key-separator", ":", "--header",
              "src=web", "--header", "empty=", "--compression", "zstd", "--partition", "2",
              stdin=b"k1:one\ntwo\n")
    assert out.returncode == 0, out.stderr
    got = records(node, "hdr")
    assert [(r.partition, r.key, r.value, list(r.headers)) for r in got] == [
        (2, b"k1", b"one", [("src", b"web"), ("empty", b"")]),
        (2, None, b"two", [("src", b"web"), ("empty", b"")])]
    fmt = run(node, home, "consume", "--topic", "hdr", "--from-beginning", "--max-messages",
              "2", "--timeout-ms", "20000", "--format", r"%t/%p/%o %k=%s [%h]\n")
    assert fmt.returncode == 0, fmt.stderr
    assert fmt.stdout == b"hdr/2/0 k1=one [src=web,empty=]\nhdr/2/1 =two [src=web,empty=]\n"
    printed = run(node, home, "consume", "--topic", "hdr", "--from-beginning", "--max-messages",
                  "1", "--timeout-ms", "20000", "--print-key", "--print-headers",
                  "--print-timestamp")
    assert printed.stdout.decode() == (
        f"CreateTime:{got[0].timestamp}\tHeaders:src=web,empty=\tk1\tone\n")


def test_the_topic_may_be_the_first_word_as_in_topics_create_and_rpk(node, home):
    """`raftlog topics create demo` then `raftlog produce demo`: the topic as a word
    (a new user's first try after the topics command), as well as --topic."""
    assert run(node, home, "topics", "create", "word").returncode == 0
    out = run(node, home, "produce", "word", stdin=b"one\ntwo\n")
    assert out.returncode == 0, out.stderr
    got = run(node, home, "consume", "word", "--from-beginning", "--max-messages", "2",
              "--timeout-ms", "20000", "--format", "raw")
    assert got.returncode == 0 and got.stdout == b"one\ntwo\n", got.stderr


def test_produce_and_consume_bad_input_loses_nothing(node, home):
    assert run(node, home, "topics", "create", "bad-in").returncode == 0
    bad = run(node, home, "produce", "--topic", "bad-in", "--header", "nokey",
              stdin=b"must not be lost\n")
    assert bad.returncode == 2 and b"--header 'nokey' is not KEY=VALUE" in bad.stderr
    part = run(node, home, "produce", "--topic", "bad-in", "--partition", "4",
               stdin=b"x\n")
    assert part.returncode == 1 and b"has 1 partitions; 4 does not exist" in part.stderr
    comp = run(node, home, "produce", "--topic", "bad-in", "--compression", "snappy",
               stdin=b"x\n")
    assert comp.returncode == 2 and b"invalid choice: 'snappy'" in comp.stderr
    assert records(node, "bad-in") == []
    fmt = run(node, home, "consume", "--topic", "bad-in", "--format", "%q")
    assert fmt.returncode == 2 and b"unknown %q" in fmt.stderr
    unknown = run(node, home, "consume", "--topic", "no-such-topic", "--timeout-ms", "1000")
    assert unknown.returncode == 1 and b"no topic 'no-such-topic'" in unknown.stderr
    assert b"raftlog topics create no-such-topic" in unknown.stderr
    nowhere = run(node, home, "produce", "no-such-topic", stdin=b"x\n")
    assert nowhere.returncode == 1 and b"raftlog topics create no-such-topic" in nowhere.stderr
    typo = run(node, home, "consume", "bad-inn", "--timeout-ms", "1000")  # (a typo of bad-in)
    assert typo.returncode == 1 and b"no topic 'bad-inn'" in typo.stderr
    assert b"did you mean 'bad-in'?" in typo.stderr and b"did you mean" not in unknown.stderr
    none = run(node, home, "consume", "--max-messages", "1")
    assert none.returncode == 2 and b"which topic?" in none.stderr
    two = run(node, home, "produce", "bad-in", "--topic", "hdr", stdin=b"x\n")
    assert two.returncode == 2 and b"two topics given" in two.stderr
    both = run(node, home, "consume", "--topic", "bad-in", "--offset", "1", "--from-end", "-1")
    assert both.returncode == 2 and b"at most one of --offset, --from-end" in both.stderr
    grp = run(node, home, "consume", "--topic", "bad-in", "--group", "g", "--offset", "0")
    assert grp.returncode == 2 and b"--offset cannot be used with it" in grp.stderr
    for out in (bad, part, comp, fmt, unknown, nowhere, typo, none, two, both, grp):
        assert b"Traceback" not in out.stderr


def _fill(node, topic: str, partitions: int, per_partition: int) -> int:
    """Records v<p>-<i> in each partition, with a timestamp gap after the first half;
    returns the first timestamp of the second half."""
    Admin(node.bootstrap).create_topic(topic, partitions)
    half = 1_000_000_000_000
    with Producer(node.bootstrap) as p:
        for part in range(partitions):
            for i in range(per_partition):
                ts = (half if i >= per_partition // 2 else half - 10_000) + i
                p.send(topic, b"v%d-%d" % (part, i), partition=part, timestamp_ms=ts)
    return half + per_partition // 2


def _values(out) -> set[str]:
    assert out.returncode == 0, out.stderr
    return set(out.stdout.decode().split())


def test_the_sdk_names_the_topic_a_typo_meant(node, home):
    """Producer.send, Consumer.partitions_for_topic and Admin.describe_topic of a
    misspelt topic: UnknownTopicOrPartitionError that names the nearest topic (and
    none for a name close to nothing); nothing is written."""
    from raftlog.client import UnknownTopicOrPartitionError

    assert run(node, home, "topics", "create", "invoices").returncode == 0
    with Producer(node.bootstrap) as p:
        with pytest.raises(UnknownTopicOrPartitionError,
                           match=r"did you mean 'invoices'\?") as e:
            p.send("invoice", b"x")
        assert e.value.suggestion == "invoices"
        with pytest.raises(UnknownTopicOrPartitionError) as far:
            p.send("zzz-nothing-like-it", b"x")
        assert far.value.suggestion is None and "did you mean" not in str(far.value)
    c = Consumer(node.bootstrap)
    try:
        with pytest.raises(UnknownTopicOrPartitionError, match=r"did you mean 'invoices'"):
            c.partitions_for_topic("invoces")
    finally:
        c.close()
    assert records(node, "invoices") == []


def test_admin_calls_and_topic_commands_name_the_topic_a_typo_meant(node, home):
    """Every Admin call about one topic (describe, delete, configs, partitions) and the
    CLI commands on them: a misspelt topic's error names the nearest one; nothing
    changes (the real topic keeps its partitions and configs, and is not deleted)."""
    from raftlog.client import Admin, UnknownTopicOrPartitionError

    assert run(node, home, "topics", "create", "payments").returncode == 0
    with Admin(node.bootstrap) as a:
        calls = [lambda: a.describe_topic("payment"), lambda: a.delete_topic("payment"),
                 lambda: a.describe_configs(topic="payment"),
                 lambda: a.alter_configs("payment", {"retention.ms": "5"}),
                 lambda: a.incremental_alter_configs("payment", [("retention.ms", "set", "5")]),
                 lambda: a.create_partitions("payment", 4)]
        for call in calls:
            with pytest.raises(UnknownTopicOrPartitionError,
                               match=r"did you mean 'payments'\?") as e:
                call()
            assert e.value.suggestion == "payments"
        with pytest.raises(UnknownTopicOrPartitionError) as far:
            a.delete_topic("zzz-nothing-like-it")
        assert far.value.suggestion is None and "did you mean" not in str(far.value)
        for argv in (["topics", "describe", "payment"], ["topics", "delete", "payment"],
                     ["topics", "alter", "payment", "--partitions", "4"],
                     ["configs", "describe", "--topic", "payment"],
                     ["configs", "alter", "--topic", "payment", "--add", "retention.ms=5"]):
            r = run(node, home, *argv)
            assert r.returncode == 1 and b"did you mean 'payments'?" in r.stderr, (argv, r.stderr)
        d = a.describe_topic("payments")
        assert len(d.partitions) == 1 and d.config["retention.ms"] == "3600000"  # (the static default)


def test_consume_start_positions(node, home):
    second_half = _fill(node, "pos", partitions=2, per_partition=6)
    common = ["--topic", "pos", "--timeout-ms", "20000", "--format", r"%s\n"]
    assert _values(run(node, home, "consume", *common, "--from-end", "-2", "--max-messages",
                       "4")) == {"v0-4", "v0-5", "v1-4", "v1-5"}
    assert _values(run(node, home, "consume", *common, "--from-end", "10", "--max-messages",
                       "12")) == {f"v{p}-{i}" for p in (0, 1) for i in range(6)}
    assert _values(run(node, home, "consume", *common, "--offset", "4", "--partition", "1",
                       "--max-messages", "2")) == {"v1-4", "v1-5"}
    assert _values(run(node, home, "consume", *common, "--from-timestamp", str(second_half),
                       "--max-messages", "6")) == {f"v{p}-{i}" for p in (0, 1) for i in (3, 4, 5)}


def test_consume_isolation_level_shows_aborted_records_only_when_asked(node, home):
    """kafka-console-consumer's --isolation-level: read_committed (the default) skips an
    aborted transaction's records, read_uncommitted prints them; with --group too."""
    assert run(node, home, "topics", "create", "iso").returncode == 0
    with Producer(node.bootstrap, transactional_id="iso-cli") as p:
        p.init_transactions()
        p.begin_transaction()
        p.send_many("iso", [b"aborted-1", b"aborted-2"], partition=0).result(timeout=30)
        p.abort_transaction()
        p.begin_transaction()
        p.send("iso", b"committed", partition=0)
        p.commit_transaction()
    common = ["iso", "--from-beginning", "--timeout-ms", "20000", "--format", r"%s\n"]
    assert _values(run(node, home, "consume", *common, "--max-messages", "1")) == {"committed"}
    assert _values(run(node, home, "consume", *common, "--max-messages", "3",
                       "--isolation-level", "read_uncommitted")) == {
        "aborted-1", "aborted-2", "committed"}
    assert _values(run(node, home, "consume", *common, "--max-messages", "3", "--group",
                       "iso-g", "--isolation-level", "read_uncommitted")) == {
        "aborted-1", "aborted-2", "committed"}
    bad = run(node, home, "consume", "iso", "--isolation-level", "committed")
    assert bad.returncode == 2 and b"invalid choice: 'committed'" in bad.stderr


@pytest.mark.parametrize(("argv", "says"), [
    (["consume", "t", "--property", "print.key=true"], "for print.key raftlog takes --print-key"),
    (["consume", "t", "--property=print.timestamp=true"], "takes --print-timestamp"),
    (["produce", "t", "--property", "parse.key=true"], "takes --key-separator SEP"),
    (["consume", "t", "--property", "frob=1"], "print.headers: --print-headers"),
    (["produce", "t", "--broker-list", "h:1"], "takes --bootstrap-server HOST:PORT"),
    (["topics", "list", "--zookeeper", "z:2181"], "there is no ZooKeeper"),
    (["consume", "t", "--consumer-property", "group.id=g"], "--group, --isolation-level"),
])
def test_kafka_console_habits_get_the_raftlog_flag(argv, says, capsys):
    assert cli_module.main(argv) == 2
    err = capsys.readouterr().err
    assert says in err and err.count("\n") == 1 and "Kafka's" in err


def test_a_kafka_flag_a_raftlog_command_takes_is_no_habit():
    # kafka-log-dirs' --broker-list is raftlog log-dirs describe's own flag (README block)
    assert cli_module._kafka_tool_hint(
        ["log-dirs", "describe", "--topic-list", "events", "--broker-list", "1"]) is None
    assert cli_module._kafka_tool_hint(["produce", "t", "--broker-list", "h:1"]) is not None


def test_consume_with_a_group_resumes_from_its_commits(node, home):
    _fill(node, "grp", partitions=2, per_partition=3)
    common = ["--topic", "grp", "--group", "day1", "--timeout-ms", "30000", "--format", r"%s\n"]
    first = _values(run(node, home, "consume", *common, "--from-beginning", "--max-messages",
                        "4"))
    rest = _values(run(node, home, "consume", *common, "--max-messages", "2"))
    assert len(first) == 4 and len(rest) == 2
    assert first | rest == {f"v{p}-{i}" for p in (0, 1) for i in range(3)}
    d = Admin(node.bootstrap).describe_group("day1")
    assert sum(o.committed for o in d.offsets.values()) == 6


def test_ctrl_c_in_consume_says_how_many_and_exits_130(node, home):
    _fill(node, "intc", partitions=1, per_partition=3)
    p = popen(node, home, "consume", "--topic", "intc", "--from-beginning")
    try:
        for _ in range(3):
            read_line(p.stdout)
        p.send_signal(signal.SIGINT)
        assert p.wait(WAIT_S) == 130
        err = p.stderr.read().decode()
    finally:
        p.kill()
    assert "interrupted after 3 records" in err and "Traceback" not in err, err


def test_a_consume_that_starts_at_the_end_says_what_it_skips(node, home):
    """kafka-console-consumer's default (the end) surprises users of kcat and rpk (the
    start): one stderr line says how many records it will not show and the flag."""
    _fill(node, "ends", partitions=1, per_partition=3)
    for extra, says in [((), "starting at the end of 'ends', after 3 earlier records "
                             "(--from-beginning reads them)"),
                        (("--group", "eg"), "group 'eg' has no committed offsets: starting "
                                            "at the end of 'ends', after 3 earlier records")]:
        out = run(node, home, "consume", "ends", "--timeout-ms", "500", *extra)
        assert out.returncode == 0 and out.stdout == b"", out
        assert says.encode() in out.stderr, out.stderr
    quiet = run(node, home, "consume", "ends", "--from-beginning", "--max-messages", "3")
    assert quiet.stdout.count(b"\n") == 3 and b"starting at the end" not in quiet.stderr


def test_sigterm_in_a_group_consume_leaves_the_group_and_exits_143(node, home):
    """`kill` or `timeout` on `raftlog consume --group`: it commits, leaves the group at
    once (no member lingering until its session times out, holding the next consumer's
    join back) and exits 143."""
    _fill(node, "termc", partitions=1, per_partition=3)
    p = popen(node, home, "consume", "--topic", "termc", "--group", "tg", "--from-beginning")
    try:
        for _ in range(3):
            read_line(p.stdout)
        with Admin(node.bootstrap) as a:
            assert len(a.describe_group("tg").members) == 1
            p.send_signal(signal.SIGTERM)
            assert p.wait(WAIT_S) == 143
            err = p.stderr.read().decode()
            g = a.describe_group("tg")
        assert g.members == [] and g.state == "Empty", g
        assert [(tp.partition, o.committed) for tp, o in g.offsets.items()] == [(0, 3)], g
    finally:
        p.kill()
    assert "interrupted after 3 records" in err and "Traceback" not in err, err


def test_ctrl_c_in_produce_says_how_many_went_through(node, home):
    Admin(node.bootstrap).create_topic("intp")
    p = popen(node, home, "produce", "--topic", "intp", stdin=subprocess.PIPE)
    try:
        p.stdin.write(b"a\nb\nc\n")
        p.stdin.flush()
        wait_until(lambda: len(records(node, "intp")) == 3, "3 records written")
        p.send_signal(signal.SIGINT)
        assert p.wait(WAIT_S) == 130
        err = p.stderr.read().decode()
    finally:
        p.kill()
    assert "interrupted: 3 of 3 records acknowledged" in err and "Traceback" not in err, err


def test_ctrl_c_in_perf_produce_shows_progress_then_a_summary(node, home):
    Admin(node.bootstrap).create_topic("intperf")
    p = popen(node, home, "perf", "produce", "--topic", "intperf", "--num-records",
              "100000000", "--throughput", "500", "--json")
    try:
        progress = read_line(p.stderr, WAIT_S + 10).decode()
        assert "of 100,000,000 records sent" in progress, progress
        p.send_signal(signal.SIGINT)
        assert p.wait(WAIT_S) == 130
        out, err = p.stdout.read(), p.stderr.read().decode()
    finally:
        p.kill()
    summary = json.loads(out)
    assert summary["interrupted"] is True and summary["records"] > 0
    assert f"interrupted after {summary['records']:,} records sent" in err
    assert "Traceback" not in err


def test_consume_into_a_closed_pipe_ends_quietly(node, home):
    _fill(node, "pipe", partitions=1, per_partition=4)
    p = popen(node, home, "consume", "--topic", "pipe", "--from-beginning")
    try:
        assert read_line(p.stdout).startswith(b"0:0")
        p.stdout.close()  # as `| head -1` does after its line
        with Producer(node.bootstrap) as prod:  # more to write into the closed pipe
            for _ in range(50):
                prod.send("pipe", b"more" * 1000).result(WAIT_S)
        assert p.wait(WAIT_S) == 0
        err = p.stderr.read().decode()
    finally:
        p.kill()
    assert "Traceback" not in err and "BrokenPipe" not in err, err


def test_perf_consume_rate_leaves_out_the_final_idle_wait(node, home):
    _fill(node, "idle", partitions=1, per_partition=50)
    idle_ms = 8000
    out = run(node, home, "perf", "consume", "--topic", "idle", "--num-records", "1000",
              "--timeout-ms", str(idle_ms), "--json")
    assert out.returncode == 0, out.stderr
    s = json.loads(out.stdout)
    assert s["records"] == 50
    # the run waited idle_ms for more; the rate is over the reading only
    assert s["secs"] < idle_ms / 1000, s


# --------------------------------------------------------------------------- --command-config


@pytest.fixture(scope="module")
def secure(tmp_path_factory):
    """A SASL_SSL node with ACLs, and a client.properties for its admin."""
    from tests.certs import make_certs
    from tests.node.test_security_node import ADMIN, keystore, start_node

    tmp = tmp_path_factory.mktemp("day1-sec")
    certs = make_certs(str(tmp / "certs"))
    n = start_node(tmp, certs, keystore(certs, "node", "node1", hosts=("127.0.0.1",)))
    props = tmp / "client.properties"
    props.write_text(f"security.protocol=SASL_SSL\nssl.truststore.location={certs.cafile}\n"
                     f"sasl.mechanism=SCRAM-SHA-256\nsasl.username=admin\n"
                     f"sasl.password={ADMIN['sasl_plain_password']}\n")
    props.chmod(0o600)  # (a password in a world-readable file is refused)
    yield n, props
    n.stop()


def test_every_command_honours_command_config(secure, home):
    node, props = secure
    cfg = ["--command-config", str(props)]
    assert run(node, home, "topics", "create", "sec", "--partitions", "2", *cfg).returncode == 0
    for argv in (["cluster", "status"], ["cluster", "status", "--json"],
                 ["log-dirs", "describe"], ["log-dirs", "describe", "--json"],
                 ["topics", "describe", "sec"], ["configs", "describe", "--topic", "sec"],
                 ["configs", "describe", "--broker", "1"],
                 ["topics", "alter", "sec", "--partitions", "3"]):
        out = run(node, home, *argv, *cfg)
        assert out.returncode == 0, (argv, out.stderr)
    status = json.loads(run(node, home, "cluster", "status", "--json", *cfg).stdout)
    assert "sec" in json.dumps(status)
    dirs = json.loads(run(node, home, "log-dirs", "describe", "--json", *cfg).stdout)
    parts = {p["partition"] for b in dirs["brokers"] for d in b["logDirs"]
             for p in d["partitions"]}
    assert {"sec-0", "sec-1", "sec-2"} <= parts
    assert run(node, home, "produce", "--topic", "sec", "--partition", "0", *cfg,
               stdin=b"secret\n").returncode == 0
    out = run(node, home, "consume", "--topic", "sec", "--partition", "0", "--from-beginning",
              "--max-messages", "1", "--timeout-ms", "20000", *cfg)
    assert out.stdout == b"0:0\t\tsecret\n", out.stderr


def test_the_default_command_config_file_is_used_and_the_flag_wins(secure, home):
    node, props = secure
    plain = run(node, home, "cluster", "status")  # no settings: the TLS listener refuses
    assert plain.returncode != 0
    d = home / ".config" / "raftlog"
    d.mkdir(parents=True)
    (d / "client.properties").write_text(props.read_text())
    (d / "client.properties").chmod(0o600)
    for argv in (["cluster", "status"], ["log-dirs", "describe"], ["topics", "list"]):
        out = run(node, home, *argv)
        assert out.returncode == 0, (argv, out.stderr)
    bad = home / "bad.properties"
    bad.write_text("security.protocol=PLAINTEXT\n")
    assert run(node, home, "topics", "list", "--command-config", str(bad)).returncode != 0


def test_describing_configs_needs_describe_on_the_topic_or_the_cluster(secure, home):
    from tests.node.test_security_node import ADMIN

    node, props = secure
    cfg = ["--command-config", str(props)]
    assert run(node, home, "topics", "create", "acl-cfg", *cfg).returncode == 0
    with Admin(node.bootstrap, **security_kwargs(
            cli_module.build_parser().parse_args(["topics", "list", *cfg]))) as admin:
        admin.create_user("dave", "dave-password-123")
    dave = home / "dave.properties"
    dave.write_text(props.read_text().replace("sasl.username=admin", "sasl.username=dave")
                    .replace(f"sasl.password={ADMIN['sasl_plain_password']}",
                             "sasl.password=dave-password-123"))
    dave.chmod(0o600)
    mine = ["--command-config", str(dave)]
    denied = run(node, home, "configs", "describe", "--topic", "acl-cfg", *mine)
    assert denied.returncode == 1 and b"AUTHORIZATION_FAILED" in denied.stderr, denied.stderr
    denied = run(node, home, "configs", "describe", "--broker", "1", *mine)
    assert denied.returncode == 1 and b"CLUSTER_AUTHORIZATION_FAILED" in denied.stderr
    assert run(node, home, "acls", "add", "--principal", "User:dave", "--operation", "describe",
               "--topic", "acl-cfg", *cfg).returncode == 0
    allowed = run(node, home, "configs", "describe", "--topic", "acl-cfg", "--all", *mine)
    assert allowed.returncode == 0 and b"retention.ms=" in allowed.stdout, allowed.stderr


def test_kafka_tool_options_get_raftlogs_names(capsys):
    """kafka-configs.sh habits (--entity-type/--entity-name, --add-config) are answered
    with the options raftlog takes instead, before anything is sent."""
    from raftlog.client.cli import main

    rc = main(["configs", "describe", "--entity-type", "topics", "--entity-name", "t",
               "--bootstrap-server", "127.0.0.1:1"])
    err = capsys.readouterr().err
    assert rc == 2 and "--topic NAME or --broker N" in err and "--entity-type" in err
    rc = main(["configs", "alter", "--topic", "t", "--add-config=retention.ms=1"])
    assert rc == 2 and "--add KEY=VALUE" in capsys.readouterr().err
