"""Every `500 internal` leaves its traceback in the log, exactly once, whichever path
produced it (issue 9); bad input never does. Driven in-process (httpx.ASGITransport or
raw ASGI calls) over a real engine on a temporary data dir."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest
from starlette.requests import Request
from starlette.types import ASGIApp, Message

from seglog.config import Settings
from seglog.engine.engine import Engine, EngineOptions
from seglog.errors import ErrorCode, SeglogError
from seglog.http import topics
from seglog.http.app import build_app
from seglog.http.app_state import ServerState
from seglog.http.auth import KeyRing
from seglog.http.routes import direct_endpoint
from seglog.model import TopicConfig

KEY = "k-internal-errors"


@pytest.fixture
def engine(tmp_path: Path) -> Iterator[Engine]:
    e = Engine(EngineOptions(data_dir=tmp_path / "data", wal_shards=1))
    e.open()
    try:
        yield e
    finally:
        e.close()


def make_app(engine: Engine, tmp_path: Path, keys: str = "") -> ASGIApp:
    settings = Settings(data_dir=tmp_path / "data", api_keys_raw=keys)
    return build_app(ServerState(engine=engine, settings=settings, keyring=KeyRing.parse(keys)))


@pytest.fixture
async def client(engine: Engine, tmp_path: Path) -> AsyncIterator[httpx.AsyncClient]:
    transport = httpx.ASGITransport(app=make_app(engine, tmp_path))
    async with httpx.AsyncClient(transport=transport, base_url="http://seglog.test") as c:
        yield c


def internal_error(r: httpx.Response) -> dict[str, Any]:
    assert r.status_code == 500, r.text
    assert r.headers["content-type"].startswith("application/json")
    body = r.json()
    assert set(body) == {"error"}
    assert body["error"]["code"] == "internal" and body["error"]["message"]
    return dict(body["error"])


def errors_logged(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.levelno >= logging.ERROR]


def assert_logged_once(
    caplog: pytest.LogCaptureFixture, exc_type: type[BaseException], method: str, path: str
) -> None:
    records = errors_logged(caplog)
    assert len(records) == 1, [r.getMessage() for r in records]
    rec = records[0]
    assert rec.name.startswith("seglog.")
    assert rec.exc_info is not None and isinstance(rec.exc_info[1], exc_type)
    assert method in rec.getMessage() and path in rec.getMessage()
    assert exc_type.__name__ in caplog.text and "Traceback" in caplog.text


async def test_unexpected_exception_in_a_handler_is_logged(
    client: httpx.AsyncClient,
    engine: Engine,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    def boom(name: str, touch: bool = True) -> None:
        raise ZeroDivisionError("forced for the test")

    monkeypatch.setattr(engine, "prepare_read", boom)  # the state route's first engine call
    caplog.set_level(logging.ERROR, logger="seglog")
    err = internal_error(await client.get("/v0/topics/t1?token=secret-in-query"))
    assert "ZeroDivisionError" in err["message"]
    assert_logged_once(caplog, ZeroDivisionError, "GET", "/v0/topics/t1")
    assert "secret-in-query" not in caplog.text  # the query string is never logged


async def test_internal_seglog_error_is_logged(
    client: httpx.AsyncClient,
    engine: Engine,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    def wal_failed(*_args: Any, **_kwargs: Any) -> None:
        raise SeglogError(ErrorCode.INTERNAL, "WAL commit failed; nothing was applied")

    monkeypatch.setattr(engine, "put_topic", wal_failed)
    caplog.set_level(logging.ERROR, logger="seglog")
    err = internal_error(await client.put("/v0/topics/t2"))
    assert err["message"] == "WAL commit failed; nothing was applied"
    assert_logged_once(caplog, SeglogError, "PUT", "/v0/topics/t2")


async def test_exception_in_the_guard_is_answered_and_logged(
    engine: Engine,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Authentication runs before Starlette (and its exception handlers) sees the request."""

    def broken(_self: KeyRing, _token: str | None) -> None:
        raise LookupError("key store broken")

    monkeypatch.setattr(KeyRing, "authenticate", broken)
    caplog.set_level(logging.ERROR, logger="seglog")
    transport = httpx.ASGITransport(app=make_app(engine, tmp_path, KEY))
    async with httpx.AsyncClient(transport=transport, base_url="http://seglog.test") as c:
        r = await c.get("/v0/topics", headers={"Authorization": f"Bearer {KEY}"})
    err = internal_error(r)
    assert "LookupError" in err["message"]
    assert_logged_once(caplog, LookupError, "GET", "/v0/topics")
    assert KEY not in caplog.text  # headers (and so keys) are never logged


async def test_client_errors_log_nothing(
    client: httpx.AsyncClient, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.ERROR, logger="seglog")
    json = {"Content-Type": "application/json"}
    assert (await client.get("/v0/topics/absent")).status_code == 404
    assert (await client.post("/v0/topics/x", content=b"{", headers=json)).status_code == 400
    assert (await client.put("/v0/topics/x", json={"durability": None})).status_code == 400
    assert (await client.get("/v0/topics", params={"page_size": "9" * 4301})).status_code == 200
    assert errors_logged(caplog) == []


async def _call(app: ASGIApp, scope: dict[str, Any], inbound: list[Message]) -> list[Message]:
    """One raw ASGI request; after `inbound` the client is gone (`http.disconnect`)."""
    sent: list[Message] = []

    async def receive() -> Message:
        return inbound.pop(0) if inbound else {"type": "http.disconnect"}

    async def send(message: Message) -> None:
        sent.append(message)

    await app(scope, receive, send)
    return sent


def _post_scope(path: str) -> dict[str, Any]:
    return {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": "POST",
        "scheme": "http",
        "path": path,
        "raw_path": path.encode(),
        "query_string": b"",
        "root_path": "",
        # A chunked upload: an HTTP/1.1 body without this header or a length is empty.
        "headers": [
            (b"host", b"seglog.test"),
            (b"content-type", b"application/json"),
            (b"transfer-encoding", b"chunked"),
        ],
        "client": ("127.0.0.1", 40000),
        "server": ("seglog.test", 80),
    }


@pytest.mark.parametrize("path", ["/v0/topics/cut", "/v0/topics/cut/diff", "/v0/topics/cut/delete"])
async def test_body_cut_short_by_a_disconnect_is_400(
    engine: Engine, tmp_path: Path, path: str, caplog: pytest.LogCaptureFixture
) -> None:
    """Starlette raises `ClientDisconnect` when the body stream ends early (the server
    reports malformed chunking and a mid-body close that way)."""
    caplog.set_level(logging.ERROR, logger="seglog")
    engine.put_topic("cut", TopicConfig())
    partial = {"type": "http.request", "body": b'{"records":[{"da', "more_body": True}
    sent = await _call(make_app(engine, tmp_path), _post_scope(path), [partial])
    start, body = sent[0], b"".join(m.get("body", b"") for m in sent[1:])
    assert start["type"] == "http.response.start" and start["status"] == 400, sent
    err = orjson.loads(body)["error"]
    assert err["code"] == "invalid_request" and err["message"]
    assert errors_logged(caplog) == []
    assert engine.get_topic("cut").head_seq == 0  # nothing was appended


async def test_disconnect_outside_read_body_is_400_too(
    engine: Engine,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The app-wide `ClientDisconnect` handler covers body reads that bypass `read_body`."""

    async def starlette_body(request: Request, _limit: int) -> bytes:
        return await request.body()

    monkeypatch.setattr(topics, "read_body", starlette_body)
    caplog.set_level(logging.ERROR, logger="seglog")
    partial = {"type": "http.request", "body": b'{"records":[', "more_body": True}
    sent = await _call(make_app(engine, tmp_path), _post_scope("/v0/topics/gone"), [partial])
    assert sent[0]["status"] == 400, sent
    assert orjson.loads(sent[1]["body"])["error"]["code"] == "invalid_request"
    assert errors_logged(caplog) == []


async def test_a_failed_ack_wakes_every_work_stream_of_the_queue(
    engine: Engine, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A failed ack puts its jobs back (SEMANTICS §10.4): every `/work` stream of the topic
    is woken to take them, not only the one that held them."""
    from seglog.http.async_engine import AsyncEngine
    from seglog.model import TopicType

    engine.put_topic("q", TopicConfig(type=TopicType.QUEUE))
    settings = Settings(data_dir=tmp_path / "data")
    st = ServerState(engine=engine, settings=settings, keyring=KeyRing.parse(""))

    async def failing_ack(*_args: Any) -> Any:
        raise SeglogError(ErrorCode.INTERNAL, "WAL commit failed: injected")

    monkeypatch.setattr(AsyncEngine, "ack", failing_ack)
    other = st.work_kick("q", 41)
    transport = httpx.ASGITransport(app=build_app(st))
    async with httpx.AsyncClient(transport=transport, base_url="http://seglog.test") as c:
        r = await c.post("/v0/topics/q/ack", json={"node": "w", "seqs": [1]})
    assert r.status_code == 500 and other.is_set()


@pytest.mark.parametrize(
    ("method", "path", "direct"),
    [("GET", "/v0/routers", False), ("GET", "/v0/topics/t3", True)],
)
async def test_internal_errors_are_logged_on_both_dispatch_paths(
    client: httpx.AsyncClient,
    engine: Engine,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
    method: str,
    path: str,
    direct: bool,
) -> None:
    """Data-plane routes bypass Starlette's router (`routes.direct_endpoint`); the rest go
    through it. A 500 is logged once and answered the same way on both."""
    assert (direct_endpoint(method, path) is not None) is direct

    def wal_failed(*_args: Any, **_kwargs: Any) -> None:
        raise SeglogError(ErrorCode.INTERNAL, "engine failed")

    def broken(*_args: Any, **_kwargs: Any) -> None:
        raise KeyError("broken")

    monkeypatch.setattr(engine, "list_routers", wal_failed)
    monkeypatch.setattr(engine, "prepare_read", wal_failed)
    caplog.set_level(logging.ERROR, logger="seglog")
    err = internal_error(await client.request(method, path))
    assert err["message"] == "engine failed"
    assert_logged_once(caplog, SeglogError, method, path)

    caplog.clear()
    monkeypatch.setattr(engine, "list_routers", broken)
    monkeypatch.setattr(engine, "prepare_read", broken)
    err = internal_error(await client.request(method, path))
    assert "KeyError" in err["message"]
    assert_logged_once(caplog, KeyError, method, path)
