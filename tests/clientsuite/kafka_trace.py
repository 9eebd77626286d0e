"""A pytest plugin for kafka-python's own suite (tests/clientsuite/suite.py copies it into
the suite's root and loads it with ``-p kafka_trace``): what the client did in a test that
failed.

The suite runs at log level WARNING (upstream's DEBUG makes it much slower), which leaves
a failure such as "a consumer got nothing for 9 s" without a trace of which request the
client sent last, or did not send. This plugin keeps the ``kafka.*`` loggers' DEBUG
records of the running test in a bounded ring, their arguments shortened but the
messages not formatted unless the test fails, and on a failure writes them to ``$RAFTLOG_KAFKA_TRACE_DIR/<test id>.log``
(the id as :func:`test_id` spells it, as the junit outcomes name tests). Without that
variable it does nothing."""

from __future__ import annotations

import collections
import logging
import os
import reprlib
import time
import traceback

import pytest

#: The environment variable naming the directory of the traces.
TRACE_DIR_ENV = "RAFTLOG_KAFKA_TRACE_DIR"
#: Records kept per test (the oldest go first).
MAX_RECORDS = 20000
#: Characters kept of one message (requests and responses print whole).
MAX_MESSAGE = 400


_REPR = reprlib.Repr()
_REPR.maxstring, _REPR.maxother, _REPR.maxlevel = 200, MAX_MESSAGE, 3
_SCALARS = (int, float, bool, type(None))


def _short(a):
    if isinstance(a, _SCALARS):
        return a
    return a[:MAX_MESSAGE] if isinstance(a, str) else _REPR.repr(a)


def shrink(record: logging.LogRecord) -> logging.LogRecord:
    """``record`` with its arguments that are not numbers made short strings: a kept
    record must not hold a client's request or response (a fetch's records) alive."""
    args = record.args
    if isinstance(args, tuple) and args:
        record.args = tuple(_short(a) for a in args)
    elif isinstance(args, dict):
        record.args = {k: _short(v) for k, v in args.items()}
    if not isinstance(record.msg, str):
        record.msg = _REPR.repr(record.msg)
    if record.exc_info and not record.exc_text:  # (its frames would hold everything)
        record.exc_text = "".join(traceback.format_exception(*record.exc_info))[-2000:]
    record.exc_info = None
    return record


class Ring(logging.Handler):
    """Keeps the last ``maxlen`` records, their arguments shortened (:func:`shrink`;
    appending to a deque is atomic: no lock, whatever thread logs)."""

    def __init__(self, maxlen: int = MAX_RECORDS) -> None:
        super().__init__(logging.DEBUG)
        self.records: collections.deque = collections.deque(maxlen=maxlen)

    def handle(self, record: logging.LogRecord) -> bool:
        self.records.append(shrink(logging.makeLogRecord(record.__dict__)))
        return True

    def emit(self, record: logging.LogRecord) -> None:  # (handle does it)
        self.handle(record)


def suite_test_id(nodeid: str) -> str:
    """A pytest node id of the suite as its junit outcome names it:
    ``test/integration/test_x.py::TestC::test_y`` -> ``test_x.TestC::test_y``."""
    parts = nodeid.split("::")
    module = parts[0].removeprefix("test/integration/").removesuffix(".py").replace("/", ".")
    return ".".join([module, *parts[1:-1]]) + "::" + parts[-1]


def file_name(tid: str) -> str:
    return tid.replace("/", "_").replace("::", "__") + ".log"


def format_record(record: logging.LogRecord, t0: float) -> str:
    try:
        message = record.getMessage()
    except Exception as e:  # (a bad format string in the client: keep the raw one)
        message = f"{record.msg!r} % {record.args!r} ({e})"
    if len(message) > MAX_MESSAGE:
        message = message[:MAX_MESSAGE] + f"... (+{len(message) - MAX_MESSAGE})"
    clock = time.strftime("%H:%M:%S", time.gmtime(record.created))
    if record.exc_text:
        message += "\n" + record.exc_text
    return (f"{clock}.{int(record.msecs):03d} +{(record.created - t0) * 1000:8.1f}ms "
            f"{record.threadName} {record.name} {record.levelname} {message}")


_ring: Ring | None = None
_t0 = 0.0


def pytest_configure(config) -> None:
    global _ring
    if not os.environ.get(TRACE_DIR_ENV):
        return
    _ring = Ring()
    logger = logging.getLogger("kafka")
    logger.setLevel(logging.DEBUG)
    logger.addHandler(_ring)


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item) -> None:
    global _t0
    if _ring is not None:
        _ring.records.clear()
        _t0 = time.time()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    if _ring is None or not report.failed:
        return
    directory = os.environ[TRACE_DIR_ENV]
    os.makedirs(directory, exist_ok=True)
    lines = [format_record(r, _t0) for r in list(_ring.records)]
    with open(os.path.join(directory, file_name(suite_test_id(item.nodeid))), "a",
              encoding="utf-8") as f:
        f.write(f"# {item.nodeid} failed in {report.when}: {len(lines)} records\n")
        f.write("\n".join(lines) + "\n")
