"""The offline reader over a hand-built data dir (no server, no Spark): live-record rules
(floors, delete flags, TTL), both tiers, one partition per segment plus one for the
records no segment holds, checksum failures."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st

pytest.importorskip("seglog.core.payload_blob")

from seglog.core.segment_format import SegmentRecord, encode_segment
from seglog.spark import files
from seglog.spark.errors import SeglogCorruptionError
from seglog.spark.files import (
    SegmentPartition,
    TailPartition,
    TailRows,
    plan,
    read_segment,
    read_tail,
    read_tail_rows,
)
from seglog.spark.options import parse_files_options
from seglog.spark.schema import arrow_schema
from seglog.storage.snapshot import encode_snapshot, snapshot_name
from tests.spark.test_logic import SPARK_SCHEMA

NOW = 1_700_000_000_000


def blob(data: Any, meta: Any = None) -> bytes:
    return orjson.dumps({"d": data} if meta is None else {"d": data, "m": meta})


def write_segment(root: Path, topic_id: int, recs: list[SegmentRecord]) -> Path:
    d = root / "topics" / f"{topic_id:08X}"
    d.mkdir(parents=True, exist_ok=True)
    data, idx = encode_segment(recs, recs[0].seq)
    path = d / f"seg-{recs[0].seq:016d}.data"
    path.write_bytes(data)
    (d / f"seg-{recs[0].seq:016d}.idx").write_bytes(idx)
    return path


def build(tmp: Path) -> tuple[Path, Path, Path]:
    hot, cold = tmp / "data", tmp / "cold"

    def rec(seq: int, deleted: bool = False, ts: int = NOW) -> SegmentRecord:
        return SegmentRecord(
            seq,
            ts,
            "n1" if seq % 2 else None,
            f"t{seq}",
            blob({"s": seq}, {"m": seq} if seq % 3 == 0 else None),
            deleted,
        )

    def snap_rec(seq: int, ts: int = NOW) -> dict[str, Any]:
        r = rec(seq, ts=ts)
        out: dict[str, Any] = {"seq": seq, "ts": ts, "tag": r.tag, "data": {"s": seq}, "bytes": 9}
        if r.node is not None:
            out["node"] = r.node
        if seq % 3 == 0:
            out["meta"] = {"m": seq}
        return out

    write_segment(cold, 1, [rec(s) for s in range(1, 11)])  # all below the floor
    write_segment(cold, 1, [rec(s, deleted=s == 15) for s in range(11, 21)])
    bad = write_segment(hot, 1, [rec(s) for s in range(21, 31)])
    write_segment(hot, 2, [rec(s, ts=NOW - 10_000 if s < 4 else NOW) for s in range(1, 7)])
    (hot / "meta").mkdir(parents=True)
    body = {
        "id": 1,
        "ts": NOW,
        "next_topic_id": 3,
        "checkpoint": {"last_checkpoint_seq": 0, "groups": []},
        "routers": [],
        "topics": [
            {
                "name": "a",
                "topic_id": 1,
                "epoch": 1,
                "config": {"ttl_ms": 0},
                "base_seq": 5,
                "head_seq": 32,
                "evict_floor": 12,
                "expiry_floor": 0,
                "delete_floor": 3,
                "source_trim_floor": 0,
                "records": [snap_rec(s) for s in range(13, 33)],  # 15: flagged in its segment
            },
            {
                "name": "b",
                "topic_id": 2,
                "epoch": 1,
                "config": {"ttl_ms": 5_000},
                "base_seq": 1,
                "head_seq": 6,
                "evict_floor": 0,
                "expiry_floor": 0,
                "delete_floor": 0,
                "source_trim_floor": 0,
                "records": [snap_rec(s, NOW - 10_000 if s < 4 else NOW) for s in range(1, 7)],
            },
        ],
    }
    (hot / "meta" / snapshot_name(1)).write_bytes(encode_snapshot(body))
    return hot, cold, bad


def read_all(opts: Any) -> list[tuple[str, int, Any, Any, Any]]:
    schema = arrow_schema(SPARK_SCHEMA)
    out = []
    for p in plan(opts, NOW):
        if isinstance(p, SegmentPartition):
            batches = read_segment(opts, schema, p)
        elif isinstance(p, TailRows):
            batches = read_tail_rows(opts, schema, p)
        else:
            batches = read_tail(opts, schema, p)
        for b in batches:
            assert b.schema.equals(schema)
            for r in b.to_pylist():
                out.append((r["topic"], r["seq"], r["tag"], r["node"], orjson.loads(r["data"])))
    return out


@pytest.mark.parametrize("embed", [True, False])
def test_offline_reads_only_live_sealed_records(
    tmp_path: Path, embed: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    if not embed:  # the tail re-derived by a replay on the executor
        monkeypatch.setattr(files, "EMBED_TAIL_RECORDS", 0)
    hot, cold, _ = build(tmp_path)
    opts = parse_files_options({"path": str(hot), "coldPath": str(cold)})
    parts = plan(opts, NOW)
    segs = [
        (p.topic, [s.first_seq for s in p.slices]) for p in parts if isinstance(p, SegmentPartition)
    ]
    assert segs == [("a", [11, 21]), ("b", [1])]  # 1..10 lie below the floors
    per_segment = {"path": str(hot), "coldPath": str(cold), "maxRecordsPerPartition": "9"}
    parts_9 = plan(parse_files_options(per_segment), NOW)
    segs_9 = [(p.topic, p.first_seq) for p in parts_9 if isinstance(p, SegmentPartition)]
    assert segs_9 == [("a", 11), ("a", 21), ("b", 1)]  # 7 + 10 live > 9: apart
    assert read_all(parse_files_options(per_segment)) == read_all(opts)
    by_bytes = {"path": str(hot), "coldPath": str(cold), "maxBytesPerPartition": "1"}
    parts_b = plan(parse_files_options(by_bytes), NOW)
    segs_b = [(p.topic, p.first_seq) for p in parts_b if isinstance(p, SegmentPartition)]
    assert segs_b == [("a", 11), ("a", 21), ("b", 1)]  # every segment over 1 byte: apart
    if embed:
        (rows_part,) = [p for p in parts if isinstance(p, TailRows)]
        assert (rows_part.topic, rows_part.seq) == ("a", (31, 32))  # the active tail
    else:
        (tail,) = [p for p in parts if isinstance(p, TailPartition)]
        assert [(t.name, t.seqs) for t in tail.topics] == [("a", ((31, 32),))]
    rows = read_all(opts)
    a = [r[1] for r in rows if r[0] == "a"]
    assert a == [s for s in range(13, 33) if s != 15]  # evict floor 12, flagged 15
    assert [r[1] for r in rows if r[0] == "b"] == [4, 5, 6]  # 1..3 older than the 5 s TTL
    assert rows[0] == ("a", 13, "t13", "n1", {"s": 13})
    only_b = parse_files_options({"path": str(hot), "coldPath": str(cold), "topics": "b"})
    assert {r[0] for r in read_all(only_b)} == {"b"}


def test_offline_checksum_mismatch_fails(tmp_path: Path) -> None:
    hot, cold, bad = build(tmp_path)
    raw = bytearray(bad.read_bytes())
    raw[40] ^= 0xFF
    bad.write_bytes(bytes(raw))
    with pytest.raises(SeglogCorruptionError, match="corrupt segment"):
        read_all(parse_files_options({"path": str(hot), "coldPath": str(cold), "topics": "a"}))


@given(
    st.lists(st.tuples(st.integers(0, 30), st.integers(1, 500)), max_size=12),
    st.integers(1, 40),
    st.integers(1, 1_000),
)
def test_group_slices_keeps_order_and_budgets(
    segs: list[tuple[int, int]], budget: int, byte_budget: int
) -> None:
    slices = [
        files.SegmentSlice(
            i * 100 + 1,
            i * 100 + 100,
            SimpleNamespace(data_bytes=size),
            ((i * 100 + 1, i * 100 + n),) if n else (),
        )
        for i, (n, size) in enumerate(segs)
    ]
    groups = files.group_slices(slices, budget, byte_budget)
    assert [s for g in groups for s in g] == slices
    counts = [sum(s.live_count for s in g) for g in groups]
    sizes = [sum(s.segment.data_bytes for s in g) for g in groups]
    assert all(
        (n <= budget and b <= byte_budget) or len(g) == 1
        for g, n, b in zip(groups, counts, sizes, strict=True)
    )
    assert all(  # greedy: the next slice did not fit one budget or the other
        counts[k] + groups[k + 1][0].live_count > budget
        or sizes[k] + groups[k + 1][0].segment.data_bytes > byte_budget
        for k in range(len(groups) - 1)
    )
