"""Keep-alive HTTP/1.1 to one cleartext origin over the standard library's `http.client`:
the sync `Client`'s request path when nothing needs httpx's (no TLS, no HTTP/2, no proxy,
no injected transport, a body already in memory, the whole response wanted).

Why: httpx spends ~350 µs of CPU per request beyond what the request needs — building and
merging the URL, `Client.send`, httpcore and h11 — against ~70–130 µs for `http.client`
(BENCHMARKS.md, "what a request costs the Python client"); on one connection that is a
`GET /v0/health` in ~250 µs instead of ~650 µs. Everything above the wire stays as it was:
a response comes back as an `httpx.Response` for the same parsers, and a failure as the
`httpx` transport error the retry policy already knows (`_base._RETRY_TRANSPORT`), raised
before anything is retried here — a request is sent at most once per call.

Thread-safe: each request has a connection to itself; idle ones wait in a locked list.
A connection that became readable while idle (the server closed it, or sent what nobody
asked for) is never reused.
"""

from __future__ import annotations

import http.client
import select
import socket
import threading
import urllib.request
from collections.abc import Mapping
from urllib.parse import urlsplit

import httpx

_EXPECTS_BODY = frozenset({"POST", "PUT", "PATCH"})


def env_proxied() -> bool:
    """Whether the environment routes HTTP through a proxy (httpx's `trust_env` does)."""
    proxies = urllib.request.getproxies()
    return any(k in proxies for k in ("http", "https", "all"))


def usable(url: str, *, http2: bool, has_transport: bool) -> bool:
    """Whether a client of `url` may send its requests through `H1Pool`."""
    return not http2 and not has_transport and urlsplit(url).scheme == "http" and not env_proxied()


class H1Pool:
    def __init__(self, url: str, headers: Mapping[str, str]) -> None:
        parts = urlsplit(url)
        if parts.scheme != "http" or parts.hostname is None:
            raise ValueError(f"H1Pool needs an http:// URL with a host, not {url!r}")
        self._host = parts.hostname
        self._port = parts.port or 80
        self._prefix = parts.path.rstrip("/")
        self._headers = dict(headers)
        self._idle: list[http.client.HTTPConnection] = []
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
    ) -> httpx.Response:
        """One request and its whole response. `path` starts with `/` and is already
        percent-encoded; it is appended to the URL's own path, as httpx's `base_url` does."""
        target = self._prefix + path
        if params:
            target += "?" + str(httpx.QueryParams(params))
        sent = {**self._headers, **headers} if headers else self._headers
        if body is None and method in _EXPECTS_BODY:
            body = b""
        conn = self._take(timeout)
        try:
            try:
                conn.request(method, target, body, sent)
            except TimeoutError as e:
                raise httpx.WriteTimeout(str(e) or "timed out sending the request") from e
            except OSError as e:
                raise httpx.WriteError(f"{type(e).__name__}: {e}") from e
            try:
                r = conn.getresponse()
                content = r.read()
            except TimeoutError as e:
                raise httpx.ReadTimeout(str(e) or "timed out waiting for the response") from e
            except http.client.HTTPException as e:
                raise httpx.RemoteProtocolError(f"{type(e).__name__}: {e}") from e
            except OSError as e:
                raise httpx.ReadError(f"{type(e).__name__}: {e}") from e
        except BaseException:
            conn.close()
            raise
        if r.will_close:
            conn.close()
        else:
            self._give_back(conn)
        return httpx.Response(r.status, headers=r.getheaders(), content=content)

    def close(self) -> None:
        with self._lock:
            self._closed = True
            idle, self._idle = self._idle, []
        for conn in idle:
            conn.close()

    def _take(self, timeout: float) -> http.client.HTTPConnection:
        while True:
            with self._lock:
                if self._closed:
                    raise RuntimeError("the client is closed")
                conn = self._idle.pop() if self._idle else None
            if conn is None:
                return self._connect(timeout)
            sock = conn.sock
            if sock is not None and not _readable(sock):
                sock.settimeout(timeout)
                return conn
            conn.close()  # closed by the server while idle (or it spoke out of turn)

    def _connect(self, timeout: float) -> http.client.HTTPConnection:
        conn = http.client.HTTPConnection(self._host, self._port, timeout=timeout)
        try:
            conn.connect()
        except TimeoutError as e:
            conn.close()
            raise httpx.ConnectTimeout(str(e) or "timed out connecting") from e
        except OSError as e:
            conn.close()
            raise httpx.ConnectError(f"{type(e).__name__}: {e}") from e
        if conn.sock is not None:
            conn.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        return conn

    def _give_back(self, conn: http.client.HTTPConnection) -> None:
        with self._lock:
            if not self._closed:
                self._idle.append(conn)
                return
        conn.close()


def _readable(sock: socket.socket) -> bool:
    try:
        ready, _, _ = select.select([sock], [], [], 0)
    except (OSError, ValueError):  # already closed
        return True
    return bool(ready)
