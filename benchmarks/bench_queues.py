"""Lease-queue benchmark (issue 13): seglog queue topics vs Redis Streams consumer groups.

Everything runs in one process on one event loop (uvloop): N workers are asyncio tasks that
share one aiohttp ClientSession (seglog) or one `redis.asyncio` connection pool (hiredis).
Per cell (a fresh queue topic / stream, N = 1, 8, 64 workers, `--jobs` jobs of ~100-byte JSON):

- seglog pull: each worker loops `POST /v0/topics/:q/claim {"node":"wI","max":10}` then
  `POST /v0/topics/:q/ack` with the claimed seqs (and their lease ids) in one request; a
  worker stops at its first empty claim (no failures are injected, so nothing is re-offered);
- seglog push: each worker holds `GET /v0/topics/:q/work?node=wI&max=10` (SSE) open, parses
  `event: job` frames, and acks every batch that arrived in one read in one request, until
  all jobs are acked;
- Redis: the same jobs XADDed to a stream, `XGROUP CREATE s g 0`, then each worker loops
  `XREADGROUP GROUP g wI COUNT 10 STREAMS s >` + `XACK s g <ids>` and stops at its first
  empty read. Workers parse each job's JSON on both sides.

Durability classes compared: seglog `disk` (acked after the buffered WAL write) vs Redis with
AOF `appendfsync everysec` (the main comparison), and seglog `fsync` vs Redis AOF
`appendfsync always`; Redis without persistence as the upper bound.

Metrics per cell: jobs/s end to end (first claim to last ack), claim latency p50/p99
(XREADGROUP for Redis; not defined for push), ack latency p50/p99, evenness = coefficient of
variation of jobs per worker (population std / mean), CPU cores used by this process and by
the server during the cell. Correctness is checked after every cell, failing loudly: every
seq/id acked exactly once, no ack skipped; seglog `GET /v0/topics/:q` has `count` 0 and
`queue.in_flight` 0; Redis `XPENDING` 0.

Push cells are run once (not `--reps`). (When this benchmark was written, a push stream
refilled only on its 250 ms re-check, so push jobs/s was ≈ N × max / 0.25 s; an ack now
wakes the stream that held its jobs at once.)

Generator ceilings, same run, same concurrency: aiohttp GETs against a trivial granian
hello-world (the client's own ceiling) and against seglog's `GET /v0/health`, and
`redis.asyncio` PINGs. Absolute numbers on a shared 2-core box are noisy: read the ratios.

usage: python benchmarks/bench_queues.py [--quick] [--out results.json] [--reps R]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import aiohttp
import orjson
import redis.asyncio as aioredis

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_http import HELLO, free_port, http, wait_up

PY = sys.executable
TICK = os.sysconf("SC_CLK_TCK")
MAX = 10  # jobs per claim / XREADGROUP COUNT / push-stream max
REDIS_MODES = {
    "none": ["--appendonly", "no"],
    "everysec": ["--appendonly", "yes", "--appendfsync", "everysec"],
    "always": ["--appendonly", "yes", "--appendfsync", "always"],
}


class BenchError(RuntimeError):
    pass


def proc_cpu_s(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as f:
        parts = f.read().rsplit(")", 1)[1].split()
    return (int(parts[11]) + int(parts[12])) / TICK


def pct(xs: list[float], p: float) -> float:
    if not xs:
        return float("nan")
    s = sorted(xs)
    return s[min(len(s) - 1, round(p / 100 * (len(s) - 1)))]


def cv(counts: list[int]) -> float:
    m = statistics.fmean(counts)
    return statistics.pstdev(counts) / m if m else float("nan")


def job_payloads(n: int) -> list[bytes]:
    """~100-byte JSON job bodies, each unique."""
    out = []
    for i in range(n):
        body = {"job": i, "kind": "resize", "args": "a" * 60}
        out.append(orjson.dumps(body))
    return out


class Cell:
    """Timing and per-worker bookkeeping of one measured run."""

    def __init__(self, workers: int) -> None:
        self.claim_ms: list[float] = []
        self.ack_ms: list[float] = []
        self.per_worker = [0] * workers
        self.acked: list[Any] = []

    def summary(self, total: int, wall: float, cpu: dict[str, float]) -> dict[str, Any]:
        if len(self.acked) != total or len(set(self.acked)) != total:
            raise BenchError(
                f"acked {len(self.acked)} ({len(set(self.acked))} distinct), expected {total}"
            )
        return {
            "jobs_per_s": round(total / wall),
            "wall_s": round(wall, 3),
            "claim_p50_ms": round(pct(self.claim_ms, 50), 3),
            "claim_p99_ms": round(pct(self.claim_ms, 99), 3),
            "ack_p50_ms": round(pct(self.ack_ms, 50), 3),
            "ack_p99_ms": round(pct(self.ack_ms, 99), 3),
            "claims": len(self.claim_ms),
            "acks": len(self.ack_ms),
            "cv": round(cv(self.per_worker), 3),
            "per_worker_min": min(self.per_worker),
            "per_worker_max": max(self.per_worker),
            **cpu,
        }


class CpuWatch:
    def __init__(self, server_pid: int) -> None:
        self.pid = server_pid
        self.t0 = time.perf_counter()
        self.c0 = time.process_time()
        self.s0 = proc_cpu_s(server_pid)

    def done(self) -> tuple[float, dict[str, float]]:
        wall = time.perf_counter() - self.t0
        return wall, {
            "client_cores": round((time.process_time() - self.c0) / wall, 2),
            "server_cores": round((proc_cpu_s(self.pid) - self.s0) / wall, 2),
        }


# --------------------------------------------------------------------------------------
# seglog


async def post(sess: aiohttp.ClientSession, url: str, body: dict[str, Any]) -> dict[str, Any]:
    async with sess.post(
        url, data=orjson.dumps(body), headers={"content-type": "application/json"}
    ) as r:
        raw = await r.read()
        if r.status != 200:
            raise BenchError(
                f"POST {url} {body if len(str(body)) < 300 else '…'} -> {r.status} {raw[:500]!r}"
            )
        return orjson.loads(raw)  # type: ignore[no-any-return]


async def seglog_fill(
    sess: aiohttp.ClientSession, base: str, topic: str, durability: str, jobs: list[bytes]
) -> float:
    async with sess.put(
        f"{base}/v0/topics/{topic}",
        data=orjson.dumps({"type": "queue", "durability": durability}),
        headers={"content-type": "application/json"},
    ) as r:
        if r.status != 201:
            raise BenchError(f"PUT {topic} -> {r.status} {await r.text()}")
    t0 = time.perf_counter()
    for i in range(0, len(jobs), 1000):
        chunk = b",".join(b'{"data":' + j + b"}" for j in jobs[i : i + 1000])
        async with sess.post(
            f"{base}/v0/topics/{topic}?return_seqs=false",
            data=b'{"records":[' + chunk + b"]}",
            headers={"content-type": "application/json"},
        ) as r:
            if r.status != 200:
                raise BenchError(f"append -> {r.status} {await r.text()}")
    return time.perf_counter() - t0


async def seglog_verify(sess: aiohttp.ClientSession, base: str, topic: str, total: int) -> None:
    async with sess.get(f"{base}/v0/topics/{topic}?touch=false") as r:
        st = await r.json()
    q = st.get("queue", {})
    if (
        st["count"] != 0
        or q.get("in_flight") != 0
        or q.get("ready") != 0
        or st["head_seq"] != total
    ):
        raise BenchError(
            f"{topic} not drained: count {st['count']}, queue {q}, head {st['head_seq']}"
        )


async def seglog_pull(
    sess: aiohttp.ClientSession, base: str, topic: str, n: int, total: int
) -> Cell:
    cell = Cell(n)
    claim_url, ack_url = f"{base}/v0/topics/{topic}/claim", f"{base}/v0/topics/{topic}/ack"

    async def worker(i: int) -> None:
        node = f"w{i}"
        while True:
            t0 = time.perf_counter()
            res = await post(sess, claim_url, {"node": node, "max": MAX})
            cell.claim_ms.append((time.perf_counter() - t0) * 1000)
            claimed = res["claimed"]
            if not claimed:
                return
            seqs = [c["$seq"] for c in claimed]
            for c in claimed:
                if c["data"]["kind"] != "resize":
                    raise BenchError(f"bad job {c}")
            t0 = time.perf_counter()
            a = await post(
                sess,
                ack_url,
                {"node": node, "seqs": seqs, "lease_ids": [c["lease_id"] for c in claimed]},
            )
            cell.ack_ms.append((time.perf_counter() - t0) * 1000)
            if a["acked"] != len(seqs) or a["skipped"]:
                raise BenchError(f"ack of {seqs} by {node}: {a}")
            cell.per_worker[i] += len(seqs)
            cell.acked.extend(seqs)

    await asyncio.gather(*(worker(i) for i in range(n)))
    return cell


async def seglog_push(
    sess: aiohttp.ClientSession, base: str, topic: str, n: int, total: int
) -> Cell:
    cell = Cell(n)
    ack_url = f"{base}/v0/topics/{topic}/ack"
    done = asyncio.Event()

    async def worker(i: int) -> None:
        node = f"w{i}"
        url = f"{base}/v0/topics/{topic}/work?node={node}&max={MAX}"
        async with sess.get(url, headers={"accept": "text/event-stream"}) as r:
            if r.status != 200:
                raise BenchError(f"GET {url} -> {r.status} {await r.text()}")
            buf = b""
            while not done.is_set():
                chunk = await r.content.readany()
                if not chunk:
                    raise BenchError(f"{url}: stream ended early")
                buf += chunk
                *frames, buf = buf.split(b"\n\n")
                seqs, leases = [], []
                for fr in frames:
                    event, data = b"", b""
                    for line in fr.split(b"\n"):
                        if line.startswith(b"event:"):
                            event = line[6:].strip()
                        elif line.startswith(b"data:"):
                            data = line[5:].strip()
                    if event == b"job":
                        j = orjson.loads(data)
                        if j["data"]["kind"] != "resize":
                            raise BenchError(f"bad job {j}")
                        seqs.append(j["$seq"])
                        leases.append(j["lease_id"])
                    elif event:
                        raise BenchError(f"{url}: unexpected frame {fr!r}")
                if not seqs:
                    continue
                t0 = time.perf_counter()
                a = await post(sess, ack_url, {"node": node, "seqs": seqs, "lease_ids": leases})
                cell.ack_ms.append((time.perf_counter() - t0) * 1000)
                if a["acked"] != len(seqs) or a["skipped"]:
                    raise BenchError(f"ack of {seqs} by {node}: {a}")
                cell.per_worker[i] += len(seqs)
                cell.acked.extend(seqs)
                if len(cell.acked) >= total:
                    done.set()

    tasks = [asyncio.create_task(worker(i)) for i in range(n)]
    waiter = asyncio.create_task(done.wait())
    pending: set[asyncio.Task[Any]] = {*tasks, waiter}
    while not done.is_set():
        finished, pending = await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)
        for t in finished:
            if t is not waiter and t.exception() is not None:
                for p in pending:
                    p.cancel()
                raise t.exception()  # type: ignore[misc]
    for t in tasks:
        t.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
    return cell


# --------------------------------------------------------------------------------------
# Redis


async def redis_fill(r: aioredis.Redis, key: str, jobs: list[bytes]) -> float:
    await r.delete(key)
    t0 = time.perf_counter()
    for i in range(0, len(jobs), 1000):
        pipe = r.pipeline(transaction=False)
        for j in jobs[i : i + 1000]:
            pipe.xadd(key, {"data": j})
        await pipe.execute()
    await r.xgroup_create(key, "g", id="0")
    return time.perf_counter() - t0


async def redis_pull(r: aioredis.Redis, key: str, n: int, total: int) -> Cell:
    cell = Cell(n)

    async def worker(i: int) -> None:
        node = f"w{i}"
        while True:
            t0 = time.perf_counter()
            res = await r.xreadgroup("g", node, {key: ">"}, count=MAX)
            cell.claim_ms.append((time.perf_counter() - t0) * 1000)
            if not res or not res[0][1]:
                return
            entries = res[0][1]
            ids = [e[0] for e in entries]
            for _id, fields in entries:
                if orjson.loads(fields[b"data"])["kind"] != "resize":
                    raise BenchError(f"bad job {fields}")
            t0 = time.perf_counter()
            acked = await r.xack(key, "g", *ids)
            cell.ack_ms.append((time.perf_counter() - t0) * 1000)
            if acked != len(ids):
                raise BenchError(f"XACK {ids} by {node}: {acked}")
            cell.per_worker[i] += len(ids)
            cell.acked.extend(ids)

    await asyncio.gather(*(worker(i) for i in range(n)))
    return cell


async def redis_verify(r: aioredis.Redis, key: str, total: int) -> None:
    p = await r.xpending(key, "g")
    n = await r.xlen(key)
    if p["pending"] != 0 or n != total:
        raise BenchError(f"{key}: XPENDING {p}, XLEN {n} (expected 0 pending, {total} entries)")


# --------------------------------------------------------------------------------------
# ceilings


async def ceiling_http(sess: aiohttp.ClientSession, url: str, n: int, requests: int) -> float:
    left = requests

    async def one() -> None:
        nonlocal left
        while left > 0:
            left -= 1
            async with sess.get(url) as r:
                await r.read()
                if r.status != 200:
                    raise BenchError(f"GET {url} -> {r.status}")

    t0 = time.perf_counter()
    await asyncio.gather(*(one() for _ in range(n)))
    return requests / (time.perf_counter() - t0)


async def ceiling_redis(r: aioredis.Redis, n: int, requests: int) -> float:
    left = requests

    async def one() -> None:
        nonlocal left
        while left > 0:
            left -= 1
            await r.ping()

    t0 = time.perf_counter()
    await asyncio.gather(*(one() for _ in range(n)))
    return requests / (time.perf_counter() - t0)


# --------------------------------------------------------------------------------------


def start_redis(tmp: Path, mode: str) -> tuple[subprocess.Popen[bytes], int]:
    port = free_port()
    d = tmp / f"redis-{mode}"
    d.mkdir()
    exe = shutil.which("redis-server") or "/usr/bin/redis-server"
    p = subprocess.Popen(
        [exe, "--port", str(port), "--bind", "127.0.0.1", "--dir", str(d), "--save", ""]
        + REDIS_MODES[mode],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    return p, port


async def wait_redis(r: aioredis.Redis) -> None:
    for _ in range(200):
        try:
            if await r.ping():
                return
        except (aioredis.ConnectionError, OSError):
            pass
        await asyncio.sleep(0.05)
    raise BenchError("redis-server never came up")


def fmt(c: dict[str, Any]) -> str:
    claim = (
        ""
        if c["claim_p50_ms"] != c["claim_p50_ms"]
        else (f"claim p50/p99 {c['claim_p50_ms']:.2f}/{c['claim_p99_ms']:.2f} ms, ")
    )
    return (
        f"{c['jobs_per_s']:>8,} jobs/s, {claim}ack p50/p99 {c['ack_p50_ms']:.2f}/"
        f"{c['ack_p99_ms']:.2f} ms, CV {c['cv']:.3f}, cores client {c['client_cores']:.2f} "
        f"server {c['server_cores']:.2f}"
    )


async def run(
    args: argparse.Namespace,
    tmp: Path,
    base: str,
    srv_pid: int,
    hello: str,
    redis_ports: dict[str, tuple[int, int]],
) -> dict[str, Any]:
    total = args.jobs
    jobs = job_payloads(total)
    ns = [int(x) for x in args.workers.split(",")]
    maxn = max(ns)
    conn = aiohttp.TCPConnector(limit=2 * maxn + 16, limit_per_host=0)
    out: dict[str, Any] = {"ceiling": {}, "cells": {}}
    # No total timeout: a push cell at N=1 streams for minutes (see above); a stalled read
    # still fails after `sock_read`.
    timeout = aiohttp.ClientTimeout(total=None, sock_read=120)
    async with aiohttp.ClientSession(connector=conn, timeout=timeout) as sess:
        rcs = {
            m: aioredis.Redis(port=p, max_connections=maxn + 8, single_connection_client=False)
            for m, (p, _pid) in redis_ports.items()
        }
        for r in rcs.values():
            await wait_redis(r)
        seq = 0
        for n in ns:
            # Generator ceilings at this concurrency, as many requests as a pull cell makes.
            reqs = max(2000, 2 * total // MAX)
            ceil = {
                "aiohttp_hello_rps": round(await ceiling_http(sess, hello, n, reqs)),
                "aiohttp_seglog_health_rps": round(
                    await ceiling_http(sess, f"{base}/v0/health", n, reqs)
                ),
                "redis_ping_rps": round(await ceiling_redis(rcs["none"], n, reqs)),
            }
            out["ceiling"][str(n)] = ceil
            print(
                f"N={n:2} ceilings: aiohttp→hello {ceil['aiohttp_hello_rps']:,} req/s, "
                f"aiohttp→seglog /v0/health {ceil['aiohttp_seglog_health_rps']:,} req/s, "
                f"redis PING {ceil['redis_ping_rps']:,} req/s",
                flush=True,
            )
            kinds = ["seglog_disk_pull", "seglog_disk_push", "seglog_fsync_pull"] + [
                f"redis_{m}" for m in rcs
            ]
            for kind in kinds:
                reps = []
                # One run for push: its rate is set by the stream's 250 ms re-check (see the
                # module docstring), not by noise, and at N=1 one run takes minutes.
                for _rep in range(1 if kind.endswith("_push") else args.reps):
                    seq += 1
                    if kind.startswith("seglog"):
                        _, cls, mode = kind.split("_")
                        topic = f"jobs-{seq}"
                        fill_s = await seglog_fill(sess, base, topic, cls, jobs)
                        cpu = CpuWatch(srv_pid)
                        fn = seglog_pull if mode == "pull" else seglog_push
                        cell = await fn(sess, base, topic, n, total)
                        wall, c = cpu.done()
                        await seglog_verify(sess, base, topic, total)
                        async with sess.delete(f"{base}/v0/topics/{topic}") as resp:
                            await resp.read()
                    else:
                        m = kind.split("_", 1)[1]
                        r = rcs[m]
                        key = f"s{seq}"
                        fill_s = await redis_fill(r, key, jobs)
                        cpu = CpuWatch(redis_ports[m][1])
                        cell = await redis_pull(r, key, n, total)
                        wall, c = cpu.done()
                        await redis_verify(r, key, total)
                        await r.delete(key)
                    s = cell.summary(total, wall, c)
                    s["fill_jobs_per_s"] = round(total / fill_s)
                    if kind.endswith("_push"):
                        s["claim_p50_ms"] = s["claim_p99_ms"] = None
                    reps.append(s)
                best = sorted(reps, key=lambda x: x["jobs_per_s"])[len(reps) // 2]  # median
                best = dict(best)
                best["jobs_per_s_reps"] = [x["jobs_per_s"] for x in reps]
                out["cells"].setdefault(str(n), {})[kind] = best
                shown = dict(best)
                if shown["claim_p50_ms"] is None:
                    shown["claim_p50_ms"] = shown["claim_p99_ms"] = float("nan")
                print(f"N={n:2} {kind:18} {fmt(shown)}  reps {best['jobs_per_s_reps']}", flush=True)
            cells = out["cells"][str(n)]
            for ref in ("everysec", "none"):
                rr = cells[f"redis_{ref}"]["jobs_per_s"]
                print(
                    f"N={n:2} ratios vs redis {ref}: disk pull "
                    f"{cells['seglog_disk_pull']['jobs_per_s'] / rr:.2f}, disk push "
                    f"{cells['seglog_disk_push']['jobs_per_s'] / rr:.2f}",
                    flush=True,
                )
            if "redis_always" in cells:
                print(
                    f"N={n:2} ratio seglog fsync pull ÷ redis always: "
                    f"{cells['seglog_fsync_pull']['jobs_per_s'] / cells['redis_always']['jobs_per_s']:.2f}",
                    flush=True,
                )
        for r in rcs.values():
            await r.aclose()
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true", help="smoke run: 2k jobs, 1 rep")
    ap.add_argument("--out", type=Path)
    ap.add_argument("--jobs", type=int, default=None, help="default 20000 (2000 with --quick)")
    ap.add_argument("--workers", default="1,8,64")
    ap.add_argument("--reps", type=int, default=None, help="runs per cell, median kept (default 3)")
    args = ap.parse_args()
    args.jobs = args.jobs or (2000 if args.quick else 20000)
    args.reps = args.reps or (1 if args.quick else 3)
    if shutil.which("redis-server") is None and not Path("/usr/bin/redis-server").exists():
        sys.exit("bench_queues needs redis-server (Debian: apt-get install redis-server)")
    result: dict[str, Any] = {
        "machine": {
            "nproc": os.cpu_count(),
            "kernel": platform.release(),
            "python": sys.version.split()[0],
            "redis": subprocess.run(
                ["redis-server", "--version"], capture_output=True, text=True
            ).stdout.strip(),
        },
        "command": " ".join([Path(PY).name, *sys.argv]),
        "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "jobs": args.jobs,
        "max_per_claim": MAX,
        "reps": args.reps,
    }
    print(json.dumps(result), flush=True)
    port, hport = free_port(), free_port()
    procs: list[subprocess.Popen[bytes]] = []
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        try:
            srv = subprocess.Popen(
                [PY, "-m", "seglog.server", "--port", str(port), "--data-dir", f"{d}/data"],
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
            procs.append(srv)
            hello = subprocess.Popen(
                [PY, "-c", HELLO, str(hport)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
            )
            procs.append(hello)
            redis_ports = {}
            for m in REDIS_MODES:
                p, rport = start_redis(tmp, m)
                procs.append(p)
                redis_ports[m] = (rport, p.pid)
            base, hurl = f"http://127.0.0.1:{port}", f"http://127.0.0.1:{hport}/"
            wait_up(base + "/v0/ready")
            wait_up(hurl)
            http("GET", base + "/v0/health")
            result["seglog_pid"] = srv.pid
            try:
                import uvloop

                runner = uvloop.run
            except ImportError:  # pragma: no cover
                runner = asyncio.run
            result.update(runner(run(args, tmp, base, srv.pid, hurl, redis_ports)))
        finally:
            for p in procs:
                p.send_signal(signal.SIGTERM)
            for p in procs:
                try:
                    p.wait(15)
                except subprocess.TimeoutExpired:
                    p.kill()
    result["finished"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    if args.out:
        args.out.write_text(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
