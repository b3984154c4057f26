"""Issue 12's side-by-side table: seglog's writes against Redis Streams, in one run.

Each seglog durability class is paired with the Redis persistence that promises the same:
`memory` with AOF off, `disk` with AOF `everysec`, `fsync` with AOF `always`. For each pair:

- batched writes, 8 connections, batches of 100 records of 100 B, native load generators:
  wrk posting `{"records": [...100...]}` to seglog; redis-benchmark pipelining 100 `XADD`s
  per connection (`-P 100`), the Redis form of a 100-record batch;
- single-record write-ack latency p50 / p99 on one connection through Python clients, one
  request in flight: aiohttp `POST` to seglog, and seglog's own `Client.append` and
  `AsyncClient.append`; redis-py (hiredis) `XADD`. Three rounds of `--pings` writes each, alternating seglog and
  Redis; the medians of the rounds' p50 and p99 are reported (a single round moved by 4x on
  this shared machine).

Both generators' ceilings are measured in the same run (wrk against granian's hello-world,
redis-benchmark's `PING` with the same pipelining), and so are the Python clients' floors:
the same single-record `POST` through aiohttp and through the two seglog clients' HTTP
transports (`_h1.H1Pool`, `_h1_aio.AsyncH1Pool`) against that hello-world app, which
answers without doing anything — no seglog write can be acked faster than that. redis-server comes from the machine
(`apt-get install redis-server`); each mode starts a fresh one on an empty directory.

    python benchmarks/bench_vs_redis.py [--seconds 5] [--pings 2000] [--out results.json]
"""

from __future__ import annotations

import argparse
import asyncio
import csv
import io
import json
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench_http import HELLO, Wrk, free_port, http, wait_up

RECORD = "y" * 98  # with the JSON string's quotes, 100 B of `data`
PAIRS = (
    ("memory", "AOF off", ["--appendonly", "no"]),
    ("disk", "AOF everysec", ["--appendonly", "yes", "--appendfsync", "everysec"]),
    ("fsync", "AOF always", ["--appendonly", "yes", "--appendfsync", "always"]),
)


def start_redis(port: int, workdir: Path, extra: list[str]) -> subprocess.Popen[bytes]:
    workdir.mkdir(parents=True, exist_ok=True)
    proc = subprocess.Popen(
        ["redis-server", "--port", str(port), "--save", "", "--dir", str(workdir), *extra],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    for _ in range(200):
        if (
            subprocess.run(
                ["redis-cli", "-p", str(port), "ping"], capture_output=True, text=True
            ).stdout.strip()
            == "PONG"
        ):
            return proc
        time.sleep(0.05)
    proc.kill()
    raise RuntimeError("redis-server never answered PING")


def redis_benchmark(port: int, seconds: float, *command: str) -> float:
    """Requests/s of redis-benchmark running `command` on 8 connections, 100 pipelined:
    sized to last about `seconds` after a short probe."""

    def run(n: int) -> float:
        out = subprocess.run(
            ["redis-benchmark", "-p", str(port), "-c", "8", "-P", "100", "-n", str(n), "--csv",
             *command],
            capture_output=True, text=True, check=True,
        ).stdout  # fmt: skip
        rows = list(csv.reader(io.StringIO(out)))
        return float(rows[1][1])  # header row, then `"<command>","<rps>",...`

    probe = run(100_000)
    return run(max(100_000, int(probe * seconds)))


async def seglog_latencies(base: str, topic: str, n: int) -> list[float]:
    import aiohttp

    body = json.dumps({"records": [{"data": RECORD}]}).encode()
    headers = {"content-type": "application/json"}
    out: list[float] = []
    async with aiohttp.ClientSession() as s:
        for i in range(n + n // 10):
            t0 = time.perf_counter()
            async with s.post(f"{base}/v0/topics/{topic}", data=body, headers=headers) as r:
                await r.read()
                if r.status != 200:
                    raise RuntimeError(f"seglog write answered {r.status}")
            if i >= n // 10:  # the first tenth warms the connection up
                out.append(time.perf_counter() - t0)
    return out


def client_latencies(base: str, topic: str, n: int) -> list[float]:
    from seglog.client import Client

    out: list[float] = []
    with Client(base) as c:
        for i in range(n + n // 10):
            t0 = time.perf_counter()
            c.append(topic, [{"data": RECORD}])
            if i >= n // 10:  # the first tenth warms the connection up
                out.append(time.perf_counter() - t0)
    return out


async def async_client_latencies(base: str, topic: str, n: int) -> list[float]:
    from seglog.client import AsyncClient

    out: list[float] = []
    async with AsyncClient(base) as c:
        for i in range(n + n // 10):
            t0 = time.perf_counter()
            await c.append(topic, [{"data": RECORD}])
            if i >= n // 10:  # the first tenth warms the connection up
                out.append(time.perf_counter() - t0)
    return out


async def aiohttp_floor(url: str, n: int) -> list[float]:
    import aiohttp

    body = json.dumps({"records": [{"data": RECORD}]}).encode()
    out: list[float] = []
    async with aiohttp.ClientSession() as s:
        for i in range(n + n // 10):
            t0 = time.perf_counter()
            async with s.post(url, data=body, headers={"content-type": "application/json"}) as r:
                await r.read()
            if i >= n // 10:
                out.append(time.perf_counter() - t0)
    return out


def client_transport_floor(url: str, n: int) -> list[float]:
    from seglog.client._h1 import H1Pool

    body = json.dumps({"records": [{"data": RECORD}]}).encode()
    headers = {"content-type": "application/json"}
    pool = H1Pool(url, {})
    out: list[float] = []
    try:
        for i in range(n + n // 10):
            t0 = time.perf_counter()
            pool.send("POST", "/v0/topics/x", None, body, headers, 5.0)
            if i >= n // 10:
                out.append(time.perf_counter() - t0)
    finally:
        pool.close()
    return out


async def async_client_transport_floor(url: str, n: int) -> list[float]:
    from seglog.client._h1_aio import AsyncH1Pool

    body = json.dumps({"records": [{"data": RECORD}]}).encode()
    headers = {"content-type": "application/json"}
    pool = AsyncH1Pool(url, {})
    out: list[float] = []
    try:
        for i in range(n + n // 10):
            t0 = time.perf_counter()
            await pool.send("POST", "/v0/topics/x", None, body, headers, 5.0)
            if i >= n // 10:
                out.append(time.perf_counter() - t0)
    finally:
        await pool.close()
    return out


def client_floors(hello: str, n: int) -> dict[str, int]:
    """p50 µs (median of three rounds) of a single-record POST to the hello-world app."""
    rounds: dict[str, list[float]] = {"aiohttp": [], "client": [], "async_client": []}
    for _ in range(3):
        rounds["aiohttp"].append(pct(asyncio.run(aiohttp_floor(hello + "/", n)), 50))
        rounds["client"].append(pct(client_transport_floor(hello, n), 50))
        rounds["async_client"].append(pct(asyncio.run(async_client_transport_floor(hello, n)), 50))
    return {k: round(statistics.median(v) * 1000) for k, v in rounds.items()}


def redis_latencies(port: int, n: int) -> list[float]:
    import redis

    r = redis.Redis(port=port)
    out: list[float] = []
    for i in range(n + n // 10):
        t0 = time.perf_counter()
        r.xadd("lat", {"d": RECORD})
        if i >= n // 10:
            out.append(time.perf_counter() - t0)
    r.close()
    return out


def pct(xs: list[float], q: float) -> float:
    return statistics.quantiles(xs, n=100)[int(q) - 1] * 1000 if len(xs) > 1 else xs[0] * 1000


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seconds", type=float, default=5)
    ap.add_argument("--pings", type=int, default=2000, help="single-record writes per round")
    ap.add_argument("--out", type=Path)
    a = ap.parse_args()
    for tool in ("wrk", "redis-server", "redis-benchmark", "redis-cli"):
        if shutil.which(tool) is None:
            sys.exit(f"bench_vs_redis needs {tool} on the PATH (apt-get install wrk redis-server)")
    results: dict[str, object] = {"seconds": a.seconds, "pings": a.pings}
    port, hport = free_port(), free_port()
    with tempfile.TemporaryDirectory() as d:
        root = Path(d)
        srv = subprocess.Popen(
            [sys.executable, "-m", "seglog.server", "--port", str(port), "--data-dir",
             str(root / "data")],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )  # fmt: skip
        hello = subprocess.Popen(
            [sys.executable, "-c", HELLO, str(hport)],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        base = f"http://127.0.0.1:{port}"
        try:
            wait_up(f"{base}/v0/ready")
            wait_up(f"http://127.0.0.1:{hport}/")
            wrk = Wrk(root, a.seconds)
            batch = json.dumps({"records": [{"data": RECORD} for _ in range(100)]}).encode()
            wrk_ceiling = wrk.run(f"http://127.0.0.1:{hport}/", 8)["rps"]
            floors = client_floors(f"http://127.0.0.1:{hport}", a.pings)
            print(
                "Python clients' floor, single-record POST to a hello-world app, p50: "
                f"aiohttp {floors['aiohttp']} us, Client's transport {floors['client']} us, "
                f"AsyncClient's transport {floors['async_client']} us",
                flush=True,
            )
            results["client_floor_p50_us"] = floors
            rows = []
            for cls, redis_mode, redis_args in PAIRS:
                http("PUT", f"{base}/v0/topics/b-{cls}", {"durability": cls})
                http("PUT", f"{base}/v0/topics/l-{cls}", {"durability": cls})
                seg_batch = wrk.post(f"{base}/v0/topics/b-{cls}", 8, batch)["rps"] * 100
                rport = free_port()
                redis = start_redis(rport, root / f"redis-{cls}", redis_args)
                seg_rounds, cli_rounds, aio_rounds, red_rounds = [], [], [], []
                try:
                    ping_ceiling = redis_benchmark(rport, 1, "PING")
                    red_batch = redis_benchmark(rport, a.seconds, "XADD", "b", "*", "d", RECORD)
                    for _ in range(3):
                        xs = asyncio.run(seglog_latencies(base, f"l-{cls}", a.pings))
                        seg_rounds.append((pct(xs, 50), pct(xs, 99)))
                        xs = client_latencies(base, f"l-{cls}", a.pings)
                        cli_rounds.append((pct(xs, 50), pct(xs, 99)))
                        xs = asyncio.run(async_client_latencies(base, f"l-{cls}", a.pings))
                        aio_rounds.append((pct(xs, 50), pct(xs, 99)))
                        xs = redis_latencies(rport, a.pings)
                        red_rounds.append((pct(xs, 50), pct(xs, 99)))
                finally:
                    redis.terminate()
                    redis.wait()
                seg_p50 = statistics.median(r[0] for r in seg_rounds)
                seg_p99 = statistics.median(r[1] for r in seg_rounds)
                cli_p50 = statistics.median(r[0] for r in cli_rounds)
                cli_p99 = statistics.median(r[1] for r in cli_rounds)
                aio_p50 = statistics.median(r[0] for r in aio_rounds)
                aio_p99 = statistics.median(r[1] for r in aio_rounds)
                red_p50 = statistics.median(r[0] for r in red_rounds)
                red_p99 = statistics.median(r[1] for r in red_rounds)
                row = {
                    "seglog_class": cls,
                    "redis_mode": redis_mode,
                    "seglog_batched_rps": round(seg_batch),
                    "redis_batched_rps": round(red_batch),
                    "batched_ratio": round(seg_batch / red_batch, 3),
                    "seglog_p50_us": round(seg_p50 * 1000),
                    "seglog_p99_us": round(seg_p99 * 1000),
                    "redis_p50_us": round(red_p50 * 1000),
                    "redis_p99_us": round(red_p99 * 1000),
                    "p50_ratio": round(seg_p50 / red_p50, 2),
                    "seglog_client_p50_us": round(cli_p50 * 1000),
                    "seglog_client_p99_us": round(cli_p99 * 1000),
                    "client_p50_ratio": round(cli_p50 / red_p50, 2),
                    "seglog_async_client_p50_us": round(aio_p50 * 1000),
                    "seglog_async_client_p99_us": round(aio_p99 * 1000),
                    "async_client_p50_ratio": round(aio_p50 / red_p50, 2),
                    "redis_benchmark_ping_rps": round(ping_ceiling),
                }
                rows.append(row)
                print(
                    f"{cls:6} vs Redis {redis_mode:12}: batched {seg_batch:,.0f} vs "
                    f"{red_batch:,.0f} rec/s ({row['batched_ratio']:.2f}x); single-record p50 "
                    f"{row['seglog_p50_us']} vs {row['redis_p50_us']} us "
                    f"({row['p50_ratio']:.1f}x slower); seglog Client p50 "
                    f"{row['seglog_client_p50_us']} us ({row['client_p50_ratio']:.1f}x), "
                    f"AsyncClient p50 {row['seglog_async_client_p50_us']} us "
                    f"({row['async_client_p50_ratio']:.1f}x)",
                    flush=True,
                )
            print(
                f"generator ceilings: wrk vs hello-world, 8 conns {wrk_ceiling:,.0f} req/s; "
                "redis-benchmark PING, 8 conns x 100 pipelined "
                + ", ".join(f"{r['redis_benchmark_ping_rps']:,}" for r in rows)
                + " req/s"
            )
            results["wrk_ceiling_8_rps"] = round(wrk_ceiling)
            results["pairs"] = rows
        finally:
            for p in (srv, hello):
                p.terminate()
                p.wait()
    if a.out:
        a.out.write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
