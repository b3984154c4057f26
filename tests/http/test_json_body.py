"""Request bodies from bytes (API §0.2): the content-type rule, the `malformed JSON body:`
message prefix, and that bytes of any kind fail only as `invalid_request`. Out-of-range
integers at any depth are in test_bad_input.py."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from seglog.errors import ErrorCode, SeglogError
from seglog.http.json_body import is_json_content_type, parse_json_body


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
    assert is_json_content_type(value) is ok


@pytest.mark.parametrize("raw", [b"", b"{", b"nope", b'{"a":1,}', b"\xff", b"[1]]"])
def test_malformed_json_message_prefix(raw: bytes) -> None:
    with pytest.raises(SeglogError) as ei:
        parse_json_body(raw)
    assert ei.value.code is ErrorCode.INVALID_REQUEST
    assert ei.value.message.startswith("malformed JSON body:")


def test_parse_json_body_ok() -> None:
    assert parse_json_body(b' {"a": [1, null]} ') == {"a": [1, None]}


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=64) | st.text(max_size=64).map(str.encode))
def test_parse_json_body_raises_only_seglog_error(raw: bytes) -> None:
    try:
        parse_json_body(raw)
    except SeglogError as e:
        assert e.code is ErrorCode.INVALID_REQUEST
