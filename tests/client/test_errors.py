"""Every wire error code maps to its exception class, with status, detail and Retry-After."""

from __future__ import annotations

import pickle

import httpx
import pytest

import seglog.client as client_pkg
from seglog.client import (
    EXCEPTION_BY_CODE,
    InternalError,
    NotReady,
    SeglogClientError,
    SeglogConnectionError,
    SeglogHTTPError,
    SeglogTimeoutError,
    Throttled,
    TopicNotFound,
)
from seglog.errors import ErrorCode
from tests.client.conftest import MakeApi, err

# (code, class name, HTTP status) exactly as API.md §0.6 lists them.
TABLE = [
    ("invalid_request", "InvalidRequest", 400),
    ("batch_too_large", "BatchTooLarge", 400),
    ("record_too_large", "RecordTooLarge", 400),
    ("unauthorized", "Unauthorized", 401),
    ("forbidden", "Forbidden", 403),
    ("topic_not_found", "TopicNotFound", 404),
    ("router_not_found", "RouterNotFound", 404),
    ("not_found", "NotFound", 404),
    ("method_not_allowed", "MethodNotAllowed", 405),
    ("not_acceptable", "NotAcceptable", 406),
    ("router_cycle", "RouterCycle", 409),
    ("topic_exists_incompatible", "TopicExistsIncompatible", 409),
    ("topic_not_empty", "TopicNotEmpty", 409),
    ("not_a_queue", "NotAQueue", 409),
    ("payload_too_large", "PayloadTooLarge", 413),
    ("unsupported_media_type", "UnsupportedMediaType", 415),
    ("topic_full", "TopicFull", 422),
    ("throttled", "Throttled", 429),
    ("internal", "InternalError", 500),
    ("not_ready", "NotReady", 503),
    ("shutting_down", "ShuttingDown", 503),
]


def test_table_covers_every_error_code() -> None:
    assert {code for code, _, _ in TABLE} == {c.value for c in ErrorCode} == set(EXCEPTION_BY_CODE)


@pytest.mark.parametrize(("code", "name", "status"), TABLE)
async def test_error_code_maps_to_class(
    make_api: MakeApi, code: str, name: str, status: int
) -> None:
    detail = {"topic": "jobs", "n": 1}
    api = make_api(lambda _req: err(status, code, "it failed", detail, retry_after=1), retries=0)
    with pytest.raises(SeglogHTTPError) as info:
        await api("get_topic", "jobs")
    exc = info.value
    assert type(exc) is getattr(client_pkg, name)
    assert isinstance(exc, SeglogClientError)
    assert (exc.status, exc.code, exc.message) == (status, code, "it failed")
    assert exc.detail == detail
    assert exc.retry_after == 1.0
    assert exc.wire_code == code
    assert code in str(exc) and "it failed" in str(exc)


async def test_detail_and_retry_after_are_optional(make_api: MakeApi) -> None:
    api = make_api(lambda _req: err(404, "topic_not_found", "missing"))
    with pytest.raises(TopicNotFound) as info:
        await api("get_topic", "jobs")
    assert info.value.detail is None and info.value.retry_after is None


async def test_unknown_code_maps_to_base_class(make_api: MakeApi) -> None:
    api = make_api(lambda _req: err(418, "teapot", "short and stout", {"k": 1}))
    with pytest.raises(SeglogHTTPError) as info:
        await api("health")
    exc = info.value
    assert type(exc) is SeglogHTTPError
    assert (exc.status, exc.code, exc.wire_code, exc.detail) == (418, "unknown", "teapot", {"k": 1})


@pytest.mark.parametrize(
    "response",
    [
        lambda: httpx.Response(502, text="<html>Bad Gateway</html>"),
        lambda: httpx.Response(500, content=b""),
        lambda: httpx.Response(400, json={"message": "no envelope"}),
        lambda: httpx.Response(400, json={"error": "flat string"}),
    ],
)
async def test_non_envelope_error_body_maps_to_base_class(
    make_api: MakeApi, response: object
) -> None:
    api = make_api(lambda _req: response(), retries=0)  # type: ignore[operator]
    with pytest.raises(SeglogHTTPError) as info:
        await api("health")
    assert type(info.value) is SeglogHTTPError
    assert info.value.code == "unknown" and info.value.wire_code is None
    assert str(info.value.status) in info.value.message


async def test_retry_after_garbage_is_ignored(make_api: MakeApi) -> None:
    def handler(_req: httpx.Request) -> httpx.Response:
        resp = err(500, "internal", "boom")
        resp.headers["Retry-After"] = "Wed, 21 Oct 2015 07:28:00 GMT"
        return resp

    api = make_api(handler)
    with pytest.raises(InternalError) as info:
        await api("health")
    assert info.value.retry_after is None


def test_not_ready_exposes_replay_progress() -> None:
    assert NotReady(503, "not_ready", "m", {"replay_progress": 0.25}).replay_progress == 0.25
    assert NotReady(503, "not_ready", "m").replay_progress is None


def test_exceptions_pickle_round_trip() -> None:
    exc = Throttled(
        429, "throttled", "slow down", {"limit": "max_topics", "max": 5}, 1.0, wire_code="throttled"
    )
    back = pickle.loads(pickle.dumps(exc))
    assert type(back) is Throttled
    assert (
        back.status,
        back.code,
        back.message,
        back.detail,
        back.retry_after,
        back.wire_code,
    ) == (
        429,
        "throttled",
        "slow down",
        {"limit": "max_topics", "max": 5},
        1.0,
        "throttled",
    )
    assert str(back) == str(exc)
    conn = pickle.loads(pickle.dumps(SeglogTimeoutError("GET /v0/health: ReadTimeout")))
    assert isinstance(conn, SeglogConnectionError) and str(conn) == "GET /v0/health: ReadTimeout"
