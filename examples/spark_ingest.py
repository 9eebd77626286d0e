"""Batch ingestion with Spark: read a raftlog topic, write Parquet partitioned by date.

    pip install -e '.[spark]'          # pyspark, pyarrow, pandas<3; Java 17 on PATH
    raftlog up &                        # a node on 127.0.0.1:9092
    python examples/spark_ingest.py --topic events --out /tmp/events-parquet

Each run reads the topic from ``--starting-offsets`` (default earliest) to its high
watermark and appends the rows under ``OUT/date=YYYY-MM-DD/``. For incremental runs
use the streaming form (``--incremental CHECKPOINT_DIR``): a ``trigger(availableNow=True)``
query that reads exactly the records added since the last run and then stops.

``--bench N`` starts its own node, writes N 100-byte records to a 4-partition topic and
times ``spark.read.format("raftlog")...load().count()`` twice (rows/s).
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--bootstrap", default="127.0.0.1:9092", help="host:port of a raftlog node")
    p.add_argument("--topic", default="events", help="topic (or comma-separated topics)")
    p.add_argument("--out", default="./events-parquet", help="Parquet output directory")
    p.add_argument("--starting-offsets", default="earliest", help='earliest or JSON {"t":{"0":5}}')
    p.add_argument("--incremental", metavar="CHECKPOINT_DIR", help="availableNow streaming run")
    p.add_argument("--master", default="local[2]", help="Spark master")
    p.add_argument("--bench", type=int, metavar="N", help="benchmark a count() of N records")
    return p


def ingest(spark, args) -> None:
    from pyspark.sql import functions as F

    reader = spark.readStream if args.incremental else spark.read
    df = (
        reader.format("raftlog")
        .option("bootstrap.servers", args.bootstrap)
        .option("subscribe", args.topic)
        .option("startingOffsets", args.starting_offsets)
        .load()
        .withColumn("date", F.to_date("timestamp"))
    )
    if args.incremental:
        q = (
            df.writeStream.format("parquet")
            .option("path", args.out)
            .option("checkpointLocation", args.incremental)
            .partitionBy("date")
            .trigger(availableNow=True)
            .start()
        )
        q.awaitTermination()
        rows = sum(p["numInputRows"] for p in q.recentProgress)
    else:
        df.write.mode("append").partitionBy("date").parquet(args.out)
        rows = spark.read.parquet(args.out).count()
    print(f"ingested into {args.out}: {rows} rows", file=sys.stderr)


def bench(spark, n: int) -> None:
    """Start a node, write n records to a 4-partition topic, time two counts."""

    from raftlog.client import Admin, Producer
    from raftlog.localnode import free_port, node_command, spawn, wait_listening

    port = free_port()
    data = tempfile.mkdtemp(prefix="raftlog-spark-bench-")
    node = spawn(node_command(port=port, data_dir=data), os.path.join(data, "node.log"))
    boot = f"127.0.0.1:{port}"
    try:
        if not wait_listening("127.0.0.1", port, 20, node):
            raise SystemExit(f"the node did not start; see {data}/node.log")
        with Admin(boot) as a:
            a.create_topic("bench", partitions=4)
        value, chunk = b"x" * 100, 10_000
        t0 = time.perf_counter()
        with Producer(boot, acks=1) as p:
            for i in range(0, n, chunk):
                p.send_many("bench", [value] * min(chunk, n - i), partition=(i // chunk) % 4)
        print(f"produced {n} records in {time.perf_counter() - t0:.1f}s", file=sys.stderr)
        df = (
            spark.read.format("raftlog")
            .option("bootstrap.servers", boot)
            .option("subscribe", "bench")
        )
        for run in (1, 2):
            t0 = time.perf_counter()
            count = df.load().count()
            secs = time.perf_counter() - t0
            assert count == n, count
            print(
                f"run {run}: count() of {count} records in {secs:.2f}s: {count / secs:,.0f} rows/s"
            )
    finally:
        node.terminate()
        node.wait(30)


def main(argv=None) -> None:
    args = build_parser().parse_args(argv)
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)  # workers must import raftlog
    from raftlog.client.spark import local_session

    spark = local_session("raftlog-ingest", args.master)
    spark.sparkContext.setLogLevel("ERROR")
    try:
        bench(spark, args.bench) if args.bench else ingest(spark, args)
    finally:
        spark.stop()


if __name__ == "__main__":
    main()
