"""Query-string values (API §0.9): booleans and page sizes fall back, never fail."""

from __future__ import annotations

import pytest

from seglog.http.query_params import parse_bool_query, parse_page_size


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
