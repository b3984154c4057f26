"""Other requests while one watcher drains a long backlog (issue 10: a consumer that is
busy catching up must not slow the server for anyone else).

A fresh server gets `--records` records (batches of 10,000), then one SSE watch with
`limit` records per frame is read to its `caught-up` by a separate process (raw socket
reads, so the reader's own parsing does not compete with the probes), while this process
sends `GET /v0/health` every 20 ms on one keep-alive connection. Reported per run: how
long the backlog took, and the probes' p50 / p90 / max latency and how many took
> 100 ms. The reader and the prober are separate processes: in one process the reader's
CPU would delay the probes' sends and the test would measure itself.

    python benchmarks/bench_backlog.py [--records 60000] [--limit 1] [--runs 3]
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from http.client import HTTPConnection
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_http import free_port, http, wait_up

READER = r"""
import socket, sys
host, port, wid = sys.argv[1], int(sys.argv[2]), sys.argv[3]
s = socket.create_connection((host, port))
s.sendall(f"GET /v0/watch/{wid} HTTP/1.1\r\nHost: {host}\r\nAccept: text/event-stream\r\n\r\n".encode())
tail = b""
while True:
    chunk = s.recv(1 << 20)
    if not chunk:
        sys.exit("stream ended before caught-up")
    if b"event: caught-up" in tail + chunk:
        break
    tail = chunk[-64:]
"""


def run(port: int, records: int, limit: int) -> dict[str, float]:
    base = f"http://127.0.0.1:{port}"
    topic = f"b{time.monotonic_ns()}"
    for lo in range(0, records, 10_000):
        n = min(10_000, records - lo)
        http("POST", f"{base}/v0/topics/{topic}", {"records": [{"data": lo + i} for i in range(n)]})
    wid = http("POST", f"{base}/v0/watch", {"topics": {topic: {}}, "limit": limit})["wid"]
    probe = HTTPConnection("127.0.0.1", port, timeout=30)
    probe.request("GET", "/v0/health")
    probe.getresponse().read()
    lat: list[float] = []
    t0 = time.monotonic()
    reader = subprocess.Popen([sys.executable, "-c", READER, "127.0.0.1", str(port), str(wid)])
    while reader.poll() is None:
        t = time.monotonic()
        probe.request("GET", "/v0/health")
        probe.getresponse().read()
        lat.append(time.monotonic() - t)
        time.sleep(0.02)
    took = time.monotonic() - t0
    if reader.returncode != 0:
        raise SystemExit("the backlog reader failed")
    lat.sort()
    return {
        "backlog_s": took,
        "probes": len(lat),
        "p50_ms": lat[len(lat) // 2] * 1e3,
        "p90_ms": lat[int(len(lat) * 0.9)] * 1e3,
        "max_ms": lat[-1] * 1e3,
        "over_100ms": sum(x > 0.1 for x in lat),
    }


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--records", type=int, default=60_000)
    ap.add_argument("--limit", type=int, default=1)
    ap.add_argument("--runs", type=int, default=3)
    a = ap.parse_args()
    for k in range(a.runs):
        port = free_port()
        with tempfile.TemporaryDirectory() as d:
            srv = subprocess.Popen(
                [sys.executable, "-m", "seglog.server", "--port", str(port), "--data-dir", d],
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
            try:
                wait_up(f"http://127.0.0.1:{port}/v0/ready")
                r = run(port, a.records, a.limit)
            finally:
                srv.terminate()
                srv.wait(timeout=60)
        print(
            f"run {k}: {a.records:,} records, limit {a.limit}: backlog {r['backlog_s']:.2f} s; "
            f"health p50 {r['p50_ms']:.1f} ms, p90 {r['p90_ms']:.1f} ms, max {r['max_ms']:.1f} ms, "
            f"{r['over_100ms']} of {r['probes']} over 100 ms",
            flush=True,
        )


if __name__ == "__main__":
    main()
