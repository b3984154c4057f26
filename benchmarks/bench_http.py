"""HTTP benchmarks over loopback against a real `seglog serve` subprocess.

- generator ceiling: the same aiohttp client against a trivial ASGI hello-world served by
  granian the same way (so we know when the client, not seglog, is the limit);
- single-record write-ack latency p50/p99 per durability class (one request at a time);
- batched write throughput: 8 concurrent writers × batch 100 × 100-byte records;
- diff throughput at limit 1/256/1000.

usage: python benchmarks/bench_http.py [--quick] [--out results.json]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from statistics import quantiles

import aiohttp
import orjson

HELLO = """
import asyncio, sys, uvloop
from granian.server.embed import Server
from granian.constants import Interfaces, HTTPModes
async def app(scope, receive, send):
    if scope["type"] != "http":
        return
    await send({"type": "http.response.start", "status": 200,
                "headers": [(b"content-type", b"application/json")]})
    await send({"type": "http.response.body", "body": b'{"ok":true}'})
async def main():
    s = Server(app, address="127.0.0.1", port=int(sys.argv[1]), interface=Interfaces.ASGINL,
               http=HTTPModes.auto, log_enabled=False)
    await s.serve()
uvloop.run(main())
"""


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


async def wait_up(url: str) -> None:
    async with aiohttp.ClientSession() as s:
        for _ in range(300):
            try:
                async with s.get(url) as r:
                    if r.status == 200:
                        return
            except aiohttp.ClientError:
                pass
            await asyncio.sleep(0.05)
    raise RuntimeError(f"{url} never came up")


async def rate(session: aiohttp.ClientSession, fn, concurrency: int, seconds: float) -> float:  # type: ignore[no-untyped-def]
    done = 0
    stop = time.perf_counter() + seconds

    async def worker() -> None:
        nonlocal done
        while time.perf_counter() < stop:
            done += await fn(session)

    t0 = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(concurrency)))
    return done / (time.perf_counter() - t0)


async def bench(base: str, hello: str, seconds: float) -> dict[str, object]:
    out: dict[str, object] = {}
    conn = aiohttp.TCPConnector(limit=64)
    async with aiohttp.ClientSession(connector=conn) as s:

        async def hello_get(sess: aiohttp.ClientSession) -> int:
            async with sess.get(hello) as r:
                await r.read()
            return 1

        ceiling = await rate(s, hello_get, 16, seconds)
        out["generator_ceiling_rps"] = round(ceiling)
        print(f"generator ceiling (hello-world GET, 16 conns): {ceiling:,.0f} req/s", flush=True)

        lat: dict[str, dict[str, float]] = {}
        body1 = orjson.dumps({"records": [{"data": "x" * 98}]})
        hdr = {"content-type": "application/json"}
        for cls in ("ephemeral", "memory", "disk", "fsync"):
            topic = f"lat-{cls}"
            async with s.put(
                f"{base}/v0/topics/{topic}", data=orjson.dumps({"durability": cls}), headers=hdr
            ) as r:
                assert r.status in (200, 201), await r.text()
            samples = []
            t_end = time.perf_counter() + seconds
            while time.perf_counter() < t_end:
                t0 = time.perf_counter()
                async with s.post(f"{base}/v0/topics/{topic}", data=body1, headers=hdr) as r:
                    await r.read()
                samples.append((time.perf_counter() - t0) * 1000)
            q = quantiles(samples, n=100)
            lat[cls] = {"p50_ms": round(q[49], 3), "p99_ms": round(q[98], 3), "n": len(samples)}
            print(
                f"write-ack {cls:9}: p50 {q[49]:.3f} ms  p99 {q[98]:.3f} ms  (n={len(samples)})",
                flush=True,
            )
        out["write_ack_latency"] = lat

        batch = orjson.dumps({"records": [{"data": "y" * 98} for _ in range(100)]})

        async def write_batch(sess: aiohttp.ClientSession) -> int:
            async with sess.post(f"{base}/v0/topics/thru", data=batch, headers=hdr) as r:
                await r.read()
                assert r.status in (200, 201)
            return 100

        thr = await rate(s, write_batch, 8, seconds)
        out["batched_write_records_per_s"] = round(thr)
        print(f"batched writes (8 writers × 100 × 100 B): {thr:,.0f} records/s", flush=True)

        diff: dict[str, int] = {}
        for limit in (1, 256, 1000):
            cursor = {"c": 0}

            async def read(
                sess: aiohttp.ClientSession, limit: int = limit, cursor: dict[str, int] = cursor
            ) -> int:
                body = orjson.dumps({"from_seq": cursor["c"], "limit": limit})
                async with sess.post(f"{base}/v0/topics/thru/diff", data=body, headers=hdr) as r:
                    res = orjson.loads(await r.read())
                cursor["c"] = 0 if res["caught_up"] else res["next_from_seq"]
                return len(res["records"])

            rr = await rate(s, read, 4, seconds)
            diff[str(limit)] = round(rr)
            print(f"diff limit {limit:5}: {rr:,.0f} records/s", flush=True)
        out["diff_records_per_s"] = diff
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()
    seconds = 1.5 if args.quick else 4.0
    port, hport = free_port(), free_port()
    with tempfile.TemporaryDirectory() as d:
        env = dict(os.environ)
        srv = subprocess.Popen(
            [sys.executable, "-m", "seglog.server", "--port", str(port), "--data-dir", f"{d}/data"],
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        hello = subprocess.Popen(
            [sys.executable, "-c", HELLO, str(hport)],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        try:
            base, hurl = f"http://127.0.0.1:{port}", f"http://127.0.0.1:{hport}/"
            asyncio.run(wait_up(base + "/v0/ready"))
            asyncio.run(wait_up(hurl))
            result = asyncio.run(bench(base, hurl, seconds))
            result["machine"] = {"cpus": os.cpu_count(), "python": sys.version.split()[0]}
            if args.out:
                args.out.write_text(json.dumps(result, indent=2))
        finally:
            for p in (srv, hello):
                p.send_signal(signal.SIGTERM)
            for p in (srv, hello):
                try:
                    p.wait(15)
                except subprocess.TimeoutExpired:
                    p.kill()


if __name__ == "__main__":
    main()
