"""Helpers shared by the route handlers: principal checks, bounded body reading, JSON
responses with the `performance` block. (Where engine calls run: `async_engine`.)

A body that ends before it is complete (malformed chunked framing, or the client closing
mid-body: an `http.disconnect`, or an end before the declared length) is bad input,
`400 invalid_request`, never a 500.
"""

from __future__ import annotations

import time
from typing import Any, TypeVar

from starlette.requests import Request
from starlette.responses import Response

from seglog.errors import ErrorCode, SeglogError
from seglog.http.auth import Principal, Scope
from seglog.http.json_body import is_json_content_type, parse_json_body

T = TypeVar("T")


def started() -> float:
    return time.perf_counter()


def elapsed_ms(t0: float) -> float:
    return round((time.perf_counter() - t0) * 1000.0, 3)


def query_value(request: Request, name: str) -> str | None:
    """`request.query_params.get(name)`, without building Starlette's `QueryParams` for a
    request that has no query string (most data-plane requests: ~5 % of a small write)."""
    if not request.scope.get("query_string"):
        return None
    return request.query_params.get(name)


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
    """The whole body, or 413 `payload_too_large` before reading past `limit`.

    Reading stops as soon as a declared `Content-Length` has arrived: an ASGI server may
    report the body's end only in a further, empty message, and granian answers each
    `receive()` from its I/O thread, so waiting for that message costs a thread round
    trip per request (~65 µs at one connection, ~25 % of a small POST's throughput:
    BENCHMARKS.md, "Queues: the request path"). An HTTP/1.x request with neither
    `Content-Length` nor `Transfer-Encoding` has no body (RFC 9112 §6.3): nothing is
    awaited at all."""
    declared = header(request, b"content-length")
    if limit and declared_length_over(declared, limit):
        raise _too_large(limit)
    # a `Transfer-Encoding` overrides a length (RFC 9112 §6.1)
    chunked = header(request, b"transfer-encoding") is not None
    expected = None if chunked else _declared_length(declared)
    if expected == 0 or (
        declared is None and not chunked and request.scope.get("http_version", "1.1")[0] == "1"
    ):
        return b""
    receive = request.receive
    chunks: list[bytes] = []
    size = 0
    while True:
        message = await receive()
        if message["type"] != "http.request":  # `http.disconnect` mid-body
            raise body_ended_early()
        chunk = message.get("body", b"")
        if chunk:
            size += len(chunk)
            if limit and size > limit:
                raise _too_large(limit)
            chunks.append(chunk)
        if not message.get("more_body", False) or (expected is not None and size >= expected):
            break
    if expected is not None and size != expected:
        raise body_ended_early()
    return chunks[0] if len(chunks) == 1 else b"".join(chunks)


def _declared_length(declared: str | None) -> int | None:
    """A `Content-Length` of plain digits as a number; `None` for anything else (absent, a
    repeated `5, 5`, absurdly long), whose body is then read to its end message."""
    if declared is None or not declared.isascii() or not declared.isdigit():
        return None
    digits = declared.lstrip("0") or "0"
    return int(digits) if len(digits) <= 19 else None  # `int` refuses > 4300 digits


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
    """Content-type check then parse (API §0.2); `empty_ok` routes treat an empty body (no
    bytes at all: whitespace is a body, checked and parsed) as `{}`."""
    if empty_ok and not raw:
        return {}
    if not is_json_content_type(header(request, b"content-type")):
        raise SeglogError(ErrorCode.UNSUPPORTED_MEDIA_TYPE, "request body must be application/json")
    return parse_json_body(raw)


class JsonBytesResponse(Response):
    """`Response(body, status, media_type="application/json")` with the same raw headers
    (`content-length` unless the status has no body, then `content-type`), built without
    Starlette's general `init_headers` (~5 % of a small write's time on the loop)."""

    media_type = "application/json"

    def __init__(self, body: bytes, status_code: int = 200) -> None:
        self.status_code = status_code
        self.body = body
        self.background = None
        if status_code < 200 or status_code in (204, 304):
            self.raw_headers = [_JSON_TYPE]
        else:
            self.raw_headers = [(b"content-length", b"%d" % len(body)), _JSON_TYPE]


_JSON_TYPE = (b"content-type", b"application/json")


def json_response(body: bytes, status: int = 200) -> Response:
    return JsonBytesResponse(body, status)


def raw_header(request: Request, name: bytes) -> bytes | None:
    """The first `name` field (lower case) of the request, its bytes as sent."""
    for key, value in request.scope["headers"]:
        if key == name:
            return value  # type: ignore[no-any-return]
    return None


def header(request: Request, name: bytes) -> str | None:
    """The first `name` field (lower case) of the request, as `request.headers.get` gives
    it, read straight from the ASGI scope: Starlette's `Headers` lookup goes through
    `Mapping.get` and a `KeyError` for every absent field."""
    for key, value in request.scope["headers"]:
        if key == name:
            return value.decode("latin-1")  # type: ignore[no-any-return]
    return None
