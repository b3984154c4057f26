"""A request body from bytes to a JSON value (API §0.2), refusing out-of-range integers.

The content type must start with `application/json` (after leading whitespace). Bytes
orjson cannot parse are `invalid_request` with a message starting `malformed JSON body:`;
so is an integer literal outside `[-2**63, 2**64-1]`, which orjson would otherwise turn
silently into a float. What the value must look like is up to each route's request module.
"""

from __future__ import annotations

import re
from typing import Any

import orjson

from seglog.errors import invalid


def is_json_content_type(value: str | None) -> bool:
    """API §0.2: after leading whitespace, the value starts with `application/json`."""
    return value is not None and value.lstrip().startswith("application/json")


# A run of 19+ digits may be an integer literal outside the 64-bit range, which orjson
# would silently turn into a float. Only then is the body re-checked precisely. The run is
# found by mapping digits to NUL and searching for 19 NULs: ~10x faster than a regex.
_DIGITS_TO_NUL = bytes(0 if 0x30 <= b <= 0x39 else 0x20 for b in range(256))
_LONG_DIGIT_RUN = b"\x00" * 19
_I64_MIN = -(2**63)
_U64_MAX = 2**64 - 1
_U64_DIGITS = len(str(_U64_MAX))
# The precise re-check is a flat scan of the bytes, never a recursive parse: a document
# nested up to orjson's depth limit must not reach Python's recursion limit.
_ESCAPE = re.compile(rb"\\.", re.DOTALL)
_LONG_NUMBER = re.compile(rb"-?[0-9]{19,}")
_NUMBER_PART_BEFORE = frozenset(b".eE+-")  # the run is a fraction or an exponent
_FLOAT_AFTER = frozenset(b".eE")  # the run is a float's integer part


def out_of_range_integer(raw: bytes) -> bytes | None:
    """The first integer literal of the valid JSON document `raw` (outside strings) that
    does not fit in `[-2**63, 2**64-1]`, or None.

    Escape pairs are blanked first (same length, so offsets hold). In valid JSON every
    backslash starts an escape and outside strings there are none, so every quote left
    delimits a string: a run of digits is inside a string iff an odd number of quotes
    precedes it.
    """
    text = _ESCAPE.sub(b"__", raw)
    quotes = 0
    scanned = 0
    for m in _LONG_NUMBER.finditer(text):
        start, end = m.span()
        quotes += text.count(b'"', scanned, start)
        scanned = start
        if quotes % 2:
            continue
        if start > 0 and text[start - 1] in _NUMBER_PART_BEFORE:
            continue
        if end < len(text) and text[end] in _FLOAT_AFTER:
            continue
        literal = m.group()
        if len(literal.lstrip(b"-")) > _U64_DIGITS or not _I64_MIN <= int(literal) <= _U64_MAX:
            return literal
    return None


def parse_json_body(raw: bytes | bytearray | memoryview) -> Any:
    try:
        obj = orjson.loads(raw)
    except orjson.JSONDecodeError as e:
        raise invalid(f"malformed JSON body: {e}") from None
    check_integers(bytes(raw))
    return obj


def check_integers(data: bytes) -> None:
    """`invalid_request` if the valid JSON document `data` has an integer literal outside
    the 64-bit range (which orjson parsed as a float)."""
    if _LONG_DIGIT_RUN in data.translate(_DIGITS_TO_NUL):
        bad = out_of_range_integer(data)
        if bad is not None:
            shown = bad.decode("ascii") if len(bad) <= 40 else f"{bad[:40].decode('ascii')}..."
            raise invalid(
                f"malformed JSON body: integer {shown} is outside the 64-bit range; integers "
                "must fit in 64 bits (send larger numbers as strings)"
            )
