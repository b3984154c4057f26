"""Soak: sustained batched writes with a reader beside them, in 10-second windows (issue 12).

8 aiohttp writers each POST batches of 100 records × ~100 B to one `disk` topic as fast as
the server answers; one reader follows the head with `diff` pages of 1,000. Every window
reports write requests/s, write p50/p99, reader p99 and the server's RSS, so stalls (a
snapshot holding the GIL, a seal burst) and memory growth show up as uneven windows. The
generator's own ceiling (aiohttp against `GET /v0/health`, same connection count) is
measured first in the same run.

usage: python benchmarks/bench_soak.py [--seconds 240] [--window 10] [--src DIR] [--out F]

`--src` runs the server from another checkout's `src/` (an A/B against an older commit).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import aiohttp

WRITERS = 8
BATCH = 100
READ_LIMIT = 1000


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def rss_mb(pid: int) -> tuple[float, float]:
    """(anonymous, file-backed) resident MB: mapped segment and snapshot files count in
    RSS as file pages the kernel can drop; anonymous memory is the heap."""
    got = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(("RssAnon:", "RssFile:")):
            got[line.split(":")[0]] = int(line.split()[1]) / 1024
    return got.get("RssAnon", 0.0), got.get("RssFile", 0.0)


def pct(xs: list[float], p: float) -> float:
    if not xs:
        return 0.0
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(p / 100 * len(xs)))]


@dataclass
class Samples:
    writes: list[tuple[float, float]] = field(default_factory=list)  # (end time, latency s)
    reads: list[tuple[float, float, int]] = field(default_factory=list)  # (+ records)
    rss: list[tuple[float, float, float]] = field(default_factory=list)  # (t, anon, file)
    errors: int = 0


async def ceiling(base: str, seconds: float) -> float:
    done = 0
    stop = time.monotonic() + seconds
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=WRITERS)) as s:

        async def one() -> None:
            nonlocal done
            while time.monotonic() < stop:
                async with s.get(f"{base}/v0/health") as r:
                    await r.read()
                done += 1

        await asyncio.gather(*(one() for _ in range(WRITERS)))
    return done / seconds


async def soak(base: str, pid: int, seconds: float) -> Samples:
    out = Samples()
    body = json.dumps({"records": [{"data": "w" * 98} for _ in range(BATCH)]}).encode()
    headers = {"Content-Type": "application/json"}
    t0 = time.monotonic()
    stop = t0 + seconds
    conn = aiohttp.TCPConnector(limit=WRITERS + 2)
    async with aiohttp.ClientSession(connector=conn) as s:
        async with s.put(f"{base}/v0/topics/soak", json={"durability": "disk"}) as r:
            assert r.status in (200, 201), await r.text()

        async def writer() -> None:
            while time.monotonic() < stop:
                a = time.monotonic()
                async with s.post(f"{base}/v0/topics/soak", data=body, headers=headers) as r:
                    await r.read()
                    if r.status != 200:
                        out.errors += 1
                        continue
                b = time.monotonic()
                out.writes.append((b - t0, b - a))

        async def reader() -> None:
            cursor = 0
            while time.monotonic() < stop:
                a = time.monotonic()
                req = {"from_seq": cursor, "limit": READ_LIMIT, "wait_ms": 500}
                async with s.post(f"{base}/v0/topics/soak/diff", json=req) as r:
                    doc = await r.json(loads=json.loads)
                    if r.status != 200:
                        out.errors += 1
                        continue
                b = time.monotonic()
                cursor = doc["next_from_seq"]
                out.reads.append((b - t0, b - a, len(doc["records"])))

        async def sampler() -> None:
            while time.monotonic() < stop:
                out.rss.append((time.monotonic() - t0, *rss_mb(pid)))
                await asyncio.sleep(1.0)

        await asyncio.gather(*(writer() for _ in range(WRITERS)), reader(), sampler())
    return out


def windows(s: Samples, seconds: float, width: float) -> list[dict[str, float]]:
    rows = []
    n = int(seconds // width)
    for k in range(n):
        lo, hi = k * width, (k + 1) * width
        w = [lat for t, lat in s.writes if lo <= t < hi]
        r = [lat for t, lat, _ in s.reads if lo <= t < hi]
        m = [(a, f) for t, a, f in s.rss if lo <= t < hi]
        rows.append(
            {
                "start_s": lo,
                "write_req_s": len(w) / width,
                "write_p50_ms": pct(w, 50) * 1000,
                "write_p99_ms": pct(w, 99) * 1000,
                "read_p99_ms": pct(r, 99) * 1000,
                "rss_anon_mb": max(a for a, _ in m) if m else 0.0,
                "rss_file_mb": max(f for _, f in m) if m else 0.0,
            }
        )
    return rows


def start_server(src: Path, data: Path, port: int, log: Path) -> subprocess.Popen[bytes]:
    env = {**os.environ, "PYTHONPATH": str(src)}
    cmd = [sys.executable, "-m", "seglog.server", "--port", str(port), "--data-dir", str(data)]
    with log.open("wb") as f:
        proc = subprocess.Popen(cmd, env=env, stdout=f, stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.2):
                return proc
        except OSError:
            time.sleep(0.1)
    proc.kill()
    raise RuntimeError(f"server did not start; see {log}")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seconds", type=float, default=240)
    ap.add_argument("--window", type=float, default=10)
    ap.add_argument("--src", type=Path, default=Path(__file__).resolve().parents[1] / "src")
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="seglog-soak-") as d:
        port = free_port()
        proc = start_server(args.src, Path(d) / "data", port, Path(d) / "server.log")
        base = f"http://127.0.0.1:{port}"
        try:
            time.sleep(1.0)
            ceil = asyncio.run(ceiling(base, 3.0))
            s = asyncio.run(soak(base, proc.pid, args.seconds))
        finally:
            proc.send_signal(signal.SIGTERM)
            proc.wait(60)
    rows = windows(s, args.seconds, args.window)
    rates = [r["write_req_s"] for r in rows]
    mean = statistics.fmean(rates) if rates else 0.0
    summary = {
        "src": str(args.src),
        "generator_ceiling_req_s": round(ceil),
        "write_req_s_mean": round(mean, 1),
        "records_written": len(s.writes) * BATCH,
        "min_window_over_mean": round(min(rates) / mean, 3) if mean else 0.0,
        "write_p99_ms": round(pct([lat for _, lat in s.writes], 99) * 1000, 1),
        "read_p99_ms": round(pct([lat for _, lat, _ in s.reads], 99) * 1000, 1),
        "rss_anon_mb_first_last_max": [
            round(s.rss[0][1]) if s.rss else 0,
            round(s.rss[-1][1]) if s.rss else 0,
            round(max(a for _, a, _ in s.rss)) if s.rss else 0,
        ],
        "rss_file_mb_max": round(max(f for _, _, f in s.rss)) if s.rss else 0,
        "errors": s.errors,
    }
    print(f"generator ceiling (aiohttp, {WRITERS} conns, GET /v0/health): {ceil:,.0f} req/s")
    print(
        "| window (s) | write req/s | write p50 ms | write p99 ms | read p99 ms "
        "| RSS anon MB | RSS file MB |"
    )
    print("|---|---|---|---|---|---|---|")
    for r in rows:
        print(
            f"| {r['start_s']:.0f} | {r['write_req_s']:,.0f} | {r['write_p50_ms']:.1f} | "
            f"{r['write_p99_ms']:.1f} | {r['read_p99_ms']:.1f} | {r['rss_anon_mb']:,.0f} | "
            f"{r['rss_file_mb']:,.0f} |"
        )
    print(json.dumps(summary, indent=2))
    if args.out:
        args.out.write_text(json.dumps({"summary": summary, "windows": rows}, indent=2))


if __name__ == "__main__":
    main()
