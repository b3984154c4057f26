"""Helpers shared by the route handlers: principal checks, bounded body reading, JSON
responses with the `performance` block, and the engine calls that may wait on a WAL fsync
(run in a worker thread so the event loop never blocks on the disk)."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any, TypeVar

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import Response

from seglog.errors import ErrorCode, SeglogError
from seglog.http.auth import Principal, Scope
from seglog.http.codec import is_json_content_type, parse_json_body

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
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and limit and int(declared) > limit:
        raise _too_large(limit)
    chunks: list[bytes] = []
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if limit and size > limit:
            raise _too_large(limit)
        chunks.append(chunk)
    return b"".join(chunks)


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


async def blocking(fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
    """Engine calls that may wait for a durable WAL commit run off the event loop."""
    return await run_in_threadpool(fn, *args, **kwargs)
