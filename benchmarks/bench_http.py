"""HTTP benchmarks over loopback against a real `seglog serve` subprocess, driven by wrk.

wrk (a C load generator: `apt-get install wrk`) is used instead of a Python client because
Python clients top out near seglog's own rate here (httpx ~1.5k req/s, aiohttp ~3-6k), which
would measure the client. Every run first measures wrk's ceiling against a trivial ASGI
hello-world served by granian exactly as seglog is served, with the same connection counts.

- single-record write-ack latency p50/p99 per durability class (one connection, one request
  in flight, HTTP/1.1 keep-alive);
- fsync-class group commit: single-record writes over 1/8/64 connections, with the
  records per fdatasync read from `/v0/metrics`;
- batched write throughput: 8 concurrent writers × batch 100 × 100-byte records;
- diff throughput at limit 1/256/1000 (4 connections, each request reads the next window
  of a topic pre-filled with 200k records, so reads move through sealed segments).

usage: python benchmarks/bench_http.py [--quick] [--out results.json]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

HELLO = """
import sys, uvloop
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

# Printed by wrk's done() hook: one JSON line, so nothing depends on wrk's text layout.
SUMMARY_LUA = """
done = function(summary, latency, requests)
  io.write(string.format(
    '{"requests":%d,"duration_us":%d,"non2xx":%d,"errors":%d,' ..
    '"p50_us":%d,"p99_us":%d,"mean_us":%f}\\n',
    summary.requests, summary.duration, summary.errors.status,
    summary.errors.connect + summary.errors.read + summary.errors.write + summary.errors.timeout,
    latency:percentile(50), latency:percentile(99), latency.mean))
end
"""

POST_LUA = """
wrk.method = "POST"
wrk.headers["Content-Type"] = "application/json"
wrk.body = io.open("{body}"):read("*a")
"""

# Each request asks for the window after the previous one; wraps at the pre-filled head.
DIFF_LUA = """
local limit, head, cursor = {limit}, {head}, 0
request = function()
  local body = string.format('{{"from_seq":%d,"limit":%d}}', cursor, limit)
  cursor = cursor + limit
  if cursor + limit > head then cursor = 0 end
  return wrk.format("POST", "{path}", {{["Content-Type"] = "application/json"}}, body)
end
"""


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def http(method: str, url: str, body: object | None = None) -> dict[str, object]:
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(url, data=data, method=method)
    req.add_header("content-type", "application/json")
    with urllib.request.urlopen(req, timeout=60) as r:
        return json.loads(r.read())  # type: ignore[no-any-return]


def fsyncs(base: str) -> int:
    with urllib.request.urlopen(f"{base}/v0/metrics", timeout=30) as r:
        for line in r.read().decode().splitlines():
            if line.startswith("topics_wal_fsyncs_total"):
                return int(float(line.split()[-1]))
    raise RuntimeError("topics_wal_fsyncs_total missing from /v0/metrics")


def wait_up(url: str) -> None:
    for _ in range(600):
        try:
            with urllib.request.urlopen(url, timeout=2) as r:
                if r.status == 200:
                    return
        except OSError:
            pass
        time.sleep(0.05)
    raise RuntimeError(f"{url} never came up")


class Wrk:
    def __init__(self, workdir: Path, seconds: float) -> None:
        self.dir, self.seconds = workdir, seconds
        self.n = 0

    def run(self, url: str, conns: int, script: str = "") -> dict[str, float]:
        self.n += 1
        lua = self.dir / f"s{self.n}.lua"
        lua.write_text(script + SUMMARY_LUA)
        # wrk's duration takes whole seconds ("3s"; "3.0s" and "3000ms" are refused).
        duration = f"{max(1, round(self.seconds))}s"
        cmd = ["wrk", "-t1", f"-c{conns}", f"-d{duration}", "-s", str(lua), url]
        out = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout
        s = json.loads(out.strip().splitlines()[-1])
        if s["non2xx"] or s["errors"]:
            raise RuntimeError(f"wrk saw failures against {url}: {s}")
        s["rps"] = s["requests"] / (s["duration_us"] / 1e6)
        return s

    def post(self, url: str, conns: int, body: bytes) -> dict[str, float]:
        self.n += 1
        path = self.dir / f"b{self.n}.json"
        path.write_bytes(body)
        return self.run(url, conns, POST_LUA.replace("{body}", str(path)))


def bench(base: str, hello: str, wrk: Wrk, quick: bool) -> dict[str, object]:
    out: dict[str, object] = {}
    ceiling = {c: round(wrk.run(hello, c)["rps"]) for c in (1, 8)}
    out["generator_ceiling_rps"] = ceiling
    print(f"wrk ceiling vs hello-world: 1 conn {ceiling[1]:,} req/s, 8 conns {ceiling[8]:,} req/s")

    one = json.dumps({"records": [{"data": "x" * 98}]}).encode()
    lat: dict[str, dict[str, float]] = {}
    for cls in ("ephemeral", "memory", "disk", "fsync"):
        http("PUT", f"{base}/v0/topics/lat-{cls}", {"durability": cls})
        s = wrk.post(f"{base}/v0/topics/lat-{cls}", 1, one)
        lat[cls] = {
            "p50_ms": s["p50_us"] / 1000,
            "p99_ms": s["p99_us"] / 1000,
            "req_per_s": round(s["rps"]),
        }
        print(
            f"write-ack {cls:9}: p50 {lat[cls]['p50_ms']:.3f} ms  p99 {lat[cls]['p99_ms']:.3f} ms"
            f"  ({s['rps']:,.0f} req/s, 1 conn)"
        )
    out["write_ack_latency"] = lat

    # Group commit over HTTP: many single-record fsync-class writers share fdatasyncs.
    group: dict[str, dict[str, float]] = {}
    for conns in (1, 8, 64):
        topic = f"gc-{conns}"
        http("PUT", f"{base}/v0/topics/{topic}", {"durability": "fsync"})
        before = fsyncs(base)
        s = wrk.post(f"{base}/v0/topics/{topic}", conns, one)
        per_fsync = s["requests"] / max(fsyncs(base) - before, 1)
        group[str(conns)] = {
            "records_per_s": round(s["rps"]),
            "p50_ms": s["p50_us"] / 1000,
            "p99_ms": s["p99_us"] / 1000,
            "records_per_fsync": round(per_fsync, 1),
        }
        print(
            f"fsync single-record writes, {conns:2} conns: {s['rps']:,.0f} records/s, "
            f"p50 {s['p50_us'] / 1000:.2f} ms, {per_fsync:.1f} records/fsync"
        )
    # Same-run baseline: the same requests on a disk-class topic (acked after the buffered
    # WAL write, no fdatasync wait) show the request path's own ceiling at 64 connections.
    http("PUT", f"{base}/v0/topics/gc-disk", {"durability": "disk"})
    s = wrk.post(f"{base}/v0/topics/gc-disk", 64, one)
    group["disk_64_baseline"] = {"records_per_s": round(s["rps"]), "p50_ms": s["p50_us"] / 1000}
    print(f"disk  single-record writes, 64 conns: {s['rps']:,.0f} records/s (baseline)")
    out["fsync_group_commit"] = group

    batch = json.dumps({"records": [{"data": "y" * 98} for _ in range(100)]}).encode()
    thr: dict[str, int] = {}
    for cls in ("disk", "fsync"):
        http("PUT", f"{base}/v0/topics/thru-{cls}", {"durability": cls})
        s = wrk.post(f"{base}/v0/topics/thru-{cls}", 8, batch)
        thr[cls] = round(s["rps"] * 100)
        print(f"batched writes {cls:5} (8 writers × 100 × 100 B): {thr[cls]:,} records/s")
    out["batched_write_records_per_s"] = thr

    head = 50_000 if quick else 200_000
    http("PUT", f"{base}/v0/topics/scan", {"durability": "disk"})
    chunk = {"records": [{"data": "z" * 98} for _ in range(1000)]}
    for _ in range(head // 1000):
        http("POST", f"{base}/v0/topics/scan", chunk)
    diff: dict[str, int] = {}
    for limit in (1, 256, 1000):
        script = DIFF_LUA.format(limit=limit, head=head, path="/v0/topics/scan/diff")
        s = wrk.run(f"{base}/v0/topics/scan/diff", 4, script)
        diff[str(limit)] = round(s["rps"] * limit)
        print(f"diff limit {limit:5}: {diff[str(limit)]:,} records/s ({s['rps']:,.0f} req/s)")
    out["diff_records_per_s"] = diff
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()
    if shutil.which("wrk") is None:
        sys.exit("bench_http needs wrk on the PATH (Debian/Ubuntu: apt-get install wrk)")
    seconds = 2 if args.quick else 5
    port, hport = free_port(), free_port()
    with tempfile.TemporaryDirectory() as d:
        srv = subprocess.Popen(
            [sys.executable, "-m", "seglog.server", "--port", str(port), "--data-dir", f"{d}/data"],
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
            wait_up(base + "/v0/ready")
            wait_up(hurl)
            result = bench(base, hurl, Wrk(Path(d), seconds), args.quick)
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
