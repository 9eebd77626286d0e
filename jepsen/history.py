"""The history recorder: every operation as invoke then ok / fail / info, in order.

Thread-safe. Each op gets a global ``index`` and ``time`` (monotonic ns since the
recorder started). Every op is also written as one JSON line to ``history.jsonl`` as it
happens, so a crashed run still leaves its history behind.
"""

from __future__ import annotations

import json
import threading
import time


class History:
    def __init__(self, path: str | None = None):
        self.t0 = time.monotonic_ns()
        self.ops: list[dict] = []
        self._lock = threading.Lock()
        self._file = open(path, "w", encoding="utf-8") if path else None

    def now(self) -> int:
        return time.monotonic_ns() - self.t0

    def _append(self, op: dict) -> dict:
        with self._lock:
            op["index"] = len(self.ops)
            op["time"] = self.now()
            self.ops.append(op)
            if self._file is not None:
                self._file.write(json.dumps(op, default=_jsonable, separators=(",", ":")) + "\n")
                self._file.flush()
        return op

    def invoke(self, process, f: str, value=None, **extra) -> dict:
        return self._append({"type": "invoke", "process": process, "f": f, "value": value,
                             **extra})

    def complete(self, invoke: dict, type_: str, value=..., **extra) -> dict:
        """ok / fail / info for ``invoke``; the value defaults to the invocation's."""
        assert type_ in ("ok", "fail", "info"), type_
        return self._append({"type": type_, "process": invoke["process"], "f": invoke["f"],
                             "value": invoke["value"] if value is ... else value, **extra})

    def ok(self, invoke: dict, value=..., **extra) -> dict:
        return self.complete(invoke, "ok", value, **extra)

    def fail(self, invoke: dict, value=..., **extra) -> dict:
        return self.complete(invoke, "fail", value, **extra)

    def info(self, invoke: dict, value=..., **extra) -> dict:
        return self.complete(invoke, "info", value, **extra)

    def close(self) -> None:
        with self._lock:
            if self._file is not None:
                self._file.close()
                self._file = None


def _jsonable(x):
    if isinstance(x, (set, frozenset, tuple)):
        return list(x)
    if isinstance(x, bytes):
        return x.decode("utf-8", "replace")
    return repr(x)


def load(path: str) -> list[dict]:
    with open(path, encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]
