"""Bulk ingest: how fast one client gets large batches into a `disk` topic over HTTP.

- in process: the append body's parse cost per record, the exact slow path
  (`parse_write(parse_json_body(...))`) against the msgspec fast path (`decode_write_fast`),
  on the same 5,000-record body;
- over loopback, one client process: pre-encoded 5,000-record JSON appends
  (`Client.append_encoded`, what the Spark sink sends) and the streaming NDJSON append
  (`Client.append_stream`, API §13.2) of the same records, from record dicts the client
  encodes as it sends and from records pre-encoded one per bytes;
- the generator's ceiling in the same run: the same requests against a hello-world ASGI
  app served by granian exactly as seglog is (the client's own cost, not the server's).

usage: python benchmarks/bench_ingest.py [--records 1000000] [--batch 5000]
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import timeit
from pathlib import Path

import orjson

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_http import HELLO, free_port, wait_up

from seglog.client import Client


def make_records(n: int, offset: int = 0) -> list[dict[str, object]]:
    return [
        {
            "data": {"user": f"u{i % 1000}", "page": f"/p/{i % 50}", "ms": i, "ok": True},
            "tag": f"t{i % 8}",
        }
        for i in range(offset, offset + n)
    ]


def parse_cost(batch: int) -> dict[str, float]:
    from seglog.http.json_body import parse_json_body
    from seglog.http.write_decode import decode_write_fast
    from seglog.http.write_request import parse_write

    body = orjson.dumps({"records": make_records(batch)})
    fast, slow = decode_write_fast(body), parse_write(parse_json_body(body))
    # the fast path's records are a `RecordBatch`, the slow path's a list of `RecordIn`
    assert fast is not None and list(fast.records) == list(slow.records)
    out = {}
    for name, fn in (
        ("slow", lambda: parse_write(parse_json_body(body))),
        ("fast", lambda: decode_write_fast(body)),
    ):
        s = min(timeit.repeat(fn, setup="import gc; gc.enable()", number=10, repeat=5)) / 10
        out[name] = s * 1e6 / batch
        print(f"parse {name}: {out[name]:.3f} µs/record", flush=True)
    return out


def ingest(url: str, n: int, batch: int, topic: str, kind: str) -> float:
    """`kind`: "json" (pre-encoded batch bodies), "ndjson" (`append_stream` of record
    dicts, encoded by the client as it sends), "ndjson-bytes" (`append_stream` of records
    pre-encoded one per bytes: the server's side of NDJSON, as "json" is of batches)."""
    bodies = [orjson.dumps(make_records(batch, k * batch)) for k in range(n // batch)]
    encoded = [orjson.dumps(r) for k in range(n // batch) for r in make_records(batch, k * batch)]
    with Client(url, timeout=60.0) as c:
        t0 = time.perf_counter()
        if kind == "ndjson":

            def records():
                for k in range(n // batch):
                    yield from make_records(batch, k * batch)

            c.append_stream(topic, records())
        elif kind == "ndjson-bytes":
            c.append_stream(topic, encoded)
        else:
            for b in bodies:
                c.append_encoded(topic, b, return_seqs=False)
        return n / (time.perf_counter() - t0)


def hello_ceiling(n: int, batch: int) -> float:
    import httpx

    port = free_port()
    proc = subprocess.Popen([sys.executable, "-c", HELLO, str(port)])
    try:
        wait_up(f"http://127.0.0.1:{port}/")
        body = orjson.dumps({"records": make_records(batch)})
        with httpx.Client(base_url=f"http://127.0.0.1:{port}") as h:
            t0 = time.perf_counter()
            for _ in range(n // batch):
                h.post("/", content=body, headers={"Content-Type": "application/json"})
            return n / (time.perf_counter() - t0)
    finally:
        proc.terminate()
        proc.wait()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--records", type=int, default=1_000_000)
    ap.add_argument("--batch", type=int, default=5_000)
    args = ap.parse_args()
    n, batch = args.records, args.batch
    parse_cost(batch)
    ceiling = hello_ceiling(n, batch)
    print(f"generator ceiling (hello-world, JSON batches): {ceiling:,.0f} rec/s", flush=True)
    root = Path(tempfile.mkdtemp(prefix="seglog-ingest-"))
    port = free_port()
    env = {**os.environ, "SEGLOG_LOG": "warning"}
    proc = subprocess.Popen(
        [sys.executable, "-m", "seglog.server", "--port", str(port), "--data-dir", str(root)],
        env=env,
    )
    try:
        url = f"http://127.0.0.1:{port}"
        wait_up(f"{url}/v0/health")
        names = {
            "json": f"JSON append_encoded × {batch}",
            "ndjson": "NDJSON append_stream",
            "ndjson-bytes": "NDJSON append_stream, bytes",
        }
        for topic, kind in (
            ("json", "json"),
            ("ndjson", "ndjson"),
            ("ndjson2", "ndjson-bytes"),
            ("json2", "json"),
        ):
            with Client(url) as c:
                c.put_topic(topic, {"durability": "disk"})
            rate = ingest(url, n, batch, topic, kind)
            print(
                f"{names[kind]:32}: {rate:,.0f} rec/s ({rate / ceiling:.2f} × ceiling)", flush=True
            )
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=120)
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
