"""What a byte of SSE delivery costs the server beyond its event loop.

The live fan-out paces itself by the loop time its rounds take (`live_fanout.py`), but the
bytes a round hands over are copied again by the HTTP server's I/O threads and by the
kernel, on the same cores, out of the loop's sight. This measures that: 100 SSE watchers
(`live_clients.py` processes) attach to a `disk` topic, wrk writes a backlog for a few
seconds (8 connections × batches of 100 records of ~100 B), then — writers stopped — the
watchers catch up while the server's CPU is read per thread from /proc. The figure the
pacing uses is "other server threads" per byte: an upper bound, as it also holds whatever
the WAL and maintenance threads still do.

    python benchmarks/bench_sse_bytes.py [--watchers 100] [--write-seconds 8] [--seconds 4]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench_http import free_port, http, wait_up
from bench_live import Child, busy_cores, machine_busy, split, wrk_post

TICK = os.sysconf("SC_CLK_TCK")


def thread_cpu_s(pid: int) -> dict[str, float]:
    """CPU seconds per thread of `pid` ("main" for the main thread)."""
    out: dict[str, float] = {}
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{tid}/stat") as f:
                parts = f.read().rsplit(")", 1)[1].split()
        except FileNotFoundError:  # the thread ended meanwhile
            continue
        out["main" if tid == str(pid) else tid] = (int(parts[11]) + int(parts[12])) / TICK
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--watchers", type=int, default=100)
    ap.add_argument("--write-seconds", type=int, default=8)
    ap.add_argument("--seconds", type=float, default=4.0)
    a = ap.parse_args()
    port = free_port()
    with tempfile.TemporaryDirectory() as d:
        srv = subprocess.Popen(
            [sys.executable, "-m", "seglog.server", "--port", str(port), "--data-dir", f"{d}/data"],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        kids: list[Child] = []
        try:
            base = f"http://127.0.0.1:{port}"
            wait_up(base + "/v0/ready")
            http("PUT", f"{base}/v0/topics/t", {"durability": "disk"})
            kids = [
                Child("watch", kind="sse", port=port, topic="t", n=k, sample_every=0)
                for k in split(a.watchers, 2)
            ]
            for c in kids:
                c.read(300)
            body = json.dumps({"records": [{"data": "y" * 98} for _ in range(100)]}).encode()
            w = wrk_post(Path(d), f"{base}/v0/topics/t", 8, a.write_seconds, body, "w")
            # Writers stopped; give the maintenance thread time to seal what they left, so
            # that from here on only the fan-out works (the watchers take far longer).
            time.sleep(3.0)
            for c in kids:
                c.send("snap")
            s0 = [c.read() for c in kids]
            cpu0, busy0, t0 = thread_cpu_s(srv.pid), machine_busy(), time.time()
            time.sleep(a.seconds)
            for c in kids:
                c.send("snap")
            s1 = [c.read() for c in kids]
            cpu1, busy1, t1 = thread_cpu_s(srv.pid), machine_busy(), time.time()
        finally:
            for c in kids:
                c.close()
            srv.terminate()
            srv.wait()
    dt = t1 - t0
    sent = sum(y["bytes"] - x["bytes"] for x, y in zip(s0, s1, strict=True))
    recs = sum(y["records"] - x["records"] for x, y in zip(s0, s1, strict=True))
    gen = sum(y["cpu_s"] - x["cpu_s"] for x, y in zip(s0, s1, strict=True))
    main_s = cpu1["main"] - cpu0["main"]
    other_s = sum(v - cpu0.get(k, 0.0) for k, v in cpu1.items() if k != "main")
    caught = min(y["min_last_seq"] for y in s1)
    print(f"backlog written: {w['requests'] * 100:,} records; slowest watcher at seq {caught:,}")
    print(
        f"delivered {sent / dt / 1e6:,.0f} MB/s ({recs / dt / 1e6:.2f}M records/s, "
        f"{sent / max(recs, 1):.0f} B each) to {a.watchers} watchers"
    )
    print(
        f"cores: server main thread {main_s / dt:.2f}, other server threads {other_s / dt:.2f}, "
        f"watchers {gen / dt:.2f}, whole machine {busy_cores(busy0, busy1)}"
    )
    if sent:
        print(
            f"per byte: main thread {main_s / sent * 1e9:.2f} ns, other server threads "
            f"{other_s / sent * 1e9:.2f} ns, watchers {gen / sent * 1e9:.2f} ns"
        )
    if caught >= w["requests"] * 100:
        print("warning: every watcher caught up inside the window; lengthen --write-seconds")


if __name__ == "__main__":
    main()
