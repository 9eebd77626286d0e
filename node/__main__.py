"""``python -m raftlog.node --config FILE [flags]``: run one raftlog node."""

from __future__ import annotations

import argparse
import gc
import logging
import signal
import sys

from raftlog.dirlock import DataDirInUse
from raftlog.errors import ApiError, ConfigError

from .config import NODE_CONFIG_KEYS, NodeConfig


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="raftlog node",
        description="Run one raftlog node. Flags override the config file.",
        epilog="Config keys: " + ", ".join(NODE_CONFIG_KEYS) + ", and log.<topic config> defaults.",
    )
    p.add_argument("--config", help="properties file (key=value lines)")
    p.add_argument("--node-id", type=int, help="node.id")
    p.add_argument("--host", help="listen host (listeners)")
    p.add_argument("--port", type=int, help="listen port (listeners)")
    p.add_argument("--data-dir", help="data directory (log.dirs)")
    p.add_argument(
        "--set", action="append", default=[], metavar="KEY=VALUE", help="any config key; repeatable"
    )
    return p


def overrides_from_args(args) -> dict[str, str]:
    o: dict[str, str] = {}
    for item in args.set:
        key, sep, value = item.partition("=")
        if not sep:
            raise ConfigError(f"--set {item!r}: expected KEY=VALUE")
        o[key.strip()] = value
    if args.node_id is not None:
        o["node.id"] = str(args.node_id)
    if (args.host is not None or args.port is not None) and "://" not in o.get("listeners", ""):
        o["listeners"] = f"{args.host or '127.0.0.1'}:{args.port if args.port is not None else 9092}"
    if args.data_dir is not None:
        o["log.dirs"] = args.data_dir
    return o


def _first_leaf(exc: BaseException) -> BaseException:
    while isinstance(exc, BaseExceptionGroup):
        exc = exc.exceptions[0]
    return exc


#: Allocations between young-generation collections, and young (then middle)
#: collections between older ones. CPython's defaults (700, 10, 10) make a node run a
#: full collection every few seconds under load, over everything it holds (metadata,
#: Raft entries, caches): measured here, 3 nodes at 1000 rec/s, 7 runs each way, p99.9
#: end-to-end latency 8-31 ms with the defaults (25-31 ms in 5 of 7) and 5.5-10.8 ms
#: with these (p99 3.7-5.9 -> 3.1-4.9 ms). Reference cycles are still collected, only
#: less often.
GC_THRESHOLDS = (50_000, 20, 100)


def _tune_gc() -> None:
    """Collect once, move what start-up built out of the collector's sight (it lives as
    long as the process) and space collections out (see GC_THRESHOLDS)."""
    gc.collect()
    gc.freeze()
    gc.set_threshold(*GC_THRESHOLDS)


#: Open files the node asks for (soft RLIMIT_NOFILE, up to the hard limit): two
#: listeners of 4,096 connections each, plus segments, indexes and peers.
NOFILE_WANTED = 65_536


def _raise_nofile() -> None:
    """Raise the soft open-files limit toward NOFILE_WANTED (never above the hard
    limit): a default soft limit of 1,024 would run out long before the connection caps."""
    import resource

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    want = NOFILE_WANTED if hard == resource.RLIM_INFINITY else min(NOFILE_WANTED, hard)
    if soft != resource.RLIM_INFINITY and soft < want:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (want, hard))
        except (ValueError, OSError):
            pass  # keep the limit we have; accept errors are handled (sockio.accept_loop)


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    # Library loggers (pysyncobj's, the quorum's) on stderr with their level, so a
    # CRITICAL line is findable (tests fail on any: see tests/conftest.py).
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr,
                        format="level=%(levelname)s logger=%(name)s msg=%(message)s")
    try:
        config = NodeConfig.load(args.config, overrides_from_args(args))
    except ConfigError as e:
        print(f"raftlog node: invalid config: {e}", file=sys.stderr)
        return 2
    import trio

    from raftlog.filemodes import restrict_umask

    from .node import serve_until_signalled

    restrict_umask()  # records and credentials: this user's only (raftlog/filemodes.py)

    _tune_gc()
    _raise_nofile()
    # A file-size limit (RLIMIT_FSIZE) must give a write error the node reports
    # (KAFKA_STORAGE_ERROR, see node/disk.py), not SIGXFSZ's default: a core dump.
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    try:
        try:
            trio.run(serve_until_signalled, config)
        except BaseExceptionGroup as group:  # trio nurseries wrap errors in groups
            raise _first_leaf(group) from None
    except ConfigError as e:
        print(f"raftlog node: {e}", file=sys.stderr)
        return 2
    except DataDirInUse as e:
        print(f"raftlog node: cannot start: {e}", file=sys.stderr)
        return 1
    except OSError as e:  # (strerror: the message alone, without "[Errno N]")
        what = e.strerror or str(e)
        if e.filename:
            what += f": {e.filename}"
        print(f"raftlog node: cannot start: {what}", file=sys.stderr)
        return 1
    except ApiError as e:  # e.g. the metadata quorum never answered the registration
        print(f"raftlog node: cannot join the cluster: {e.message}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:  # a second signal during shutdown: logs are already closed
        return 0
    return 0


if __name__ == "__main__":
    sys.exit(main())
