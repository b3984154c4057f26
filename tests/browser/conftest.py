"""Fixtures for the browser suite: a headless Chromium (Debian's `chromium` package, driven by
Playwright without `playwright install`), seglog servers, and a small TCP proxy that lets a
test see the browser's stream requests (their `Last-Event-ID`) and drop its connections.

The browser is optional outside CI: without `/usr/bin/chromium` (or `SEGLOG_CHROMIUM`) or
the `playwright` package every test here is *skipped* with a reason naming what to install.
With `SEGLOG_REQUIRE_BROWSER=1` (set by `.ci/run`) a missing browser *fails* instead.
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import shutil
import socket
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from tests.support.server import ServerProcess

if TYPE_CHECKING:
    from playwright.sync_api import BrowserContext, Page

CHROMIUM = os.environ.get("SEGLOG_CHROMIUM", "/usr/bin/chromium")
REQUIRE_ENV = "SEGLOG_REQUIRE_BROWSER"
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
INSTALL_HINT = (
    "install the browser with `apt-get install -y chromium` (binary /usr/bin/chromium, or set "
    "SEGLOG_CHROMIUM) and the driver with `.venv/bin/pip install -e '.[dev]'` (playwright); "
    "do not run `playwright install`"
)

ServerFactory = Callable[..., ServerProcess]


def _browser_missing() -> str | None:
    """Why the browser tests cannot run here, or None when they can."""
    missing = []
    if importlib.util.find_spec("playwright") is None:
        missing.append("the `playwright` Python package is not installed")
    if not (os.path.isfile(CHROMIUM) and os.access(CHROMIUM, os.X_OK)):
        missing.append(f"no Chromium executable at {CHROMIUM}")
    return "; ".join(missing) or None


def _require_browser() -> bool:
    return os.environ.get(REQUIRE_ENV, "").strip().lower() in ("1", "true", "yes")


@pytest.fixture(scope="module")
def browser_context() -> Iterator[BrowserContext]:
    """One headless Chromium with a fresh user-data dir per module (module scope, so that
    Playwright's own event loop is gone before the asyncio tests of other packages run)."""
    why = _browser_missing()
    if why is not None:
        message = f"browser tests need Chromium and Playwright: {why}; {INSTALL_HINT}"
        if _require_browser():
            pytest.fail(f"{REQUIRE_ENV}=1 but {message}", pytrace=False)
        pytest.skip(message)
    from playwright.sync_api import sync_playwright

    profile = tempfile.mkdtemp(prefix="seglog-chromium-")
    try:
        with sync_playwright() as pw:
            ctx = pw.chromium.launch_persistent_context(
                profile,
                executable_path=CHROMIUM,
                headless=True,
                args=CHROMIUM_ARGS,
                timeout=30_000,
            )
            try:
                yield ctx
            finally:
                ctx.close()
    finally:
        shutil.rmtree(profile, ignore_errors=True)


@pytest.fixture(scope="module", autouse=True)
def _browser_first(browser_context: BrowserContext) -> BrowserContext:
    """Skip (or fail) on a missing browser before any server of the module is started."""
    return browser_context


@pytest.fixture
def new_page(browser_context: BrowserContext) -> Iterator[Callable[[], Page]]:
    """`new_page()` opens a tab; every tab (and so every EventSource in it) is closed after."""
    pages: list[Page] = []

    def factory() -> Page:
        page = browser_context.new_page()
        page.set_default_timeout(10_000)
        pages.append(page)
        return page

    yield factory
    for page in pages:
        with contextlib.suppress(Exception):
            page.close()


@pytest.fixture(scope="module")
def server() -> Iterator[ServerProcess]:
    """A module-wide server with auth disabled (each test uses its own topics)."""
    srv = ServerProcess()
    srv.start()
    try:
        yield srv
    finally:
        srv.close()


@pytest.fixture
def make_server(tmp_path: Path) -> Iterator[ServerFactory]:
    """`make_server(env={...})`: a server of the test's own; every one is stopped after."""
    made: list[ServerProcess] = []

    def factory(env: Mapping[str, str] | None = None) -> ServerProcess:
        srv = ServerProcess(data_dir=tmp_path / f"data{len(made)}", env=env)
        made.append(srv)
        srv.start()
        return srv

    yield factory
    for srv in made:
        srv.close()


# --------------------------------------------------------------------------- proxy


class _Link:
    """One proxied TCP connection: browser socket <-> server socket."""

    def __init__(self, client: socket.socket, upstream: socket.socket) -> None:
        self.client = client
        self.upstream = upstream
        self.watch = False  # carried a `GET /v0/watch/...` request
        self.frozen = False  # server bytes are swallowed, not forwarded

    def close(self) -> None:
        for s in (self.client, self.upstream):
            with contextlib.suppress(OSError):
                s.shutdown(socket.SHUT_RDWR)
            with contextlib.suppress(OSError):
                s.close()


class SseProxy:
    """A byte-for-byte TCP proxy on 127.0.0.1 in front of a seglog server.

    - `watch_requests`: the headers (lower-cased names) of every `GET /v0/watch/...` request
      the browser sent through it, in order — how a test sees `Last-Event-ID`.
    - `freeze()`: from now on, bytes the server sends on watch connections are read (so the
      server believes them delivered and advances the session cursors) but kept in
      `swallowed` instead of reaching the browser.
    - `cut()`: close every watch connection on both sides — to the browser it looks like the
      server dropped the stream, so its EventSource reconnects by itself.
    - `upstream` may be changed to point new connections at another server.
    """

    def __init__(self, upstream: str) -> None:
        self.upstream = upstream  # "host:port"
        self.watch_requests: list[dict[str, str]] = []
        self.swallowed = bytearray()
        self._links: list[_Link] = []
        self._lock = threading.Lock()
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port = self._listener.getsockname()[1]
        self._closed = False
        threading.Thread(target=self._accept, name="sse-proxy-accept", daemon=True).start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def _accept(self) -> None:
        while not self._closed:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            host, _, port = self.upstream.rpartition(":")
            try:
                upstream = socket.create_connection((host.strip("[]"), int(port)), timeout=5)
            except OSError:
                client.close()  # the browser sees a refused/reset connection
                continue
            upstream.settimeout(None)
            for s in (client, upstream):
                s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            link = _Link(client, upstream)
            with self._lock:
                self._links.append(link)
            threading.Thread(target=self._to_server, args=(link,), daemon=True).start()
            threading.Thread(target=self._to_browser, args=(link,), daemon=True).start()

    def _to_server(self, link: _Link) -> None:
        pending = b""
        while True:
            try:
                chunk = link.client.recv(65536)
            except OSError:
                chunk = b""
            if not chunk:
                link.close()
                return
            pending = self._scan_requests(link, pending + chunk)
            try:
                link.upstream.sendall(chunk)
            except OSError:
                link.close()
                return

    def _scan_requests(self, link: _Link, buf: bytes) -> bytes:
        """Record watch GETs found in the browser's bytes; returns the unparsed tail."""
        while True:
            start = buf.find(b"GET /v0/watch/")
            if start < 0:
                return buf[-16:]
            end = buf.find(b"\r\n\r\n", start)
            if end < 0:
                return buf[start:]
            lines = buf[start:end].decode("latin-1").split("\r\n")
            headers = {"_request_line": lines[0]}
            for line in lines[1:]:
                name, _, value = line.partition(":")
                headers[name.strip().lower()] = value.strip()
            with self._lock:
                link.watch = True
                self.watch_requests.append(headers)
            buf = buf[end + 4 :]

    def _to_browser(self, link: _Link) -> None:
        while True:
            try:
                chunk = link.upstream.recv(65536)
            except OSError:
                chunk = b""
            if not chunk:
                link.close()
                return
            with self._lock:
                frozen = link.frozen
                if frozen:
                    self.swallowed += chunk
            if frozen:
                continue
            try:
                link.client.sendall(chunk)
            except OSError:
                link.close()
                return

    def freeze(self) -> None:
        with self._lock:
            for link in self._links:
                if link.watch:
                    link.frozen = True

    def cut(self) -> None:
        with self._lock:
            links = [link for link in self._links if link.watch]
            self._links = [link for link in self._links if not link.watch]
        for link in links:
            link.close()

    def close(self) -> None:
        self._closed = True
        with contextlib.suppress(OSError):
            self._listener.close()
        with self._lock:
            links, self._links = self._links, []
        for link in links:
            link.close()


@pytest.fixture
def make_proxy() -> Iterator[Callable[[ServerProcess], SseProxy]]:
    made: list[SseProxy] = []

    def factory(srv: ServerProcess) -> SseProxy:
        proxy = SseProxy(srv.address)
        made.append(proxy)
        return proxy

    yield factory
    for proxy in made:
        proxy.close()


def wait_until(what: str, check: Callable[[], Any], timeout_s: float = 10.0) -> Any:
    """Poll `check` (from Python) until it returns something truthy; fail after the deadline."""
    deadline = time.monotonic() + timeout_s
    while True:
        got = check()
        if got:
            return got
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout_s} s waiting for {what}", pytrace=False)
        time.sleep(0.02)
