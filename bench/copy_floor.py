"""The floor of a throttled data move on this machine: the same bytes at the same rate
through a loopback TCP socket into new files, with no broker logic at all.

    python bench/copy_floor.py --src DIR --dst DIR --bytes N --rate-mb 50 [--burst-s 0.1]

A sender sends the ``*.log`` files under ``--src`` with ``os.sendfile`` in bursts of
``rate x burst_s`` bytes (the reassignment throttle's budget per round); a receiver
process ``recv_into``s a 1 MiB buffer and writes each file under ``--dst``, as a
follower appends, with an fsync every ``--fsync-s`` (1 s, as the node's default
``log.flush.interval.ms``). Both are a few C calls per MiB; the CPU figure includes the
writeback the fsyncs do in the receiver's context. bench/reassign.py ``--floor`` runs it
in place of the reassignment, beside the same steady producer, so the p99 ratio it
reports is what moving those bytes costs on this machine before any broker work.
"""

from __future__ import annotations

import argparse
import os
import resource
import socket
import subprocess
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

from raftlog.localnode import free_port  # noqa: E402

CHUNK = 1 << 20


def receive(port: int, dst: str, total: int, fsync_s: float) -> None:
    """Accept one connection; write ``total`` bytes into ``dst``/part-N files of ~64 MB,
    fsyncing every ``fsync_s`` seconds (0: never) as a node's periodic flush does."""
    os.makedirs(dst, exist_ok=True)
    srv = socket.create_server(("127.0.0.1", port))
    print("ready", flush=True)
    conn, _ = srv.accept()
    buf = bytearray(CHUNK)
    view = memoryview(buf)
    got, n, fd = 0, 0, None
    last_sync = time.monotonic()
    while got < total:
        if fsync_s and fd is not None and time.monotonic() - last_sync >= fsync_s:
            os.fsync(fd)
            last_sync = time.monotonic()
        if fd is None or got // (64 << 20) != n:
            if fd is not None:
                os.close(fd)
            n = got // (64 << 20)
            fd = os.open(os.path.join(dst, f"part-{n}"), os.O_CREAT | os.O_WRONLY, 0o644)
        k = conn.recv_into(view, min(CHUNK, total - got))
        if not k:
            break
        os.write(fd, view[:k])
        got += k
    if fd is not None:
        os.close(fd)
    conn.sendall(b"k")
    conn.close()


def send(port: int, files: list[str], total: int, rate: float, burst_s: float) -> tuple:
    """Send ``total`` bytes of ``files`` at ``rate`` bytes/s; returns (seconds taken,
    this thread's CPU seconds)."""
    cpu0 = time.thread_time()
    sock = socket.create_connection(("127.0.0.1", port))
    start, sent = time.monotonic(), 0
    burst = max(1, int(rate * burst_s))
    for path in files:
        with open(path, "rb") as f:
            size, off = os.fstat(f.fileno()).st_size, 0
            while off < size and sent < total:
                due = start + sent / rate
                ahead = due - time.monotonic()
                if ahead > 0:
                    time.sleep(ahead)
                k = os.sendfile(sock.fileno(), f.fileno(), off, min(burst, size - off, total - sent))
                off += k
                sent += k
        if sent >= total:
            break
    sock.recv(1)
    sock.close()
    return time.monotonic() - start, time.thread_time() - cpu0


def log_files(src: str) -> list[str]:
    out = []
    for root, _dirs, names in os.walk(src):
        out += [os.path.join(root, n) for n in names if n.endswith(".log")]
    return sorted(out)


def run(src: str, dst: str, total: int, rate: float, burst_s: float = 0.1,
        fsync_s: float = 1.0) -> tuple:
    """Copy ``total`` bytes of ``src``'s segment files to ``dst`` at ``rate`` bytes/s
    (receiver in a child process); returns (seconds taken, CPU seconds of the sender
    and the receiver)."""
    if not src or not os.path.isdir(src):
        raise SystemExit(f"copy floor: --src {src!r} is not a directory")
    if total <= 0 or rate <= 0 or burst_s <= 0:
        raise SystemExit("copy floor: --bytes, --rate-mb and --burst-s must be positive")
    files = log_files(src)
    if sum(os.path.getsize(p) for p in files) < total:
        raise SystemExit(f"copy floor: {src} holds fewer than {total} bytes of *.log files")
    port = free_port()
    rx_cpu0 = _children_cpu_s()
    rx = subprocess.Popen([sys.executable, __file__, "--receive", str(port), "--dst", dst,
                           "--bytes", str(total), "--fsync-s", str(fsync_s)],
                          stdout=subprocess.PIPE)
    if rx.stdout.readline() != b"ready\n":
        rx.kill()
        raise SystemExit("copy floor: the receiver did not start")
    try:
        secs, cpu = send(port, files, total, rate, burst_s)
    finally:
        rx.wait(60)
    return secs, cpu + _children_cpu_s() - rx_cpu0


def _children_cpu_s() -> float:
    """CPU seconds of this process's children that have ended and been waited for."""
    ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    return ru.ru_utime + ru.ru_stime


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--src")
    ap.add_argument("--dst", required=True)
    ap.add_argument("--bytes", type=int, required=True)
    ap.add_argument("--rate-mb", type=float, default=50.0)
    ap.add_argument("--burst-s", type=float, default=0.1)
    ap.add_argument("--fsync-s", type=float, default=1.0,
                    help="receiver fsyncs every this many seconds (a node's log.flush.interval.ms)")
    ap.add_argument("--receive", type=int, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.receive:
        receive(args.receive, args.dst, args.bytes, args.fsync_s)
        return
    secs, cpu = run(args.src, args.dst, args.bytes, args.rate_mb * 1e6, args.burst_s,
                    args.fsync_s)
    print(f"copied {args.bytes} bytes in {secs:.2f} s ({args.bytes / secs / 1e6:.1f} MB/s), "
          f"{cpu:.2f} CPU s")


if __name__ == "__main__":
    main()
