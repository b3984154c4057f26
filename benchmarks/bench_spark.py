"""Benchmark: records/s of the Spark connector against ceilings measured in the same run.

    python benchmarks/bench_spark.py --records 10000000 --master 'local[2]'

Starts its own server on a temp data dir and loads N records of ~100 B (a ~60-byte JSON
`data` and a tag) into one `disk` topic, then measures, in this order:

- `read_arrow`, `read_arrow2` — `Client.read_arrow()` of the whole topic in this one
  process, twice;
- `online` — `spark.read.format("seglog")` of the topic into the `noop` sink (Arrow IPC diff);
- `stream` — `readStream` (availableNow) → `writeStream.format("seglog")` into a second
  `disk` topic: read, Arrow, chunked keyed appends;
- `sink` — `spark.read.parquet(...)` of the same rows → `write.format("seglog")` into a
  third `disk` topic;
- after a clean stop (SIGTERM) of the server: `offline` — `spark.read.format("seglog")
  .option("path", dir)` into `noop`;
- the ceilings: `py-ceiling` — a trivial Python data source that yields ready Arrow
  batches of the same rows (4 columns) into `noop`; `parquet` — Spark's Parquet reader
  on the same rows into `noop`.

The offline read and the ceiling run twice each (`offline2`, `py-ceiling2`): ratios are
against the faster ceiling, which is the warm one. The first Spark query of a session pays
several seconds of worker start-up, so a small warm-up query runs first.
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition

from seglog.spark.options import RECORDS_PER_PARTITION


def data_text(i: int) -> str:
    return f'{{"i":{i},"user":"u{i % 1000:04d}","page":"/p/{i % 50:02d}","ok":true}}'


def bench_session(master: str) -> Any:
    """The benchmarks' SparkSession: no UI, loopback driver, 4 GB, the ceiling registered."""
    from pyspark.sql import SparkSession

    spark = (
        SparkSession.builder.master(master)
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.driver.memory", "4g")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    spark.dataSource.register(CeilingSource)
    return spark


class CeilingSource(DataSource):  # type: ignore[misc]
    """Yields pre-built Arrow batches: what a Python data source costs with no work."""

    @classmethod
    def name(cls) -> str:
        return "bench_ceiling"

    def schema(self) -> str:
        return "topic string, seq bigint, ts timestamp, data string"

    def reader(self, schema: Any) -> DataSourceReader:
        return CeilingReader(int(self.options["rows"]), int(self.options["parts"]))


class CeilingReader(DataSourceReader):  # type: ignore[misc]
    BATCH = 65_536

    def __init__(self, rows: int, parts: int) -> None:
        self.rows, self.parts = rows, parts

    def partitions(self) -> list[InputPartition]:
        return [InputPartition(i) for i in range(self.parts)]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        n = self.rows // self.parts + (partition.value < self.rows % self.parts)
        k = min(self.BATCH, n)
        batch = pa.record_batch(
            [
                pa.array(["bench"] * k),
                pa.array(range(k), pa.int64()),
                pa.array([1_700_000_000_000_000 + i for i in range(k)], pa.timestamp("us", "UTC")),
                pa.array([data_text(i) for i in range(k)]),
            ],
            names=["topic", "seq", "ts", "data"],
        )
        while n > 0:
            yield batch if n >= k else batch.slice(0, n)
            n -= k


def start_server(base: Path) -> tuple[subprocess.Popen[bytes], str]:
    import httpx

    port_file = base / "port"
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "seglog.server",
            "--port",
            "0",
            "--port-file",
            str(port_file),
            "--data-dir",
            str(base / "data"),
        ],
        stdout=subprocess.DEVNULL,
        stderr=(base / "server.log").open("wb"),
    )
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if port_file.exists():
            url = "http://" + port_file.read_text().strip()
            try:
                if httpx.get(url + "/v0/ready", timeout=2).status_code == 200:
                    return proc, url
            except httpx.HTTPError:
                pass
        time.sleep(0.05)
    proc.kill()
    raise SystemExit("server did not become ready")


def load(url: str, topic: str, n: int) -> None:
    from seglog.client import Client

    with Client(url, timeout=120) as c:
        c.put_topic(topic, {"durability": "disk"})
        batch = 10_000
        for lo in range(0, n, batch):
            rows = [
                b'{"data":%s,"tag":"t%d"}' % (data_text(i).encode(), i % 10)
                for i in range(lo, min(n, lo + batch))
            ]
            c.append_encoded(topic, b"[" + b",".join(rows) + b"]", return_seqs=False)


def write_parquet(path: Path, n: int, files: int) -> None:
    import pyarrow.parquet as pq

    path.mkdir(parents=True)
    per = -(-n // files)
    for f in range(files):
        lo, hi = f * per, min(n, (f + 1) * per)
        table = pa.table(
            {
                "topic": pa.array(["bench"] * (hi - lo)),
                "seq": pa.array(range(lo + 1, hi + 1), pa.int64()),
                "ts": pa.array(
                    [1_700_000_000_000_000 + i for i in range(lo, hi)], pa.timestamp("us", "UTC")
                ),
                "data": pa.array([data_text(i) for i in range(lo, hi)]),
                "tag": pa.array([f"t{i % 10}" for i in range(lo, hi)]),
            }
        )
        pq.write_table(table, path / f"part-{f:04d}.parquet")


def timed(label: str, n: int, fn: Any, results: list[tuple[str, int, float]]) -> None:
    t0 = time.perf_counter()
    got = fn()
    dt = time.perf_counter() - t0
    if got is not None and got != n:
        print(f"warning: {label} saw {got:,d} records, expected {n:,d}", file=sys.stderr)
    print(f"{label:12s} {n:>11,d} records {dt:8.2f} s {n / dt:>12,.0f} rec/s", flush=True)
    results.append((label, n, dt))


def topic_count(url: str, topic: str) -> int:
    from seglog.client import Client

    with Client(url) as c:
        return int(c.get_topic(topic).count)


def main() -> int:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--records", type=int, default=10_000_000)
    p.add_argument("--master", default="local[2]")
    p.add_argument(
        "--partition-records",
        type=int,
        default=None,
        help="maxRecordsPerPartition for every read (default: the connector's own)",
    )
    a = p.parse_args()
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    from seglog.client import Client

    base = Path(tempfile.mkdtemp(prefix="seglog-bench-"))
    proc, url = start_server(base)
    n = a.records
    per_part = a.partition_records or RECORDS_PER_PARTITION
    parts = max(2, -(-n // per_part))  # the ceiling's and the Parquet files' partitions
    part_opts = {} if a.partition_records is None else {"maxRecordsPerPartition": per_part}
    results: list[tuple[str, int, float]] = []
    try:
        t0 = time.perf_counter()
        load(url, "bench", n)
        dt = time.perf_counter() - t0
        print(f"loaded {n:,d} records in {dt:.1f} s ({n / dt:,.0f} rec/s)", flush=True)
        write_parquet(base / "parquet", n, parts)
        spark = bench_session(a.master)

        def seglog_read() -> Any:  # a fresh reader each time: `.option` mutates it
            return spark.read.format("seglog").option("url", url).option("topics", "bench")

        seglog_read().option("endingSeqs", '{"bench": 1000}').load().count()  # warm-up

        with Client(url, timeout=300) as c:
            # Twice: the server's first snapshot after the load may overlap the first read
            # (it renders every live record, holding the GIL), the second rarely.
            timed("read_arrow", n, lambda: c.read_arrow("bench").num_rows, results)
            timed("read_arrow2", n, lambda: c.read_arrow("bench").num_rows, results)

        def online() -> None:
            (
                seglog_read()
                .options(**part_opts)
                .load()
                .write.format("noop")
                .mode("overwrite")
                .save()
            )

        timed("online", n, online, results)

        def stream() -> int:
            with Client(url) as c:
                c.put_topic("bench.copy", {"durability": "disk"})
            q = (
                spark.readStream.format("seglog")
                .option("url", url)
                .option("topics", "bench")
                .option("startingSeqs", "earliest")
                .options(**part_opts)
                .load()
                .select("data", "tag")
                .writeStream.format("seglog")
                .option("url", url)
                .option("topic", "bench.copy")
                .option("checkpointLocation", str(base / "ckpt"))
                .trigger(availableNow=True)
                .start()
            )
            q.awaitTermination()
            return topic_count(url, "bench.copy")

        timed("stream", n, stream, results)

        def sink() -> int:
            with Client(url) as c:
                c.put_topic("bench.sink", {"durability": "disk"})
            (
                spark.read.parquet(str(base / "parquet"))
                .select("data", "tag")
                .write.format("seglog")
                .option("url", url)
                .option("topic", "bench.sink")
                .mode("append")
                .save()
            )
            return topic_count(url, "bench.sink")

        timed("sink", n, sink, results)
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=300)
        data_dir = base / "data"

        def offline() -> None:
            (
                spark.read.format("seglog")
                .option("path", str(data_dir))
                .option("topics", "bench")
                .options(**part_opts)
                .load()
                .write.format("noop")
                .mode("overwrite")
                .save()
            )

        timed("offline", n, offline, results)
        timed("offline2", n, offline, results)

        def ceiling() -> None:
            (
                spark.read.format("bench_ceiling")
                .option("rows", n)
                .option("parts", parts)
                .load()
                .write.format("noop")
                .mode("overwrite")
                .save()
            )

        timed("py-ceiling", n, ceiling, results)
        timed("py-ceiling2", n, ceiling, results)

        def parquet() -> None:
            spark.read.parquet(str(base / "parquet")).write.format("noop").mode("overwrite").save()

        timed("parquet", n, parquet, results)
        spark.stop()
    finally:
        if proc.poll() is None:
            proc.kill()
        shutil.rmtree(base, ignore_errors=True)
    ceiling_s = min(dt for label, _, dt in results if label.startswith("py-ceiling"))
    print(
        f"\n{n:,d} records, master {a.master}; the ceiling's partitions and parquet files: {parts}"
    )
    print(
        "| path | records | seconds | records/s | × py-ceiling |\n| --- | ---: | ---: | ---: | ---: |"
    )
    for label, cnt, dt in results:
        print(f"| {label} | {cnt:,d} | {dt:.2f} | {cnt / dt:,.0f} | {ceiling_s / dt:.2f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
