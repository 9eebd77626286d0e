"""``python -m raftlog.jepsen.lazyfs MOUNTPOINT BACKING --control SOCKET``: mount, and
answer control commands on a Unix socket until unmounted (SIGTERM, SIGINT or
``fusermount3 -u``).

Control protocol: one command per connection, one line each way; the answer is a
JSON object with ``"ok"``. Commands: ``crash`` (power loss: drop every unsynced
change, then keep serving), ``status`` (the ledger's counters), ``describe`` (what a crash would take back, by
path), ``ping``.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import sys
import threading

#: The longest control command line accepted.
COMMAND_BYTES_MAX = 256


def serve_control(path: str, fs) -> threading.Thread:
    if os.path.exists(path):
        os.unlink(path)
    srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    srv.bind(path)
    os.chmod(path, 0o600)
    srv.listen(8)

    def answer(cmd: str) -> dict:
        if cmd == "crash":
            return {"ok": True, **fs.crash()}
        if cmd == "status":
            with fs.mutex:
                return {"ok": True, **fs.ledger.stats(), "open_files": len(fs.handles)}
        if cmd == "describe":
            with fs.mutex:
                return {"ok": True, **fs.ledger.describe()}
        if cmd == "ping":
            return {"ok": True}
        return {"ok": False, "error": f"unknown command {cmd!r} (crash, status, describe, ping)"}

    def loop():
        while True:
            conn, _ = srv.accept()
            with conn:
                try:
                    buf = b""
                    while b"\n" not in buf and len(buf) < COMMAND_BYTES_MAX:
                        chunk = conn.recv(COMMAND_BYTES_MAX)
                        if not chunk:
                            break
                        buf += chunk
                    try:
                        out = answer(buf.split(b"\n", 1)[0].decode().strip())
                    except Exception as e:  # report, keep serving
                        out = {"ok": False, "error": repr(e)}
                    conn.sendall(json.dumps(out).encode() + b"\n")
                except OSError:
                    pass

    t = threading.Thread(target=loop, name="lazyfs-control", daemon=True)
    t.start()
    return t


def exit_with_parent(poll_s: float = 1.0) -> threading.Thread:
    """Unmount (SIGTERM to this process: libfuse ends its loop and unmounts) once the
    process that started this one is gone, so a harness that died leaves no mount."""
    import signal
    import time

    parent = os.getppid()

    def watch():
        while os.getppid() == parent:
            time.sleep(poll_s)
        print("lazyfs: parent exited; unmounting", file=sys.stderr, flush=True)
        os.kill(os.getpid(), signal.SIGTERM)

    t = threading.Thread(target=watch, name="lazyfs-parent-watch", daemon=True)
    t.start()
    return t


def main(argv: list[str] | None = None) -> int:
    import logging

    import mfusepy as fuse

    from .fs import LazyFS
    from .ledger import Ledger, Limits

    p = argparse.ArgumentParser(prog="python -m raftlog.jepsen.lazyfs",
                                description="A FUSE pass-through that loses unsynced "
                                            "writes on command (power loss).")
    p.add_argument("mountpoint")
    p.add_argument("backing")
    p.add_argument("--control", required=True, help="Unix socket for control commands")
    p.add_argument("--unsynced-bytes-max", type=int, default=Limits.unsynced_bytes_max)
    p.add_argument("--saved-bytes-max", type=int, default=Limits.saved_bytes_max)
    p.add_argument("--exit-with-parent", action="store_true",
                   help="unmount when the process that started this one exits")
    p.add_argument("--debug", action="store_true")
    a = p.parse_args(argv)
    logging.basicConfig(level=logging.DEBUG if a.debug else logging.WARNING,
                        stream=sys.stderr)
    limits = Limits(unsynced_bytes_max=a.unsynced_bytes_max,
                    saved_bytes_max=a.saved_bytes_max)
    fs = LazyFS(Ledger(a.backing, limits))
    serve_control(a.control, fs)
    if a.exit_with_parent:
        exit_with_parent()
    try:
        fuse.FUSE(fs, a.mountpoint, foreground=True, nothreads=True,
                  fsname="lazyfs", subtype="lazyfs")
    except RuntimeError as e:  # fuse_main's code; 8 when a signal (SIGTERM) ended the loop
        if e.args != (8,):
            print(f"lazyfs: fuse_main failed: {e.args}", file=sys.stderr, flush=True)
            return 1
    print(f"lazyfs: unmounted {a.mountpoint}; {json.dumps(fs.ledger.stats())}",
          file=sys.stderr, flush=True)
    return 0
