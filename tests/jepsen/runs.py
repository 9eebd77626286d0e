"""Running the harness as a subprocess from the slow tests."""

from __future__ import annotations

import json
import subprocess
import sys


def run_harness(out, *args: str, nodes: int = 3, timeout: float = 170) -> tuple[int, dict, str]:
    """(exit status, results.json, the end of stderr) of ``raftlog.jepsen run``."""
    cmd = [sys.executable, "-m", "raftlog.jepsen", "run", "--nodes", str(nodes), *args,
           "--out", str(out)]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    results = json.loads((out / "results.json").read_text())
    return p.returncode, results, p.stderr[-3000:]


def node_events(out, *events: str, limit: int = 60) -> str:
    """Lines of the run's node logs (kept in ``out``) with one of ``events``: what a
    failed assertion shows, so a surprising verdict can be explained afterwards."""
    lines = []
    for path in sorted(out.glob("node-*.log")):
        for line in path.read_text(errors="replace").splitlines():
            if any(f"event={e}" in line for e in events):
                lines.append(f"{path.stem}: {line}")
    return "\n".join(lines[-limit:])


def iptables_available() -> bool:
    from raftlog.jepsen.cluster import IptablesNet, NetUnavailable

    try:
        IptablesNet("127.254.254")  # checks only; creates nothing
        return True
    except NetUnavailable:
        return False
