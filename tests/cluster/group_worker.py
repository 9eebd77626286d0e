"""A consumer-group member in its own process (killed for real by the tests).

usage: group_worker.py BOOTSTRAP GROUP TOPIC OUT_DIR NAME

Appends every record it processes to OUT_DIR/NAME.records (one "partition offset
value" line each, flushed before the next poll, so auto-commit never runs ahead of
what was written) and its current assignment to OUT_DIR/NAME.assignment. SIGTERM
closes the consumer cleanly (commit, leave).
"""

from __future__ import annotations

import os
import signal
import sys

from raftlog.client import Consumer


def main() -> None:
    bootstrap, group, topic, out_dir, name = sys.argv[1:6]
    stop = []
    signal.signal(signal.SIGTERM, lambda *_: stop.append(1))
    c = Consumer(bootstrap, group_id=group, auto_offset_reset="earliest",
                 session_timeout_ms=3000, heartbeat_interval_ms=300,
                 auto_commit_interval_ms=200)
    c.subscribe([topic])
    records = open(os.path.join(out_dir, f"{name}.records"), "a", buffering=1)
    last = None
    while not stop:
        for r in c.poll(timeout_ms=100):
            records.write(f"{r.partition} {r.offset} {r.value.decode()}\n")
        records.flush()
        os.fsync(records.fileno())
        owned = sorted(tp.partition for tp in c.assignment())
        if owned != last:
            tmp = os.path.join(out_dir, f"{name}.assignment.tmp")
            with open(tmp, "w") as f:
                f.write(" ".join(map(str, owned)))
            os.replace(tmp, os.path.join(out_dir, f"{name}.assignment"))
            last = owned
    c.close()
    records.close()


if __name__ == "__main__":
    main()
