"""kafka-python's own integration suite (its sdist's ``test/integration``), pinned, run
against a raftlog cluster's Kafka listener.

The sdist is fetched from PyPI with pip (hash-checked) at test time and never vendored.
Its tests run with the sdist's own ``kafka`` package (the suite's directory is first on
``sys.path``), so the client under test is the pinned one, whatever kafka-python the dev
extra installed. They target an existing broker through the suite's own switches:
``KAFKA_URI`` (its ``KafkaFixture`` is then "external") and ``KAFKA_VERSION``.

The sdist lacks two files of kafka-python's repository that the suite imports:
``test/__init__.py`` (without it ``test`` is CPython's regression-test package) and
``test/service.py`` (its process wrappers for Kafka's Java broker). ``prepare`` writes both:
the package marker, and a ``service.py`` whose external service is inert and whose spawned
service refuses (a test that spawns its own Java broker fails, as it would on any machine
without Kafka installed).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tarfile
import xml.etree.ElementTree as ET

from . import kafka_trace

#: The suite: kafka-python's sdist on PyPI, by version and hash.
NAME, VERSION = "kafka-python", "3.0.12"
SHA256 = "4ccda3616b9aa5c353d74a97f2770d6cd1b950890d77ab0e8890e09a48eeed65"
#: The Kafka version the suite is told it talks to (its tests gate features on it).
KAFKA_VERSION = "4.2.0"
#: Bound of one test of the suite (pytest-timeout, signal method: a stuck test fails alone).
TEST_TIMEOUT_S = 45

SERVICE_PY = '''\
"""Written by raftlog's tests/clientsuite/suite.py: the sdist lacks kafka-python's
test/service.py. raftlog's CI has no Kafka (Java) broker to spawn."""


class ExternalService:
    def __init__(self, host, port):
        self.host, self.port = host, port

    def start(self):
        pass

    def stop(self):
        pass

    def dump_logs(self):
        pass

    def wait_for(self, pattern, timeout=30):
        return True


class SpawnedService:
    def __init__(self, *args, **kwargs):
        raise RuntimeError("this test spawns its own Kafka (Java) broker; "
                           "raftlog's CI has none")
'''


def fetch(cache_dir: str) -> str:
    """The pinned sdist's path in ``cache_dir``, downloaded with pip if missing
    (``--require-hashes``: a different file is refused)."""
    tarball = os.path.join(cache_dir, f"{NAME.replace('-', '_')}-{VERSION}.tar.gz")
    if os.path.exists(tarball):
        return tarball
    os.makedirs(cache_dir, exist_ok=True)
    req = os.path.join(cache_dir, "requirements.txt")
    with open(req, "w") as f:
        f.write(f"{NAME}=={VERSION} --hash=sha256:{SHA256}\n")
    subprocess.run([sys.executable, "-m", "pip", "download", "--quiet", "--no-deps",
                    "--no-binary", ":all:", "--require-hashes", "--disable-pip-version-check",
                    "-r", req, "-d", cache_dir], check=True, timeout=300)
    return tarball


def prepare(tarball: str, work_dir: str) -> str:
    """Extract the sdist under ``work_dir`` and add the two missing files; returns the
    suite's root (the directory to run pytest in)."""
    with tarfile.open(tarball) as tf:
        try:
            tf.extractall(work_dir, filter="data")
        except TypeError:  # (a Python without extraction filters; the file is hash-pinned)
            tf.extractall(work_dir)  # noqa: S202
    root = os.path.join(work_dir, f"{NAME.replace('-', '_')}-{VERSION}")
    open(os.path.join(root, "test", "__init__.py"), "a").close()
    with open(os.path.join(root, "test", "service.py"), "w") as f:
        f.write(SERVICE_PY)
    os.makedirs(os.path.join(root, "no-kafka"), exist_ok=True)  # (KAFKA_ROOT must exist)
    shutil.copy(os.path.join(os.path.dirname(__file__), "kafka_trace.py"), root)
    return root


def command(root: str, junit: str) -> list[str]:
    return [sys.executable, "-m", "pytest", "test/integration", "-p", "no:cacheprovider",
            "-p", "no:randomly", f"--timeout={TEST_TIMEOUT_S}", "--timeout-method=signal",
            "-q", "--tb=short", "-o", "log_level=WARNING", f"--junitxml={junit}",
            "-p", "kafka_trace"]


def environment(root: str, kafka_uri: str, trace_dir: str = "") -> dict[str, str]:
    """The suite's environment: its broker, and where kafka_trace.py writes the client's
    DEBUG trace of a failed test (none when ``trace_dir`` is empty)."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("PYTEST_", "KAFKA_", "ZOOKEEPER_", kafka_trace.TRACE_DIR_ENV))}
    if trace_dir:
        env[kafka_trace.TRACE_DIR_ENV] = trace_dir
    env.update({"KAFKA_URI": kafka_uri, "KAFKA_VERSION": KAFKA_VERSION,
                "KAFKA_ROOT": os.path.join(root, "no-kafka"), "PYTHONDONTWRITEBYTECODE": "1"})
    return env


def run(root: str, kafka_uri: str, junit: str, timeout_s: float, log_path: str,
        trace_dir: str = "") -> int:
    """Run the suite against ``kafka_uri`` ("PLAINTEXT://host:port"); returns pytest's
    exit code (the outcomes are in ``junit``; a failed test's client trace in
    ``trace_dir``, see :func:`trace`). Raises TimeoutExpired past ``timeout_s``."""
    env = environment(root, kafka_uri, trace_dir)
    with open(log_path, "wb") as log:
        return subprocess.run(command(root, junit), cwd=root, env=env,
                              stdout=log, stderr=subprocess.STDOUT, timeout=timeout_s).returncode


def outcomes(junit_xml: str) -> dict[str, str]:
    """{test id: "passed" | "failed" | "skipped"} from a pytest junit file; the id is the
    file's stem and the test's name ("test_admin_integration::test_delete_records"). An
    error (in a fixture) counts as failed."""
    result = {}
    for case in ET.parse(junit_xml).getroot().iter("testcase"):
        module = case.get("classname", "").removeprefix("test.integration.")
        tid = f"{module}::{case.get('name')}"
        tags = {child.tag for child in case}
        if tags & {"failure", "error"}:
            result[tid] = "failed"
        elif "skipped" in tags:
            result.setdefault(tid, "skipped")
        else:
            result.setdefault(tid, "passed")
    return result


def trace(trace_dir: str, tid: str, max_chars: int | None = 8000) -> str:
    """The end of the client trace kafka_trace.py wrote for failed test ``tid`` ("" if
    none): its last ``max_chars`` characters (all of it for None)."""
    try:
        with open(os.path.join(trace_dir, kafka_trace.file_name(tid)),
                  encoding="utf-8", errors="replace") as f:
            text = f.read()
        return text if max_chars is None else text[-max_chars:]
    except FileNotFoundError:
        return ""


#: kafka-python 3.0.12's race (kafka/cluster.py): ``update_metadata`` clears the update flag
#: that a subscription set while an older MetadataRequest was in flight, so the consumer
#: sleeps ``metadata_max_age_ms`` (300 s) before it asks for its topic, with any broker.
_SENT = "Sending metadata request MetadataRequest("
_SUBSCRIBED = "Updating subscribed topics to:"
_ANSWERED = "Metadata refresh: success"
_SLEEPING = re.compile(r"Sleeping (\d+(?:\.\d+)?) for next Metadata refresh")


def lost_subscription(trace_text: str, long_sleep_s: float = 60.0) -> bool:
    """Whether a client trace shows kafka-python's own race: the last subscription was made
    while a MetadataRequest was in flight, that request's answer was the last metadata the
    client asked for, and the client then slept ``long_sleep_s`` or more before its next
    one. Such a test fails for want of metadata the client never requested, whatever the
    broker; any other failure does not match."""
    in_flight = False  # a MetadataRequest sent, not answered yet
    raced = answered = slept = False  # (of the last subscription)
    for line in trace_text.splitlines():
        if _SENT in line:
            in_flight, raced = True, False  # (asked after it: the client did not lose it)
        elif _SUBSCRIBED in line:
            raced, answered, slept = in_flight, False, False
        elif _ANSWERED in line:
            in_flight, answered = False, answered or raced
        elif answered and (m := _SLEEPING.search(line)) and float(m.group(1)) >= long_sleep_s:
            slept = True
    return raced and answered and slept


def node_lines(log_paths: list[str], tid: str, max_lines: int = 30) -> str:
    """The last ``max_lines`` lines of each node log that name the topic of failed test
    ``tid`` (the suite names a test's topic after the test: its name's first characters)."""
    needle = tid.rpartition("::")[2].split("[")[0][:30]
    out = []
    for path in log_paths:
        try:
            with open(path, encoding="utf-8", errors="replace") as f:
                hits = [line for line in f if needle in line]
        except FileNotFoundError:
            continue
        out.append(f"{path}: {len(hits)} lines name {needle!r}\n" + "".join(hits[-max_lines:]))
    return "".join(out)


def compare(results: dict[str, str], expected: dict[str, str]) -> tuple[list[str], list[str]]:
    """(failures not in ``expected``, ``expected`` failures that did not fail): both must be
    empty. An expected failure that is missing from the run counts as not failing."""
    unexpected = sorted(t for t, o in results.items() if o == "failed" and t not in expected)
    stale = sorted(t for t in expected if results.get(t) != "failed")
    return unexpected, stale
