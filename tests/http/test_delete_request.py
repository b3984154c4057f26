"""The delete body (API §5): `before_seq`, `match`, or both; neither is invalid."""

from __future__ import annotations

from typing import Any

import pytest

from seglog.errors import ErrorCode, SeglogError
from seglog.http.delete_request import DeleteRequest, parse_delete
from seglog.model import Selector


def code_of(fn: Any, *args: Any) -> ErrorCode:
    with pytest.raises(SeglogError) as ei:
        fn(*args)
    return ei.value.code


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
    assert parse_delete(body) == DeleteRequest(before, match)


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
    assert code_of(parse_delete, body) is ErrorCode.INVALID_REQUEST
