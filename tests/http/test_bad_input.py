"""Bad input is a 4xx, never a crash (issue 9), at the parsing/model level: out-of-range
integers at any nesting depth, page sizes of any length, `Content-Length` values `int`
refuses, and `null` in topic config fields that are not nullable (API §0.2, §0.9, §0.11).
The same cases over a real server are in test_live_bad_input.py."""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from seglog.errors import ErrorCode, SeglogError
from seglog.http.common import declared_length_over
from seglog.http.json_body import out_of_range_integer, parse_json_body
from seglog.http.query_params import parse_page_size
from seglog.http.topic_config import parse_config
from seglog.model import Durability, TopicConfig

# orjson accepts up to 1024 levels; 1020 is above Python's default recursion limit (1000),
# so any recursive re-parse of such a document fails where orjson does not.
DEPTH = 1020


def nested(inner: bytes, depth: int = DEPTH) -> bytes:
    return b"[" * depth + inner + b"]" * depth


def malformed(raw: bytes) -> SeglogError:
    with pytest.raises(SeglogError) as ei:
        parse_json_body(raw)
    assert ei.value.code is ErrorCode.INVALID_REQUEST
    assert ei.value.message.startswith("malformed JSON body:")
    return ei.value


# --------------------------------------------------------------------------- integers


@pytest.mark.parametrize(
    "literal", [b"18446744073709551616", b"-9223372036854775809", b"9" * 30, b"1" * 5000]
)
def test_out_of_range_integer_deep_in_a_document_is_400(literal: bytes) -> None:
    # `1` * 5000 is an integer orjson refuses itself (infinite as a double): still 400.
    err = malformed(b'{"records":[{"data":' + nested(literal) + b"}]}")
    assert len(err.message) < 300  # the literal is shortened, never echoed whole


@pytest.mark.parametrize(
    "literal", [b"18446744073709551615", b"-9223372036854775808", b"1234567890123456789"]
)
def test_in_range_long_integer_deep_in_a_document_parses(literal: bytes) -> None:
    value = parse_json_body(b'{"x":' + nested(literal) + b"}")["x"]
    for _ in range(DEPTH):  # unwrapped in a loop: `==` on the whole value would recurse
        assert isinstance(value, list) and len(value) == 1
        value = value[0]
    assert type(value) is int and value == int(literal)


@pytest.mark.parametrize(
    ("raw", "bad"),
    [
        (b"18446744073709551616", b"18446744073709551616"),
        (b"-9223372036854775809", b"-9223372036854775809"),
        (b"[18446744073709551615, -9223372036854775808]", None),
        (b'"18446744073709551616"', None),
        (b'{"18446744073709551616": 1}', None),
        (b'["\\"18446744073709551616"]', None),  # an escaped quote does not end the string
        (b'["a\\\\", 18446744073709551616]', b"18446744073709551616"),  # an escaped backslash
        (b'["\\u0031", 99999999999999999999]', b"99999999999999999999"),
        (b"1.18446744073709551616", None),  # fraction digits
        (b"18446744073709551616.5", None),  # a float's integer part
        (b"18446744073709551616e1", None),
        (b"1E-18446744073709551616", None),  # exponent digits
        (b"1e+0000000000000000000001", None),
        (b'{"k": 1' + b"0" * 44 + b"}", b"1" + b"0" * 44),
        (b'["x", 1, {"a": "\\\\\\"", "b": -18446744073709551616}]', b"-18446744073709551616"),
    ],
)
def test_out_of_range_integer_scan(raw: bytes, bad: bytes | None) -> None:
    orjson.loads(raw)  # every case is a valid document: the scan relies on that
    assert out_of_range_integer(raw) == bad


def test_depth_beyond_orjson_limit_is_400_not_a_crash() -> None:
    malformed(nested(b"18446744073709551616", 1100))


# --------------------------------------------------------------------------- page_size


@pytest.mark.parametrize(
    ("value", "out"),
    [
        ("9" * 4301, 1000),
        ("1" * 100_000, 1000),
        ("+" + "9" * 5000, 1000),
        ("-" + "9" * 5000, 1),
        ("0" * 5000 + "7", 7),
        ("-" + "0" * 5000, 1),
        (" 0012 ", 12),
        ("+5", 5),
        ("10000", 1000),
    ],
)
def test_page_size_of_any_length_clamps(value: str, out: int) -> None:
    assert parse_page_size(value) == out


# --------------------------------------------------------------------------- content-length


@pytest.mark.parametrize(
    ("declared", "over"),
    [
        (None, False),
        ("", False),
        ("100", False),
        ("101", True),
        ("000101", True),
        ("0" * 5000 + "100", False),
        ("9" * 5000, True),
        ("\u00b2", False),  # isdigit() but not a decimal `int` accepts
        ("1\u00b9", False),
        ("-5", False),
        ("abc", False),
    ],
)
def test_declared_length_never_raises(declared: str | None, over: bool) -> None:
    assert declared_length_over(declared, 100) is over


# --------------------------------------------------------------------------- config nulls

NULLABLE = {"priority", "dead_letter"}
NOT_NULLABLE = [k for k in TopicConfig().to_dict() if k not in NULLABLE]


def test_durability_null_is_400() -> None:
    with pytest.raises(SeglogError) as ei:
        parse_config({"durability": None})
    assert ei.value.code is ErrorCode.INVALID_REQUEST
    assert ei.value.message.startswith("malformed JSON body:")
    assert "durability" in ei.value.message
    with pytest.raises(SeglogError):
        parse_config({"durable": True, "durability": None})


@pytest.mark.parametrize("key", NOT_NULLABLE)
def test_no_config_field_but_the_nullable_ones_takes_null(key: str) -> None:
    with pytest.raises(SeglogError) as ei:
        parse_config({key: None})
    assert ei.value.code is ErrorCode.INVALID_REQUEST
    assert key in ei.value.message


@pytest.mark.parametrize("key", sorted(NULLABLE))
def test_priority_and_dead_letter_take_null(key: str) -> None:
    assert getattr(parse_config({key: None}), key) is None


@pytest.mark.parametrize(
    ("given", "resolved"),
    [
        ({}, Durability.DISK),
        ({"durable": True}, Durability.FSYNC),
        ({"durable": False}, Durability.DISK),
        ({"durable": True, "durability": "memory"}, Durability.MEMORY),
    ],
)
def test_absent_durability_still_resolves_from_durable(
    given: dict[str, Any], resolved: Durability
) -> None:
    assert parse_config(given).durability is resolved


@pytest.mark.parametrize("durability", list(Durability))
def test_snapshot_form_still_loads(durability: Durability) -> None:
    """Snapshots and WAL TopicCreate frames store `to_dict()`/`to_json()`: full configs with
    the resolved class, which must keep loading unchanged."""
    config = TopicConfig(durability=durability, priority=None, dead_letter=None)
    assert TopicConfig.from_dict(config.to_dict()) == config
    assert TopicConfig.from_json(config.to_json()) == config
