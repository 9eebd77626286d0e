"""Structured log lines on stderr: ``ts=... level=info node=1 event=listening host=... port=...``.

logfmt because it is greppable by people and parseable by machines (the safety
harness reads node event logs). Values with spaces or quotes are quoted.
"""

from __future__ import annotations

import sys
import time

LEVELS = {"debug": 10, "info": 20, "warning": 30, "error": 40, "critical": 50}


class EventLog:
    """A tiny structured logger bound to one node."""

    def __init__(self, node_id: int | None = None, level: str = "info", stream=None):
        self.node_id = node_id
        self.threshold = LEVELS[level]
        self.stream = stream if stream is not None else sys.stderr
        self.counts: dict[str, int] = {}

    def log(self, level: str, event: str, **fields) -> None:
        self.counts[level] = self.counts.get(level, 0) + 1
        if LEVELS[level] < self.threshold:
            return
        t = time.time()
        ts = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(t)) + f".{int(t * 1000) % 1000:03d}Z"
        parts = [f"ts={ts}", f"level={level}"]
        if self.node_id is not None:
            parts.append(f"node={self.node_id}")
        parts.append(f"event={event}")
        parts.extend(f"{k}={_fmt(v)}" for k, v in fields.items())
        try:
            self.stream.write(" ".join(parts) + "\n")
            self.stream.flush()
        except (OSError, ValueError):
            pass  # a closed stderr must never take the node down

    def info(self, event: str, **fields) -> None:
        self.log("info", event, **fields)

    def warning(self, event: str, **fields) -> None:
        self.log("warning", event, **fields)

    def error(self, event: str, **fields) -> None:
        self.log("error", event, **fields)

    def debug(self, event: str, **fields) -> None:
        self.log("debug", event, **fields)


def _fmt(v) -> str:
    s = str(v)
    if not s or any(c in s for c in ' "=\n\t'):
        return '"' + s.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'
    return s
