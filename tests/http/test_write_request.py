"""The append body and `Idempotency-Key` header (API §3): fields, types, limits, order."""

from __future__ import annotations

from typing import Any

import pytest

from seglog.errors import ErrorCode, SeglogError
from seglog.http.write_request import check_idempotency_key, parse_write
from seglog.model import RecordIn


def code_of(fn: Any, *args: Any) -> ErrorCode:
    with pytest.raises(SeglogError) as ei:
        fn(*args)
    return ei.value.code


def w(*records: Any, **extra: Any) -> dict[str, Any]:
    return {"records": list(records), **extra}


def test_write_minimal_and_encoding() -> None:
    req = parse_write(w({"data": {"b": 1, "a": [1, 2]}}))
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
    req = parse_write(body)
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
        parse_write(body)
    assert ei.value.code is ErrorCode.INVALID_REQUEST
    assert ei.value.message.startswith("malformed JSON body:")


def test_write_record_count_limits() -> None:
    assert code_of(parse_write, w()) is ErrorCode.INVALID_REQUEST
    assert len(parse_write(w(*[{"data": i} for i in range(10_000)])).records) == 10_000
    with pytest.raises(SeglogError) as ei:
        parse_write(w(*[{"data": i} for i in range(10_001)]))
    assert ei.value.code is ErrorCode.BATCH_TOO_LARGE
    assert ei.value.detail == {"records": 10_001, "max": 10_000}


def test_batch_too_large_precedes_record_validation() -> None:
    assert code_of(parse_write, w(*[{}] * 10_001)) is ErrorCode.BATCH_TOO_LARGE


def test_tag_and_node_byte_limits() -> None:
    parse_write(w({"data": 1, "tag": "t" * 256, "node": "n" * 128}))
    parse_write(w({"data": 1, "tag": "é" * 128}))  # 256 bytes
    for rec in ({"tag": "t" * 257}, {"tag": "é" * 129}, {"node": "n" * 129}):
        assert code_of(parse_write, w({"data": 1, **rec})) is ErrorCode.INVALID_REQUEST
    assert code_of(parse_write, w({"data": 1}, node="n" * 129)) is ErrorCode.INVALID_REQUEST


def test_idempotency_key_limit() -> None:
    assert parse_write(w({"data": 1}, idempotency_key="k" * 256)).idempotency_key
    assert (
        code_of(parse_write, w({"data": 1}, idempotency_key="k" * 257)) is ErrorCode.INVALID_REQUEST
    )
    assert check_idempotency_key(None) is None
    assert check_idempotency_key(b"") is None
    assert check_idempotency_key(b"h" * 256) == "h" * 256
    assert code_of(check_idempotency_key, b"h" * 257) is ErrorCode.INVALID_REQUEST
    # UTF-8, as the body's key: 128 two-byte characters are 256 bytes, one more is over
    assert check_idempotency_key(("é" * 128).encode()) == "é" * 128
    assert code_of(check_idempotency_key, ("é" * 129).encode()) is ErrorCode.INVALID_REQUEST
    # bytes that are not UTF-8 are Latin-1 (browsers send "café" so): the same key as the
    # body's "café", and measured as its UTF-8
    assert check_idempotency_key("café".encode("latin-1")) == "café"
    assert check_idempotency_key(b"\xff" * 128) == "ÿ" * 128
    assert code_of(check_idempotency_key, b"\xff" * 129) is ErrorCode.INVALID_REQUEST


def test_record_node_overrides_batch_node() -> None:
    req = parse_write(w({"data": 1, "node": "own"}, {"data": 2}, node="batch"))
    assert [r.node for r in req.records] == ["own", "batch"]


def test_meta_limits() -> None:
    big_key_count = {f"k{i}": i for i in range(64)}
    assert parse_write(w({"data": 1, "meta": big_key_count})).records[0].meta_json
    too_many = {f"k{i}": i for i in range(65)}
    assert code_of(parse_write, w({"data": 1, "meta": too_many})) is ErrorCode.INVALID_REQUEST
    # serialized size: `"` + s + `"` is len(s) + 2 bytes
    ok = "m" * (16_384 - 2)
    assert len(parse_write(w({"data": 1, "meta": ok})).records[0].meta_json or b"") == 16_384
    assert code_of(parse_write, w({"data": 1, "meta": ok + "m"})) is ErrorCode.INVALID_REQUEST
    # a non-object meta is fine (the key cap only applies to objects)
    assert parse_write(w({"data": 1, "meta": [1, 2]})).records[0].meta_json == b"[1,2]"


def test_record_too_large() -> None:
    limit = 1_048_576
    exact = "d" * (limit - 2)
    assert parse_write(w({"data": exact})).records[0].size == limit
    with pytest.raises(SeglogError) as ei:
        parse_write(w({"data": 1}, {"data": exact + "d"}))
    assert ei.value.code is ErrorCode.RECORD_TOO_LARGE
    assert ei.value.detail == {"index": 1, "bytes": limit + 1, "max": limit}
    # data + meta together
    data = "d" * (limit - 16_000)
    meta = "m" * 15_999
    assert code_of(parse_write, w({"data": data, "meta": meta})) is ErrorCode.RECORD_TOO_LARGE


def test_unencodable_values_are_invalid_request() -> None:
    assert code_of(parse_write, w({"data": 2**70})) is ErrorCode.INVALID_REQUEST
    assert code_of(parse_write, w({"data": "\ud800"})) is ErrorCode.INVALID_REQUEST
    assert code_of(parse_write, w({"data": 1, "tag": "\ud800"})) is ErrorCode.INVALID_REQUEST
