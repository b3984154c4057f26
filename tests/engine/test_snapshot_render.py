"""Snapshot bodies (STORAGE §5.2) restored from each record's raw JSON text (msgspec) build
the same topic, slot for slot, as the generic parse of the same body."""

from __future__ import annotations

import orjson
from hypothesis import given, settings
from hypothesis import strategies as st

from seglog.core.jsonbytes import json_bytes
from seglog.engine.snapshots import records_json, restore_topic
from seglog.engine.topic import Rows
from seglog.model import TopicConfig
from seglog.storage.snapshot import SnapshotRecord, decode_snapshot, encode_snapshot

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
