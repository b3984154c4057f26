"""The composite watch cursor (API.md §7.4): encoding, decoding, round trips."""

from __future__ import annotations

import base64
import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from seglog.client.cursors import U64_MAX, decode_cursor, encode_cursor
from seglog.client.exceptions import SeglogProtocolError

TOPIC = st.from_regex(r"\A[A-Za-z0-9][A-Za-z0-9._:-]{0,40}\Z")
SEQ = st.integers(min_value=0, max_value=U64_MAX)


def test_spec_examples() -> None:
    assert encode_cursor({"jobs": 4098}) == "eyJqb2JzIjo0MDk4fQ"
    assert decode_cursor("eyJldmVudHMiOjgzMDAwfQ") == {"events": 83000}
    assert decode_cursor(encode_cursor({"jobs": 5210, "events": 88130})) == {
        "events": 88130,
        "jobs": 5210,
    }


def test_keys_are_sorted_and_json_is_compact() -> None:
    raw = base64.urlsafe_b64decode(encode_cursor({"b": 2, "a": 1}) + "==")
    assert raw == b'{"a":1,"b":2}'


@given(st.dictionaries(TOPIC, SEQ, max_size=20))
def test_round_trip(cursors: dict[str, int]) -> None:
    text = encode_cursor(cursors)
    assert "=" not in text and "+" not in text and "/" not in text
    assert decode_cursor(text) == cursors


@given(st.dictionaries(TOPIC, SEQ, max_size=20))
def test_matches_an_independent_encoder(cursors: dict[str, int]) -> None:
    compact = json.dumps(cursors, sort_keys=True, separators=(",", ":")).encode()
    assert encode_cursor(cursors) == base64.urlsafe_b64encode(compact).decode().rstrip("=")


@given(st.dictionaries(st.text(min_size=1, max_size=10), SEQ, max_size=5))
def test_round_trip_any_unicode_name(cursors: dict[str, int]) -> None:
    assert decode_cursor(encode_cursor(cursors)) == cursors


def test_padding_is_optional_on_decode() -> None:
    assert decode_cursor("eyJqb2JzIjo0MDk4fQ==") == {"jobs": 4098}


@pytest.mark.parametrize(
    "bad",
    [
        "!!!",
        base64.urlsafe_b64encode(b"[1,2]").decode(),
        base64.urlsafe_b64encode(b'{"a":-1}').decode(),
        base64.urlsafe_b64encode(b'{"a":true}').decode(),
        base64.urlsafe_b64encode(b'{"a":"1"}').decode(),
        base64.urlsafe_b64encode(b'{"a":18446744073709551616}').decode(),
        base64.urlsafe_b64encode(b"not json").decode(),
    ],
)
def test_malformed_cursors_raise(bad: str) -> None:
    with pytest.raises(SeglogProtocolError, match="malformed watch cursor"):
        decode_cursor(bad)
