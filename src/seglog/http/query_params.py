"""Query-string values (API §0.9): lenient by rule, so a bad value falls back to the
default instead of failing the request."""

from __future__ import annotations

import re

DEFAULT_PAGE_SIZE = 100
MAX_PAGE_SIZE = 1000
_INT = re.compile(r"[+-]?[0-9]+")


def parse_bool_query(value: str | None, default: bool) -> bool:
    """`true`/`1` ⇒ True, `false`/`0` ⇒ False, anything else (or absent) ⇒ `default`."""
    if value in ("true", "1"):
        return True
    if value in ("false", "0"):
        return False
    return default


def query_int(value: str | None) -> int | None:
    """An integer query value — an optional sign and ASCII digits (not `int`'s `1_000` or
    other scripts' digits), surrounding whitespace ignored — or None when absent or not
    one. More than 19 digits read as ±10**19: every caller clamps, and `int` refuses over
    4,300."""
    if value is None:
        return None
    text = value.strip()
    if not _INT.fullmatch(text):
        return None
    sign = -1 if text.startswith("-") else 1
    digits = text.lstrip("+-").lstrip("0") or "0"
    return sign * (10**19 if len(digits) > 19 else int(digits))


def parse_page_size(value: str | None) -> int:
    """API §0.9: default 100, non-numeric ⇒ default, clamped to `[1, 1000]`."""
    n = query_int(value)
    return DEFAULT_PAGE_SIZE if n is None else min(max(n, 1), MAX_PAGE_SIZE)
