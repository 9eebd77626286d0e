"""README's table of Kafka APIs is what the Kafka listener advertises (ApiVersions)."""

from __future__ import annotations

import re
from pathlib import Path

from raftlog.kafka.wire import API_NAMES, SUPPORTED

README = Path(__file__).resolve().parents[2] / "README.md"
ROW = re.compile(r"^\| (\w+) \((\d+)\) \| (\d+)(?:-(\d+))? \|", re.M)


def test_readme_lists_every_served_kafka_api_with_its_versions():
    rows = {int(key): (name, int(lo), int(hi or lo))
            for name, key, lo, hi in ROW.findall(README.read_text())}
    assert rows == {k: (API_NAMES[k], lo, hi) for k, (lo, hi) in SUPPORTED.items()}
