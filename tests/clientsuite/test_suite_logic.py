"""The client suite's bookkeeping (pure): junit outcomes by test id, and the comparison
with the expected-failure list that fails the run both ways."""

from __future__ import annotations

import logging
import os
import shutil
import subprocess

from . import kafka_trace, suite

JUNIT = """<?xml version="1.0" encoding="utf-8"?><testsuites><testsuite name="pytest">
<testcase classname="test.integration.test_admin_integration" name="test_a"/>
<testcase classname="test.integration.test_admin_integration" name="test_b">
  <failure message="boom"/></testcase>
<testcase classname="test.integration.test_ssl_integration.TestSSL" name="test_c">
  <error message="setup"/></testcase>
<testcase classname="test.integration.test_sasl_integration" name="test_d[PLAIN]">
  <skipped message="external"/></testcase>
</testsuite></testsuites>"""


def test_outcomes_by_test_id(tmp_path):
    path = tmp_path / "junit.xml"
    path.write_text(JUNIT)
    assert suite.outcomes(str(path)) == {
        "test_admin_integration::test_a": "passed",
        "test_admin_integration::test_b": "failed",
        "test_ssl_integration.TestSSL::test_c": "failed",  # (an error counts as a failure)
        "test_sasl_integration::test_d[PLAIN]": "skipped",
    }


def test_compare_fails_both_ways():
    results = {"m::a": "passed", "m::b": "failed", "m::c": "failed", "m::d": "skipped"}
    assert suite.compare(results, {"m::b": "why", "m::c": "why"}) == ([], [])
    unexpected, stale = suite.compare(results, {"m::a": "why", "m::b": "why", "m::gone": "why"})
    assert unexpected == ["m::c"]
    assert stale == ["m::a", "m::gone"]  # (passing, and no longer in the suite)


def test_trace_ids_are_the_junit_ids():
    assert kafka_trace.suite_test_id(
        "test/integration/test_admin_integration.py::test_b") == "test_admin_integration::test_b"
    assert kafka_trace.suite_test_id(
        "test/integration/test_ssl_integration.py::TestSSL::test_c") == (
        "test_ssl_integration.TestSSL::test_c")
    assert kafka_trace.suite_test_id(
        "test/integration/test_sasl_integration.py::test_d[PLAIN]") == (
        "test_sasl_integration::test_d[PLAIN]")


FAKE_SUITE = '''
import logging

log = logging.getLogger("kafka.consumer.fetcher")


def test_quiet():
    log.debug("sent ListOffsets %s to node %d", "quiet", 1)


def test_stalls():
    log.debug("sent ListOffsets %s to node %d", "stalls", 2)
    logging.getLogger("other").debug("not the client's")
    assert False, "got nothing"
'''


def test_a_failed_tests_client_trace_is_kept_and_a_passing_ones_is_not(tmp_path):
    """The plugin in a real pytest run of a suite shaped as kafka-python's (without a
    broker): the failed test's kafka.* DEBUG records (and only its) land in its file,
    which suite.trace reads back by the junit id."""
    root = tmp_path / "suite"
    (root / "test" / "integration").mkdir(parents=True)
    (root / "test" / "integration" / "test_fake.py").write_text(FAKE_SUITE)
    shutil.copy(kafka_trace.__file__, root)
    traces, junit = str(tmp_path / "traces"), str(tmp_path / "junit.xml")
    cmd = [c for c in suite.command(str(root), junit) if not c.startswith("--timeout")]
    env = suite.environment(str(root), "PLAINTEXT://127.0.0.1:1", traces)
    done = subprocess.run(cmd, cwd=root, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 1, done.stdout + done.stderr
    assert suite.outcomes(junit) == {"test_fake::test_quiet": "passed",
                                     "test_fake::test_stalls": "failed"}
    text = suite.trace(traces, "test_fake::test_stalls")
    assert "kafka.consumer.fetcher DEBUG sent ListOffsets stalls to node 2" in text
    assert "quiet" not in text and "not the client's" not in text
    assert suite.trace(traces, "test_fake::test_quiet") == ""
    assert os.listdir(traces) == [kafka_trace.file_name("test_fake::test_stalls")]


def test_node_lines_name_the_failed_tests_topic(tmp_path):
    log = tmp_path / "node.log"
    log.write_text("a partition roles: test_kafka_consumer_max_bytes_simple_ab12-0 leader\n"
                   "b other_topic-1 leader\n")
    text = suite.node_lines([str(log), str(tmp_path / "gone.log")],
                            "test_consumer_integration::test_kafka_consumer_max_bytes_simple")
    assert "1 lines name" in text and "a partition roles" in text and "other_topic" not in text


def test_a_kept_record_holds_no_client_object():
    """The ring keeps records with their non-number arguments as short strings (a
    fetch response's bytes are not kept alive), formatted as the client wrote them."""
    class Response:
        def __init__(self):
            self.records = b"x" * 100_000

        def __repr__(self):
            return f"FetchResponse(records={self.records!r})"

    ring = kafka_trace.Ring(maxlen=2)
    logger = logging.getLogger("kafka.test_ring")
    logger.addHandler(ring)
    logger.setLevel(logging.DEBUG)
    try:
        logger.debug("Response %d from node %s: %s", 7, "2", Response())
        try:
            raise ValueError("boom")
        except ValueError:
            logger.debug("failed", exc_info=True)
        logger.debug("three")
    finally:
        logger.removeHandler(ring)
    first, second = list(ring.records)  # (the ring keeps the last two)
    assert first.exc_info is None and "ValueError: boom" in first.exc_text
    assert kafka_trace.format_record(second, second.created).endswith("three")
    ring.records.appendleft(kafka_trace.shrink(logging.makeLogRecord({
        "msg": "Response %d from node %s: %s", "args": (7, "2", Response())})))
    kept = ring.records[0]
    assert all(isinstance(a, (int, str)) for a in kept.args)
    assert len(kept.args[2]) <= kafka_trace.MAX_MESSAGE
    text = kafka_trace.format_record(kept, kept.created)
    assert "Response 7 from node 2: FetchResponse(records=b'xxx" in text
    assert len(text) < kafka_trace.MAX_MESSAGE + 200


# The lines that matter of a real trace (test_idempotent_producer_max_in_flight[1], a
# fresh-clone CI run of 2026-12-07), threads and objects shortened.
_RACE = """\
15:39:34.640 +7.1ms kafka-io-p kafka.cluster DEBUG Sending metadata request MetadataRequest(topics=['pmYbp']) to node 0
15:39:34.641 +8.0ms kafka-io-p kafka.cluster DEBUG Metadata refresh: success (node_id=0)
15:39:34.642 +8.1ms kafka-io-p kafka.cluster DEBUG Sleeping 299.99 for next Metadata refresh
15:39:35.007 +373.8ms kafka-io-c kafka.cluster DEBUG Sending metadata request MetadataRequest(topics=[], allow_auto_topic_creation=True) to node bootstrap-0
15:39:35.007 +374.1ms MainThread kafka.consumer.subscription_state INFO Updating subscribed topics to: ['pmYbp']
15:39:35.008 +375.0ms kafka-io-c kafka.cluster DEBUG Metadata refresh: success (node_id=bootstrap-0)
15:39:35.008 +375.1ms kafka-io-c kafka.consumer.subscription_state INFO Updated partition assignment: []
15:39:35.009 +375.7ms kafka-io-c kafka.cluster DEBUG Sleeping 299.99934551899975 for next Metadata refresh
15:40:05.009 +30375.8ms MainThread kafka.consumer.group DEBUG Closing the KafkaConsumer.
"""


def test_lost_subscription_is_told_by_the_trace():
    assert suite.lost_subscription(_RACE)
    lines = _RACE.splitlines(keepends=True)
    # subscribed after the bootstrap's answer: the client asks again, no race
    after = lines[:3] + [lines[3], lines[5], lines[4]] + lines[6:]
    assert not suite.lost_subscription("".join(after))
    # a later MetadataRequest (the client did ask for the topic): another cause
    asked = lines[:6] + [lines[3].replace("topics=[]", "topics=['pmYbp']")] + lines[6:]
    assert not suite.lost_subscription("".join(asked))
    # a short sleep after the answer: the client was about to ask
    short = lines[:7] + [lines[7].replace("299.99934551899975", "0.1")] + lines[8:]
    assert not suite.lost_subscription("".join(short))
    # no subscription, or no answer
    assert not suite.lost_subscription("".join(lines[:4] + lines[5:]))
    assert not suite.lost_subscription("".join(lines[:5]))
    assert not suite.lost_subscription("")
