"""The one `ErrorCode → HTTP status` table (API §0.6) and the canonical error envelope.

Every non-2xx response is exactly `{"error":{"code","message","detail"?}}` (API §0.5).
`Retry-After: 1` goes with every 429 and with `not_ready`; any other error carries the
header only when its `SeglogError.retry_after` is set.
"""

from __future__ import annotations

import orjson
from starlette.responses import Response

from seglog.errors import ErrorCode, SeglogError
from seglog.http.wire_types import Error, ErrorBody

STATUS: dict[ErrorCode, int] = {
    ErrorCode.INVALID_REQUEST: 400,
    ErrorCode.BATCH_TOO_LARGE: 400,
    ErrorCode.RECORD_TOO_LARGE: 400,
    ErrorCode.UNAUTHORIZED: 401,
    ErrorCode.FORBIDDEN: 403,
    ErrorCode.TOPIC_NOT_FOUND: 404,
    ErrorCode.ROUTER_NOT_FOUND: 404,
    ErrorCode.NOT_FOUND: 404,
    ErrorCode.METHOD_NOT_ALLOWED: 405,
    ErrorCode.NOT_ACCEPTABLE: 406,
    ErrorCode.ROUTER_CYCLE: 409,
    ErrorCode.TOPIC_EXISTS_INCOMPATIBLE: 409,
    ErrorCode.TOPIC_NOT_EMPTY: 409,
    ErrorCode.NOT_A_QUEUE: 409,
    ErrorCode.PAYLOAD_TOO_LARGE: 413,
    ErrorCode.UNSUPPORTED_MEDIA_TYPE: 415,
    ErrorCode.TOPIC_FULL: 422,
    ErrorCode.THROTTLED: 429,
    ErrorCode.INTERNAL: 500,
    ErrorCode.NOT_READY: 503,
    ErrorCode.SHUTTING_DOWN: 503,
}


def status_for(code: ErrorCode) -> int:
    return STATUS[code]


def retry_after(err: SeglogError) -> int | None:
    """Seconds for the `Retry-After` header, or None for no header."""
    if STATUS[err.code] == 429 or err.code is ErrorCode.NOT_READY:
        return 1
    return err.retry_after


def error_headers(err: SeglogError) -> dict[str, str]:
    seconds = retry_after(err)
    return {} if seconds is None else {"Retry-After": str(seconds)}


def error_body(err: SeglogError) -> bytes:
    inner: ErrorBody = {"code": err.code, "message": err.message or err.code.value}
    if err.detail is not None:
        inner["detail"] = err.detail
    body: Error = {"error": inner}
    return orjson.dumps(body, default=str)


def error_response(err: SeglogError) -> Response:
    return Response(
        error_body(err),
        status_code=STATUS[err.code],
        headers=error_headers(err),
        media_type="application/json",
    )
