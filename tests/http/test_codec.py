"""Request parsing rules (API §0.2, §0.9, §3, §4, §5) and response shapes of `http.codec`."""

from __future__ import annotations

import base64
from typing import Any

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from seglog.errors import ErrorCode, SeglogError
from seglog.http import codec
from seglog.model import (
    DeleteResult,
    DropTopicResult,
    PutTopicResult,
    ReadResult,
    Record,
    RecordIn,
    Selector,
    Tombstone,
    TombstoneReason,
    TopicConfig,
    TopicInfo,
    WriteResult,
)


def code_of(fn: Any, *args: Any) -> ErrorCode:
    with pytest.raises(SeglogError) as ei:
        fn(*args)
    return ei.value.code


def message_of(fn: Any, *args: Any) -> str:
    with pytest.raises(SeglogError) as ei:
        fn(*args)
    return ei.value.message


def w(*records: Any, **extra: Any) -> dict[str, Any]:
    return {"records": list(records), **extra}


# --------------------------------------------------------------------------- bodies


@pytest.mark.parametrize(
    ("value", "ok"),
    [
        ("application/json", True),
        ("application/json; charset=utf-8", True),
        ("  \tapplication/json", True),
        ("application/jsonx", True),  # "starts with" is the whole rule
        ("Application/JSON", False),
        ("text/plain", False),
        ("", False),
        (None, False),
    ],
)
def test_is_json_content_type(value: str | None, ok: bool) -> None:
    assert codec.is_json_content_type(value) is ok


@pytest.mark.parametrize("raw", [b"", b"{", b"nope", b'{"a":1,}', b"\xff", b"[1]]"])
def test_malformed_json_message_prefix(raw: bytes) -> None:
    with pytest.raises(SeglogError) as ei:
        codec.parse_json_body(raw)
    assert ei.value.code is ErrorCode.INVALID_REQUEST
    assert ei.value.message.startswith("malformed JSON body:")


def test_parse_json_body_ok() -> None:
    assert codec.parse_json_body(b' {"a": [1, null]} ') == {"a": [1, None]}


@pytest.mark.parametrize(
    ("name", "topic_ok", "router_ok"),
    [
        ("jobs", True, True),
        ("a", True, True),
        ("A.b_c:d-9", True, True),
        ("orders->audit", False, True),
        (">x", False, False),
        ("-x", False, False),
        ("", False, False),
        ("a b", False, False),
        ("a/b", False, False),
        ("é", False, False),
        ("a" * 255, True, True),
        ("a" * 256, False, False),
        ("ab\n", False, False),
    ],
)
def test_names(name: str, topic_ok: bool, router_ok: bool) -> None:
    assert codec.valid_topic_name(name) is topic_ok
    assert codec.valid_router_name(name) is router_ok


# --------------------------------------------------------------------------- write


def test_write_minimal_and_encoding() -> None:
    req = codec.parse_write(w({"data": {"b": 1, "a": [1, 2]}}))
    assert req.records == [RecordIn(b'{"b":1,"a":[1,2]}', None, None, None)]
    assert (req.node, req.idempotency_key, req.create, req.config) == (None, None, None, None)
    assert req.disable_backpressure is False


def test_write_all_fields() -> None:
    body = w(
        {"data": {"type": "resize"}, "tag": "t:1", "node": "n1", "meta": {"trace": "abc"}},
        {"data": "opaque", "tag": "t:2"},
        {"data": None, "meta": None},
        node="batch",
        idempotency_key="k-1",
        create=False,
        config={"ttl_ms": 5},
        disable_backpressure=True,
        unknown_field={"ignored": True},
    )
    req = codec.parse_write(body)
    assert req.records == [
        RecordIn(b'{"type":"resize"}', b'{"trace":"abc"}', "n1", "t:1"),
        RecordIn(b'"opaque"', None, "batch", "t:2"),
        RecordIn(b"null", None, "batch", None),
    ]
    assert req.node == "batch"
    assert req.idempotency_key == "k-1"
    assert req.create is False
    assert req.config == {"ttl_ms": 5}
    assert req.disable_backpressure is True


@pytest.mark.parametrize(
    "body",
    [
        [],
        "x",
        None,
        {},
        {"records": {}},
        {"records": "x"},
        {"records": [1]},
        {"records": [{"tag": "x"}]},  # data missing
        {"records": [{"data": 1, "tag": 5}]},
        {"records": [{"data": 1, "tag": None}]},
        {"records": [{"data": 1, "node": ["a"]}]},
        {"records": [{"data": 1}], "node": 1},
        {"records": [{"data": 1}], "idempotency_key": 7},
        {"records": [{"data": 1}], "create": "true"},
        {"records": [{"data": 1}], "create": None},
        {"records": [{"data": 1}], "config": []},
        {"records": [{"data": 1}], "config": None},
        {"records": [{"data": 1}], "disable_backpressure": 0},
    ],
)
def test_write_type_errors(body: Any) -> None:
    with pytest.raises(SeglogError) as ei:
        codec.parse_write(body)
    assert ei.value.code is ErrorCode.INVALID_REQUEST
    assert ei.value.message.startswith("malformed JSON body:")


def test_write_record_count_limits() -> None:
    assert code_of(codec.parse_write, w()) is ErrorCode.INVALID_REQUEST
    assert len(codec.parse_write(w(*[{"data": i} for i in range(10_000)])).records) == 10_000
    with pytest.raises(SeglogError) as ei:
        codec.parse_write(w(*[{"data": i} for i in range(10_001)]))
    assert ei.value.code is ErrorCode.BATCH_TOO_LARGE
    assert ei.value.detail == {"records": 10_001, "max": 10_000}


def test_batch_too_large_precedes_record_validation() -> None:
    assert code_of(codec.parse_write, w(*[{}] * 10_001)) is ErrorCode.BATCH_TOO_LARGE


def test_tag_and_node_byte_limits() -> None:
    codec.parse_write(w({"data": 1, "tag": "t" * 256, "node": "n" * 128}))
    codec.parse_write(w({"data": 1, "tag": "é" * 128}))  # 256 bytes
    for rec in ({"tag": "t" * 257}, {"tag": "é" * 129}, {"node": "n" * 129}):
        assert code_of(codec.parse_write, w({"data": 1, **rec})) is ErrorCode.INVALID_REQUEST
    assert code_of(codec.parse_write, w({"data": 1}, node="n" * 129)) is ErrorCode.INVALID_REQUEST


def test_idempotency_key_limit() -> None:
    assert codec.parse_write(w({"data": 1}, idempotency_key="k" * 256)).idempotency_key
    assert (
        code_of(codec.parse_write, w({"data": 1}, idempotency_key="k" * 257))
        is ErrorCode.INVALID_REQUEST
    )
    assert codec.check_idempotency_key(None) is None
    assert codec.check_idempotency_key("") is None
    assert codec.check_idempotency_key("h" * 256) == "h" * 256
    assert code_of(codec.check_idempotency_key, "h" * 257) is ErrorCode.INVALID_REQUEST


def test_record_node_overrides_batch_node() -> None:
    req = codec.parse_write(w({"data": 1, "node": "own"}, {"data": 2}, node="batch"))
    assert [r.node for r in req.records] == ["own", "batch"]


def test_meta_limits() -> None:
    big_key_count = {f"k{i}": i for i in range(64)}
    assert codec.parse_write(w({"data": 1, "meta": big_key_count})).records[0].meta_json
    too_many = {f"k{i}": i for i in range(65)}
    assert code_of(codec.parse_write, w({"data": 1, "meta": too_many})) is ErrorCode.INVALID_REQUEST
    # serialized size: `"` + s + `"` is len(s) + 2 bytes
    ok = "m" * (16_384 - 2)
    assert len(codec.parse_write(w({"data": 1, "meta": ok})).records[0].meta_json or b"") == 16_384
    assert code_of(codec.parse_write, w({"data": 1, "meta": ok + "m"})) is ErrorCode.INVALID_REQUEST
    # a non-object meta is fine (the key cap only applies to objects)
    assert codec.parse_write(w({"data": 1, "meta": [1, 2]})).records[0].meta_json == b"[1,2]"


def test_record_too_large() -> None:
    limit = 1_048_576
    exact = "d" * (limit - 2)
    assert codec.parse_write(w({"data": exact})).records[0].size == limit
    with pytest.raises(SeglogError) as ei:
        codec.parse_write(w({"data": 1}, {"data": exact + "d"}))
    assert ei.value.code is ErrorCode.RECORD_TOO_LARGE
    assert ei.value.detail == {"index": 1, "bytes": limit + 1, "max": limit}
    # data + meta together
    data = "d" * (limit - 16_000)
    meta = "m" * 15_999
    assert code_of(codec.parse_write, w({"data": data, "meta": meta})) is ErrorCode.RECORD_TOO_LARGE


def test_unencodable_values_are_invalid_request() -> None:
    assert code_of(codec.parse_write, w({"data": 2**70})) is ErrorCode.INVALID_REQUEST
    assert code_of(codec.parse_write, w({"data": "\ud800"})) is ErrorCode.INVALID_REQUEST
    assert code_of(codec.parse_write, w({"data": 1, "tag": "\ud800"})) is ErrorCode.INVALID_REQUEST


# --------------------------------------------------------------------------- diff


def test_diff_defaults() -> None:
    assert codec.parse_diff({}) == codec.DiffRequest(
        from_seq=0,
        limit=256,
        nodes=(),
        include_tags=False,
        include_meta=True,
        wait_ms=0,
        max_batch_bytes=1_048_576,
    )


@pytest.mark.parametrize(
    ("body", "field", "value"),
    [
        ({"from_seq": 479100}, "from_seq", 479100),
        ({"from_seq": 2**64 - 1}, "from_seq", 2**64 - 1),
        ({"limit": 0}, "limit", 256),
        ({"limit": 1}, "limit", 1),
        ({"limit": 1000}, "limit", 1000),
        ({"limit": 1001}, "limit", 1000),
        ({"limit": 2**40}, "limit", 1000),
        ({"node": "a"}, "nodes", ("a",)),
        ({"node": ["a", "b"]}, "nodes", ("a", "b")),
        ({"node": []}, "nodes", ()),
        ({"include_tags": True}, "include_tags", True),
        ({"include_meta": False}, "include_meta", False),
        ({"wait_ms": 500}, "wait_ms", 500),
        ({"wait_ms": 30_001}, "wait_ms", 30_000),
        ({"max_batch_bytes": 0}, "max_batch_bytes", 1_048_576),
        ({"max_batch_bytes": 1}, "max_batch_bytes", 1),
        ({"max_batch_bytes": 8_388_609}, "max_batch_bytes", 8_388_608),
    ],
)
def test_diff_fields(body: dict[str, Any], field: str, value: Any) -> None:
    assert getattr(codec.parse_diff(body), field) == value


@pytest.mark.parametrize(
    "body",
    [
        [],
        {"from_seq": -1},
        {"from_seq": "5"},
        {"from_seq": 1.5},
        {"from_seq": True},
        {"from_seq": None},
        {"limit": -1},
        {"limit": False},
        {"node": 5},
        {"node": ["a", 1]},
        {"node": None},
        {"include_tags": "true"},
        {"include_meta": 1},
        {"wait_ms": -5},
        {"max_batch_bytes": "big"},
    ],
)
def test_diff_type_errors(body: Any) -> None:
    with pytest.raises(SeglogError) as ei:
        codec.parse_diff(body)
    assert ei.value.code is ErrorCode.INVALID_REQUEST
    assert ei.value.message.startswith("malformed JSON body:")


# --------------------------------------------------------------------------- delete


@pytest.mark.parametrize(
    ("body", "before", "match"),
    [
        ({"before_seq": 480001}, 480001, None),
        ({"before_seq": 0}, 0, None),
        ({"match": ["tag", "Glob", "chat-42:*"]}, None, Selector("Glob", "chat-42:")),
        ({"match": ["tag", "Eq", "msg-123"], "before_seq": 77}, 77, Selector("Eq", "msg-123")),
        ({"match": "tenant42:job-9001"}, None, Selector("Eq", "tenant42:job-9001")),
        ({"match": "p*"}, None, Selector("Glob", "p")),
    ],
)
def test_delete_ok(body: dict[str, Any], before: int | None, match: Selector | None) -> None:
    assert codec.parse_delete(body) == codec.DeleteRequest(before, match)


@pytest.mark.parametrize(
    "body",
    [
        {},
        {"other": 1},
        [],
        {"before_seq": -1},
        {"before_seq": "1"},
        {"match": ["tag", "Glob", "no-star"]},
        {"match": ["tag", "eq", "x"]},
        {"match": ["node", "Eq", "x"]},
        {"match": ["tag", "Eq"]},
        {"match": 5},
        {"match": None},
    ],
)
def test_delete_invalid(body: Any) -> None:
    assert code_of(codec.parse_delete, body) is ErrorCode.INVALID_REQUEST


# --------------------------------------------------------------------------- query strings


@pytest.mark.parametrize(
    ("value", "default", "out"),
    [
        ("true", False, True),
        ("1", False, True),
        ("false", True, False),
        ("0", True, False),
        ("yes", True, True),
        ("yes", False, False),
        ("", True, True),
        (None, False, False),
        ("TRUE", False, False),
    ],
)
def test_parse_bool_query(value: str | None, default: bool, out: bool) -> None:
    assert codec.parse_bool_query(value, default) is out


@pytest.mark.parametrize(
    ("value", "out"),
    [
        (None, 100),
        ("", 100),
        ("abc", 100),
        ("1.5", 100),
        ("0", 1),
        ("-3", 1),
        ("7", 7),
        ("1000", 1000),
        ("1001", 1000),
        ("99999999999999999999", 1000),
    ],
)
def test_parse_page_size(value: str | None, out: int) -> None:
    assert codec.parse_page_size(value) == out


def test_cursor_matches_spec_examples() -> None:
    assert codec.encode_cursor("jobs") == "eyJhZnRlciI6ImpvYnMifQ=="
    assert codec.encode_cursor("orders->audit") == "eyJhZnRlciI6Im9yZGVycy0+YXVkaXQifQ=="
    assert base64.b64decode(codec.encode_cursor("x")) == b'{"after":"x"}'


def test_cursor_round_trip_and_tolerance() -> None:
    for name in ("jobs", "orders->audit", "a" * 255, ""):
        assert codec.decode_cursor(codec.encode_cursor(name)) == name
    # `+` turned into a space by form decoding, and missing padding
    assert codec.decode_cursor("eyJhZnRlciI6Im9yZGVycy0 YXVkaXQifQ==") == "orders->audit"
    assert codec.decode_cursor("eyJhZnRlciI6ImpvYnMifQ") == "jobs"
    assert codec.decode_cursor("") is None
    assert codec.decode_cursor(None) is None


@pytest.mark.parametrize(
    "bad",
    [
        "!!!",
        "é",
        base64.b64encode(b"not json").decode(),
        base64.b64encode(b"[1]").decode(),
        base64.b64encode(b'{"after":1}').decode(),
        base64.b64encode(b'{"before":"x"}').decode(),
        base64.b64encode(b"\xff\xfe").decode(),
    ],
)
def test_bad_cursor(bad: str) -> None:
    with pytest.raises(SeglogError) as ei:
        codec.decode_cursor(bad)
    assert ei.value.code is ErrorCode.INVALID_REQUEST
    assert ei.value.message == "malformed cursor"


# --------------------------------------------------------------------------- responses


def keys(raw: bytes) -> list[str]:
    return list(orjson.loads(raw))


def test_encode_write_result() -> None:
    res = WriteResult("jobs", 480232, 480234, [480232, 480233, 480234], 480234, 3, False, False)
    out = orjson.loads(codec.encode_write_result(res, True, 0.62))
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
    assert "seqs" not in orjson.loads(codec.encode_write_result(res, False, 0))


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
    raw = codec.encode_read_result(read_result(), include_tags=False, include_meta=True, total_ms=1)
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
    out = orjson.loads(codec.encode_read_result(res, True, False, 0.0))
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
    out = orjson.loads(codec.encode_topic_info(topic_info(), 0.05))
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
    q = codec.QueueCounts(ready=3, in_flight=1, dead_lettered=0)
    out = orjson.loads(codec.encode_topic_info(topic_info(), 0.05, q))
    assert out["queue"] == {"ready": 3, "in_flight": 1, "dead_lettered": 0}
    assert list(out)[-2:] == ["queue", "performance"]


def test_encode_topic_list_and_summary() -> None:
    row = orjson.loads(codec.encode_topic_summary(topic_info()))
    assert list(row) == [
        "topic",
        "head_seq",
        "earliest_seq",
        "count",
        "bytes",
        "durable",
        "effective_priority",
    ]
    out = orjson.loads(codec.encode_topic_list([topic_info()], "jobs", 0.1))
    assert list(out) == ["topics", "next_cursor", "performance"]
    assert out["next_cursor"] == "eyJhZnRlciI6ImpvYnMifQ=="
    assert "next_cursor" not in orjson.loads(codec.encode_topic_list([], None, 0.1))


def test_encode_put_drop_delete() -> None:
    put = orjson.loads(codec.encode_put_topic(PutTopicResult("jobs", True, TopicConfig()), 0))
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
    drop = orjson.loads(codec.encode_drop_topic(DropTopicResult("jobs", True, ["z", "a"]), 0))
    assert drop == {
        "topic": "jobs",
        "deleted": True,
        "routers_removed": ["a", "z"],
        "performance": {"server_total_ms": 0.0},
    }
    dele = orjson.loads(codec.encode_delete_result(DeleteResult("jobs", 14, 1, 2, 3, 4), 0.12))
    assert list(dele) == [
        "topic",
        "deleted",
        "earliest_seq",
        "head_seq",
        "count",
        "bytes",
        "performance",
    ]


# --------------------------------------------------------------------------- fuzz

json_scalars = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**63), max_value=2**64 - 1)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=8)
)
json_values = st.recursive(
    json_scalars,
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=6), inner, max_size=4)
    ),
    max_leaves=12,
)
field_names = st.sampled_from(
    [
        "records", "data", "meta", "tag", "node", "idempotency_key", "create", "config",
        "disable_backpressure", "from_seq", "limit", "include_tags", "include_meta", "wait_ms",
        "max_batch_bytes", "before_seq", "match",
    ]
)  # fmt: skip
records_like = st.lists(
    st.dictionaries(field_names, json_values, max_size=5) | json_values, max_size=4
)
bodies = (
    st.dictionaries(field_names, json_values | records_like, max_size=6)
    | st.fixed_dictionaries({"records": records_like}, optional={"node": json_values})
    | json_values
)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(bodies)
def test_parsers_raise_only_seglog_error(body: Any) -> None:
    for parse in (codec.parse_write, codec.parse_diff, codec.parse_delete):
        try:
            parse(body)
        except SeglogError as e:
            assert e.code in {
                ErrorCode.INVALID_REQUEST,
                ErrorCode.BATCH_TOO_LARGE,
                ErrorCode.RECORD_TOO_LARGE,
            }


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=64) | st.text(max_size=64).map(str.encode))
def test_byte_parsers_raise_only_seglog_error(raw: bytes) -> None:
    for fn in (codec.parse_json_body, lambda b: codec.decode_cursor(b.decode("latin-1"))):
        try:
            fn(raw)
        except SeglogError as e:
            assert e.code is ErrorCode.INVALID_REQUEST


@given(st.text(max_size=40))
def test_cursor_round_trip_property(name: str) -> None:
    try:
        cursor = codec.encode_cursor(name)
    except orjson.JSONEncodeError:  # lone surrogates cannot be encoded (never a real name)
        return
    assert codec.decode_cursor(cursor) == name


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
    body = codec.encode_read_result(res, include_tags, include_meta, 0.1)
    expect = orjson.dumps([codec.record_object(r, include_tags, include_meta) for r in recs])
    assert orjson.dumps(orjson.loads(body)["records"]) == expect
    assert expect in body  # spliced as is, not re-encoded
