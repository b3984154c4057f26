"""Snapshot bodies (STORAGE §5.2): restored from each record's raw JSON text (msgspec) they
build the same topic, slot for slot, as the generic parse of the same body; rendered
incrementally (unchanged sealed chunks copied from the previous file) they are the body a
full render gives, and a damaged previous file is never copied from."""

from __future__ import annotations

from typing import Any

import orjson
from hypothesis import given, settings
from hypothesis import strategies as st

from seglog.clock import ManualClock
from seglog.core.jsonbytes import json_bytes
from seglog.engine.engine import Engine
from seglog.engine.maintenance import seal_topic
from seglog.engine.snapshot_body import RenderCache
from seglog.engine.snapshots import records_json, restore_topic
from seglog.engine.topic import Rows
from seglog.model import Durability, RecordIn, Selector, TopicConfig
from seglog.storage.fs import write_file_durably
from seglog.storage.snapshot import (
    SnapshotRecord,
    decode_snapshot,
    encode_snapshot,
    snapshot_name,
)
from tests.conftest import EngineFactory

LABEL = st.none() | st.sampled_from(["n", "é-ü", 'q"', "b\\s", "t\tab", "x" * 20])
JSON = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**63), 2**63 - 1) | st.text(max_size=5),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=3), inner, max_size=3)
    ),
    max_leaves=5,
)


@st.composite
def row_sets(draw: st.DrawFn) -> Rows:
    n = draw(st.integers(0, 12))
    first = draw(st.integers(1, 2**40))
    dead = [draw(st.booleans()) for _ in range(n)]
    data = [None if d else json_bytes(draw(JSON)) for d in dead]
    meta = [None if d or not draw(st.booleans()) else json_bytes(draw(JSON)) for d in dead]
    return Rows(
        first,
        [draw(st.integers(0, 2**53)) for _ in range(n)],
        [draw(LABEL) for _ in range(n)],
        [None if d else draw(LABEL) for d in dead],
        data,
        meta,
        [
            0 if d else len(x or b"") + len(m or b"")
            for d, x, m in zip(dead, data, meta, strict=True)
        ],
        bytearray(dead),
    )


@settings(max_examples=200, derandomize=True, database=None, deadline=None)
@given(row_sets())
def test_raw_and_parsed_restores_build_the_same_topic(rows: Rows) -> None:
    head = rows.first_seq + len(rows.ts) - 1 if rows.ts else rows.first_seq - 1
    entry = {
        "name": "t",
        "topic_id": 3,
        "epoch": 1,
        "config": TopicConfig().to_dict(),
        "base_seq": rows.first_seq,
        "head_seq": head,
    }
    body = {"id": 1, "ts": 0, "next_topic_id": 4, "checkpoint": {"groups": []}, "routers": []}
    raw = encode_snapshot(
        {**body, "topics": [{**entry, "records": orjson.Fragment(records_json(rows))}]}
    )
    typed = decode_snapshot(raw)
    assert typed is not None
    records = typed["topics"][0]["records"]
    assert all(isinstance(r, SnapshotRecord) for r in records)
    parsed = {**entry, "records": orjson.loads(records_json(rows))}
    a, b = restore_topic(typed["topics"][0]), restore_topic(parsed)
    for attr in (
        "origin",
        "head",
        "front",
        "count",
        "bytes",
        "ts",
        "data",
        "meta",
        "node",
        "tag",
        "size",
        "dead",
        "tags",
    ):
        assert getattr(a, attr) == getattr(b, attr), attr


def test_an_unexpected_body_shape_is_parsed_generically() -> None:
    body = {"id": 1, "ts": 0, "next_topic_id": 1, "checkpoint": {}, "topics": [], "future": 1}
    doc = decode_snapshot(encode_snapshot(body))
    assert doc is not None and doc["future"] == 1


# ---- incremental bodies: unchanged sealed chunks copied from the previous snapshot --------


def _snapshot_doc(e: Engine) -> dict[str, Any]:
    assert e.datadir is not None and e.last_snapshot is not None
    path = e.datadir.meta_dir / snapshot_name(e.last_snapshot.id)
    doc = decode_snapshot(e.fs.read_file(path))
    assert doc is not None
    out = orjson.loads(e.fs.read_file(path)[24:])
    assert isinstance(out, dict)
    return out


def _fresh_topics(e: Engine) -> list[Any]:
    """The `topics` a snapshot renders with nothing to reuse."""
    e.snapshot_cache = RenderCache()
    e.snapshot()
    assert e.snapshot_cache.reused == 0
    return list(_snapshot_doc(e)["topics"])


def test_unchanged_sealed_chunks_are_copied_and_the_body_is_the_same(
    make_engine: EngineFactory, clock: ManualClock
) -> None:
    e = make_engine(segment_max_events=50, segment_payload_cache=0)
    e.put_topic("a", TopicConfig(cap_records=900))
    e.put_topic("b", TopicConfig(ttl_ms=60_000))
    e.put_topic("eph", TopicConfig(durability=Durability.EPHEMERAL))
    for k in range(10):
        e.write("a", [RecordIn.of({"k": k, "i": i}, tag=f"t{i % 3}", node="n" if i % 7 else None,
                                  meta={"m": i} if i % 5 == 0 else None) for i in range(100)])  # fmt: skip
        e.write("b", [RecordIn.of(i) for i in range(30)])
        clock.advance(5_000)
    e.write("eph", [RecordIn.of(1)])
    for t in list(e.topics.values()):
        seal_topic(e, t)
    e.snapshot()
    first = e.snapshot_cache
    assert first.rendered > 0
    # changes: a delete inside one sealed segment, the cap and the TTL move the fronts,
    # new records (sealed and not)
    e.delete_records("a", seqs=[555])
    e.write("a", [RecordIn.of(i) for i in range(120)])
    clock.advance(20_000)
    e.write("b", [RecordIn.of("late")])
    for t in list(e.topics.values()):
        seal_topic(e, t)
    e.snapshot()
    assert e.snapshot_cache.reused > 5 and e.snapshot_cache.rendered > 0
    incremental = _snapshot_doc(e)["topics"]
    assert incremental == _fresh_topics(e)
    a = next(t for t in incremental if t["name"] == "a")
    seqs = [r["seq"] for r in a["records"]]
    assert 555 not in seqs and len(seqs) == 900 and seqs == sorted(seqs)


def test_a_damaged_previous_snapshot_is_never_copied(make_engine: EngineFactory) -> None:
    e = make_engine(segment_max_events=50)
    e.write("a", [RecordIn.of({"i": i}) for i in range(500)])
    seal_topic(e, e.topics["a"])
    e.snapshot()
    assert e.datadir is not None and e.last_snapshot is not None
    path = e.datadir.meta_dir / snapshot_name(e.last_snapshot.id)
    raw = bytearray(e.fs.read_file(path))
    at = raw.index(b'{"i":123}')
    raw[at + 5 : at + 8] = b"999"  # still valid JSON, but no longer what was written
    write_file_durably(e.fs, path, bytes(raw))
    e.snapshot()
    assert e.snapshot_cache.reused == 0  # the checksum no longer matched: all rendered
    recs = next(t for t in _snapshot_doc(e)["topics"] if t["name"] == "a")["records"]
    assert [r["data"]["i"] for r in recs] == list(range(500))
    e.snapshot()
    assert e.snapshot_cache.reused > 0  # the new file is intact: its chunks are reused


def test_restart_from_an_incremental_snapshot(make_engine: EngineFactory) -> None:
    e = make_engine(segment_max_events=20, segment_payload_cache=0)
    e.write("a", [RecordIn.of({"i": i}, tag=str(i % 2)) for i in range(300)])
    seal_topic(e, e.topics["a"])
    e.snapshot()
    e.delete_records("a", match=Selector("Eq", "1"))
    seal_topic(e, e.topics["a"])
    e.snapshot()
    assert e.snapshot_cache.reused == 0  # every segment lost its odd records
    e.write("a", [RecordIn.of({"i": 300 + i}) for i in range(7)])
    e.snapshot()
    assert e.snapshot_cache.reused > 0
    before = [(r.seq, r.data) for r in e.read("a", 0, limit=1000).records]
    e.close(snapshot=False)
    e2 = make_engine()
    assert [(r.seq, r.data) for r in e2.read("a", 0, limit=1000).records] == before
