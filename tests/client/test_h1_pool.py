"""The sync client's lean HTTP/1.1 path (`seglog.client._h1`) against a scripted server on
a real socket: what goes on the wire, connection reuse, and how each kind of failure comes
back (the httpx error the retry policy already handles, sent at most once per attempt)."""

from __future__ import annotations

import socket
import socketserver
import threading
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

import httpx
import orjson
import pytest

from seglog.client import Client, SeglogConnectionError, SeglogTimeoutError, _base, _h1

HEALTH = orjson.dumps({"status": "ok", "version": "0.1.0", "uptime_ms": 1})


@dataclass
class Seen:
    """What the scripted server received: one entry per request, and connections opened."""

    requests: list[tuple[str, dict[str, str], bytes]] = field(default_factory=list)
    connections: int = 0


# A script answers one request: the raw bytes to send back, or None to close the socket
# without answering; a list of parts is written one `write` each, a callable part is
# called between them. It sees the request number (0-based, across connections).
Script = Callable[[int, str], "bytes | list[bytes | Callable[[], object]] | None"]


def response(body: bytes, status: str = "200 OK", extra: str = "") -> bytes:
    head = f"HTTP/1.1 {status}\r\nContent-Type: application/json\r\n{extra}"
    return (head + f"Content-Length: {len(body)}\r\n\r\n").encode() + body


@pytest.fixture(autouse=True)
def _no_proxies(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(urllib.request, "getproxies", lambda: {})


Start = Callable[[Script], tuple[str, Seen]]


@pytest.fixture
def scripted() -> Iterator[Start]:
    servers: list[socketserver.ThreadingTCPServer] = []

    def start(script: Script) -> tuple[str, Seen]:
        seen = Seen()
        lock = threading.Lock()

        class Handler(socketserver.StreamRequestHandler):
            def handle(self) -> None:
                with lock:
                    seen.connections += 1
                while True:
                    line = self.rfile.readline()
                    if not line:
                        return
                    headers: dict[str, str] = {}
                    while (h := self.rfile.readline()) not in (b"\r\n", b""):
                        k, _, v = h.decode().partition(":")
                        headers[k.strip().lower()] = v.strip()
                    body = self.rfile.read(int(headers.get("content-length", "0")))
                    with lock:
                        n = len(seen.requests)
                        seen.requests.append((line.decode().strip(), headers, body))
                    out = script(n, line.decode())
                    if out is None:
                        return
                    for part in out if isinstance(out, list) else [out]:
                        if callable(part):
                            part()
                            continue
                        self.wfile.write(part)
                        self.wfile.flush()

        srv = socketserver.ThreadingTCPServer(("127.0.0.1", 0), Handler)
        srv.daemon_threads = True
        servers.append(srv)
        threading.Thread(target=srv.serve_forever, args=(0.05,), daemon=True).start()
        return f"http://127.0.0.1:{srv.server_address[1]}", seen

    yield start
    for srv in servers:
        srv.shutdown()
        srv.server_close()


def test_only_plain_http_without_h2_transport_or_proxy_uses_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    assert _h1.usable("http://h:1", http2=False, has_transport=False)
    assert not _h1.usable("https://h:1", http2=False, has_transport=False)
    assert not _h1.usable("http://h:1", http2=True, has_transport=False)
    assert not _h1.usable("http://h:1", http2=False, has_transport=True)
    monkeypatch.setattr(urllib.request, "getproxies", lambda: {"http": "http://proxy:3128"})
    assert not _h1.usable("http://h:1", http2=False, has_transport=False)


def test_the_request_on_the_wire_is_the_one_httpx_would_send(scripted: Start) -> None:
    url, seen = scripted(lambda n, line: response(b'{"topics":[],"next_cursor":null}'))
    with Client(url + "/base/", api_key="k1") as c:
        c.list_topics(prefix="a b/é&", page_size=5)
        assert c._h1 is not None
    line, headers, body = seen.requests[0]
    expected = httpx.Client(base_url=url + "/base/").build_request(
        "GET", "/v0/topics", params={"prefix": "a b/é&", "page_size": 5}
    )
    assert line == f"GET {expected.url.raw_path.decode()} HTTP/1.1"
    assert line.startswith("GET /base/v0/topics?")
    assert headers["authorization"] == "Bearer k1"
    assert headers["accept"] == "application/json"
    assert headers["user-agent"] == _base.USER_AGENT
    assert body == b""


def test_a_post_carries_its_body_and_content_type(scripted: Start) -> None:
    appended = {"topic": "t", "first_seq": 1, "last_seq": 1, "seqs": [1], "head_seq": 1,
                "count": 1, "created": False, "deduped": False,
                "performance": {"server_total_ms": 0.1}}  # fmt: skip
    url, seen = scripted(lambda n, line: response(orjson.dumps(appended)))
    with Client(url) as c:
        assert c.append("t", [{"data": {"x": 1}}]).last_seq == 1
    line, headers, body = seen.requests[0]
    assert line == "POST /v0/topics/t HTTP/1.1"
    assert headers["content-type"] == "application/json"
    assert orjson.loads(body)["records"] == [{"data": {"x": 1}}]


def test_connections_are_kept_alive_and_reused(scripted: Start) -> None:
    url, seen = scripted(lambda n, line: response(HEALTH))
    with Client(url) as c:
        for _ in range(5):
            c.health()
    assert len(seen.requests) == 5 and seen.connections == 1


def test_a_connection_the_server_closed_while_idle_is_replaced(scripted: Start) -> None:
    # Every answer says the server closes after it; the client must not write into the
    # dead socket (a non-idempotent write would then fail instead of being sent once).
    url, seen = scripted(lambda n, line: response(HEALTH, extra="Connection: close\r\n"))
    with Client(url, retries=0) as c:
        for _ in range(3):
            c.health()
    assert len(seen.requests) == 3 and seen.connections == 3


def test_an_idle_connection_that_became_readable_is_not_reused(scripted: Start) -> None:
    # The server answers, then (once the client holds the answer) sends bytes nobody
    # asked for: that connection is spoiled.
    answered, stray_sent = threading.Event(), threading.Event()

    def script(n: int, line: str) -> list[bytes | Callable[[], object]]:
        if n > 0:
            return [response(HEALTH)]
        return [response(HEALTH), lambda: answered.wait(5), b"HTTP/1.1 200 OK\r\n", stray_sent.set]

    url, seen = scripted(script)
    with Client(url, retries=0) as c:
        c.health()
        answered.set()
        assert stray_sent.wait(5)
        assert c._h1 is not None and c._h1._idle[0].sock is not None
        assert _h1._readable(c._h1._idle[0].sock)
        c.health()
    assert len(seen.requests) == 2 and seen.connections == 2


def test_a_write_whose_answer_never_comes_is_sent_once_and_reported(scripted: Start) -> None:
    url, seen = scripted(lambda n, line: None)  # reads the request, closes the socket
    with Client(url, retries=3) as c, pytest.raises(SeglogConnectionError):
        c.append("t", [{"data": 1}])  # no idempotency key: never resent
    assert len(seen.requests) == 1


def test_an_idempotent_request_is_retried_after_a_dropped_connection(scripted: Start) -> None:
    url, seen = scripted(lambda n, line: None if n == 0 else response(HEALTH))
    sleeps: list[float] = []
    with Client(url, retries=3, sleep=sleeps.append) as c:
        assert c.health().status == "ok"
    assert len(seen.requests) == 2 and len(sleeps) == 1


def test_a_refused_connection_is_a_connection_error(scripted: Start) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # nothing listens here once the socket is closed
    c = Client(f"http://127.0.0.1:{port}", retries=2, sleep=lambda _s: None)
    with c, pytest.raises(SeglogConnectionError) as e:
        c.health()
    assert "ConnectError" in str(e.value)


def test_a_slow_answer_is_a_timeout_and_is_not_retried(scripted: Start) -> None:
    release = threading.Event()

    def slow(n: int, line: str) -> bytes:
        release.wait(5)
        return response(HEALTH)

    url, seen = scripted(slow)
    try:
        with Client(url, timeout=0.2, retries=3) as c, pytest.raises(SeglogTimeoutError):
            c.get_topic("t")
    finally:
        release.set()
    assert len(seen.requests) == 1


def test_a_malformed_answer_is_a_protocol_failure(scripted: Start) -> None:
    url, _seen = scripted(lambda n, line: b"SPDY/9 nonsense\r\n\r\n")
    with Client(url, retries=0) as c, pytest.raises(SeglogConnectionError) as e:
        c.health()
    assert "RemoteProtocolError" in str(e.value)


def test_threads_share_one_client(scripted: Start) -> None:
    url, seen = scripted(lambda n, line: response(HEALTH))
    errors: list[BaseException] = []
    with Client(url) as c:

        def work() -> None:
            try:
                for _ in range(25):
                    assert c.health().status == "ok"
            except BaseException as e:  # pragma: no cover - reported below
                errors.append(e)

        threads = [threading.Thread(target=work) for _ in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    assert errors == []
    assert len(seen.requests) == 200 and seen.connections <= 8


def test_a_closed_client_refuses_requests(scripted: Start) -> None:
    url, _seen = scripted(lambda n, line: response(HEALTH))
    c = Client(url)
    c.health()
    c.close()
    with pytest.raises(RuntimeError, match="closed"):
        c.health()
