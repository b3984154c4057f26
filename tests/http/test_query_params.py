"""Query-string values (API §0.9): booleans and page sizes fall back, never fail."""

from __future__ import annotations

import pytest

from seglog.http.query_params import parse_bool_query, parse_page_size, query_int
from seglog.http.queue_request import parse_work_query


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
    assert parse_bool_query(value, default) is out


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
    assert parse_page_size(value) == out


@pytest.mark.parametrize(
    ("value", "out"),
    [
        (None, None),
        ("", None),
        ("abc", None),
        ("1_0", None),  # int() takes it; a query value does not
        ("١٢", None),  # other scripts' digits
        ("1.5", None),
        (" 12 ", 12),
        ("+7", 7),
        ("-3", -3),
        ("007", 7),
        ("-0", 0),
        ("9" * 19, 10**19 - 1),
        ("9" * 5000, 10**19),
        ("-" + "9" * 5000, -(10**19)),
    ],
)
def test_query_int_takes_signed_ascii_digits_only(value: str | None, out: int | None) -> None:
    assert query_int(value) == out


@pytest.mark.parametrize(
    ("query", "n", "lease"),
    [
        ({"node": "w"}, 1, None),
        ({"node": "w", "max": "1_0"}, 1, None),
        ({"node": "w", "max": "١٢"}, 1, None),
        ({"node": "w", "max": "12"}, 12, None),
        ({"node": "w", "max": "0"}, 1, None),
        ({"node": "w", "max": "5000"}, 1000, None),
        ({"node": "w", "lease_ms": "1_000"}, 1, None),
        ({"node": "w", "lease_ms": "5"}, 1, 100),
        ({"node": "w", "lease_ms": "2500"}, 1, 2500),
        ({"node": "w", "lease_ms": "9" * 30}, 1, 86_400_000),
    ],
)
def test_work_query_numbers(query: dict[str, str], n: int, lease: int | None) -> None:
    """API §9.5: `max` unparseable ⇒ 1, `lease_ms` unparseable ⇒ the topic's (None)."""
    q = parse_work_query(query)
    assert (q.max, q.lease_ms) == (n, lease)
