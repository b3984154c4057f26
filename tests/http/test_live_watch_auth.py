"""Black-box: the SSE watch with auth enabled (API §1.2, §1.3, §7.1, §7.2, §11): the read
scope and the prefix allowlist on create, the stream's session binding (Bearer or the first
`?token=`), its check order, and the per-key stream cap."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from tests.http.conftest import ServerFactory
from tests.http.live import JSON, error_of, ok
from tests.http.test_live_watch import SseConn, open_stream
from tests.support.server import ServerProcess

KEYS = "full, ronly:r, wonly:w, tenant:r:tenant1.|shared., other:rw, rw2:rw"
MAX_BODY = 4096
TOPICS = ("tenant1.a", "tenant1.b", "shared.x", "private.y")


def bearer(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


@pytest.fixture(scope="module")
def auth_server() -> Iterator[ServerProcess]:
    srv = ServerProcess(env={"SEGLOG_API_KEYS": KEYS, "SEGLOG_MAX_BODY_BYTES": str(MAX_BODY)})
    srv.start()
    try:
        with httpx.Client(base_url=srv.url, timeout=10, headers=bearer("full")) as c:
            for t in TOPICS:
                ok(c.put(f"/v0/topics/{t}"), 201)
        yield srv
    finally:
        srv.close()


@pytest.fixture
def c(auth_server: ServerProcess) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=auth_server.url, timeout=10) as client:
        yield client


def watch_as(c: httpx.Client, key: str, topics: list[str], query: str = "") -> httpx.Response:
    return c.post(
        f"/v0/watch{query}", json={"topics": {t: {} for t in topics}}, headers=bearer(key)
    )


# --------------------------------------------------------------------------- create


@pytest.mark.parametrize(
    "headers", [{}, bearer("nope"), {"Authorization": "bearer full"}, {"X-Api-Key": "full"}]
)
def test_create_without_valid_key_401(c: httpx.Client, headers: dict[str, str]) -> None:
    r = c.post("/v0/watch", json={"topics": {"shared.x": {}}}, headers=headers)
    error_of(r, 401, "unauthorized")


def test_create_token_query_is_ignored(c: httpx.Client) -> None:
    # `?token=` counts only on the two SSE GETs (API §1.2)
    r = c.post("/v0/watch?token=full", json={"topics": {"shared.x": {}}})
    error_of(r, 401, "unauthorized")


def test_create_needs_read_scope(c: httpx.Client) -> None:
    error_of(watch_as(c, "wonly", ["shared.x"]), 403, "forbidden")
    for key in ("full", "ronly", "other", "tenant"):
        ok(watch_as(c, key, ["shared.x"]))


def test_create_allowlist_per_topic(c: httpx.Client) -> None:
    ok(watch_as(c, "tenant", ["tenant1.a", "tenant1.b", "shared.x"]))
    r = watch_as(c, "tenant", ["tenant1.a", "private.y"])
    error_of(r, 403, "forbidden", detail={"topic": "private.y"})
    # the allowlist is checked before existence, and lenient does not bypass it
    r = watch_as(c, "tenant", ["tenant1.a", "private.nope"])
    error_of(r, 403, "forbidden", detail={"topic": "private.nope"})
    r = watch_as(c, "tenant", ["tenant1.a", "private.nope"], "?lenient=true")
    error_of(r, 403, "forbidden", detail={"topic": "private.nope"})
    # an allowed but unknown topic is 404 / dropped with lenient
    r = watch_as(c, "tenant", ["tenant1.a", "tenant1.nope"])
    error_of(r, 404, "topic_not_found", detail={"topic": "tenant1.nope"})
    body = ok(watch_as(c, "tenant", ["tenant1.nope", "tenant1.a"], "?lenient=true"))
    assert list(body["topics"]) == ["tenant1.a"]


def test_create_auth_before_body_checks(c: httpx.Client) -> None:
    # authentication → scope → body size → content type → parse (API §0.2)
    big = b'{"topics":{"shared.x":{}},"pad":"' + b"x" * MAX_BODY + b'"}'
    error_of(c.post("/v0/watch", content=b"{"), 401, "unauthorized")
    error_of(c.post("/v0/watch", content=big, headers=JSON), 401, "unauthorized")
    error_of(
        c.post("/v0/watch", content=big, headers={**JSON, **bearer("wonly")}), 403, "forbidden"
    )
    error_of(c.post("/v0/watch", content=b"{", headers=bearer("wonly")), 403, "forbidden")
    error_of(c.post("/v0/watch", content=big, headers=bearer("ronly")), 413, "payload_too_large")
    r = c.post("/v0/watch", content=b"{", headers=bearer("ronly"))
    error_of(r, 415, "unsupported_media_type")
    r = c.post("/v0/watch", content=b"{", headers={**JSON, **bearer("ronly")})
    error_of(r, 400, "invalid_request", message_prefix="malformed JSON body:")


# --------------------------------------------------------------------------- stream binding


def _wid(c: httpx.Client, key: str, topics: list[str] | None = None) -> str:
    wid = ok(watch_as(c, key, topics or ["shared.x"]))["wid"]
    assert isinstance(wid, str)
    return wid


@pytest.mark.parametrize(
    ("headers", "query"),
    [
        ({}, ""),
        (bearer("nope"), ""),
        (bearer("full"), ""),  # a different valid key, even a full-access one
        (bearer("rw2"), ""),
        ({"Authorization": "Basic ronly"}, ""),
        ({}, "?token=nope"),
        ({}, "?token=full"),
        ({}, "?token="),
        ({}, "?token=full&token=ronly"),  # first occurrence wins
        ({}, "?tok=ronly"),
    ],
)
def test_stream_binding_refuses_401(
    auth_server: ServerProcess, c: httpx.Client, headers: dict[str, str], query: str
) -> None:
    wid = _wid(c, "ronly")
    with SseConn(auth_server.address, f"/v0/watch/{wid}{query}", headers) as conn:
        conn.error(401, "unauthorized")


@pytest.mark.parametrize(
    ("headers", "query"),
    [
        (bearer("ronly"), ""),
        ({"Authorization": "Bearer  ronly "}, ""),  # the remainder is trimmed
        ({}, "?token=ronly"),
        ({}, "?token=ronly&token=full"),
        ({}, "?x=1&token=ronly"),
    ],
)
def test_stream_binding_same_key_200(
    auth_server: ServerProcess, c: httpx.Client, headers: dict[str, str], query: str
) -> None:
    wid = _wid(c, "ronly")
    conn = SseConn(auth_server.address, f"/v0/watch/{wid}{query}", headers)
    with conn:
        assert conn.status == 200, conn.body
        first = conn.next_frame()
        assert first is not None and first.retry == 2000
        conn.until_caught_up({"shared.x": 0})


def test_stream_check_order_with_auth(auth_server: ServerProcess, c: httpx.Client) -> None:
    wid = _wid(c, "ronly")
    # Accept first: no key at all, yet 406
    with SseConn(auth_server.address, f"/v0/watch/{wid}", accept="application/json") as conn:
        conn.error(406, "not_acceptable")
    # then the session: an unknown wid without a key is 404, not 401 (no up-front auth)
    with SseConn(auth_server.address, "/v0/watch/wid_AAAAAAAAAAAAAAAAAAAAAA") as conn:
        conn.error(404, "not_found")
    with SseConn(auth_server.address, "/v0/watch/wid_AAAAAAAAAAAAAAAAAAAAAA", bearer("x")) as conn:
        conn.error(404, "not_found")


@pytest.mark.parametrize(
    ("method", "path"),
    [
        ("GET", "/v0/watch/"),
        ("GET", "/v0/watch/wid_AAAAAAAAAAAAAAAAAAAAAA/extra"),
        ("GET", "/v0/watch/a/b/c"),
        ("POST", "/v0/watch/wid_AAAAAAAAAAAAAAAAAAAAAA"),
        ("DELETE", "/v0/watch/wid_AAAAAAAAAAAAAAAAAAAAAA"),
        ("GET", "/v0/watch"),
    ],
)
def test_non_stream_watch_paths_need_a_key(c: httpx.Client, method: str, path: str) -> None:
    """Only `GET /v0/watch/:wid` skips up-front authentication (API §1.2): any other path
    or method without a key is 401 before routing."""
    error_of(c.request(method, path), 401, "unauthorized")


def test_stream_works_for_every_creating_key(auth_server: ServerProcess, c: httpx.Client) -> None:
    for key, topics in (("tenant", ["tenant1.a", "shared.x"]), ("full", list(TOPICS))):
        wid = _wid(c, key, topics)
        with open_stream(auth_server, wid, bearer(key)) as conn:
            conn.until_caught_up({t: 0 for t in topics})
        # another key, even one allowed every topic, cannot use it
        with SseConn(auth_server.address, f"/v0/watch/{wid}", bearer("other")) as conn:
            conn.error(401, "unauthorized")


# --------------------------------------------------------------------------- caps


def _metrics(srv: ServerProcess, key: str) -> dict[str, Any]:
    with httpx.Client(base_url=srv.url, timeout=10) as c:
        r = c.get("/v0/metrics", headers={"Accept": "application/json", **bearer(key)})
        return ok(r, perf=False)


def test_per_key_stream_cap(make_server: ServerFactory) -> None:
    srv = make_server(env={"SEGLOG_API_KEYS": "ka,kb", "SEGLOG_MAX_SSE_CONNECTIONS_PER_KEY": "1"})
    with httpx.Client(base_url=srv.url, timeout=10) as c:
        ok(c.put("/v0/topics/t", headers=bearer("ka")), 201)
        wa1 = _wid(c, "ka", ["t"])
        wa2 = _wid(c, "ka", ["t"])
        wb = _wid(c, "kb", ["t"])
        first = open_stream(srv, wa1, bearer("ka"))
        try:
            first.until_caught_up({"t": 0})
            for wid in (wa1, wa2):
                with SseConn(srv.address, f"/v0/watch/{wid}", bearer("ka")) as conn:
                    err = conn.error(429, "throttled")
                    assert "detail" not in err
            # another key has its own budget
            with open_stream(srv, wb, bearer("kb")) as other:
                other.until_caught_up({"t": 0})
            # the binding is checked before the cap: a wrong key is 401, not 429
            with SseConn(srv.address, f"/v0/watch/{wa2}", bearer("kb")) as conn:
                conn.error(401, "unauthorized")
        finally:
            first.abort()
        deadline = time.monotonic() + 10
        while _metrics(srv, "ka")["sse_connections"] != 0:
            assert time.monotonic() < deadline, "the slot was not released"
            time.sleep(0.02)
        with open_stream(srv, wa2, bearer("ka")) as conn:
            conn.until_caught_up({"t": 0})


def test_inflight_cap_not_held_by_open_streams(make_server: ServerFactory) -> None:
    """API §11: stream GETs release the in-flight slot once open — two open streams of a
    key, or of two keys, must not exhaust `SEGLOG_MAX_INFLIGHT_PER_KEY=1`."""
    srv = make_server(env={"SEGLOG_API_KEYS": "ka,kb", "SEGLOG_MAX_INFLIGHT_PER_KEY": "1"})
    with httpx.Client(base_url=srv.url, timeout=10) as c:
        ok(c.put("/v0/topics/t", headers=bearer("ka")), 201)
        wa = _wid(c, "ka", ["t"])
        wa2 = _wid(c, "ka", ["t"])
        wb = _wid(c, "kb", ["t"])
        s1 = open_stream(srv, wa, bearer("ka"))
        try:
            s1.until_caught_up({"t": 0})
            # the same key can still make requests while its stream is open
            ok(c.get("/v0/topics/t", headers=bearer("ka")))
            # a second stream (another key's, then the same key's) opens too
            with SseConn(srv.address, f"/v0/watch/{wb}", bearer("kb")) as s2:
                assert s2.status == 200, s2.body
                with SseConn(srv.address, f"/v0/watch/{wa2}", bearer("ka")) as s3:
                    assert s3.status == 200, s3.body
                    ok(c.get("/v0/topics/t", headers=bearer("kb")))
        finally:
            s1.close()
