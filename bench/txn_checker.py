"""The txn workload's checker (jepsen/txn_checker.py, issue 33): how long it takes on a
large history -- pure Python, no cluster.

    python bench/txn_checker.py [--ops 100000] [--runs 2] [--seed 1] [--json]

Builds one history of ``--ops`` operations (invoke + completion each: twice as many
history entries) from the simulated correct transactional log of the tests
(tests/jepsen/txn_sim.py: 6 producers, 2 of them read-process-write in one group, 3
read_committed consumers, 3 partitions, 1-4 sends per transaction, 30% aborted, 20%
indeterminate), then checks it ``--runs`` times. Reports wall and CPU seconds per check
(CPU time is the figure to compare on a shared machine: wall time there counts the
other processes' turns) and the anomalies found (none: the history is correct).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

from raftlog.jepsen.txn_checker import check_txn  # noqa: E402
from tests.jepsen.txn_sim import TxnSim  # noqa: E402


def history(ops: int, seed: int) -> TxnSim:
    s = TxnSim(seed, producers=6, rpw=2, consumers=3)
    while len(s.h.ops) < 2 * ops:
        s.step()
    s.finish()
    return s


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--ops", type=int, default=100_000, help="operations in the history")
    ap.add_argument("--runs", type=int, default=2)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args(argv)
    t = time.perf_counter()
    s = history(a.ops, a.seed)
    final = s.final()
    built = time.perf_counter() - t
    entries = len(s.h.ops)
    reads = sum(len(r) for o in s.h.ops if o["type"] == "ok" and o["f"] == "poll"
                for r in o["value"].values())
    runs = []
    for _ in range(a.runs):
        w, c = time.perf_counter(), time.process_time()
        found = check_txn(s.h.ops, final)
        runs.append({"wall_s": round(time.perf_counter() - w, 2),
                     "cpu_s": round(time.process_time() - c, 2),
                     "anomalies": {k: len(v) for k, v in found.items()}})
    out = {"operations": entries // 2, "history_entries": entries, "polled_records": reads,
           "final_records": sum(len(v) for v in final.values()),
           "build_s": round(built, 1), "runs": runs}
    if a.json:
        print(json.dumps(out))
    else:
        print(f"{out['operations']} operations ({entries} history entries, {reads} records "
              f"polled outside transactions), built in {out['build_s']} s")
        for r in runs:
            print(f"check: {r['wall_s']} s wall, {r['cpu_s']} s CPU, anomalies "
                  f"{r['anomalies'] or 'none'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
