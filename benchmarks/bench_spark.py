"""Benchmark: records/s of the Spark connector vs the plain client, on one machine.

    python benchmarks/bench_spark.py --records 1000000 --master 'local[2]'

Starts its own server on a temp data dir, loads N records into one topic, then measures:
1. client  — `seglog.client` paging `diff` over the whole topic in this one process;
2. online  — `spark.read.format("seglog")` of the whole topic into the `noop` sink;
3. stream  — `readStream.format("seglog")` (availableNow) → `writeStream.format("seglog")`
             into a second topic: read, Arrow, sink chunks with idempotency keys, appends;
4. files-1p — `seglog.storage.segment.iter_segment` over every sealed segment, one process;
5. offline — after a clean server stop, `spark.read.format("seglog").option("path", dir)`.
The first Spark query of a session pays 5-7 s of worker start-up, so a warm-up query runs first.
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
from pathlib import Path
from typing import Any


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

    c = Client(url, timeout=120)
    batch = 10_000
    for lo in range(0, n, batch):
        recs = [
            {"data": {"i": i, "user": f"u{i % 1000}", "page": f"/p/{i % 50}"}, "tag": f"t{i % 10}"}
            for i in range(lo, min(n, lo + batch))
        ]
        c.append(topic, recs, return_seqs=False)


def timed(label: str, n: int, fn: Any) -> tuple[str, int, float]:
    t0 = time.perf_counter()
    got = fn()
    dt = time.perf_counter() - t0
    if got is not None and got != n:
        print(f"warning: {label} saw {got} records, expected {n}", file=sys.stderr)
    print(f"{label:10s} {n:>10,d} records {dt:8.2f} s {n / dt:>12,.0f} rec/s", flush=True)
    return label, n, dt


def client_read(url: str, topic: str) -> int:
    from seglog.client import Client

    c = Client(url, timeout=120)
    cursor, count = 0, 0
    while True:
        res = c.diff(topic, cursor, limit=1000, include_tags=True, max_batch_bytes=8 * 1024 * 1024)
        count += len(res.records)
        if res.caught_up:
            return count
        cursor = res.next_from_seq


def files_read(data_dir: Path) -> int:
    from seglog.core.payload_blob import decode_blob
    from seglog.storage.fs import RealFs
    from seglog.storage.segment import iter_segment, list_topic_segments
    from seglog.storage.snapshot import load_latest_snapshot

    body = load_latest_snapshot(RealFs(), data_dir / "meta")
    assert body is not None
    count = 0
    for t in body["topics"]:
        if t["name"] != "bench":
            continue
        for seg in list_topic_segments(data_dir, int(t["topic_id"])):
            for rec in iter_segment(seg):
                if not rec.deleted:
                    decode_blob(rec.blob)
                    count += 1
    return count


def main() -> int:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--records", type=int, default=1_000_000)
    p.add_argument("--master", default="local[2]")
    p.add_argument("--partition-records", type=int, default=100_000)
    a = p.parse_args()
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    from pyspark.sql import SparkSession

    base = Path(tempfile.mkdtemp(prefix="seglog-bench-"))
    proc, url = start_server(base)
    n = a.records
    results = []
    try:
        t0 = time.perf_counter()
        load(url, "bench", n)
        print(f"loaded {n:,d} records in {time.perf_counter() - t0:.1f} s", flush=True)
        spark = (
            SparkSession.builder.master(a.master)
            .config("spark.ui.enabled", "false")
            .config("spark.ui.showConsoleProgress", "false")
            .config("spark.driver.host", "127.0.0.1")
            .getOrCreate()
        )
        spark.sparkContext.setLogLevel("ERROR")

        def online() -> Any:
            (
                spark.read.format("seglog")
                .option("url", url)
                .option("topics", "bench")
                .option("maxRecordsPerPartition", a.partition_records)
                .load()
                .write.format("noop")
                .mode("overwrite")
                .save()
            )

        spark.read.format("seglog").option("url", url).option("topics", "bench").option(
            "endingSeqs", '{"bench": 1000}'
        ).load().count()
        results.append(timed("client", n, lambda: client_read(url, "bench")))
        results.append(timed("online", n, online))

        def stream() -> Any:
            q = (
                spark.readStream.format("seglog")
                .option("url", url)
                .option("topics", "bench")
                .option("startingSeqs", "earliest")
                .option("maxRecordsPerPartition", a.partition_records)
                .load()
                .select("data", "tag")
                .writeStream.format("seglog")
                .option("url", url)
                .option("topic", "bench.copy")
                .option("writeBatchSize", 5000)
                .option("checkpointLocation", str(base / "ckpt"))
                .trigger(availableNow=True)
                .start()
            )
            q.awaitTermination()

        results.append(timed("stream", n, stream))
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=120)
        data_dir = base / "data"
        results.append(timed("files-1p", n, lambda: files_read(data_dir)))

        def offline() -> Any:
            (
                spark.read.format("seglog")
                .option("path", str(data_dir))
                .option("topics", "bench")
                .load()
                .write.format("noop")
                .mode("overwrite")
                .save()
            )

        results.append(timed("offline", n, offline))
        spark.stop()
    finally:
        if proc.poll() is None:
            proc.kill()
        shutil.rmtree(base, ignore_errors=True)
    print("\n| path | records | seconds | records/s |\n| --- | ---: | ---: | ---: |")
    for label, cnt, dt in results:
        print(f"| {label} | {cnt:,d} | {dt:.2f} | {cnt / dt:,.0f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
