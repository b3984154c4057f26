"""Domain errors shared by every layer.

A `SeglogError` carries a stable wire `code` (API.md §0.6), a human message, an optional
`detail` object and an optional `retry_after` (seconds). It never carries an HTTP status:
the mapping from code to status lives in `seglog.http.errors` (server) and is mirrored by
the client's exception hierarchy.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Any


class ErrorCode(StrEnum):
    INVALID_REQUEST = "invalid_request"
    BATCH_TOO_LARGE = "batch_too_large"
    RECORD_TOO_LARGE = "record_too_large"
    UNAUTHORIZED = "unauthorized"
    FORBIDDEN = "forbidden"
    TOPIC_NOT_FOUND = "topic_not_found"
    ROUTER_NOT_FOUND = "router_not_found"
    NOT_FOUND = "not_found"
    METHOD_NOT_ALLOWED = "method_not_allowed"
    NOT_ACCEPTABLE = "not_acceptable"
    ROUTER_CYCLE = "router_cycle"
    TOPIC_EXISTS_INCOMPATIBLE = "topic_exists_incompatible"
    TOPIC_NOT_EMPTY = "topic_not_empty"
    NOT_A_QUEUE = "not_a_queue"
    PAYLOAD_TOO_LARGE = "payload_too_large"
    UNSUPPORTED_MEDIA_TYPE = "unsupported_media_type"
    TOPIC_FULL = "topic_full"
    THROTTLED = "throttled"
    INTERNAL = "internal"
    NOT_READY = "not_ready"
    SHUTTING_DOWN = "shutting_down"


class SeglogError(Exception):
    """An error with a stable wire code; raised by the engine, mapped to HTTP at the edge."""

    def __init__(
        self,
        code: ErrorCode,
        message: str,
        detail: dict[str, Any] | None = None,
        retry_after: int | None = None,
    ) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.detail = detail
        self.retry_after = retry_after

    def __repr__(self) -> str:
        return f"SeglogError({self.code.value!r}, {self.message!r}, detail={self.detail!r})"


def invalid(message: str, detail: dict[str, Any] | None = None) -> SeglogError:
    return SeglogError(ErrorCode.INVALID_REQUEST, message, detail)


def topic_not_found(topic: str) -> SeglogError:
    return SeglogError(
        ErrorCode.TOPIC_NOT_FOUND, f"topic {topic!r} does not exist", {"topic": topic}
    )


def throttled(message: str, detail: dict[str, Any] | None = None) -> SeglogError:
    return SeglogError(ErrorCode.THROTTLED, message, detail, retry_after=1)


def internal(message: str) -> SeglogError:
    return SeglogError(ErrorCode.INTERNAL, message)
