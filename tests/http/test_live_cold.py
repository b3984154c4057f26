"""Black-box: reads served from the cold tier (STORAGE §4.5) through HTTP."""

from __future__ import annotations

from pathlib import Path

import httpx

from seglog.engine.engine import Engine, EngineOptions
from seglog.engine.maintenance import relocate_cold, seal_topic
from seglog.model import RecordIn, TopicConfig
from tests.http.conftest import ServerFactory
from tests.http.live import diff, seqs_of


def test_diff_reads_cold_segments_and_reports_them(
    make_server: ServerFactory, tmp_path: Path
) -> None:
    data, cold = tmp_path / "data", tmp_path / "cold"
    e = Engine(
        EngineOptions(
            data_dir=data, cold_dir=cold, wal_shards=2, segment_max_events=1000,
            hot_retain_segments=1,
        )
    )  # fmt: skip
    e.open()
    e.put_topic("t", TopicConfig())
    for w in range(6):
        e.write("t", [RecordIn.of({"n": w * 1000 + i}, tag=f"g{i % 2}") for i in range(1000)])
        seal_topic(e, e.topics["t"], force=True)
    assert relocate_cold(e, e.topics["t"]) == 5
    e.close(snapshot=True)
    assert len(list(cold.rglob("seg-*.data"))) == 5

    srv = make_server(
        data_dir=data,
        env={"SEGLOG_COLD_DIR": str(cold), "SEGLOG_HOT_RETAIN_SEGMENTS": "1"},
    )
    c = httpx.Client(base_url=srv.url, timeout=15)
    d = diff(c, "t", from_seq=0, limit=25, include_tags=True)
    assert seqs_of(d) == list(range(1, 26))
    assert [r["data"] for r in d["records"]] == [{"n": n} for n in range(25)]
    assert [r["$tag"] for r in d["records"][:2]] == ["g0", "g1"]
    assert d["performance"]["cold_segments_read"] == 25
    # the newest 4096 sealed payloads stay in memory (STORAGE §4.4): no cold read
    hot = diff(c, "t", from_seq=5900, limit=1000)
    assert seqs_of(hot) == list(range(5901, 6001)) and hot["caught_up"]
    assert "cold_segments_read" not in hot["performance"]
