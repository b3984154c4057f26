"""Keep-alive HTTP/1.1 to one cleartext origin on blocking sockets: the sync `Client`'s
request path when nothing needs httpx's (no TLS, no HTTP/2, no proxy, no injected
transport, a body already in memory, the whole response wanted).

Why: httpx spends ~350 µs of CPU per request beyond what the request needs — building and
merging the URL, `Client.send`, httpcore and h11 — and even the standard library's
`http.client` ~150 µs more than this path (its header parsing runs through the `email`
package), which is one `sendall`, the shared reader of `_h1_wire` and a light response
(BENCHMARKS.md, "what a request costs the Python client", and "Issue 12, stop 36").
Everything above the wire stays as it was: a response comes back as a `WireResponse`
(`_base.Reply`) for the same parsers, and a failure as the `httpx` transport error the
retry policy already knows (`_base._RETRY_TRANSPORT`): nothing is resent here, the
client's retry policy alone decides.

Thread-safe: each request has a connection to itself; idle ones wait in a locked list
(at most MAX_IDLE, each for at most IDLE_EXPIRY_S, as httpx keeps them). A connection that
became readable while idle (the server closed it, or sent what nobody asked for) is never
reused, nor is one whose request failed or timed out. An answer that arrives although
the request's body could not all be written (a server refusing an oversized body early)
is the answer returned.
"""

from __future__ import annotations

import io
import select
import socket
import threading
import time
import urllib.request
from collections.abc import Callable, Mapping
from typing import TypeVar
from urllib.parse import urlsplit

import httpx

from seglog.client._h1_wire import (
    Answer,
    AnswerReader,
    Ended,
    WireResponse,
    host_header,
    request_head,
)

# Like httpx's defaults: at most this many idle connections are kept, each for at most
# this long (a server may close a connection it sees idle; one closed while idle is caught
# by the readability check anyway, this only bounds the sockets held).
MAX_IDLE = 20
IDLE_EXPIRY_S = 5.0


def env_proxied() -> bool:
    """Whether the environment routes HTTP through a proxy (httpx's `trust_env` does)."""
    proxies = urllib.request.getproxies()
    return any(k in proxies for k in ("http", "https", "all"))


def usable(url: str, *, http2: bool, has_transport: bool) -> bool:
    """Whether a client of `url` may send its requests through `H1Pool`: plain HTTP/1.1,
    nothing in the URL but a host, port and path (httpx turns `user:pw@` into Basic auth),
    and no proxy."""
    parts = urlsplit(url)
    return (
        not http2
        and not has_transport
        and parts.scheme == "http"
        and parts.hostname is not None
        and parts.username is None
        and parts.password is None
        and not parts.query
        and not parts.fragment
        and not env_proxied()
    )


def origin_of(url: str, pool: str) -> tuple[str, int, str]:
    """(host, port, path prefix) of a plain `http://` URL; ValueError naming `pool` else."""
    parts = urlsplit(url)
    if parts.scheme != "http" or parts.hostname is None:
        raise ValueError(f"{pool} needs an http:// URL with a host, not {url!r}")
    return parts.hostname, parts.port or 80, parts.path.rstrip("/")


def request_target(prefix: str, path: str, params: Mapping[str, str | int] | None) -> str:
    """`path` (starting with `/`, already percent-encoded) under the URL's own path, as
    httpx's `base_url` joins them, with `params` as httpx encodes them."""
    target = prefix + path
    if params:
        target += "?" + str(httpx.QueryParams(params))
    return target


def request_headers(
    defaults: Mapping[str, str], headers: Mapping[str, str] | None
) -> Mapping[str, str]:
    """`defaults` (lower-case names) with a request's own headers replacing those of the
    same name, whatever their case."""
    if not headers:
        return defaults
    return {**defaults, **{k.lower(): v for k, v in headers.items()}}


Conn = TypeVar("Conn")


def trim_idle(
    idle: list[tuple[Conn, float]], now: float
) -> tuple[list[tuple[Conn, float]], list[Conn]]:
    """An idle list (oldest first) without the expired connections, then without the oldest
    beyond MAX_IDLE: (what stays, what to close)."""
    fresh = [(c, t) for c, t in idle if now - t < IDLE_EXPIRY_S]
    stale = [c for c, t in idle if now - t >= IDLE_EXPIRY_S]
    cut = max(0, len(fresh) - MAX_IDLE)
    stale += [c for c, _t in fresh[:cut]]
    return fresh[cut:], stale


# Bytes asked of the socket per read: a diff page of 1,000 records is ~100–200 KiB. A body
# of known length beyond that is received whole (`_recv_body`) up to BODY_MAX_BYTES, which
# bounds what a declared length alone can make the client reserve.
RECV_BYTES = 256 * 1024
BODY_MAX_BYTES = 1024 * 1024 * 1024


class _Conn:
    """One pooled socket; `sock` is None once closed."""

    __slots__ = ("sock",)

    def __init__(self, sock: socket.socket) -> None:
        self.sock: socket.socket | None = sock

    def close(self) -> None:
        sock, self.sock = self.sock, None
        if sock is not None:
            sock.close()


class H1Pool:
    def __init__(
        self,
        url: str,
        headers: Mapping[str, str],
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._host, self._port, self._prefix = origin_of(url, "H1Pool")
        self._host_header = host_header(self._host, self._port)
        self._headers = {k.lower(): v for k, v in headers.items()}
        self._clock = clock
        self._idle: list[tuple[_Conn, float]] = []  # (conn, idle since)
        self._busy: set[_Conn] = set()
        self._lock = threading.Lock()
        self._closed = False

    def send(
        self,
        method: str,
        path: str,
        params: Mapping[str, str | int] | None,
        body: bytes | None,
        headers: Mapping[str, str] | None,
        timeout: float,
    ) -> WireResponse:
        """One request and its whole response. `path` starts with `/` and is already
        percent-encoded; it is appended to the URL's own path, as httpx's `base_url` does.
        Failures raise the httpx transport error of their kind; nothing is resent here."""
        target = request_target(self._prefix, path, params)
        sent = request_headers(self._headers, headers)
        head = request_head(method, target, self._host_header, sent, body)
        conn = self._take(timeout)
        reusable = False
        try:
            answer, reusable = _exchange(conn, method, head + body if body else head)
        finally:
            self._give_back(conn, reusable)
        return WireResponse.of(answer)

    def close(self) -> None:
        """Close every connection: idle ones, and those of requests in flight (which then
        fail as a dropped connection would)."""
        with self._lock:
            self._closed = True
            idle, self._idle = self._idle, []
            busy = list(self._busy)
        for conn, _since in idle:
            conn.close()
        for conn in busy:
            sock = conn.sock
            if sock is not None:
                try:
                    sock.shutdown(socket.SHUT_RDWR)  # wakes a thread blocked on it
                except OSError:
                    pass

    def _take(self, timeout: float) -> _Conn:
        while True:
            now = self._clock()
            with self._lock:
                if self._closed:
                    raise RuntimeError("the client is closed")
                conn, since = self._idle.pop() if self._idle else (None, now)
                if conn is None:
                    break
                self._busy.add(conn)
            sock = conn.sock
            if sock is not None and now - since < IDLE_EXPIRY_S and not readable(sock):
                sock.settimeout(timeout)
                return conn
            # expired, or closed by the server while idle (or it spoke out of turn)
            self._give_back(conn, False)
        conn = self._connect(timeout)
        with self._lock:
            if self._closed:  # closed while this request was connecting
                conn.close()
                raise RuntimeError("the client is closed")
            self._busy.add(conn)
        return conn

    def _connect(self, timeout: float) -> _Conn:
        try:
            sock = socket.create_connection((self._host, self._port), timeout)
        except TimeoutError as e:
            raise httpx.ConnectTimeout(str(e) or "timed out connecting") from e
        except OSError as e:
            raise httpx.ConnectError(f"{type(e).__name__}: {e}") from e
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        return _Conn(sock)

    def _give_back(self, conn: _Conn, reusable: bool) -> None:
        now = self._clock()
        with self._lock:
            self._busy.discard(conn)
            keep = reusable and not self._closed
            if keep:
                self._idle.append((conn, now))
            self._idle, stale = trim_idle(self._idle, now)
        if not keep:
            conn.close()
        for c in stale:
            c.close()


def _exchange(conn: _Conn, method: str, request: bytes) -> tuple[Answer, bool]:
    """Send the request and read the whole answer on `conn`, mapping failures to httpx's
    transport errors: (answer, whether the connection may be reused). The socket's
    timeout bounds each send and each wait for bytes, as httpx's timeouts do."""
    sock = conn.sock
    if sock is None:
        raise httpx.ReadError("the client is closed")
    write_error: OSError | None = None
    try:
        sock.sendall(request)
    except TimeoutError as e:
        raise httpx.WriteTimeout(str(e) or "timed out sending the request") from e
    except OSError as e:
        # The server may have answered before reading the whole body and closed (a
        # `413` for a body over its limit): that answer is what the caller must see.
        write_error = e
    buf = bytearray()
    reader = AnswerReader(method)
    ended = False
    try:
        while (answer := reader.feed(buf, ended)) is None:
            missing = reader.body_missing(buf)
            if RECV_BYTES < missing <= BODY_MAX_BYTES:
                answer = reader.take_body(_recv_body(sock, buf, missing))
                break
            chunk = sock.recv(RECV_BYTES)
            if chunk:
                buf += chunk
            else:
                ended = True
    except TimeoutError as e:
        raise httpx.ReadTimeout(str(e) or "timed out waiting for the response") from e
    except (Ended, OSError, httpx.RemoteProtocolError) as e:
        if write_error is not None:
            raise httpx.WriteError(f"{type(write_error).__name__}: {write_error}") from e
        if isinstance(e, httpx.RemoteProtocolError):
            raise
        if isinstance(e, Ended):
            raise httpx.RemoteProtocolError("server disconnected without a full response") from e
        raise httpx.ReadError(f"{type(e).__name__}: {e}") from e
    return answer, write_error is None and answer.keep_alive and not buf


def _recv_body(sock: socket.socket, buf: bytearray, missing: int) -> bytes:
    """A large body whose first bytes are `buf` (taken from it) and whose `missing` rest
    is received straight into one `bytes` of its size, as `http.client` did: the buffered
    reader over the socket reads a request larger than its (one-byte) buffer directly into
    its result, and never past it. The memory is allocated, not written, ahead of the
    bytes (RSS grows as they arrive). Shorter than the body if the peer closed first."""
    with io.BufferedReader(socket.SocketIO(sock, "rb"), buffer_size=1) as reader:
        rest = reader.read(missing)
    body = b"".join((buf, rest))
    buf.clear()
    return body


def readable(sock: socket.socket) -> bool:
    """Whether `sock` has bytes or a close waiting to be read (or is unusable)."""
    try:
        ready, _, _ = select.select([sock], [], [], 0)
    except (OSError, ValueError):  # already closed
        return True
    return bool(ready)
