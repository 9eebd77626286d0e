"""Bootstrap server lists as Kafka's clients read them: empty entries skipped, anything
else that is not host:port refused with its text."""

from __future__ import annotations

import pytest

from raftlog.client.conn import parse_servers


def test_trailing_commas_and_spaces_are_skipped():
    assert parse_servers("127.0.0.1:9092, 127.0.0.1:9093,") == [("127.0.0.1", 9092),
                                                                 ("127.0.0.1", 9093)]
    assert parse_servers(" ,h:1,,") == [("h", 1)]
    assert parse_servers(["[::1]:9092", ""]) == [("::1", 9092)]


@pytest.mark.parametrize("bad, why", [
    ("h:1,nohost", "'nohost' is not host:port"),
    ("h:port", "'h:port' is not host:port"),
    (":9092", "':9092' is not host:port"),
    (",", "bootstrap_servers is empty"),
    ("", "bootstrap_servers is empty"),
])
def test_anything_else_is_refused_with_its_text(bad, why):
    with pytest.raises(ValueError, match=why):
        parse_servers(bad)
