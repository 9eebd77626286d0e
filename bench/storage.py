"""Storage benchmark: record batch encode/decode, PartitionLog append/read, raw disk writes.

    python bench/storage.py [--json] [--records N] [--dir DIR]

100-byte values, 1000-record batches, no compression. ``raw_write_mb_s`` is a plain
os.write loop of the same bytes to the same disk in the same run, so
``append_vs_raw`` compares the log with what the disk gives Python.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

from raftlog.config import LogConfig  # noqa: E402
from raftlog.log import PartitionLog  # noqa: E402
from raftlog.records import decode_batch, decode_batches, encode_batch  # noqa: E402

BATCH = 1000
VALUE = b"v" * 100


def bench(n_records: int, directory: str) -> dict:
    n_batches = max(1, n_records // BATCH)
    values = [VALUE] * BATCH
    ts = int(time.time() * 1000)

    t = time.perf_counter()
    batches = [encode_batch(values, timestamp=ts) for _ in range(n_batches)]
    encode_s = time.perf_counter() - t

    t = time.perf_counter()
    for b in batches:
        decode_batch(b, "t", 0)
    decode_s = time.perf_counter() - t
    total_bytes = sum(map(len, batches))

    raw_path = os.path.join(directory, "raw.bin")
    fd = os.open(raw_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    t = time.perf_counter()
    for b in batches:
        os.write(fd, b)
    os.fsync(fd)
    raw_s = time.perf_counter() - t
    os.close(fd)
    os.unlink(raw_path)

    log_dir = os.path.join(directory, "log")
    log = PartitionLog.open(log_dir, LogConfig(segment_bytes=256 * 1024 * 1024))
    t = time.perf_counter()
    for b in batches:
        log.append(b, leader_epoch=1)
    log.flush()
    append_s = time.perf_counter() - t
    log.maybe_increment_high_watermark(log.log_end_offset)

    t = time.perf_counter()
    offset, n_read = 0, 0
    while offset < log.log_end_offset:
        sl = log.read(offset, 1024 * 1024)
        recs = decode_batches(sl.read_bytes(), "t", 0, start_offset=offset)
        n_read += len(recs)
        offset = sl.next_offset
    read_s = time.perf_counter() - t
    log.close()
    shutil.rmtree(log_dir)
    assert n_read == n_batches * BATCH, (n_read, n_batches * BATCH)

    n = n_batches * BATCH
    out = {
        "records": n,
        "batch_records": BATCH,
        "value_bytes": len(VALUE),
        "encode_rec_s": n / encode_s,
        "decode_rec_s": n / decode_s,
        "append_rec_s": n / append_s,
        "read_rec_s": n / read_s,
        "append_mb_s": total_bytes / append_s / 1e6,
        "raw_write_mb_s": total_bytes / raw_s / 1e6,
    }
    out["append_vs_raw"] = out["append_mb_s"] / out["raw_write_mb_s"]
    return out


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--json", action="store_true", help="print one JSON object")
    ap.add_argument("--records", type=int, default=2_000_000)
    ap.add_argument(
        "--dir", default=None, help="directory on the disk to measure (default: a temp dir)"
    )
    args = ap.parse_args()
    directory = tempfile.mkdtemp(dir=args.dir)
    try:
        res = bench(args.records, directory)
    finally:
        shutil.rmtree(directory, ignore_errors=True)
    if args.json:
        print(json.dumps(res))
        return
    for k, v in res.items():
        print(f"{k:>16}  {v:,.2f}" if isinstance(v, float) else f"{k:>16}  {v:,}")


if __name__ == "__main__":
    main()
