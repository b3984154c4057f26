"""Keep-alive HTTP/1.1 to one cleartext origin on asyncio: `AsyncClient`'s request path
when nothing needs httpx's (the same conditions as the sync client's `_h1`).

Why: `httpx.AsyncClient` spends ~0.8–1 ms of CPU per request here, against ~0.1 ms for
one asyncio protocol per connection that formats the request and parses the answer from
its own buffer (BENCHMARKS.md, "Issue 12, eighth session"). Above the wire nothing
changes: a response comes back as an `httpx.Response`, a failure as the `httpx` transport
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
import re
import socket
import time
from collections.abc import Callable, Mapping
from typing import cast

import httpx

from seglog.client import _h1
from seglog.client._h1 import IDLE_EXPIRY_S

# The largest response head accepted (status line and headers), as h11's default.
MAX_HEAD = 64 * 1024
_NO_BODY_STATUS = (204, 304)
_FORBIDDEN = frozenset("\r\n\0")
_STATUS_LINE = re.compile(rb"(HTTP/1\.[01]) ([0-9]{3})(?: .*)?", re.DOTALL)
_CHUNK_SIZE = re.compile(rb"[0-9A-Fa-f]{1,16}")


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
        """Until more bytes arrive or the peer ends (raises `_Ended` if it already has),
        at most `timeout` seconds (`TimeoutError`): like httpx's, the read timeout bounds
        each wait for bytes, not the whole answer."""
        if self.eof or self.lost:
            raise _Ended
        self._waiter = self.loop.create_future()
        try:
            async with asyncio.timeout(timeout):
                await self._waiter
        finally:
            self._waiter = None

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


class _Ended(Exception):
    """The peer closed the connection before the answer was complete."""


class AsyncH1Pool:
    def __init__(
        self,
        url: str,
        headers: Mapping[str, str],
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._host, self._port, self._prefix = _h1.origin_of(url, "AsyncH1Pool")
        host = f"[{self._host}]" if ":" in self._host else self._host
        self._host_header = host if self._port == 80 else f"{host}:{self._port}"
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
    ) -> httpx.Response:
        """One request and its whole response (see `_h1.H1Pool.send`)."""
        target = _h1.request_target(self._prefix, path, params)
        sent = _h1.request_headers(self._headers, headers)
        head = _request_head(method, target, self._host_header, sent, body)
        conn = await self._take(timeout)
        reusable = False
        try:
            status, raw, content, reusable = await _exchange(conn, method, head, body, timeout)
        finally:
            self._give_back(conn, reusable)
        return httpx.Response(status, headers=raw, content=content)

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


def _request_head(
    method: str, target: str, host: str, headers: Mapping[str, str], body: bytes | None
) -> bytes:
    """The request line and headers, as `http.client` writes them; a CR, LF or NUL in any
    of them, or a character outside Latin-1, is a `LocalProtocolError` (nothing is sent)."""
    lines = [f"{method} {target} HTTP/1.1", f"Host: {host}"]
    lines += [f"{k}: {v}" for k, v in headers.items() if k not in ("host", "content-length")]
    if body is not None:
        lines.append(f"Content-Length: {len(body)}")
    elif method in ("POST", "PUT", "PATCH"):
        lines.append("Content-Length: 0")
    if " " in target or any(not _FORBIDDEN.isdisjoint(line) for line in lines):
        raise httpx.LocalProtocolError("a request header or target holds a CR, LF, NUL or space")
    text = "\r\n".join(lines)
    try:
        return text.encode("latin-1") + b"\r\n\r\n"
    except UnicodeEncodeError as e:
        raise httpx.LocalProtocolError(f"a request header is not Latin-1: {e}") from e


async def _exchange(
    conn: _Connection, method: str, head: bytes, body: bytes | None, timeout: float
) -> tuple[int, list[tuple[bytes, bytes]], bytes, bool]:
    """Send the request, read the whole answer: (status, headers, body, reusable)."""
    transport = conn.transport
    assert transport is not None
    write_error: OSError | None = None
    try:
        transport.write(head + body if body else head)
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
    except (_Ended, OSError, httpx.RemoteProtocolError) as e:
        if write_error is not None:
            raise httpx.WriteError(f"{type(write_error).__name__}: {write_error}") from e
        if isinstance(e, httpx.RemoteProtocolError):
            raise
        if isinstance(e, _Ended):
            if conn.error is not None:
                raise httpx.ReadError(f"{type(conn.error).__name__}: {conn.error}") from e
            raise httpx.RemoteProtocolError("server disconnected without a full response") from e
        raise httpx.ReadError(f"{type(e).__name__}: {e}") from e


async def _read_answer(
    conn: _Connection, method: str, timeout: float, *, whole: bool
) -> tuple[int, list[tuple[bytes, bytes]], bytes, bool]:
    while True:  # interim (1xx) answers are skipped, as h11 does
        end = conn.buf.find(b"\r\n\r\n")
        while end < 0:
            if len(conn.buf) > MAX_HEAD:
                raise httpx.RemoteProtocolError("response head too large")
            await conn.wait_data(timeout)
            end = conn.buf.find(b"\r\n\r\n")
        head = bytes(conn.buf[:end])
        del conn.buf[: end + 4]
        status, version_11, raw = _parse_head(head)
        if not 100 <= status < 200 or status == 101:
            break
    fields: dict[bytes, bytes] = {}
    for k, v in raw:
        name = k.lower()
        if name == b"content-length" and fields.get(name, v) != v:
            raise httpx.RemoteProtocolError("conflicting Content-Length headers")
        fields[name] = v
    close = b"close" in fields.get(b"connection", b"").lower() or not version_11
    if method == "HEAD" or status in _NO_BODY_STATUS or 100 <= status < 200:
        content = b""
    elif b"chunked" in fields.get(b"transfer-encoding", b"").lower():
        content = await _read_chunked(conn, timeout)
    elif b"content-length" in fields:
        length = _content_length(fields[b"content-length"])
        while len(conn.buf) < length:
            await conn.wait_data(timeout)
        content = bytes(conn.buf[:length])
        del conn.buf[:length]
    else:  # delimited by the close: a reset is not an end
        while not (conn.eof or conn.lost):
            await conn.wait_data(timeout)
        if conn.error is not None:
            raise conn.error
        content, close = bytes(conn.buf), True
        conn.buf.clear()
    return status, raw, content, whole and not close and not conn.buf


def _parse_head(head: bytes) -> tuple[int, bool, list[tuple[bytes, bytes]]]:
    lines = head.split(b"\r\n")
    status = _STATUS_LINE.fullmatch(lines[0])
    if status is None:
        raise httpx.RemoteProtocolError(f"malformed status line {lines[0][:80]!r}")
    version, code = status.group(1), status.group(2)
    raw: list[tuple[bytes, bytes]] = []
    for line in lines[1:]:
        name, sep, value = line.partition(b":")
        if not sep or not name or name != name.strip():
            raise httpx.RemoteProtocolError(f"malformed header line {line[:80]!r}")
        raw.append((name, value.strip(b" \t")))
    return int(code), version == b"HTTP/1.1", raw


def _content_length(value: bytes) -> int:
    if not value.isdigit() or len(value) > 18:
        raise httpx.RemoteProtocolError(f"malformed Content-Length {value[:40]!r}")
    return int(value)


async def _read_chunked(conn: _Connection, timeout: float) -> bytes:
    parts: list[bytes] = []
    while True:
        line = await _read_line(conn, timeout, "chunk size line")
        size_text = line.split(b";", 1)[0].strip()
        if _CHUNK_SIZE.fullmatch(size_text) is None:
            raise httpx.RemoteProtocolError(f"malformed chunk size {size_text[:40]!r}")
        size = int(size_text, 16)
        if size == 0:  # the last chunk, then trailers up to an empty line
            while await _read_line(conn, timeout, "chunked trailer"):
                pass
            return b"".join(parts)
        while len(conn.buf) < size + 2:
            await conn.wait_data(timeout)
        if conn.buf[size : size + 2] != b"\r\n":
            raise httpx.RemoteProtocolError("chunk not followed by CRLF")
        parts.append(bytes(conn.buf[:size]))
        del conn.buf[: size + 2]


async def _read_line(conn: _Connection, timeout: float, what: str) -> bytes:
    """The next CRLF-terminated line, taken from the buffer (at most MAX_HEAD bytes)."""
    end = conn.buf.find(b"\r\n")
    while end < 0:
        if len(conn.buf) > MAX_HEAD:
            raise httpx.RemoteProtocolError(f"{what} too long")
        await conn.wait_data(timeout)
        end = conn.buf.find(b"\r\n")
    line = bytes(conn.buf[:end])
    del conn.buf[: end + 2]
    return line
