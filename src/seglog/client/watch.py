"""`Watch` and `AsyncWatch`: the I/O drivers of `Client.watch()` / `AsyncClient.watch()`.

Each drives one `WatchState` (`_watch.py`, where every decision lives): create the session,
open `GET /v0/watch/:wid` as a stream, feed the bytes through `SSEDecoder`, hand out events, and
on a failure sleep for the delay the state picked (with the client's injectable sleep) before
reopening or re-creating. The two classes are line-for-line twins; only `await` differs.

A watch is single-consumer: iterate it from one thread (or task). `close()` ends it; a `with`
block or `break`+`close()` releases the connection. Closing from another thread is not
supported (a blocking read is not interruptible from outside); use the async client for that.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable, Generator, Iterator
from types import TracebackType
from typing import Protocol, Self, TypeVar

import httpx

from seglog.client._base import Call, RequestSpec, error_from_response
from seglog.client._watch import WatchState, check_event_stream
from seglog.client.events import WatchEvent, WatchSession
from seglog.client.exceptions import SeglogClientError
from seglog.client.sse import SSEDecoder

T = TypeVar("T")
log = logging.getLogger("seglog.client.watch")


# What the drivers use of `Client` / `AsyncClient`, as protocols so this module does not import
# the clients that import it.
class _SyncHost(Protocol):
    timeout: float
    _http: httpx.Client
    _sleep: Callable[[float], None]

    def _call(self, call: Call[T]) -> T: ...


class _AsyncHost(Protocol):
    timeout: float
    _http: httpx.AsyncClient
    _sleep: Callable[[float], Awaitable[None]]

    async def _call(self, call: Call[T]) -> T: ...


class _WatchView:
    """Read-only views of the state shared by both drivers."""

    _state: WatchState

    @property
    def cursors(self) -> dict[str, int]:
        """Per-topic cursor: the last position handed out (resume with `from_seq` = this)."""
        return dict(self._state.cursors)

    @property
    def last_event_id(self) -> str | None:
        """The composite cursor of what was handed out (API.md §7.4); pass it to a later
        `watch(..., last_event_id=...)` to resume. None until the session exists."""
        return self._state.last_event_id() if self._state.cursors else None

    @property
    def topics(self) -> list[str]:
        """Topics still watched (deleted ones drop out)."""
        return list(self._state.live)

    @property
    def session(self) -> WatchSession | None:
        """The current session (a new one after the server lost the old)."""
        return self._state.session

    def _request(self, http: httpx.Client | httpx.AsyncClient, timeout: float) -> httpx.Request:
        spec: RequestSpec = self._state.stream_spec()
        read = self._state.options.read_timeout
        return http.build_request(
            spec.method, spec.path, headers=spec.headers, timeout=httpx.Timeout(timeout, read=read)
        )


def _reconnecting(delay: float, why: object) -> None:
    log.info("watch: reconnecting in %.2fs (%s)", delay, why)


class Watch(_WatchView):
    """Iterator of `WatchEvent`s from `Client.watch()`; reconnects and resumes by itself."""

    def __init__(self, client: _SyncHost, state: WatchState) -> None:
        self._client, self._state = client, state
        self._resp: httpx.Response | None = None
        self._items = self._run()

    def open(self) -> Self:
        """Create the session now (else the first `next()` does): errors such as
        `TopicNotFound` surface here. Idempotent."""
        if self._state.session is None and not self._state.cursors and not self._state.done:
            self._state.created(self._client._call(self._state.create_call()))
        return self

    def _run(self) -> Generator[WatchEvent, None, None]:
        st = self._state
        while not st.done:
            if st.session is None:
                try:
                    session = self._client._call(st.create_call())
                except SeglogClientError as exc:
                    self._pause(st.create_failed(exc), exc)
                    continue
                yield from st.created(session)
                continue
            delay = yield from self._stream()
            self._pause(delay, "stream closed")

    def _stream(self) -> Generator[WatchEvent, None, float]:
        st, c = self._state, self._client
        try:
            resp = c._http.send(self._request(c._http, c.timeout), stream=True)
        except httpx.TransportError as exc:
            return st.stream_failed(exc)
        self._resp = resp
        try:
            if not resp.is_success:
                resp.read()
                return st.stream_failed(error_from_response(resp))
            check_event_stream(resp)
            decoder = SSEDecoder()
            for chunk in resp.iter_bytes():
                for item in decoder.feed(chunk):
                    yield from st.feed(item)
                    if st.restart or st.done:
                        break
                if st.restart or st.done:
                    break
        except httpx.TransportError as exc:
            return st.stream_failed(exc)
        finally:
            self._resp = None
            resp.close()
        return 0.0 if st.done else st.stream_ended()

    def _pause(self, delay: float, why: object) -> None:
        if delay > 0 and not self._state.done:
            _reconnecting(delay, why)
            self._client._sleep(delay)

    def __iter__(self) -> Iterator[WatchEvent]:
        return self

    def __next__(self) -> WatchEvent:
        return next(self._items)

    def close(self) -> None:
        """Stop: closes the stream; iteration ends. Safe to call twice."""
        self._items.close()
        if self._resp is not None:
            self._resp.close()

    def __enter__(self) -> Self:
        return self.open()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


class AsyncWatch(_WatchView):
    """Async iterator of `WatchEvent`s from `AsyncClient.watch()`; the twin of `Watch`."""

    def __init__(self, client: _AsyncHost, state: WatchState) -> None:
        self._client, self._state = client, state
        self._resp: httpx.Response | None = None
        self._delay = 0.0
        self._items = self._run()

    async def open(self) -> Self:
        """Create the session now (else the first `anext()` does). Idempotent."""
        if self._state.session is None and not self._state.cursors and not self._state.done:
            self._state.created(await self._client._call(self._state.create_call()))
        return self

    async def _run(self) -> AsyncGenerator[WatchEvent, None]:
        st = self._state
        while not st.done:
            if st.session is None:
                try:
                    session = await self._client._call(st.create_call())
                except SeglogClientError as exc:
                    await self._pause(st.create_failed(exc), exc)
                    continue
                for ev in st.created(session):
                    yield ev
                continue
            async with contextlib.aclosing(self._stream()) as events:
                async for ev in events:
                    yield ev
            await self._pause(self._delay, "stream closed")

    async def _stream(self) -> AsyncGenerator[WatchEvent, None]:
        """Yields the stream's events; leaves the delay before the next attempt in `_delay`
        (an async generator cannot return a value)."""
        st, c = self._state, self._client
        try:
            resp = await c._http.send(self._request(c._http, c.timeout), stream=True)
        except httpx.TransportError as exc:
            self._delay = st.stream_failed(exc)
            return
        self._resp = resp
        try:
            if not resp.is_success:
                await resp.aread()
                self._delay = st.stream_failed(error_from_response(resp))
                return
            check_event_stream(resp)
            decoder = SSEDecoder()
            async for chunk in resp.aiter_bytes():
                for item in decoder.feed(chunk):
                    for ev in st.feed(item):
                        yield ev
                    if st.restart or st.done:
                        break
                if st.restart or st.done:
                    break
        except httpx.TransportError as exc:
            self._delay = st.stream_failed(exc)
            return
        finally:
            self._resp = None
            await resp.aclose()
        self._delay = 0.0 if st.done else st.stream_ended()

    async def _pause(self, delay: float, why: object) -> None:
        if delay > 0 and not self._state.done:
            _reconnecting(delay, why)
            await self._client._sleep(delay)

    def __aiter__(self) -> AsyncIterator[WatchEvent]:
        return self

    async def __anext__(self) -> WatchEvent:
        return await anext(self._items)

    async def aclose(self) -> None:
        """Stop: closes the stream; iteration ends. Safe to call twice."""
        await self._items.aclose()
        if self._resp is not None:
            await self._resp.aclose()

    async def close(self) -> None:
        await self.aclose()

    async def __aenter__(self) -> Self:
        return await self.open()

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()
