"""Keep-alive HTTP/1.1 to one cleartext origin on asyncio: `AsyncClient`'s request path
when nothing needs httpx's (the same conditions as the sync client's `_h1`).

Why: `httpx.AsyncClient` spends ~0.8–1 ms of CPU per request here, against ~0.1 ms for
one asyncio protocol per connection that formats the request and parses the answer from
its own buffer (BENCHMARKS.md, "Issue 12, eighth session"). Above the wire nothing
changes: a response comes back as a `WireResponse`, a failure as the `httpx` transport
error the retry policy knows, and nothing is resent here.

Connections belong to the event loop that opened them: a pool used from another loop
drops the idle ones it kept, and never pools one whose request ends on a loop it has left.
A connection that received anything while idle (the server's close, or bytes nobody asked
for; the socket is asked too, not only what the loop delivered) is never reused, nor is
one whose request failed, timed out or was cancelled. An answer that arrives although the
request's body could not all be written (a server refusing an oversized body early) is
the answer returned.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import time
from collections.abc import Callable, Mapping
from typing import cast

import httpx

from seglog.client import _h1
from seglog.client._h1 import IDLE_EXPIRY_S
from seglog.client._h1_wire import (
    Answer,
    AnswerReader,
    Ended,
    WireResponse,
    host_header,
    request_head,
)


class _Connection(asyncio.Protocol):
    """One socket: what arrived (`buf`), whether the peer ended (`eof`, `lost`), and the
    one waiter of a request in flight."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self.transport: asyncio.Transport | None = None
        self.buf = bytearray()
        self.eof = False
        self.lost = False
        self.error: Exception | None = None
        self._waiter: asyncio.Future[None] | None = None
        self._writable: asyncio.Future[None] | None = None

    # -- asyncio.Protocol ---------------------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # uvloop's is no subclass

    def data_received(self, data: bytes) -> None:
        self.buf += data
        self._wake()

    def eof_received(self) -> bool:
        self.eof = True
        self._wake()
        return False  # close our side too

    def connection_lost(self, exc: Exception | None) -> None:
        self.lost = True
        self.error = exc
        self._wake()
        if self._writable is not None and not self._writable.done():
            self._writable.set_result(None)

    def pause_writing(self) -> None:
        self._writable = self.loop.create_future()

    def resume_writing(self) -> None:
        if self._writable is not None and not self._writable.done():
            self._writable.set_result(None)
        self._writable = None

    # -- used by the pool ---------------------------------------------------------------
    def _wake(self) -> None:
        if self._waiter is not None and not self._waiter.done():
            self._waiter.set_result(None)

    @property
    def idle_ok(self) -> bool:
        """Nothing arrived and nothing ended since the last answer: neither what the loop
        has delivered nor the socket itself (a close that came right after the answer may
        not have been read by the loop yet when the next request is sent)."""
        t = self.transport
        if self.buf or self.eof or self.lost or t is None or t.is_closing():
            return False
        sock = t.get_extra_info("socket")
        return sock is not None and not _h1.readable(sock)

    async def wait_data(self, timeout: float) -> None:
        """Until more bytes arrive or the peer ends (raises `Ended` if it already has),
        at most `timeout` seconds (`TimeoutError`): like httpx's, the read timeout bounds
        each wait for bytes, not the whole answer."""
        if self.eof or self.lost:
            raise Ended
        self._waiter = self.loop.create_future()
        try:
            async with asyncio.timeout(timeout):
                await self._waiter
        finally:
            self._waiter = None

    @property
    def must_drain(self) -> bool:
        """Whether `drain` would wait or fail: writing is paused, or the socket is gone."""
        return self._writable is not None or self.lost

    async def drain(self) -> None:
        if self._writable is not None:
            await self._writable
        if self.lost:
            raise ConnectionResetError("connection lost while sending the request")

    def close(self) -> None:
        """Abort the socket, from any loop (one whose loop is closed is shut down: its
        transport can no longer close it)."""
        t = self.transport
        if t is None:
            return
        if self.loop.is_closed():
            # uvloop closed its transports with the loop; asyncio's must be shut down
            # here (uvloop's socket object refuses `shutdown` with a TypeError)
            if not t.is_closing():
                sock = t.get_extra_info("socket")
                if sock is not None:
                    with contextlib.suppress(OSError, TypeError):
                        sock.shutdown(socket.SHUT_RDWR)
            self.transport = None
            return
        try:
            running: asyncio.AbstractEventLoop | None = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if running is self.loop:
            t.abort()
        else:
            self.loop.call_soon_threadsafe(t.abort)


class AsyncH1Pool:
    def __init__(
        self,
        url: str,
        headers: Mapping[str, str],
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._host, self._port, self._prefix = _h1.origin_of(url, "AsyncH1Pool")
        self._host_header = host_header(self._host, self._port)
        self._headers = {k.lower(): v for k, v in headers.items()}
        self._clock = clock
        self._loop: asyncio.AbstractEventLoop | None = None
        self._idle: list[tuple[_Connection, float]] = []  # (connection, idle since)
        self._busy: set[_Connection] = set()
        self._closed = False

    async def send(
        self,
        method: str,
        path: str,
        params: Mapping[str, str | int] | None,
        body: bytes | None,
        headers: Mapping[str, str] | None,
        timeout: float,
    ) -> WireResponse:
        """One request and its whole response (see `_h1.H1Pool.send`)."""
        target = _h1.request_target(self._prefix, path, params)
        sent = _h1.request_headers(self._headers, headers)
        head = request_head(method, target, self._host_header, sent, body)
        conn = await self._take(timeout)
        reusable = False
        try:
            answer, reusable = await _exchange(conn, method, head, body, timeout)
        finally:
            self._give_back(conn, reusable)
        return WireResponse.of(answer)

    async def close(self) -> None:
        """Close every connection: idle ones, and those of requests in flight (which then
        fail as a dropped connection would)."""
        self._closed = True
        idle, self._idle = self._idle, []
        for conn, _since in idle:
            conn.close()
        for conn in list(self._busy):
            conn.close()

    async def _take(self, timeout: float) -> _Connection:
        if self._closed:
            raise RuntimeError("the client is closed")
        loop = asyncio.get_running_loop()
        if loop is not self._loop:  # idle connections of another loop cannot serve here
            for conn, _since in self._idle:
                conn.close()
            self._idle = []
            self._loop = loop
        now = self._clock()
        while self._idle:
            conn, since = self._idle.pop()
            if now - since < IDLE_EXPIRY_S and conn.idle_ok:
                self._busy.add(conn)
                return conn
            conn.close()  # expired, or the server closed it (or spoke out of turn)
        conn = await self._connect(loop, timeout)
        if self._closed:
            conn.close()
            raise RuntimeError("the client is closed")
        self._busy.add(conn)
        return conn

    async def _connect(self, loop: asyncio.AbstractEventLoop, timeout: float) -> _Connection:
        try:
            async with asyncio.timeout(timeout):
                _t, conn = await loop.create_connection(
                    lambda: _Connection(loop), self._host, self._port
                )
        except TimeoutError as e:
            raise httpx.ConnectTimeout(str(e) or "timed out connecting") from e
        except OSError as e:
            raise httpx.ConnectError(f"{type(e).__name__}: {e}") from e
        return conn

    def _give_back(self, conn: _Connection, reusable: bool) -> None:
        now = self._clock()
        self._busy.discard(conn)
        # a request that ends on a loop the pool has since left: its socket stays there
        if reusable and not self._closed and conn.loop is self._loop:
            self._idle.append((conn, now))
        else:
            conn.close()
        self._idle, stale = _h1.trim_idle(self._idle, now)
        for c in stale:
            c.close()


async def _exchange(
    conn: _Connection, method: str, head: bytes, body: bytes | None, timeout: float
) -> tuple[Answer, bool]:
    """Send the request, read the whole answer: (answer, whether the connection may be
    reused)."""
    transport = conn.transport
    assert transport is not None
    write_error: OSError | None = None
    try:
        transport.write(head + body if body else head)
        if conn.must_drain:  # (a timeout scope costs more than most requests' own work)
            async with asyncio.timeout(timeout):
                await conn.drain()
    except TimeoutError as e:
        raise httpx.WriteTimeout(str(e) or "timed out sending the request") from e
    except OSError as e:
        write_error = e  # an early answer (a `413` before the body was read) may be waiting
    try:
        return await _read_answer(conn, method, timeout, whole=write_error is None)
    except TimeoutError as e:
        raise httpx.ReadTimeout(str(e) or "timed out waiting for the response") from e
    except (Ended, OSError, httpx.RemoteProtocolError) as e:
        if write_error is not None:
            raise httpx.WriteError(f"{type(write_error).__name__}: {write_error}") from e
        if isinstance(e, httpx.RemoteProtocolError):
            raise
        if isinstance(e, Ended):
            if conn.error is not None:
                raise httpx.ReadError(f"{type(conn.error).__name__}: {conn.error}") from e
            raise httpx.RemoteProtocolError("server disconnected without a full response") from e
        raise httpx.ReadError(f"{type(e).__name__}: {e}") from e


async def _read_answer(
    conn: _Connection, method: str, timeout: float, *, whole: bool
) -> tuple[Answer, bool]:
    reader = AnswerReader(method)
    while (answer := reader.feed(conn.buf, conn.eof or conn.lost)) is None:
        await conn.wait_data(timeout)
    if answer.by_close and conn.error is not None:
        raise conn.error  # a reset is not the end of a body delimited by the close
    return answer, whole and answer.keep_alive and not conn.buf
