"""The data plane's direct dispatch (`routes.direct_endpoint`, `app.Guard._direct`) routes
exactly as Starlette's router would route the same request, and steps aside where the
router must decide (a mounted `root_path`). Its error answers are checked on both paths
in test_internal_errors.py."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from starlette.routing import Match, Route, Router

from seglog.config import Settings
from seglog.engine.engine import Engine, EngineOptions
from seglog.http.app_state import ServerState
from seglog.http.auth import KeyRing
from seglog.http.routes import ANY_METHOD, TOPIC_DATA_PLANE, direct_endpoint, route_table


async def _openapi(_request: Any) -> Any:
    raise AssertionError("not called")


ROUTER = Router(routes=route_table(_openapi))
DATA_PLANE_ENDPOINTS = set(TOPIC_DATA_PLANE.values())

segments = st.one_of(
    st.sampled_from(["v0", "topics", "t", "diff", "ack", "claim", "work", "", "%2F", "x.y"]),
    st.text(alphabet="ab/\n%-_.é", max_size=6),
)
paths = st.lists(segments, min_size=1, max_size=5).map(lambda parts: "/" + "/".join(parts))
topic_paths = st.tuples(
    st.text(alphabet="ab\n%-_.é", min_size=0, max_size=5),
    st.sampled_from(["", "/", *(f"/{s}" for s in TOPIC_DATA_PLANE if s), "/work", "/diff/x"]),
).map(lambda p: f"/v0/topics/{p[0]}{p[1]}")
methods = st.sampled_from([*ANY_METHOD, "TRACE", "CONNECT", "post"])


def starlette_match(method: str, path: str) -> tuple[Any, dict[str, Any]] | None:
    """The endpoint and path parameters of Starlette's first full match, as its router
    picks them; `None` when no route matches fully (a 404 or a 405)."""
    scope = {"type": "http", "method": method, "path": path, "root_path": ""}
    for route in ROUTER.routes:
        match, child = route.matches(scope)
        if match is Match.FULL:
            assert isinstance(route, Route)
            return route.endpoint, child["path_params"]
    return None


@settings(max_examples=800)
@given(method=methods, path=st.one_of(paths, topic_paths))
def test_direct_dispatch_matches_what_starlette_would_match(method: str, path: str) -> None:
    direct = direct_endpoint(method, path)
    routed = starlette_match(method, path)
    if direct is not None:
        endpoint, topic = direct
        assert routed == (endpoint, {"topic": topic})
    elif "\n" not in path:
        # Everything Starlette sends to a data-plane handler is dispatched directly (a
        # trailing newline, which Starlette's `$` lets through, takes the long way).
        assert routed is None or routed[0] not in DATA_PLANE_ENDPOINTS, (method, path, routed)


def test_the_hot_routes_are_dispatched_directly() -> None:
    assert direct_endpoint("POST", "/v0/topics/orders") == (TOPIC_DATA_PLANE[""], "orders")
    for sub in ("diff", "delete", "claim", "ack", "nack", "extend"):
        assert direct_endpoint("POST", f"/v0/topics/q/{sub}") == (TOPIC_DATA_PLANE[sub], "q")
    for path in ("/v0/topics/q/work", "/v0/topics/q/", "/v0/topics/", "/v0/topics", "/v0/ws"):
        assert direct_endpoint("GET", path) is None
    # every method reaches the handler, which checks the scope before its 405 (API §1.3)
    assert direct_endpoint("TRACE", "/v0/topics/q") == (TOPIC_DATA_PLANE[""], "q")


async def test_a_request_under_a_root_path_goes_through_starlette(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Behind a proxy that mounts the app under a prefix, Starlette strips `root_path`
    before matching; the guard leaves such requests to it. Here the app is mounted at
    `/v0`, so `/v0/topics/absent` is the app's `/topics/absent`: no such route (a direct
    dispatch would have taken it for a topic)."""
    from seglog.http import app as app_module

    def never(_method: str, _path: str) -> None:
        raise AssertionError("dispatched directly")

    engine = Engine(EngineOptions(data_dir=tmp_path / "data", wal_shards=1))
    engine.open()
    try:
        state = ServerState(
            engine=engine, settings=Settings(data_dir=tmp_path / "data"), keyring=KeyRing()
        )
        asgi = app_module.build_app(state)
        monkeypatch.setattr(app_module, "direct_endpoint", never)
        sent: list[dict[str, Any]] = []

        async def receive() -> dict[str, Any]:
            return {"type": "http.request", "body": b"", "more_body": False}

        async def send(message: dict[str, Any]) -> None:
            sent.append(message)

        scope = {
            "type": "http",
            "http_version": "1.1",
            "method": "GET",
            "path": "/v0/topics/absent",
            "raw_path": b"/v0/topics/absent",
            "root_path": "/v0",
            "query_string": b"",
            "headers": [(b"host", b"x")],
            "scheme": "http",
            "server": ("x", 80),
            "client": ("c", 1),
        }
        await asgi(scope, receive, send)  # type: ignore[arg-type]
    finally:
        engine.close()
    assert sent[0]["status"] == 404
    assert orjson.loads(sent[1]["body"])["error"]["code"] == "not_found"
