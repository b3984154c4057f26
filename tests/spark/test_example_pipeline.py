"""The examples/ clickstream pipeline end to end: seglog → windowed counts → seglog + Parquet,
then a restart from the checkpoints that must not duplicate anything (streaming sink keys)."""

from __future__ import annotations

import importlib.util
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from tests.spark.conftest import ServerProc
from tests.spark.test_spark_e2e import http_rows

pytestmark = pytest.mark.spark

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "clickstream_pipeline.py"


def load_example() -> Any:
    spec = importlib.util.spec_from_file_location("clickstream_pipeline", EXAMPLE)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules["clickstream_pipeline"] = mod
    spec.loader.exec_module(mod)
    return mod


def run(
    ex: Any, spark: Any, url: str, out: Path, sinks: tuple[str, ...] = ("topic", "parquet")
) -> None:
    queries = ex.start_pipeline(
        spark, url, "ex.clicks", "ex.per_minute", out, available_now=True, sinks=sinks
    )
    try:
        for q in queries:
            q.awaitTermination(120)
    finally:
        for q in queries:
            q.stop()


def test_clickstream_pipeline(spark: Any, server: ServerProc, tmp_path: Path) -> None:
    ex = load_example()
    start_ms, span_ms, n = 1_700_000_040_000, 600_000, 3000  # window-aligned start
    ex.generate_clicks(server.url, "ex.clicks", n, start_ms=start_ms, span_ms=span_ms)
    run(ex, spark, server.url, tmp_path)

    c = server.client()
    in_topic = {
        (r[5]["window_start"], r[5]["page"]): r[5]["clicks"] for r in http_rows(c, "ex.per_minute")
    }
    parquet = spark.read.parquet(str(tmp_path / "parquet")).collect()
    assert len(parquet) == len(in_topic) > 0
    assert sum(r.clicks for r in parquet) == sum(in_topic.values())
    # the closed windows hold exactly the clicks generated for them
    pages = ["/", "/search", "/item", "/cart", "/checkout"]
    expected: Counter[tuple[int, str]] = Counter()
    for i in range(n):
        minute = ((i * span_ms) // n) // 60_000
        expected[(minute, pages[(i * 7) % len(pages)])] += 1
    closed = sorted({int(r.window_start.timestamp() * 1000 - start_ms) // 60_000 for r in parquet})
    assert closed == list(range(len(closed))) and len(closed) >= 8
    got = Counter(
        {
            (int(r.window_start.timestamp() * 1000 - start_ms) // 60_000, r.page): r.clicks
            for r in parquet
        }
    )
    assert got == Counter({k: v for k, v in expected.items() if k[0] in closed})

    # Simulate a crash after the sink wrote its last batch but before Spark recorded the commit:
    # the restarted query re-runs that batch under the same query id and batch id, and every
    # chunk is deduplicated by its idempotency key.
    commits = tmp_path / "checkpoints" / "topic" / "commits"
    written = [p for p in commits.iterdir() if p.name.isdigit()]
    last = max(written, key=lambda p: int(p.name))
    last.unlink()
    (commits / f".{last.name}.crc").unlink(missing_ok=True)
    before = c.get_topic("ex.per_minute").head_seq
    run(ex, spark, server.url, tmp_path, sinks=("topic",))
    assert c.get_topic("ex.per_minute").head_seq == before
