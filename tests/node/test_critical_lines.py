"""The check every node-starting test runs on the nodes' logs (tests/conftest.py), and
the format that makes a CRITICAL line findable there."""

from __future__ import annotations

import subprocess
import sys

from ..conftest import critical_lines


def test_critical_lines_are_found_in_a_node_log():
    log = ("ts=2026-11-24T20:00:00Z level=info node=1 event=listening port=9092\n"
           "level=CRITICAL logger=pysyncobj.syncobj msg=truncating already-applied log "
           "entries from index 2 (last applied: 8) - state machine may have diverged\n"
           "ts=2026-11-24T20:00:01Z level=critical node=1 event=disk_failed\n"
           "level=WARNING logger=pysyncobj.serializer msg=slow dump\n")
    found = critical_lines(log)
    assert len(found) == 2 and "truncating already-applied" in found[0]


def test_the_node_process_logs_library_criticals_with_their_level(tmp_path):
    # the node's main() up to trio.run, with trio.run replaced by a CRITICAL log line
    code = ("import logging, sys, trio; import raftlog.node.__main__ as m; "
            "trio.run = lambda *a, **k: logging.getLogger('pysyncobj.syncobj')"
            ".critical('boom'); "
            f"sys.exit(m.main(['--data-dir', {str(tmp_path)!r}]))")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert critical_lines(r.stderr) == ["level=CRITICAL logger=pysyncobj.syncobj msg=boom"]
