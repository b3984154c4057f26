"""The OpenAPI document and the mounted route table agree, both ways, methods included:
every path the real app serves is documented and every documented path is served; a route
mounted with fixed methods documents exactly those; a route whose handler dispatches on the
method answers every documented method (never 405) and every other one 405. The drift check
itself is exercised on tables that disagree, so it can fail."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import httpx
import orjson
import pytest
from starlette.applications import Starlette
from starlette.routing import BaseRoute, Route, WebSocketRoute

from seglog.config import Settings
from seglog.engine.engine import Engine, EngineOptions
from seglog.http import openapi, topics
from seglog.http.app import build_app
from seglog.http.app_state import ServerState
from seglog.http.auth import KeyRing
from seglog.http.openapi import (
    HTTP_METHODS,
    OPENAPI,
    DocumentDrift,
    build_document,
    documented_methods,
    served_methods,
)
from seglog.http.routes import ANY_METHOD, route_table

PARAMS = {"topic": "t-openapi", "router": "r-openapi", "wid": "w-missing", "name": "app.js"}
PROBED = ("GET", "PUT", "POST", "DELETE", "PATCH", "OPTIONS")


@pytest.fixture
def engine(tmp_path: Path) -> Iterator[Engine]:
    e = Engine(EngineOptions(data_dir=tmp_path / "data", wal_shards=1))
    e.open()
    try:
        yield e
    finally:
        e.close()


@pytest.fixture
def mounted(engine: Engine, tmp_path: Path) -> Starlette:
    state = ServerState(
        engine=engine,
        settings=Settings(data_dir=tmp_path / "data"),
        keyring=KeyRing.parse(""),
    )
    guard = build_app(state)
    app = getattr(guard, "app", None)
    assert isinstance(app, Starlette)
    return app


@pytest.fixture
async def client(
    mounted: Starlette, engine: Engine, tmp_path: Path
) -> AsyncIterator[httpx.AsyncClient]:
    state = ServerState(
        engine=engine,
        settings=Settings(data_dir=tmp_path / "data"),
        keyring=KeyRing.parse(""),
    )
    transport = httpx.ASGITransport(app=build_app(state))
    async with httpx.AsyncClient(transport=transport, base_url="http://seglog.test") as c:
        yield c


def test_served_paths_are_exactly_the_documented_ones(mounted: Starlette) -> None:
    served = served_methods(mounted.routes)
    assert list(OPENAPI["paths"]) == list(served)  # same set, in matching order
    for path, fixed in served.items():
        if fixed is not None:
            assert documented_methods(path) == fixed, path


def test_every_mounted_route_is_documented_or_the_topic_catch_all(mounted: Starlette) -> None:
    for route in mounted.routes:
        assert isinstance(route, Route | WebSocketRoute)
        if route.path == "/v0/topics/{topic}/{rest:path}":
            continue
        ops = OPENAPI["paths"][route.path]
        assert {m for m in ops if m in HTTP_METHODS}, route.path


async def test_topic_catch_all_is_404_not_an_operation(client: httpx.AsyncClient) -> None:
    for method in PROBED:
        r = await client.request(method, "/v0/topics/t-openapi/not-a-route")
        assert r.status_code == 404, (method, r.text)
        assert r.json()["error"]["code"] == "not_found"


def _concrete(path: str) -> str:
    return path.format(**{k: v for k, v in PARAMS.items() if "{" + k + "}" in path})


@pytest.mark.parametrize("path", list(OPENAPI["paths"]))
async def test_documented_methods_are_served_and_others_are_405(
    client: httpx.AsyncClient, path: str
) -> None:
    documented = {m.upper() for m in documented_methods(path)}
    url = _concrete(path)
    for method in PROBED:
        r = await client.request(method, url, content=b"{}" if method != "GET" else None)
        body = (
            orjson.loads(r.content) if r.headers.get("content-type") == "application/json" else None
        )
        if method in documented:
            assert r.status_code != 405, (method, path, r.text)
            assert r.status_code in _documented_statuses(path, method), (method, path, r.text)
        else:
            assert r.status_code == 405, (method, path, r.status_code, r.text)
            assert body is not None and body["error"]["code"] == "method_not_allowed"


def _documented_statuses(path: str, method: str) -> set[int]:
    return {int(s) for s in OPENAPI["paths"][path][method.lower()]["responses"]}


async def _endpoint(_request: object) -> None:
    raise AssertionError("never called")


def _table() -> list[BaseRoute]:
    return route_table(openapi.serve)


def test_drift_a_served_route_without_operations() -> None:
    table = [*_table(), Route("/v0/brand-new", _endpoint, methods=["GET"])]
    with pytest.raises(DocumentDrift, match="served but undocumented: /v0/brand-new"):
        build_document(table)


def test_drift_operations_without_a_route() -> None:
    table = [r for r in _table() if getattr(r, "path", "") != "/v0/routers"]
    with pytest.raises(DocumentDrift, match="documented but not served: /v0/routers"):
        build_document(table)


def test_drift_fixed_methods_documented_otherwise() -> None:
    table = [
        Route("/v0/topics", topics.list_topics, methods=["GET", "POST"])
        if getattr(r, "path", "") == "/v0/topics"
        else r
        for r in _table()
    ]
    with pytest.raises(DocumentDrift, match=r"/v0/topics: serves \['get', 'post'\]"):
        build_document(table)


def test_dispatching_routes_take_their_methods_from_the_operations() -> None:
    served = served_methods([Route("/v0/watch", _endpoint, methods=ANY_METHOD)])
    assert served == {"/v0/watch": None}
    assert build_document(_table())["paths"] == OPENAPI["paths"]
