"""Columnar diff (API §13.1) against the JSON diff, through the public client, same run.

A `disk` topic of N records of ~100 B (written in batches of 1,000 before timing), then,
each repeated and the best of 3 kept: `Client.read(topic)` (JSON pages of 1,000, records
as Python objects), `Client.read_arrow(topic, limit=1000)` (Arrow pages into one
`pyarrow.Table`), and the same with `limit=10000` (the diff's maximum page).

usage: python benchmarks/bench_columnar.py [--records 200000]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tests.support.server import ServerProcess

from seglog.client import Client


def best(fn, n: int, reps: int = 3) -> float:
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        got = fn()
        times.append(time.perf_counter() - t0)
        assert got == n, (got, n)
    return n / min(times)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--records", type=int, default=200_000)
    a = ap.parse_args()
    n = a.records
    with (
        tempfile.TemporaryDirectory() as d,
        ServerProcess(data_dir=Path(d) / "data") as srv,
        Client(srv.url) as c,
    ):
        c.put_topic("col", {"durability": "disk"})
        pad = "x" * 60
        for i in range(0, n, 1000):
            c.append("col", [{"data": {"i": j, "pad": pad}} for j in range(i, i + 1000)])
        json_rate = best(lambda: sum(1 for r in c.read("col", limit=1000) if hasattr(r, "seq")), n)
        arrow_1k = best(lambda: c.read_arrow("col", limit=1000).num_rows, n)
        arrow_big = best(lambda: c.read_arrow("col").num_rows, n)
    print(f"{n:,} records of ~100 B, one client process, best of 3:")
    print(f"  read() JSON, pages of 1,000:        {json_rate:>12,.0f} rec/s  (1.00x)")
    print(
        f"  read_arrow(), pages of 1,000:       {arrow_1k:>12,.0f} rec/s  ({arrow_1k / json_rate:.2f}x)"
    )
    print(
        f"  read_arrow(), default pages (65,536): {arrow_big:>11,.0f} rec/s  ({arrow_big / json_rate:.2f}x)"
    )


if __name__ == "__main__":
    main()
