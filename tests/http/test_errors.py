"""The status table (API §0.6), the error envelope (§0.5) and Retry-After rules, plus the
OpenAPI document's error schema and path coverage (§12)."""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from seglog.errors import ErrorCode, SeglogError
from seglog.http.errors import (
    STATUS,
    error_body,
    error_headers,
    error_response,
    status_for,
)
from seglog.http.openapi import OPENAPI, openapi_bytes

SPEC_TABLE = {
    "invalid_request": 400,
    "batch_too_large": 400,
    "record_too_large": 400,
    "unauthorized": 401,
    "forbidden": 403,
    "topic_not_found": 404,
    "router_not_found": 404,
    "not_found": 404,
    "method_not_allowed": 405,
    "not_acceptable": 406,
    "router_cycle": 409,
    "topic_exists_incompatible": 409,
    "topic_not_empty": 409,
    "not_a_queue": 409,
    "payload_too_large": 413,
    "unsupported_media_type": 415,
    "topic_full": 422,
    "throttled": 429,
    "internal": 500,
    "not_ready": 503,
    "shutting_down": 503,
}


def test_table_covers_every_code_exactly() -> None:
    assert set(STATUS) == set(ErrorCode)
    assert {c.value: s for c, s in STATUS.items()} == SPEC_TABLE
    for code in ErrorCode:
        assert status_for(code) == SPEC_TABLE[code.value]


def test_body_without_detail() -> None:
    body = error_body(SeglogError(ErrorCode.NOT_FOUND, "no such route"))
    assert body == b'{"error":{"code":"not_found","message":"no such route"}}'


def test_body_with_detail() -> None:
    err = SeglogError(ErrorCode.TOPIC_NOT_FOUND, 'topic "jobs" does not exist', {"topic": "jobs"})
    out = orjson.loads(error_body(err))
    assert out == {
        "error": {
            "code": "topic_not_found",
            "message": 'topic "jobs" does not exist',
            "detail": {"topic": "jobs"},
        }
    }
    assert list(out["error"]) == ["code", "message", "detail"]


def test_empty_message_is_replaced() -> None:
    out = orjson.loads(error_body(SeglogError(ErrorCode.INTERNAL, "")))
    assert out["error"]["message"]


@pytest.mark.parametrize("code", list(ErrorCode))
def test_retry_after_rules(code: ErrorCode) -> None:
    headers = error_headers(SeglogError(code, "x"))
    if STATUS[code] == 429 or code is ErrorCode.NOT_READY:
        assert headers == {"Retry-After": "1"}
    else:
        assert headers == {}


def test_retry_after_is_one_even_if_error_says_otherwise() -> None:
    assert error_headers(SeglogError(ErrorCode.THROTTLED, "x", retry_after=5)) == {
        "Retry-After": "1"
    }
    assert error_headers(SeglogError(ErrorCode.SHUTTING_DOWN, "x", retry_after=2)) == {
        "Retry-After": "2"
    }


def test_error_response() -> None:
    err = SeglogError(ErrorCode.NOT_READY, "recovering", {"replay_progress": 0.5})
    resp = error_response(err)
    assert resp.status_code == 503
    assert resp.headers["retry-after"] == "1"
    assert resp.headers["content-type"] == "application/json"
    assert orjson.loads(resp.body)["error"]["detail"] == {"replay_progress": 0.5}


# --------------------------------------------------------------------------- OpenAPI

SPEC_PATHS = {
    "/v0/topics/{topic}": {"put", "get", "delete", "post"},
    "/v0/topics": {"get"},
    "/v0/topics/{topic}/diff": {"post"},
    "/v0/topics/{topic}/delete": {"post"},
    "/v0/topics/{topic}/claim": {"post"},
    "/v0/topics/{topic}/ack": {"post"},
    "/v0/topics/{topic}/nack": {"post"},
    "/v0/topics/{topic}/extend": {"post"},
    "/v0/topics/{topic}/work": {"get"},
    "/v0/routers/{router}": {"put", "get", "delete"},
    "/v0/routers": {"get"},
    "/v0/watch": {"post"},
    "/v0/watch/{wid}": {"get"},
    "/v0/ws": {"get"},
    "/v0/health": {"get"},
    "/healthz": {"get"},
    "/v0/ready": {"get"},
    "/readyz": {"get"},
    "/v0/metrics": {"get"},
}
METHODS = {"get", "put", "post", "delete", "patch", "head", "options"}


def test_openapi_covers_endpoint_index() -> None:
    doc = orjson.loads(openapi_bytes())
    assert doc["openapi"].startswith("3.1")
    for path, methods in SPEC_PATHS.items():
        assert set(doc["paths"][path]) & METHODS == methods, path


def test_openapi_error_schema_lists_every_code() -> None:
    schemas = OPENAPI["components"]["schemas"]

    def resolve(s: dict[str, Any]) -> dict[str, Any]:
        return schemas[s["$ref"].rsplit("/", 1)[1]] if "$ref" in s else s

    envelope = schemas["Error"]
    assert envelope["required"] == ["error"] and envelope["additionalProperties"] is False
    err = resolve(envelope["properties"]["error"])
    assert set(resolve(err["properties"]["code"])["enum"]) == {c.value for c in ErrorCode}
    assert err["required"] == ["code", "message"] and err["additionalProperties"] is False
    statuses = {str(s) for s in STATUS.values()}
    assert {k[1:] for k in OPENAPI["components"]["responses"]} == statuses


def test_openapi_refs_resolve() -> None:
    raw = openapi_bytes().decode()
    schemas = OPENAPI["components"]["schemas"]
    responses = OPENAPI["components"]["responses"]
    for part in raw.split('"$ref":"')[1:]:
        target = part.split('"', 1)[0]
        kind, name = target.removeprefix("#/components/").split("/")
        assert name in (schemas if kind == "schemas" else responses), target
