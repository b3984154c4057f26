"""The diff body (API §4): defaults, clamps and type errors."""

from __future__ import annotations

from typing import Any

import pytest

from seglog.errors import ErrorCode, SeglogError
from seglog.http.diff_request import DiffRequest, parse_diff


def test_diff_defaults() -> None:
    assert parse_diff({}) == DiffRequest(
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
        ({"limit": 2**32 - 1}, "limit", 1000),
        ({"node": "a"}, "nodes", ("a",)),
        ({"node": ["a", "b"]}, "nodes", ("a", "b")),
        ({"node": []}, "nodes", ()),
        ({"include_tags": True}, "include_tags", True),
        ({"include_meta": False}, "include_meta", False),
        ({"wait_ms": 500}, "wait_ms", 500),
        ({"wait_ms": 30_001}, "wait_ms", 30_000),
        ({"wait_ms": 2**32 - 1}, "wait_ms", 30_000),
        ({"max_batch_bytes": 0}, "max_batch_bytes", 1_048_576),
        ({"max_batch_bytes": 1}, "max_batch_bytes", 1),
        ({"max_batch_bytes": 8_388_609}, "max_batch_bytes", 8_388_608),
    ],
)
def test_diff_fields(body: dict[str, Any], field: str, value: Any) -> None:
    assert getattr(parse_diff(body), field) == value


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
        {"limit": 2**32},  # API §4: u32; out of range is a type error, not a clamp
        {"wait_ms": 2**40},
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
        parse_diff(body)
    assert ei.value.code is ErrorCode.INVALID_REQUEST
    assert ei.value.message.startswith("malformed JSON body:")
