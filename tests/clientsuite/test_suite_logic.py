"""The client suite's bookkeeping (pure): junit outcomes by test id, and the comparison
with the expected-failure list that fails the run both ways."""

from __future__ import annotations

from . import suite

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
