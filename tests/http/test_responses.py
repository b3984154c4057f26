"""Response bodies (API §0.4, §0.7, §2–§5): key order, optional members, and record
payloads spliced byte for byte."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import orjson
from hypothesis import given, settings
from hypothesis import strategies as st

from seglog.http.responses import (
    columns_array,
    encode_delete_result,
    encode_drop_topic,
    encode_put_topic,
    encode_read_result,
    encode_topic_info,
    encode_topic_list,
    encode_topic_summary,
    encode_write_result,
    record_object,
    records_array,
)
from seglog.model import (
    DeleteResult,
    DropTopicResult,
    PutTopicResult,
    QueueCounts,
    ReadResult,
    Record,
    RecordColumns,
    Tombstone,
    TombstoneReason,
    TopicConfig,
    TopicInfo,
    WriteResult,
)


def test_encode_write_result() -> None:
    res = WriteResult("jobs", 480232, 480234, [480232, 480233, 480234], 480234, 3, False, False)
    out = orjson.loads(encode_write_result(res, True, 0.62))
    assert list(out) == [
        "topic",
        "first_seq",
        "last_seq",
        "seqs",
        "head_seq",
        "count",
        "created",
        "deduped",
        "performance",
    ]
    assert out["seqs"] == [480232, 480233, 480234]
    assert out["performance"] == {"server_total_ms": 0.62, "wal_append_ms": 0.0, "fsync_ms": 0.0}
    assert "seqs" not in orjson.loads(encode_write_result(res, False, 0))


def read_result(**kw: Any) -> ReadResult:
    base: dict[str, Any] = {
        "topic": "jobs",
        "records": [
            Record(479101, 1748450001000, b'{"x": 1}', b'{"trace":"z9"}', "worker-us-2", "t1"),
            Record(479102, 1748450001001, b"null"),
        ],
        "next_from_seq": 479102,
        "head_seq": 480234,
        "earliest_seq": 479101,
        "tombstone": None,
        "records_scanned": 2,
    }
    base.update(kw)
    return ReadResult(**base)


def test_encode_read_result_shape_and_splicing() -> None:
    raw = encode_read_result(read_result(), include_tags=False, include_meta=True, total_ms=1)
    # the data bytes are spliced verbatim (note the space kept from the stored bytes)
    assert b'"data":{"x": 1}' in raw
    out = orjson.loads(raw)
    assert list(out) == [
        "topic",
        "records",
        "next_from_seq",
        "head_seq",
        "earliest_seq",
        "caught_up",
        "tombstone",
        "lag",
        "performance",
    ]
    assert out["records"] == [
        {"$seq": 479101, "$ts": 1748450001000, "$node": "worker-us-2", "data": {"x": 1},
         "meta": {"trace": "z9"}},
        {"$seq": 479102, "$ts": 1748450001001, "data": None},
    ]  # fmt: skip
    assert list(out["records"][0]) == ["$seq", "$ts", "$node", "data", "meta"]
    assert out["tombstone"] is None
    assert out["caught_up"] is False
    assert out["lag"] == 480234 - 479102
    assert out["performance"] == {"server_total_ms": 1.0, "records_scanned": 2}


def test_encode_read_result_include_flags_and_tombstone() -> None:
    tomb = Tombstone(1, 3, TombstoneReason.CAP, 3, 4, 6)
    res = read_result(tombstone=tomb, next_from_seq=480234, cold_segments_read=2)
    out = orjson.loads(encode_read_result(res, True, False, 0.0))
    assert list(out["records"][0]) == ["$seq", "$ts", "$node", "$tag", "data"]
    assert out["records"][0]["$tag"] == "t1"
    assert "meta" not in out["records"][0]
    assert out["tombstone"] == {
        "gap_from": 1,
        "gap_to": 3,
        "reason": "cap",
        "missed_estimate": 3,
        "earliest_seq": 4,
        "head_seq": 6,
    }
    assert out["caught_up"] is True and out["lag"] == 0
    assert out["performance"]["cold_segments_read"] == 2


def topic_info() -> TopicInfo:
    return TopicInfo("jobs", TopicConfig(), 5, 1, 5, 120, 7, None, 1748450009000)


def test_encode_topic_info() -> None:
    out = orjson.loads(encode_topic_info(topic_info(), 0.05))
    assert list(out) == [
        "topic",
        "type",
        "head_seq",
        "earliest_seq",
        "next_seq",
        "count",
        "bytes",
        "config",
        "effective_priority",
        "last_write_ts",
        "last_read_ts",
        "performance",
    ]
    assert out["type"] == "log" and out["next_seq"] == 6 and out["last_write_ts"] is None
    assert out["config"] == TopicConfig().to_dict()
    q = QueueCounts(ready=3, in_flight=1, dead_lettered=0)
    out = orjson.loads(encode_topic_info(replace(topic_info(), queue=q), 0.05))
    assert out["queue"] == {"ready": 3, "in_flight": 1, "dead_lettered": 0}
    assert list(out)[-2:] == ["queue", "performance"]


def test_encode_topic_list_and_summary() -> None:
    row = orjson.loads(encode_topic_summary(topic_info()))
    assert list(row) == [
        "topic",
        "head_seq",
        "earliest_seq",
        "count",
        "bytes",
        "durable",
        "effective_priority",
    ]
    out = orjson.loads(encode_topic_list([topic_info()], "jobs", 0.1))
    assert list(out) == ["topics", "next_cursor", "performance"]
    assert out["next_cursor"] == "eyJhZnRlciI6ImpvYnMifQ=="
    assert "next_cursor" not in orjson.loads(encode_topic_list([], None, 0.1))


def test_encode_put_drop_delete() -> None:
    put = orjson.loads(encode_put_topic(PutTopicResult("jobs", True, TopicConfig()), 0))
    assert list(put) == ["topic", "created", "config", "performance"]
    assert list(put["config"])[:7] == [
        "type",
        "ttl_ms",
        "cap_records",
        "cap_bytes",
        "discard",
        "durable",
        "durability",
    ]
    drop = orjson.loads(encode_drop_topic(DropTopicResult("jobs", True, ["z", "a"]), 0))
    assert drop == {
        "topic": "jobs",
        "deleted": True,
        "routers_removed": ["a", "z"],
        "performance": {"server_total_ms": 0.0},
    }
    dele = orjson.loads(encode_delete_result(DeleteResult("jobs", 14, 1, 2, 3, 4), 0.12))
    assert list(dele) == [
        "topic",
        "deleted",
        "earliest_seq",
        "head_seq",
        "count",
        "bytes",
        "performance",
    ]


_opt_text = st.none() | st.text(max_size=8)

_json_leaf = st.none() | st.booleans() | st.integers(-(2**63), 2**63) | st.text(max_size=8)


@settings(max_examples=150, derandomize=True, database=None)
@given(
    rows=st.lists(
        st.tuples(
            st.integers(0, 2**64 - 1), st.integers(0, 2**64 - 1), _json_leaf,
            st.none() | _json_leaf, _opt_text, _opt_text,
        ),
        max_size=6,
    ),
    include_tags=st.booleans(),
    include_meta=st.booleans(),
)  # fmt: skip
def test_records_array_is_byte_identical_to_record_objects(
    rows: list[tuple[int, int, Any, Any, str | None, str | None]],
    include_tags: bool,
    include_meta: bool,
) -> None:
    recs = [
        Record(seq, ts, orjson.dumps(d), None if m is None else orjson.dumps(m), node, tag)
        for seq, ts, d, m, node, tag in rows
    ]
    res = read_result(records=recs)
    body = encode_read_result(res, include_tags, include_meta, 0.1)
    expect = orjson.dumps([record_object(r, include_tags, include_meta) for r in recs])
    assert orjson.dumps(orjson.loads(body)["records"]) == expect
    assert expect in body  # spliced as is, not re-encoded


@settings(max_examples=300, derandomize=True, database=None)
@given(
    rows=st.lists(
        st.tuples(
            st.integers(0, 2**64 - 1), st.integers(0, 2**64 - 1), _json_leaf,
            st.none() | _json_leaf, _opt_text, _opt_text,
        ),
        max_size=6,
    ),
    include_tags=st.booleans(),
    include_meta=st.booleans(),
)  # fmt: skip
def test_columns_array_is_byte_identical_to_records_array(
    rows: list[tuple[int, int, Any, Any, str | None, str | None]],
    include_tags: bool,
    include_meta: bool,
) -> None:
    """The diff answers from columnar reads: the bytes must be exactly the record path's."""
    recs = [
        Record(seq, ts, orjson.dumps(d), None if m is None else orjson.dumps(m), node, tag)
        for seq, ts, d, m, node, tag in rows
    ]
    cols = RecordColumns(
        [r.seq for r in recs],
        [r.ts for r in recs],
        [r.node for r in recs],
        [r.tag for r in recs],
        [r.data_json for r in recs],
        [r.meta_json for r in recs],
    )
    assert columns_array(cols, include_tags, include_meta) == records_array(
        recs, include_tags, include_meta
    )
    by_columns = encode_read_result(read_result(records=[], columns=cols), include_tags,
                                    include_meta, 0.1)  # fmt: skip
    assert by_columns == encode_read_result(read_result(records=recs), include_tags,
                                            include_meta, 0.1)  # fmt: skip
