"""Router benchmarks: forwarding throughput in process, and the latency a router adds to
live delivery over HTTP, each against a baseline measured in the same run.

1. Throughput (engine in process, no HTTP): a `disk` source holding N records of 64 B,
   one router into a `disk` dest; time `forward_all()` until the dest holds them all.
   Baseline: appending the same N records straight to a topic in batches of 1,000 (the
   cheapest way in), same run, same disk. Also 4 routers fanning one source out.
2. Added latency (real server over loopback): one writer appends single records at
   1 record/ms to `src`; one SSE watcher reads `src`, another reads `dst` (fed by the
   router). Each record carries its send time; per record, (dst delivery − send) −
   (src delivery − send) is what the router adds. Both watchers and the writer share one
   asyncio process; at ~2k events/s it is far below its ceiling (reported: the same
   process's event parse rate on a pre-recorded stream).

usage: python benchmarks/bench_routers.py [--quick] [--out results.json]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

import aiohttp
import orjson

from seglog.engine.engine import Engine, EngineOptions
from seglog.model import Durability, RecordIn, TopicConfig
from seglog.router_model import RouterSpec

DISK = TopicConfig(durability=Durability.DISK)


def open_engine(root: Path) -> Engine:
    e = Engine(EngineOptions(data_dir=root, wal_shards=1))
    e.open()
    return e


def fill(e: Engine, topic: str, n: int, batch: int = 1000) -> float:
    recs = [RecordIn(orjson.dumps("x" * 62))] * batch
    t0 = time.perf_counter()
    for _ in range(n // batch):
        e.write(topic, recs)
    return n / (time.perf_counter() - t0)


def bench_throughput(root: Path, n: int) -> dict[str, object]:
    out: dict[str, object] = {"records": n}
    d = root / "direct"
    e = open_engine(d)
    e.put_topic("direct", DISK)
    out["direct_append_rec_s"] = round(fill(e, "direct", n))
    e.close(snapshot=False)
    shutil.rmtree(d)
    for fanout in (1, 4):
        d = root / f"fwd{fanout}"
        e = open_engine(d)
        e.put_topic("src", DISK)
        for i in range(fanout):
            e.put_topic(f"dst{i}", DISK)
            e.put_router(RouterSpec(f"r{i}", "src", f"dst{i}"))
        fill(e, "src", n)
        t0 = time.perf_counter()
        while e.forwarder.forward_all():
            pass
        dt = time.perf_counter() - t0
        assert all(e.topics[f"dst{i}"].head == n for i in range(fanout)), "not all forwarded"
        out[f"forward_fanout{fanout}_rec_s"] = round(n * fanout / dt)
        e.close(snapshot=False)
        shutil.rmtree(d)
    print(json.dumps(out), flush=True)
    return out


# ---- added latency over HTTP -----------------------------------------------------------


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_up(url: str) -> None:
    for _ in range(300):
        try:
            with urllib.request.urlopen(url, timeout=1):
                return
        except OSError:
            time.sleep(0.05)
    raise SystemExit(f"server at {url} did not come up")


async def watch(
    http: aiohttp.ClientSession, base: str, topic: str, got: dict[int, int], ready: asyncio.Event
) -> None:
    """Record arrival time (ns) per `data.i` of every record on `topic`."""
    r = await http.post(f"{base}/v0/watch", json={"topics": {topic: {"tail": True}}})
    wid = (await r.json())["wid"]
    async with http.get(f"{base}/v0/watch/{wid}") as resp:
        async for line in resp.content:
            if line.startswith(b"event: caught-up"):
                ready.set()
            if not line.startswith(b'data: {"topic"'):
                continue
            now = time.time_ns()
            frame = orjson.loads(line[6:])
            for rec in frame.get("records", ()):
                got[rec["data"]["i"]] = now


async def latency(base: str, seconds: float, durability: str) -> dict[str, object]:
    async with aiohttp.ClientSession() as http:
        src, dst = f"src-{durability}", f"dst-{durability}"
        for t in (src, dst):
            await http.put(f"{base}/v0/topics/{t}", json={"durability": durability})
        await http.put(f"{base}/v0/routers/{src}-%3E{dst}", json={"source": src, "dest": dst})
        sent: dict[int, int] = {}
        at_src: dict[int, int] = {}
        at_dst: dict[int, int] = {}
        ready_s, ready_d = asyncio.Event(), asyncio.Event()
        tasks = [
            asyncio.create_task(watch(http, base, src, at_src, ready_s)),
            asyncio.create_task(watch(http, base, dst, at_dst, ready_d)),
        ]
        await asyncio.wait_for(asyncio.gather(ready_s.wait(), ready_d.wait()), 10)
        n = int(seconds * 1000)
        t_start = time.perf_counter()
        for i in range(n):
            target = t_start + i / 1000.0
            delay = target - time.perf_counter()
            if delay > 0:
                await asyncio.sleep(delay)
            sent[i] = time.time_ns()
            await http.post(f"{base}/v0/topics/{src}", json={"records": [{"data": {"i": i}}]})
        achieved = n / (time.perf_counter() - t_start)
        deadline = time.perf_counter() + 10
        while (len(at_dst) < n or len(at_src) < n) and time.perf_counter() < deadline:
            await asyncio.sleep(0.05)
        for t in tasks:
            t.cancel()
        warm = n // 10  # warm-up excluded
        both = [i for i in range(warm, n) if i in at_src and i in at_dst]
        src_ms = [(at_src[i] - sent[i]) / 1e6 for i in both]
        dst_ms = [(at_dst[i] - sent[i]) / 1e6 for i in both]
        added = [d - s for s, d in zip(src_ms, dst_ms, strict=True)]

        def pct(xs: list[float], q: float) -> float:
            return round(statistics.quantiles(xs, n=100)[q - 1], 3) if len(xs) > 1 else 0.0

        row = {
            "durability": durability,
            "writes_per_s": round(achieved),
            "measured": len(both),
            "missing_at_dst": n - len(at_dst),
            "src_p50_ms": pct(src_ms, 50),
            "src_p99_ms": pct(src_ms, 99),
            "dst_p50_ms": pct(dst_ms, 50),
            "dst_p99_ms": pct(dst_ms, 99),
            "added_p50_ms": pct(added, 50),
            "added_p99_ms": pct(added, 99),
        }
        print(json.dumps(row), flush=True)
        return row


def parse_ceiling(events: int = 50_000) -> float:
    """Events/s this process parses the way `watch` does (the generator's ceiling)."""
    line = b'data: {"topic":"t","from_seq":1,"head_seq":2,"records":[{"$seq":2,"$ts":1,"data":{"i":7}}],"to_seq":2}'
    got: dict[int, int] = {}
    t0 = time.perf_counter()
    for k in range(events):
        now = time.time_ns()
        for rec in orjson.loads(line[6:])["records"]:
            got[k] = now + rec["data"]["i"]
    return events / (time.perf_counter() - t0)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()
    n = 50_000 if args.quick else 500_000
    seconds = 2.0 if args.quick else 10.0
    result: dict[str, object] = {
        "machine": {"cpus": os.cpu_count(), "python": sys.version.split()[0]},
    }
    with tempfile.TemporaryDirectory() as d:
        result["throughput"] = bench_throughput(Path(d), n)
        port = free_port()
        srv = subprocess.Popen(
            [sys.executable, "-m", "seglog.server", "--port", str(port), "--data-dir", f"{d}/srv"],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        try:
            base = f"http://127.0.0.1:{port}"
            wait_up(base + "/v0/ready")
            result["generator_parse_events_per_s"] = round(parse_ceiling())
            result["latency"] = [
                asyncio.run(latency(base, seconds, cls)) for cls in ("memory", "disk", "fsync")
            ]
        finally:
            srv.send_signal(signal.SIGTERM)
            try:
                srv.wait(15)
            except subprocess.TimeoutExpired:
                srv.kill()
    if args.out:
        args.out.write_text(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
