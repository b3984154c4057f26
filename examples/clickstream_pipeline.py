"""Clickstream pipeline: seglog topic → windowed counts per page → seglog topic + Parquet.

    python examples/clickstream_pipeline.py --url http://127.0.0.1:4000 --generate 20000 \
        --out /tmp/clicks-out --available-now

runs on `local[*]`; the same file runs unchanged under `spark-submit --master ...` (see
docs/spark.md). Clicks carry their own event time (`data.event_ms`); the stream is windowed
by it with a watermark, so a window is emitted once, after the watermark passes its end
(append mode), to both sinks:
- the topic `--dest` through the seglog streaming sink (idempotent per micro-batch), and
- Parquet files under `<out>/parquet` through Spark's file sink (exactly-once by batch id).
Each sink is its own streaming query with its own checkpoint under `<out>/checkpoints`;
restarting the script resumes both where they stopped.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import Any

CLICK_SCHEMA = "user string, page string, event_ms bigint"


def generate_clicks(
    url: str, topic: str, n: int, *, start_ms: int = 1_700_000_000_000, span_ms: int = 600_000
) -> None:
    """Append `n` synthetic clicks whose event times spread evenly over `span_ms`."""
    from seglog.client import Client

    client = Client(url)
    pages = ["/", "/search", "/item", "/cart", "/checkout"]
    batch: list[dict[str, Any]] = []
    for i in range(n):
        ev = start_ms + (i * span_ms) // max(n, 1)
        batch.append(
            {
                "data": {"user": f"u{i % 97}", "page": pages[(i * 7) % len(pages)], "event_ms": ev},
                "tag": f"u{i % 97}",
            }
        )
        if len(batch) == 5000:
            client.append(topic, batch, return_seqs=False)
            batch = []
    if batch:
        client.append(topic, batch, return_seqs=False)


def build_counts(spark: Any, url: str, source: str, *, max_per_trigger: int = 5000) -> Any:
    """The windowed aggregation: clicks per page per 1-minute event-time window."""
    from pyspark.sql import functions as F

    clicks = (
        spark.readStream.format("seglog")
        .option("url", url)
        .option("topics", source)
        .option("startingSeqs", "earliest")
        .option("maxRecordsPerTrigger", max_per_trigger)
        .option("dataSchema", CLICK_SCHEMA)
        .load()
        .select(
            F.col("data.page").alias("page"),
            F.timestamp_millis(F.col("data.event_ms")).alias("event_time"),
        )
    )
    return (
        clicks.withWatermark("event_time", "1 minute")
        .groupBy(F.window("event_time", "1 minute"), "page")
        .count()
        .select(
            F.col("window.start").alias("window_start"),
            F.col("window.end").alias("window_end"),
            "page",
            F.col("count").alias("clicks"),
        )
    )


def start_pipeline(
    spark: Any,
    url: str,
    source: str,
    dest: str,
    out: Path,
    *,
    available_now: bool,
    sinks: tuple[str, ...] = ("topic", "parquet"),
) -> list[Any]:
    from pyspark.sql import functions as F

    counts = build_counts(spark, url, source)
    as_records = counts.select(
        F.to_json(
            F.struct(
                F.date_format("window_start", "yyyy-MM-dd'T'HH:mm:ssXXX").alias("window_start"),
                "page",
                "clicks",
            )
        ).alias("data"),
        F.col("page").alias("tag"),
    )

    def trig(w: Any) -> Any:
        return (
            w.trigger(availableNow=True) if available_now else w.trigger(processingTime="5 seconds")
        )

    queries = []
    if "topic" in sinks:
        queries.append(start_topic_sink(as_records, url, dest, out, trig))
    if "parquet" in sinks:
        queries.append(start_parquet_sink(counts, out, trig))
    return queries


def start_topic_sink(as_records: Any, url: str, dest: str, out: Path, trig: Any) -> Any:
    return trig(
        as_records.writeStream.format("seglog")
        .option("url", url)
        .option("topic", dest)
        .option("checkpointLocation", str(out / "checkpoints" / "topic"))
        .outputMode("append")
        .queryName("clicks_per_minute_to_seglog")
    ).start()


def start_parquet_sink(counts: Any, out: Path, trig: Any) -> Any:
    return trig(
        counts.writeStream.format("parquet")
        .option("path", str(out / "parquet"))
        .option("checkpointLocation", str(out / "checkpoints" / "parquet"))
        .outputMode("append")
        .queryName("clicks_per_minute_to_parquet")
    ).start()


def session(app: str, master: str | None) -> Any:
    from pyspark.sql import SparkSession

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    builder = SparkSession.builder.appName(app).config("spark.sql.shuffle.partitions", "4")
    # Under spark-submit the master comes from --master; run directly, default to local[*].
    if "PYSPARK_GATEWAY_PORT" not in os.environ:
        builder = builder.master(master or "local[*]").config(
            "spark.ui.showConsoleProgress", "false"
        )
    return builder.getOrCreate()


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--url", default=os.environ.get("SEGLOG_URL", "http://127.0.0.1:4000"))
    p.add_argument("--source", default="clicks")
    p.add_argument("--dest", default="clicks.per_minute")
    p.add_argument("--out", type=Path, default=Path("clickstream-out"))
    p.add_argument("--generate", type=int, default=0, help="append N synthetic clicks first")
    p.add_argument("--available-now", action="store_true", help="process what is there, then stop")
    p.add_argument(
        "--master", default=None, help="only when not under spark-submit (default local[*])"
    )
    a = p.parse_args(argv)
    if a.generate:
        generate_clicks(a.url, a.source, a.generate)
    spark = session("seglog-clickstream", a.master)
    queries = start_pipeline(spark, a.url, a.source, a.dest, a.out, available_now=a.available_now)
    try:
        for q in queries:
            q.awaitTermination()
    finally:
        for q in queries:
            q.stop()
    rows = spark.read.parquet(str(a.out / "parquet")).orderBy("window_start", "page").collect()
    print(f"{len(rows)} closed windows in {a.out / 'parquet'}; first: {rows[:3]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
