"""List cursors (API §0.9): opaque to clients, but the format is fixed by the spec, as
standard base64 of the compact JSON `{"after":"<last name of the page>"}`."""

from __future__ import annotations

import base64
import binascii

import orjson

from seglog.errors import invalid


def encode_cursor(after: str) -> str:
    """Standard base64 (with padding) of the compact JSON `{"after":"<name>"}`."""
    return base64.b64encode(orjson.dumps({"after": after})).decode("ascii")


def decode_cursor(value: str | None) -> str | None:
    """The `after` name of a list cursor; empty ⇒ None (first page). A `+` that arrived
    as a space through form-decoding and missing padding are tolerated."""
    if value is None or value == "":
        return None
    s = value.strip().replace(" ", "+")
    s += "=" * (-len(s) % 4)
    try:
        decoded = orjson.loads(base64.b64decode(s, validate=True))
    except (binascii.Error, ValueError):
        raise invalid("malformed cursor") from None
    after = decoded.get("after") if isinstance(decoded, dict) else None
    if not isinstance(after, str):
        raise invalid("malformed cursor")
    return after
