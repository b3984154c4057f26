"""Typed reads of fields from a parsed JSON request body, with the API §0.2 errors.

Rules shared by every request module: unknown fields are ignored; a wrong JSON type, a
negative number for an unsigned field, a bool where a number is required, a missing
required field or a non-object body is `invalid_request` with a message starting
`malformed JSON body:`; a length limit exceeded is `invalid_request` with a plain message
and a `{"field", "max"}` detail. `null` is accepted only where a caller allows it.
"""

from __future__ import annotations

from typing import Any

import orjson

from seglog.core.jsonbytes import json_bytes
from seglog.errors import SeglogError, invalid
from seglog.model import U64_MAX


def malformed(message: str) -> SeglogError:
    return invalid(f"malformed JSON body: {message}")


def json_object(obj: Any) -> dict[str, Any]:
    """The body itself, which must be a JSON object."""
    if not isinstance(obj, dict):
        raise malformed("the body must be a JSON object")
    return obj


def utf8_len(value: str, field: str) -> int:
    try:
        return len(value.encode("utf-8"))
    except UnicodeEncodeError:
        raise malformed(f"{field} is not valid UTF-8") from None


def compact_json(value: Any, field: str) -> bytes:
    """`value` re-encoded as compact JSON (how record payloads are stored)."""
    try:
        return json_bytes(value)
    except orjson.JSONEncodeError as e:
        raise malformed(f"{field} cannot be encoded as JSON: {e}") from None


U32_MAX = 2**32 - 1


def u64_field(obj: dict[str, Any], key: str, default: int) -> int:
    return _unsigned(obj, key, default, U64_MAX, "an unsigned integer")


def u32_field(obj: dict[str, Any], key: str, default: int) -> int:
    """An API `u32` field: out of `[0, 2**32-1]` is a type error (API §0.2), not a clamp."""
    return _unsigned(obj, key, default, U32_MAX, "an unsigned 32-bit integer")


def _unsigned(obj: dict[str, Any], key: str, default: int, top: int, what: str) -> int:
    if key not in obj:
        return default
    v = obj[key]
    if isinstance(v, bool) or not isinstance(v, int) or not 0 <= v <= top:
        raise malformed(f"{key} must be {what}")
    return v


def bool_field(obj: dict[str, Any], key: str, default: bool) -> bool:
    if key not in obj:
        return default
    v = obj[key]
    if not isinstance(v, bool):
        raise malformed(f"{key} must be a boolean")
    return v


def optional_str_field(obj: dict[str, Any], key: str, max_bytes: int, field: str) -> str | None:
    if key not in obj:
        return None
    v = obj[key]
    if not isinstance(v, str):
        raise malformed(f"{field} must be a string")
    if utf8_len(v, field) > max_bytes:
        raise invalid(f"{field} exceeds {max_bytes} bytes", {"field": field, "max": max_bytes})
    return v
