"""Reads through Python clients, seglog vs Redis Streams in the same run (issue 12).

100k records of ~100 B are written to a seglog `disk` topic and to a Redis stream (AOF
everysec, the closest durability), then read back in pages of 1,000, three times each:

- seglog: `Client.read(topic, from_seq=0)` (the public iterator: diff pages of 1,000);
  also `Client.diff` page by page, and `Client.read_arrow` (one Arrow table);
- Redis: `XRANGE s <after> + COUNT 1000` with redis-py and hiredis, decoding each entry's
  JSON field (as the seglog client hands out decoded `data`).

The server and redis-server run as subprocesses; the client is one Python process (the
same interpreter for both), so the ratio compares the two stacks end to end.

usage: python benchmarks/bench_reads.py [--records 100000] [--reps 3]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import orjson
import redis
from bench_http import free_port, wait_up  # run as a script: benchmarks/ is on sys.path

from seglog.client import Client

PAGE = 1000


def seglog_server(tmp: Path) -> tuple[subprocess.Popen[bytes], str]:
    port = free_port()
    cmd = [sys.executable, "-m", "seglog.server", "--port", str(port), "--data-dir", str(tmp)]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    wait_up(f"{url}/v0/ready")
    return proc, url


def redis_server(tmp: Path) -> tuple[subprocess.Popen[bytes], redis.Redis]:
    port = free_port()
    exe = shutil.which("redis-server") or "/usr/bin/redis-server"
    args = ["--port", str(port), "--bind", "127.0.0.1", "--dir", str(tmp), "--save", ""]
    args += ["--appendonly", "yes", "--appendfsync", "everysec"]
    proc = subprocess.Popen([exe, *args], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    r = redis.Redis(port=port)
    for _ in range(200):
        try:
            if r.ping():
                return proc, r
        except redis.ConnectionError:
            time.sleep(0.05)
    raise RuntimeError("redis-server never came up")


def timed(fn: object, reps: int) -> list[float]:
    out = []
    for _ in range(reps):
        t0 = time.perf_counter()
        n = fn()  # type: ignore[operator]
        out.append(n / (time.perf_counter() - t0))
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--records", type=int, default=100_000)
    ap.add_argument("--reps", type=int, default=3)
    args = ap.parse_args()
    n = args.records
    with tempfile.TemporaryDirectory(prefix="seglog-reads-") as d:
        tmp = Path(d)
        (tmp / "redis").mkdir()
        sp, url = seglog_server(tmp / "seglog")
        rp, r = redis_server(tmp / "redis")
        try:
            rows = [{"user": i, "event": "click", "page": "/p/" + "x" * 50} for i in range(n)]
            with Client(url) as c:
                c.put_topic("reads", {"durability": "disk"})
                for k in range(0, n, 1000):
                    c.append("reads", [{"data": v} for v in rows[k : k + 1000]])
            pipe = r.pipeline(transaction=False)
            for k, v in enumerate(rows):
                pipe.xadd("s", {"data": json.dumps(v)})
                if k % 1000 == 999:
                    pipe.execute()
            pipe.execute()

            def seglog_read() -> int:
                with Client(url) as c:
                    got = sum(1 for _ in c.read("reads", from_seq=0, limit=PAGE))
                assert got == n, got
                return got

            def seglog_diff() -> int:
                got, cursor = 0, 0
                with Client(url) as c:
                    while True:
                        page = c.diff("reads", from_seq=cursor, limit=PAGE)
                        got += len(page.records)
                        if page.caught_up:
                            break
                        cursor = page.next_from_seq
                assert got == n, got
                return got

            def seglog_arrow() -> int:
                with Client(url) as c:
                    got = c.read_arrow("reads").num_rows
                assert got == n, got
                return got

            def redis_xrange() -> int:
                got, after = 0, "-"
                while True:
                    page = r.xrange("s", min=after, max="+", count=PAGE)
                    if not page:
                        break
                    for _id, fields in page:
                        orjson.loads(fields[b"data"])
                    got += len(page)
                    after = "(" + page[-1][0].decode()
                assert got == n, got
                return got

            results = {
                "redis XRANGE (hiredis)": timed(redis_xrange, args.reps),
                "seglog Client.read": timed(seglog_read, args.reps),
                "seglog Client.diff pages": timed(seglog_diff, args.reps),
                "seglog Client.read_arrow": timed(seglog_arrow, args.reps),
            }
        finally:
            for p in (sp, rp):
                p.send_signal(signal.SIGTERM)
                p.wait(30)
    base = statistics.median(results["redis XRANGE (hiredis)"])
    print(f"{n:,} records of ~100 B, pages of {PAGE}, {args.reps} runs each (median)")
    print("| reader | records/s (median; runs) | ÷ Redis XRANGE |")
    print("|---|---:|---:|")
    for name, rates in results.items():
        med = statistics.median(rates)
        runs = ", ".join(f"{x:,.0f}" for x in rates)
        print(f"| {name} | {med:,.0f} ({runs}) | {med / base:.2f} |")
    print(f"os: {os.uname().release}, cpus: {os.cpu_count()}")


if __name__ == "__main__":
    main()
