"""Drive `Client` and `AsyncClient` through one awaitable surface against in-test fake servers.

Every test taking `make_api` runs twice (sync and async). The fake servers are plain handlers
for `httpx.MockTransport` that answer only what a test needs; sleeps are recorded, never slept,
and the RNG is fixed so backoff delays are exact.
"""

from __future__ import annotations

import inspect
from collections.abc import AsyncIterator, Callable
from typing import Any

import httpx
import orjson
import pytest

from seglog.client import AsyncClient, Client
from tests.client.h1_server import scripted  # noqa: F401 (the lean HTTP/1.1 paths' fixture)

BASE_URL = "http://seglog.test"
Handler = Callable[[httpx.Request], httpx.Response]


class FixedRng:
    def __init__(self, value: float = 0.5) -> None:
        self.value = value

    def random(self) -> float:
        return self.value


def ok(body: Any, status: int = 200, headers: dict[str, str] | None = None) -> httpx.Response:
    return httpx.Response(
        status,
        content=orjson.dumps(body),
        headers={"Content-Type": "application/json", **(headers or {})},
    )


def err(
    status: int,
    code: str,
    message: str = "nope",
    detail: dict[str, Any] | None = None,
    retry_after: int | None = None,
) -> httpx.Response:
    error: dict[str, Any] = {"code": code, "message": message}
    if detail is not None:
        error["detail"] = detail
    headers = {} if retry_after is None else {"Retry-After": str(retry_after)}
    return ok({"error": error}, status, headers)


def body_of(request: httpx.Request) -> Any:
    return orjson.loads(request.content)


class Api:
    """One client (sync or async) plus what the fake saw: `requests` and `sleeps`."""

    def __init__(self, kind: str, handler: Handler, **kwargs: Any) -> None:
        self.kind = kind
        self.requests: list[httpx.Request] = []
        self.sleeps: list[float] = []

        def recording(request: httpx.Request) -> httpx.Response:
            self.requests.append(request)
            return handler(request)

        kwargs.setdefault("rng", FixedRng())
        url = kwargs.pop("url", BASE_URL)
        self.client: Client | AsyncClient
        if kind == "sync":
            self.client = Client(
                url, transport=httpx.MockTransport(recording), sleep=self.sleeps.append, **kwargs
            )
        else:

            async def sleep(seconds: float) -> None:
                self.sleeps.append(seconds)

            self.client = AsyncClient(
                url, transport=httpx.MockTransport(recording), sleep=sleep, **kwargs
            )

    @property
    def last(self) -> httpx.Request:
        return self.requests[-1]

    async def __call__(self, method: str, *args: Any, **kwargs: Any) -> Any:
        result = getattr(self.client, method)(*args, **kwargs)
        if inspect.isawaitable(result):
            result = await result
        return result

    async def collect(self, iterable: Any, n: int | None = None) -> list[Any]:
        """Drain a sync or async iterator (at most `n` items)."""
        items: list[Any] = []
        if hasattr(iterable, "__anext__"):
            while n is None or len(items) < n:
                try:
                    items.append(await anext(iterable))
                except StopAsyncIteration:
                    break
        else:
            while n is None or len(items) < n:
                try:
                    items.append(next(iterable))
                except StopIteration:
                    break
        return items

    async def close(self) -> None:
        await self("close")


MakeApi = Callable[..., Api]


@pytest.fixture(params=["sync", "async"])
async def make_api(request: pytest.FixtureRequest) -> AsyncIterator[MakeApi]:
    made: list[Api] = []

    def factory(handler: Handler, **kwargs: Any) -> Api:
        api = Api(request.param, handler, **kwargs)
        made.append(api)
        return api

    yield factory
    for api in made:
        await api.close()
