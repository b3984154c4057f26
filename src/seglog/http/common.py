"""Helpers shared by the route handlers: principal checks, bounded body reading, JSON
responses with the `performance` block. (Where engine calls run: `async_engine`.)

A body that ends before it is complete (malformed chunked framing, or the client closing
mid-body: Starlette's `ClientDisconnect`) is bad input, `400 invalid_request`, never a 500.
"""

from __future__ import annotations

import time
from typing import Any, TypeVar

from starlette.requests import ClientDisconnect, Request
from starlette.responses import Response

from seglog.errors import ErrorCode, SeglogError
from seglog.http.auth import Principal, Scope
from seglog.http.json_body import is_json_content_type, parse_json_body

T = TypeVar("T")


def started() -> float:
    return time.perf_counter()


def elapsed_ms(t0: float) -> float:
    return round((time.perf_counter() - t0) * 1000.0, 3)


def principal(request: Request) -> Principal:
    p = request.scope.get("seglog.principal")
    assert isinstance(p, Principal)
    return p


def require(request: Request, scopes: tuple[Scope, ...], name: str | None = None) -> Principal:
    """403 unless the key has every scope and (when given) `name` is inside its allowlist."""
    p = principal(request)
    for s in scopes:
        if not p.has(s):
            raise SeglogError(ErrorCode.FORBIDDEN, f"api key lacks {s.value} scope")
    if name is not None and not p.allows(name):
        raise SeglogError(ErrorCode.FORBIDDEN, f"api key may not access {name!r}", {"topic": name})
    return p


async def read_body(request: Request, limit: int) -> bytes:
    """The whole body, or 413 `payload_too_large` before reading past `limit`."""
    if limit and declared_length_over(request.headers.get("content-length"), limit):
        raise _too_large(limit)
    chunks: list[bytes] = []
    size = 0
    try:
        async for chunk in request.stream():
            size += len(chunk)
            if limit and size > limit:
                raise _too_large(limit)
            chunks.append(chunk)
    except ClientDisconnect:
        raise body_ended_early() from None
    return b"".join(chunks)


def declared_length_over(declared: str | None, limit: int) -> bool:
    """Whether a `Content-Length` value is a decimal number above `limit`. Only ASCII
    digits count (`str.isdigit` also accepts e.g. `²`, which `int` refuses), and a value
    longer than `limit` has digits is over it without converting (`int` refuses more than
    4300 digits). The HTTP server rejects malformed values first; this holds regardless."""
    if declared is None or not declared.isascii() or not declared.isdigit():
        return False
    digits = declared.lstrip("0")
    return len(digits) > len(str(limit)) or (digits != "" and int(digits) > limit)


def body_ended_early() -> SeglogError:
    return SeglogError(
        ErrorCode.INVALID_REQUEST,
        "the request body ended before it was complete (bad chunked framing, or the "
        "connection closed mid-body)",
    )


def _too_large(limit: int) -> SeglogError:
    return SeglogError(
        ErrorCode.PAYLOAD_TOO_LARGE, f"request body exceeds {limit} bytes", {"max": limit}
    )


def json_body(request: Request, raw: bytes, *, empty_ok: bool = False) -> Any:
    """Content-type check then parse (API §0.2); `empty_ok` routes treat no body as `{}`."""
    if empty_ok and not raw.strip():
        return {}
    if not is_json_content_type(request.headers.get("content-type")):
        raise SeglogError(ErrorCode.UNSUPPORTED_MEDIA_TYPE, "request body must be application/json")
    return parse_json_body(raw)


def json_response(body: bytes, status: int = 200) -> Response:
    return Response(body, status_code=status, media_type="application/json")
