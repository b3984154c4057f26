"""In-process engine benchmarks, each reported against a baseline measured in the same run.

- append: batch 1/10/100/1000 × 64 B and 1 KiB payloads, per durability class (batch 1000
  also handed over as a `RecordBatch`);
- diff: limit 1/256/1000 over a 100k-record sealed topic, and columnar at 256/1000 (the
  server's path);
- group commit: fsync-class throughput with 1/8/64 concurrent writer threads (batch 1);
- recovery: replay time for 1M records (WAL only, and snapshot + WAL);
- raw limit: a plain `os.write` + `os.fdatasync` loop with the same batch sizes on the same
  disk, and the best case "one fdatasync per 64-writer group" for the group-commit ratio.

usage: python benchmarks/bench_engine.py [--quick] [--out results.json]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path

import orjson

from seglog.engine.engine import Engine, EngineOptions
from seglog.engine.maintenance import seal_topic
from seglog.model import Durability, RecordBatch, RecordIn, TopicConfig

FRAME_OVERHEAD = 42 + 8  # WAL header + checksum + blob wrapper, roughly


def payload(size: int) -> RecordIn:
    # compact JSON string of exactly `size` bytes: quotes + (size-2) chars
    return RecordIn(orjson.dumps("x" * (size - 2)))


def timed(fn: Callable[[], int], min_s: float) -> float:
    """Run `fn` (returns records done) until `min_s` elapsed; records/s."""
    done = 0
    t0 = time.perf_counter()
    while True:
        done += fn()
        dt = time.perf_counter() - t0
        if dt >= min_s:
            return done / dt


def raw_fdatasync(root: Path, batch: int, size: int, min_s: float) -> float:
    """Records/s of write(batch × framed size) + fdatasync per batch on the same disk."""
    path = root / "raw.bin"
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    os.ftruncate(fd, 64 << 20)
    buf = b"r" * ((size + FRAME_OVERHEAD) * batch)
    off = 0

    def step() -> int:
        nonlocal off
        if off + len(buf) > (64 << 20):
            off = 0
        os.pwrite(fd, buf, off)
        off += len(buf)
        os.fdatasync(fd)
        return batch

    try:
        return timed(step, min_s)
    finally:
        os.close(fd)
        path.unlink()


def open_engine(root: Path, **kw: object) -> Engine:
    e = Engine(EngineOptions(data_dir=root, wal_shards=1, **kw))  # type: ignore[arg-type]
    e.open()
    return e


def bench_append(root: Path, min_s: float) -> list[dict[str, object]]:
    rows: list[dict[str, object]] = []
    for cls in (Durability.EPHEMERAL, Durability.MEMORY, Durability.DISK, Durability.FSYNC):
        for size in (64, 1024):
            for batch in (1, 10, 100, 1000):
                d = root / f"append-{cls.value}-{size}-{batch}"
                e = open_engine(d)
                e.put_topic("b", TopicConfig(durability=cls))
                recs = [payload(size)] * batch
                rate = timed(lambda recs=recs, e=e: e.write("b", recs).count, min_s)
                row: dict[str, object] = {
                    "class": cls.value,
                    "size": size,
                    "batch": batch,
                    "records_per_s": round(rate),
                }
                line = f"append {cls.value:9} {size:5}B batch {batch:5}: {rate:12,.0f} rec/s"
                if batch == 1000:
                    # The same records handed over as columns (`RecordBatch`), as a caller
                    # that builds them so skips the engine's conversion of `RecordIn`s.
                    cols = RecordBatch.of(recs)
                    col_rate = timed(lambda cols=cols, e=e: e.write("b", cols).count, min_s)
                    row["records_per_s_columns"] = round(col_rate)
                    line += f"  (as a RecordBatch: {col_rate:,.0f})"
                e.close(snapshot=False)
                shutil.rmtree(d)
                rows.append(row)
                print(line, flush=True)
    return rows


def bench_diff(root: Path, min_s: float) -> list[dict[str, object]]:
    e = open_engine(root / "diff")
    e.put_topic("r", TopicConfig())
    rec = payload(64)
    for _ in range(100):
        e.write("r", [rec] * 1000)
    seal_topic(e, e.topics["r"])  # reads then come from mmap'd sealed segments
    rows: list[dict[str, object]] = []
    for limit in (1, 256, 1000):
        cursor = [0]

        def step(limit: int = limit, cursor: list[int] = cursor) -> int:
            r = e.read("r", cursor[0], limit=limit)
            cursor[0] = 0 if r.caught_up else r.next_from_seq
            return len(r.records)

        rate = timed(step, min_s)
        rows.append({"limit": limit, "records_per_s": round(rate)})
        print(f"diff limit {limit:5}: {rate:12,.0f} rec/s", flush=True)
    # The server's path: both wire forms of a diff (JSON, Arrow) are built from a columnar
    # read, with no `Record` per row (issue 12's "in process ≥ 3M rec/s").
    for limit in (256, 1000):
        cursor = [0]

        def col_step(limit: int = limit, cursor: list[int] = cursor) -> int:
            r = e.read("r", cursor[0], limit=limit, columnar=True)
            cursor[0] = 0 if r.caught_up else r.next_from_seq
            assert r.columns is not None
            return len(r.columns.seq)

        rate = timed(col_step, min_s)
        rows.append({"limit": limit, "columnar": True, "records_per_s": round(rate)})
        print(f"diff limit {limit:5}, columnar: {rate:12,.0f} rec/s", flush=True)
    e.close(snapshot=False)
    return rows


def bench_group_commit(root: Path, min_s: float) -> list[dict[str, object]]:
    rows: list[dict[str, object]] = []
    for writers in (1, 8, 64):
        d = root / f"gc-{writers}"
        e = open_engine(d)
        e.put_topic("g", TopicConfig(durability=Durability.FSYNC))
        rec = [payload(64)]
        stop = time.perf_counter() + min_s
        counts = [0] * writers

        def worker(
            i: int,
            e: Engine = e,
            counts: list[int] = counts,
            stop: float = stop,
            rec: list[RecordIn] = rec,
        ) -> None:
            while time.perf_counter() < stop:
                e.write("g", rec)
                counts[i] += 1

        t0 = time.perf_counter()
        threads = [threading.Thread(target=worker, args=(i,)) for i in range(writers)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        rate = sum(counts) / (time.perf_counter() - t0)
        m = e.wal.metrics() if e.wal else None
        fsyncs = m.fsyncs if m else 0
        e.close(snapshot=False)
        shutil.rmtree(d)
        raw = raw_fdatasync(root, writers, 64, min_s)
        rows.append(
            {
                "writers": writers,
                "records_per_s": round(rate),
                "raw_batched_limit": round(raw),
                "ratio": round(rate / raw, 3),
                "records_per_fsync": round(sum(counts) / max(fsyncs, 1), 1),
            }
        )
        print(
            f"group commit {writers:3} writers: {rate:10,.0f} rec/s  raw {raw:10,.0f}  ratio {rate / raw:.2f}",
            flush=True,
        )
    return rows


def bench_recovery(root: Path, n: int) -> list[dict[str, object]]:
    rows: list[dict[str, object]] = []
    for mode in ("wal", "snapshot"):
        d = root / f"recovery-{mode}"
        e = open_engine(d, segment_max_events=100_000)
        e.put_topic("big", TopicConfig())
        rec = payload(64)
        for _ in range(n // 1000):
            e.write("big", [rec] * 1000)
        if mode == "snapshot":
            e.snapshot()
        e.close(snapshot=False)
        t0 = time.perf_counter()
        e2 = open_engine(d, segment_max_events=100_000)
        dt = time.perf_counter() - t0
        assert e2.topics["big"].count == n
        e2.close(snapshot=False)
        shutil.rmtree(d)
        rows.append(
            {"mode": mode, "records": n, "seconds": round(dt, 2), "records_per_s": round(n / dt)}
        )
        print(
            f"recovery from {mode:8}: {n:,} records in {dt:.2f}s = {n / dt:,.0f} rec/s", flush=True
        )
    return rows


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--out", type=Path)
    ap.add_argument("--dir", type=Path, help="where to put data (default: a temp dir on /tmp)")
    ap.add_argument(
        "--recovery-only",
        type=int,
        metavar="N",
        help="only the recovery benchmark, with N records (e.g. 10000000)",
    )
    ap.add_argument("--only-diff", action="store_true", help="only the diff benchmark")
    args = ap.parse_args()
    min_s = 0.3 if args.quick else 1.0
    root = Path(tempfile.mkdtemp(prefix="seglog-bench-", dir=args.dir))
    try:
        if args.only_diff:
            rows = bench_diff(root, min_s)
            if args.out:
                args.out.write_text(json.dumps({"diff": rows}, indent=2))
            return
        if args.recovery_only:
            rows = bench_recovery(root, args.recovery_only)
            if args.out:
                args.out.write_text(json.dumps({"recovery": rows}, indent=2))
            return
        raw = [
            {"batch": b, "size": s, "records_per_s": round(raw_fdatasync(root, b, s, min_s))}
            for s in (64, 1024)
            for b in (1, 10, 100, 1000)
        ]
        for r in raw:
            print(
                f"raw write+fdatasync {r['size']:5}B batch {r['batch']:5}: {r['records_per_s']:12,} rec/s",
                flush=True,
            )
        result = {
            "machine": {
                "cpus": os.cpu_count(),
                "python": platform.python_version(),
                "platform": platform.platform(),
            },
            "raw_fdatasync": raw,
            "append": bench_append(root, min_s),
            "diff": bench_diff(root, min_s),
            "group_commit": bench_group_commit(root, min_s),
            "recovery": bench_recovery(root, 200_000 if args.quick else 1_000_000),
        }
        if args.out:
            args.out.write_text(json.dumps(result, indent=2))
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
