"""Everything the client raises.

`SeglogClientError` is the root. Non-2xx answers become `SeglogHTTPError` or the subclass named
after the wire `code` (API.md §0.6); a code this client does not know (or a body that is not the
§0.5 envelope) becomes the base class with `code == "unknown"`, the raw code kept in `wire_code`.
Transport failures become `SeglogConnectionError`. Every exception pickles (Spark ships them
between processes).
"""

from __future__ import annotations

from typing import Any

from seglog.errors import ErrorCode

UNKNOWN_CODE = "unknown"


class SeglogClientError(Exception):
    """Root of every exception raised by `seglog.client`."""


class SeglogConnectionError(SeglogClientError):
    """The request did not get an HTTP response (refused, reset, DNS, protocol error)."""


class SeglogTimeoutError(SeglogConnectionError):
    """A connect, read, write or pool timeout."""


class SeglogProtocolError(SeglogClientError):
    """A 2xx response whose body is not the JSON shape API.md promises."""


class SeglogHTTPError(SeglogClientError):
    """A non-2xx response. `retry_after` is the `Retry-After` header in seconds, if any;
    `wire_code` is the `error.code` string exactly as received (None without an envelope)."""

    code_value: str = UNKNOWN_CODE

    def __init__(
        self,
        status: int,
        code: str,
        message: str,
        detail: dict[str, Any] | None = None,
        retry_after: float | None = None,
        *,
        wire_code: str | None = None,
    ) -> None:
        super().__init__(f"{status} {code}: {message}")
        self.status = status
        self.code = code
        self.message = message
        self.detail = detail
        self.retry_after = retry_after
        self.wire_code = wire_code

    def __reduce__(self) -> tuple[Any, ...]:
        args = (self.status, self.code, self.message, self.detail, self.retry_after)
        return (_rebuild, (type(self), args, self.wire_code))

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(status={self.status}, code={self.code!r}, "
            f"message={self.message!r}, detail={self.detail!r}, retry_after={self.retry_after!r})"
        )


def _rebuild(
    cls: type[SeglogHTTPError], args: tuple[Any, ...], wire_code: str | None
) -> SeglogHTTPError:
    return cls(*args, wire_code=wire_code)


class InvalidRequest(SeglogHTTPError):
    code_value = ErrorCode.INVALID_REQUEST.value


class BatchTooLarge(SeglogHTTPError):
    code_value = ErrorCode.BATCH_TOO_LARGE.value


class RecordTooLarge(SeglogHTTPError):
    code_value = ErrorCode.RECORD_TOO_LARGE.value


class Unauthorized(SeglogHTTPError):
    code_value = ErrorCode.UNAUTHORIZED.value


class Forbidden(SeglogHTTPError):
    code_value = ErrorCode.FORBIDDEN.value


class TopicNotFound(SeglogHTTPError):
    code_value = ErrorCode.TOPIC_NOT_FOUND.value


class RouterNotFound(SeglogHTTPError):
    code_value = ErrorCode.ROUTER_NOT_FOUND.value


class NotFound(SeglogHTTPError):
    code_value = ErrorCode.NOT_FOUND.value


class MethodNotAllowed(SeglogHTTPError):
    code_value = ErrorCode.METHOD_NOT_ALLOWED.value


class NotAcceptable(SeglogHTTPError):
    code_value = ErrorCode.NOT_ACCEPTABLE.value


class RouterCycle(SeglogHTTPError):
    code_value = ErrorCode.ROUTER_CYCLE.value


class TopicExistsIncompatible(SeglogHTTPError):
    code_value = ErrorCode.TOPIC_EXISTS_INCOMPATIBLE.value


class TopicNotEmpty(SeglogHTTPError):
    code_value = ErrorCode.TOPIC_NOT_EMPTY.value


class NotAQueue(SeglogHTTPError):
    code_value = ErrorCode.NOT_A_QUEUE.value


class PayloadTooLarge(SeglogHTTPError):
    code_value = ErrorCode.PAYLOAD_TOO_LARGE.value


class UnsupportedMediaType(SeglogHTTPError):
    code_value = ErrorCode.UNSUPPORTED_MEDIA_TYPE.value


class TopicFull(SeglogHTTPError):
    code_value = ErrorCode.TOPIC_FULL.value


class Throttled(SeglogHTTPError):
    code_value = ErrorCode.THROTTLED.value


class InternalError(SeglogHTTPError):
    code_value = ErrorCode.INTERNAL.value


class NotReady(SeglogHTTPError):
    code_value = ErrorCode.NOT_READY.value

    @property
    def replay_progress(self) -> float | None:
        """`detail.replay_progress` (0.0..1.0) while the server recovers, if reported."""
        value = (self.detail or {}).get("replay_progress")
        return float(value) if isinstance(value, int | float) else None


class ShuttingDown(SeglogHTTPError):
    code_value = ErrorCode.SHUTTING_DOWN.value


EXCEPTION_BY_CODE: dict[str, type[SeglogHTTPError]] = {
    cls.code_value: cls
    for cls in (
        InvalidRequest,
        BatchTooLarge,
        RecordTooLarge,
        Unauthorized,
        Forbidden,
        TopicNotFound,
        RouterNotFound,
        NotFound,
        MethodNotAllowed,
        NotAcceptable,
        RouterCycle,
        TopicExistsIncompatible,
        TopicNotEmpty,
        NotAQueue,
        PayloadTooLarge,
        UnsupportedMediaType,
        TopicFull,
        Throttled,
        InternalError,
        NotReady,
        ShuttingDown,
    )
}
"""Wire code → exception class; covers every `seglog.errors.ErrorCode`."""


def http_error(
    status: int,
    code: str | None,
    message: str,
    detail: dict[str, Any] | None = None,
    retry_after: float | None = None,
) -> SeglogHTTPError:
    """The exception for one error response; unknown or missing codes map to the base class."""
    cls = EXCEPTION_BY_CODE.get(code or "")
    if cls is None:
        return SeglogHTTPError(status, UNKNOWN_CODE, message, detail, retry_after, wire_code=code)
    return cls(status, cls.code_value, message, detail, retry_after, wire_code=code)


# The HTTP status each wire code is sent with (API.md §0.6). In-band errors (WebSocket `error`
# messages, SSE `error` frames) carry only a code; they get the status the same failure would
# have had over HTTP, so `except TopicNotFound` and `.status` mean the same on every transport.
_STATUS_BY_CODE: dict[str, int] = {
    **dict.fromkeys(("invalid_request", "batch_too_large", "record_too_large"), 400),
    "unauthorized": 401,
    "forbidden": 403,
    **dict.fromkeys(("topic_not_found", "router_not_found", "not_found"), 404),
    "method_not_allowed": 405,
    "not_acceptable": 406,
    **dict.fromkeys(
        ("router_cycle", "topic_exists_incompatible", "topic_not_empty", "not_a_queue"), 409
    ),
    "payload_too_large": 413,
    "unsupported_media_type": 415,
    "topic_full": 422,
    "throttled": 429,
    "internal": 500,
    **dict.fromkeys(("not_ready", "shutting_down", "server_shutting_down"), 503),
    # WebSocket-only codes: a command the server could not parse or a binary frame.
    **dict.fromkeys(("invalid_json", "unsupported_message"), 400),
}

# Codes that only exist in-band but mean an existing exception class.
_IN_BAND_ALIASES = {
    "server_shutting_down": ShuttingDown.code_value,
    "invalid_json": InvalidRequest.code_value,
    "unsupported_message": InvalidRequest.code_value,
}


def in_band_error(code: str, message: str, detail: dict[str, Any] | None = None) -> SeglogHTTPError:
    """The exception for an error reported inside a stream or socket rather than as an HTTP
    response; `wire_code` keeps the code exactly as received."""
    status = _STATUS_BY_CODE.get(code, 0)
    cls = EXCEPTION_BY_CODE.get(_IN_BAND_ALIASES.get(code, code))
    if cls is None:
        return SeglogHTTPError(status, UNKNOWN_CODE, message, detail, wire_code=code)
    return cls(status, cls.code_value, message, detail, wire_code=code)
