"""Recovery and offline planning of a realistic data directory: records sealed into
segments as the server's maintenance does, tagged, and a final snapshot (a clean stop).

`bench_engine.py --recovery-only` measures replay of records that were never sealed; a
real server seals every `segment_max_events` records, and recovery then reuses those
segments (STORAGE §6 step 8). This measures, on one directory:

- `plan`: `OfflineDir.open` of the topic (what the Spark offline reader's planner runs);
- `open`: `Engine.open` of a copy of the directory (the server's start before "ready"),
  then 21 diffs of 1,000 records around the topic's middle (the first one's segment cold);
- `spark` (only when asked for): the Spark offline read of the directory into the `noop`
  sink in one `local[2]` session, `--reps` times, each followed by `bench_spark.py`'s
  Python-source ceiling over as many rows (the first read pays the JVM's warm-up).

    python benchmarks/bench_recovery_sealed.py --records 10000000 [--dir D] [--reps 2] \
        [--only plan|open|spark]

Each `open` also reports the process's RSS once the engine is open (after a
`gc.collect()`) and its peak so far: run with `--only open` for figures that the plans'
allocations do not blur.

With `--dir`, the directory is built once and reused (so two checkouts can be compared on
the same bytes: run each with its `src` first on `PYTHONPATH`).
"""

from __future__ import annotations

import argparse
import gc
import shutil
import statistics
import tempfile
import time
from pathlib import Path

from seglog.engine.engine import Engine, EngineOptions
from seglog.engine.maintenance import Maintenance
from seglog.model import Durability, RecordIn, TopicConfig
from seglog.offline import OfflineDir

BATCH = 10_000


def rss_mb() -> tuple[float, float]:
    """(VmRSS, VmHWM) of this process in MB."""
    got = {}
    with open("/proc/self/status") as f:
        for line in f:
            key, _, value = line.partition(":")
            if key in ("VmRSS", "VmHWM"):
                got[key] = int(value.split()[0]) / 1024
    return got["VmRSS"], got["VmHWM"]


def middle_diffs(e: Engine, count: int, reads: int = 20) -> list[float]:
    """ms per `Engine.read` of 1,000 records (the server's diff) at positions around the
    middle of the topic (the middle half), the first being the very first read."""
    head = e.topics["t"].head
    step = max(1, count // (4 * reads)) + 13  # off the segment boundaries
    out = []
    for k in range(reads + 1):
        from_seq = head // 2 + (k - reads // 2) * step
        t0 = time.perf_counter()
        r = e.read("t", from_seq, limit=1000, max_bytes=8 << 20)
        out.append((time.perf_counter() - t0) * 1000)
        assert len(r.records) == 1000 and r.records[0].seq == from_seq + 1, "diff lost records"
    return out


def build(root: Path, n: int) -> None:
    e = Engine(EngineOptions(data_dir=root, wal_shards=2))
    e.open()
    e.put_topic("t", TopicConfig(durability=Durability.DISK))
    seal = Maintenance(e)
    t0 = time.perf_counter()
    for b in range(n // BATCH):
        e.write(
            "t",
            [
                RecordIn.of({"i": b * BATCH + i, "name": "event-name", "v": 3.5}, tag=f"g{i % 8}")
                for i in range(BATCH)
            ],
        )
        if b % 20 == 19:
            seal.run_once()
    seal.run_once()
    e.close()  # a clean stop: the final snapshot
    print(f"built {n:,} records in {time.perf_counter() - t0:.1f} s", flush=True)


def spark_reads(root: Path, reps: int) -> None:
    import os
    import sys

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    import bench_spark
    from pyspark import cloudpickle

    cloudpickle.register_pickle_by_value(bench_spark)  # the workers cannot import it

    d = OfflineDir.open(root, None, int(time.time() * 1000), running=False)
    (view,) = d.topics()
    n = view.count
    del d
    spark = bench_spark.bench_session("local[2]")
    try:
        for _ in range(reps):
            t0 = time.perf_counter()
            spark.read.format("seglog").option("path", str(root)).option("topics", "t").load()\
                .write.format("noop").mode("overwrite").save()  # fmt: skip
            dt = time.perf_counter() - t0
            print(f"spark offline {n:,} records: {dt:.2f} s ({n / dt:,.0f} rec/s)", flush=True)
            t0 = time.perf_counter()
            spark.read.format("bench_ceiling").option("rows", n).option("parts", 8).load()\
                .write.format("noop").mode("overwrite").save()  # fmt: skip
            dt = time.perf_counter() - t0
            print(f"  py-ceiling {n:,} rows: {dt:.2f} s ({n / dt:,.0f} rec/s)", flush=True)
    finally:
        spark.stop()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--records", type=int, default=2_000_000)
    ap.add_argument("--dir", type=Path, help="build here once and reuse (default: a temp dir)")
    ap.add_argument("--reps", type=int, default=2)
    ap.add_argument("--only", choices=("plan", "open", "spark"))
    a = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="seglog-bench-rec-"))
    root = a.dir or tmp / "data"
    try:
        if not (root / "meta").exists():
            build(root, a.records)
        if a.only == "spark":
            spark_reads(root, a.reps)
            return
        for _ in range(a.reps if a.only != "open" else 0):
            t0 = time.perf_counter()
            d = OfflineDir.open(root, None, int(time.time() * 1000), running=False)
            dt = time.perf_counter() - t0
            (view,) = d.topics()
            del d
            print(f"plan {view.count:,} records: {dt:.2f} s ({view.count / dt:,.0f} rec/s)")
        for _ in range(a.reps if a.only != "plan" else 0):
            copy = tmp / "copy"
            shutil.rmtree(copy, ignore_errors=True)
            shutil.copytree(root, copy)
            t0 = time.perf_counter()
            e = Engine(EngineOptions(data_dir=copy, wal_shards=2))
            e.open()
            dt = time.perf_counter() - t0
            count = e.topics["t"].count
            gc.collect()
            rss, peak = rss_mb()
            diffs = middle_diffs(e, count)
            e.close(snapshot=False)
            print(
                f"open {count:,} records: {dt:.2f} s ({count / dt:,.0f} rec/s), "
                f"RSS {rss:,.0f} MB (peak {peak:,.0f} MB)",
                flush=True,
            )
            print(
                "diff of 1,000 records from the middle, right after the start: first "
                f"{diffs[0]:.2f} ms (its segment not yet read), then median "
                f"{statistics.median(diffs[1:]):.2f} ms, max {max(diffs[1:]):.2f} ms "
                f"over {len(diffs) - 1} other middle positions",
                flush=True,
            )
            del e
            gc.collect()
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
