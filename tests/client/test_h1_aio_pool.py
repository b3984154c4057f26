"""The async client's lean HTTP/1.1 path (`seglog.client._h1_aio`) against the scripted
server of `test_h1_pool`: what goes on the wire, connection reuse, and how each kind of
failure comes back (the httpx error the retry policy already handles, sent at most once
per attempt)."""

from __future__ import annotations

import asyncio
import contextlib
import gzip
import select
import socket
import struct
import threading
import time
import urllib.request
from collections.abc import Callable, Coroutine
from typing import Any

import httpx
import orjson
import pytest
import uvloop

from seglog.client import (
    AsyncClient,
    PayloadTooLarge,
    SeglogConnectionError,
    SeglogTimeoutError,
    _base,
    _h1,
    _h1_aio,
)
from tests.client.h1_server import (
    DIFF,
    HEALTH,
    MALFORMED_ANSWERS,
    MALFORMED_IDS,
    Start,
    raw_server,
    response,
)

APPENDED = orjson.dumps(
    {"topic": "t", "first_seq": 1, "last_seq": 1, "seqs": [1], "head_seq": 1, "count": 1,
     "created": False, "deduped": False, "performance": {"server_total_ms": 0.1}}
)  # fmt: skip


@pytest.fixture(autouse=True)
def _no_proxies(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(urllib.request, "getproxies", lambda: {})


async def no_sleep(_s: float) -> None:
    return None


def test_it_is_used_exactly_where_the_sync_pool_is() -> None:
    assert AsyncClient("http://127.0.0.1:1")._h1 is not None
    assert AsyncClient("http://127.0.0.1:1", http2=True)._h1 is None
    assert AsyncClient("https://127.0.0.1:1")._h1 is None
    transport = httpx.MockTransport(lambda r: httpx.Response(200))
    assert AsyncClient("http://127.0.0.1:1", transport=transport)._h1 is None


async def test_the_request_on_the_wire_is_the_one_httpx_would_send(scripted: Start) -> None:
    url, seen = scripted(lambda n, line: response(b'{"topics":[],"next_cursor":null}'))
    async with AsyncClient(url + "/base/", api_key="k1") as c:
        await c.list_topics(prefix="a b/é&", page_size=5)
        assert c._h1 is not None
    line, headers, body = seen.requests[0]
    expected = httpx.Client(base_url=url + "/base/").build_request(
        "GET", "/v0/topics", params={"prefix": "a b/é&", "page_size": 5}
    )
    assert line == f"GET {expected.url.raw_path.decode()} HTTP/1.1"
    assert headers["host"] == url.removeprefix("http://")
    assert headers["authorization"] == "Bearer k1"
    assert headers["accept"] == "application/json"
    assert headers["user-agent"] == _base.USER_AGENT
    assert body == b""


async def test_a_post_carries_its_body_and_content_type(scripted: Start) -> None:
    url, seen = scripted(lambda n, line: response(APPENDED))
    async with AsyncClient(url) as c:
        assert (await c.append("t", [{"data": {"x": 1}}])).last_seq == 1
    line, headers, body = seen.requests[0]
    assert line == "POST /v0/topics/t HTTP/1.1"
    assert headers["content-type"] == "application/json"
    assert int(headers["content-length"]) == len(body)
    assert orjson.loads(body)["records"] == [{"data": {"x": 1}}]


async def test_connections_are_kept_alive_and_reused(scripted: Start) -> None:
    url, seen = scripted(lambda n, line: response(HEALTH))
    async with AsyncClient(url) as c:
        for _ in range(5):
            await c.health()
    assert len(seen.requests) == 5 and seen.connections == 1


async def test_concurrent_requests_each_get_a_connection(scripted: Start) -> None:
    url, seen = scripted(lambda n, line: response(HEALTH))
    async with AsyncClient(url) as c:
        for _ in range(3):
            got = await asyncio.gather(*(c.health() for _ in range(8)))
            assert all(h.status == "ok" for h in got)
    assert len(seen.requests) == 24 and seen.connections <= 8


async def test_an_answer_that_closes_its_connection_is_not_pooled(scripted: Start) -> None:
    url, seen = scripted(lambda n, line: response(HEALTH, extra="Connection: close\r\n"))
    async with AsyncClient(url, retries=0) as c:
        for _ in range(3):
            await c.health()
    assert len(seen.requests) == 3 and seen.connections == 3


async def test_an_idle_connection_that_received_bytes_is_not_reused(scripted: Start) -> None:
    answered, stray_sent = threading.Event(), threading.Event()

    def script(n: int, line: str) -> list[bytes | Callable[[], object]]:
        if n > 0:
            return [response(HEALTH)]
        return [response(HEALTH), lambda: answered.wait(5), b"HTTP/1.1 200 OK\r\n", stray_sent.set]

    url, seen = scripted(script)
    async with AsyncClient(url, retries=0) as c:
        await c.health()
        answered.set()
        assert await asyncio.to_thread(stray_sent.wait, 5)
        assert c._h1 is not None
        idle = c._h1._idle[0][0]
        for _ in range(200):  # until the loop has delivered the stray bytes
            if idle.buf:
                break
            await asyncio.sleep(0.01)
        assert not idle.idle_ok
        await c.health()
    assert len(seen.requests) == 2 and seen.connections == 2


async def test_a_write_whose_answer_never_comes_is_sent_once_and_reported(
    scripted: Start,
) -> None:
    url, seen = scripted(lambda n, line: None)  # reads the request, closes the socket
    async with AsyncClient(url, retries=3, sleep=no_sleep) as c:
        with pytest.raises(SeglogConnectionError):
            await c.append("t", [{"data": 1}])  # no idempotency key: never resent
    assert len(seen.requests) == 1


async def test_an_idempotent_request_is_retried_after_a_dropped_connection(
    scripted: Start,
) -> None:
    url, seen = scripted(lambda n, line: None if n == 0 else response(HEALTH))
    sleeps: list[float] = []

    async def sleep(s: float) -> None:
        sleeps.append(s)

    async with AsyncClient(url, retries=3, sleep=sleep) as c:
        assert (await c.health()).status == "ok"
    assert len(seen.requests) == 2 and len(sleeps) == 1


async def test_a_refused_connection_is_a_connection_error() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # nothing listens here once the socket is closed
    async with AsyncClient(f"http://127.0.0.1:{port}", retries=2, sleep=no_sleep) as c:
        with pytest.raises(SeglogConnectionError) as e:
            await c.health()
    assert "ConnectError" in str(e.value)


async def test_a_slow_answer_is_a_timeout_not_retried_and_the_socket_dropped(
    scripted: Start,
) -> None:
    late = threading.Event()

    def script(n: int, line: str) -> list[bytes | Callable[[], object]]:
        if n == 0:
            return [
                lambda: late.wait(5),
                response(b'{"status":"late","version":"x","uptime_ms":1}'),
            ]
        return [response(HEALTH)]

    url, seen = scripted(script)
    try:
        async with AsyncClient(url, timeout=0.2, retries=3) as c:
            with pytest.raises(SeglogTimeoutError):
                await c.get_topic("t")
            late.set()
            assert (await c.health()).status == "ok"  # never the late answer
    finally:
        late.set()
    assert len(seen.requests) == 2 and seen.connections == 2


async def test_a_long_poll_gets_its_wait_added_to_the_timeout(scripted: Start) -> None:
    answer = threading.Event()
    url, _seen = scripted(lambda n, line: [lambda: answer.wait(0.5), response(DIFF)])
    async with AsyncClient(url, timeout=0.2, retries=0) as c:
        await c.diff("t", 0, wait_ms=2000)  # answered after 0.5 s: inside 0.2 s + the wait


@pytest.mark.parametrize("answer", MALFORMED_ANSWERS, ids=MALFORMED_IDS)
async def test_a_malformed_answer_is_a_protocol_failure(scripted: Start, answer: bytes) -> None:
    url, _seen = scripted(lambda n, line: answer)
    async with AsyncClient(url, retries=0, timeout=5) as c:
        with pytest.raises(SeglogConnectionError) as e:
            await c.health()
    assert "RemoteProtocolError" in str(e.value)


async def test_a_chunked_answer_is_read_whole_and_keeps_its_connection(scripted: Start) -> None:
    half = len(HEALTH) // 2
    chunked = (
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
        + b"%x;ext=1\r\n%s\r\n" % (half, HEALTH[:half])
        + b"%x\r\n%s\r\n" % (len(HEALTH) - half, HEALTH[half:])
        + b"0\r\nX-Trailer: t\r\n\r\n"
    )
    url, seen = scripted(lambda n, line: [chunked[:20], chunked[20:]])
    async with AsyncClient(url, retries=0, timeout=5) as c:
        assert (await c.health()).status == "ok"
        assert (await c.health()).status == "ok"
    assert seen.connections == 1


async def test_an_answer_delimited_by_the_close_is_read_whole() -> None:
    def serve(srv: socket.socket) -> None:
        s, _ = srv.accept()
        with s:
            s.recv(65536)
            s.sendall(b"HTTP/1.1 200 OK\r\n\r\n" + HEALTH[:5])
            time.sleep(0.05)
            s.sendall(HEALTH[5:])

    url, _t = raw_server(serve)
    async with AsyncClient(url, retries=0, timeout=5) as c:
        assert (await c.health()).status == "ok"
        assert c._h1 is not None and c._h1._idle == []


async def test_a_close_right_after_the_answer_is_seen_before_the_next_request() -> None:
    # The server answers keep-alive and closes at once; the caller sends its next request
    # before the loop has read that close. The socket itself says so: a fresh connection.
    requests: list[bytes] = []

    def serve(srv: socket.socket) -> None:
        for body in (HEALTH, APPENDED):
            s, _ = srv.accept()
            with s:
                requests.append(s.recv(65536))
                s.sendall(response(body))

    url, _t = raw_server(serve)
    async with AsyncClient(url, retries=0, timeout=5) as c:
        await c.health()
        assert c._h1 is not None
        sock = c._h1._idle[0][0].transport.get_extra_info("socket")  # type: ignore[union-attr]
        select.select([sock], [], [], 5)  # the close has arrived; the loop has not run since
        assert (await c.append("t", [{"data": 1}])).last_seq == 1  # no key: not retried
    assert len(requests) == 2


async def test_a_body_delimited_by_the_close_and_cut_by_a_reset_is_an_error() -> None:
    def serve(srv: socket.socket) -> None:
        s, _ = srv.accept()
        s.recv(65536)
        s.sendall(b"HTTP/1.1 200 OK\r\n\r\n" + HEALTH[:5])
        time.sleep(0.05)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        s.close()  # RST

    url, _t = raw_server(serve)
    async with AsyncClient(url, retries=0, timeout=5) as c:
        with pytest.raises(SeglogConnectionError, match="ReadError"):
            await c.health()


async def test_the_read_timeout_bounds_each_wait_not_the_whole_answer() -> None:
    answer = response(HEALTH)
    parts = [answer[k : k + 8] for k in range(0, len(answer), 8)]

    def serve(srv: socket.socket) -> None:
        s, _ = srv.accept()
        with s:
            s.recv(65536)
            for part in parts:  # the whole answer takes ~3x the timeout, each part 1/5 of it
                s.sendall(part)
                time.sleep(0.1)

    assert len(parts) >= 15
    url, _t = raw_server(serve)
    async with AsyncClient(url, retries=0, timeout=0.5) as c:
        assert (await c.health()).status == "ok"


def test_a_request_that_ends_on_a_loop_the_pool_left_does_not_pool_its_socket(
    scripted: Start,
) -> None:
    first, release = threading.Event(), threading.Event()

    def script(n: int, line: str) -> list[bytes | Callable[[], object]]:
        if n == 0:
            first.set()
            return [lambda: release.wait(5), response(HEALTH)]
        return [response(HEALTH)]

    url, seen = scripted(script)
    with contextlib.ExitStack() as stack:
        c = AsyncClient(url, retries=0, timeout=5)
        loop1, loop2 = asyncio.new_event_loop(), asyncio.new_event_loop()
        stack.callback(loop1.close)
        stack.callback(loop2.close)
        slow = loop1.create_task(c.health())
        loop1.run_until_complete(asyncio.to_thread(first.wait, 5))  # in flight on loop 1
        assert loop2.run_until_complete(c.health()).status == "ok"  # the pool moves to loop 2
        release.set()
        assert loop1.run_until_complete(slow).status == "ok"
        assert c._h1 is not None and all(k.loop is loop2 for k, _ in c._h1._idle)
        assert loop2.run_until_complete(c.health()).status == "ok"
        loop2.run_until_complete(c.close())
        loop1.run_until_complete(asyncio.sleep(0))
    assert len(seen.requests) == 3


async def test_a_closed_client_refuses_requests(scripted: Start) -> None:
    url, _seen = scripted(lambda n, line: response(HEALTH))
    c = AsyncClient(url)
    await c.health()
    assert c._h1 is not None
    idle = c._h1._idle[0][0]
    await c.close()
    assert idle.transport is not None and idle.transport.is_closing()
    with pytest.raises(RuntimeError, match="closed"):
        await c.health()


async def test_close_ends_a_request_in_flight(scripted: Start) -> None:
    started, release = threading.Event(), threading.Event()

    def script(n: int, line: str) -> list[bytes | Callable[[], object]]:
        started.set()
        return [lambda: release.wait(5), response(HEALTH)]

    url, _seen = scripted(script)
    c = AsyncClient(url, timeout=10, retries=3, sleep=no_sleep)
    call = asyncio.ensure_future(c.health())
    try:
        assert await asyncio.to_thread(started.wait, 5)
        await c.close()
        with pytest.raises(RuntimeError, match="closed"):
            await asyncio.wait_for(call, 5)  # retried (idempotent) into a closed client
    finally:
        release.set()


async def test_a_cancelled_request_does_not_leave_its_connection_pooled(scripted: Start) -> None:
    started, release = threading.Event(), threading.Event()

    def script(n: int, line: str) -> list[bytes | Callable[[], object]]:
        if n == 0:
            started.set()
            return [
                lambda: release.wait(5),
                response(b'{"status":"late","version":"x","uptime_ms":1}'),
            ]
        return [response(HEALTH)]

    url, seen = scripted(script)
    try:
        async with AsyncClient(url, timeout=10) as c:
            call = asyncio.ensure_future(c.health())
            assert await asyncio.to_thread(started.wait, 5)
            call.cancel()
            with pytest.raises(asyncio.CancelledError):
                await call
            release.set()
            assert (await c.health()).status == "ok"
    finally:
        release.set()
    assert seen.connections == 2


async def test_the_idle_list_is_capped_and_expires(scripted: Start) -> None:
    url, _seen = scripted(lambda n, line: response(HEALTH))
    now = [0.0]
    pool = _h1_aio.AsyncH1Pool(url, {}, clock=lambda: now[0])
    conns = [await pool._take(2.0) for _ in range(_h1.MAX_IDLE + 5)]
    for conn in conns:
        pool._give_back(conn, True)
    assert len(pool._idle) == _h1.MAX_IDLE
    assert all(c.transport is not None and c.transport.is_closing() for c in conns[:5])
    now[0] = _h1.IDLE_EXPIRY_S + 1
    assert (await pool.send("GET", "/v0/health", None, None, None, 2.0)).status_code == 200
    assert len(pool._idle) == 1  # the expired ones closed, the fresh one kept
    assert all(c.transport is not None and c.transport.is_closing() for c in conns)
    await pool.close()


async def test_a_reset_while_waiting_is_a_network_error_retried_only_if_idempotent() -> None:
    received = [0]

    def serve(srv: socket.socket) -> None:
        while True:
            s, _ = srv.accept()
            s.recv(65536)
            received[0] += 1
            s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            s.close()  # RST

    url, _t = raw_server(serve)
    async with AsyncClient(url, retries=2, sleep=no_sleep, timeout=2) as c:
        with pytest.raises(SeglogConnectionError) as e:
            await c.append("t", [{"data": 1}], idempotency_key="k")  # may be resent
        assert not isinstance(e.value, SeglogTimeoutError)
        assert received[0] == 3
        with pytest.raises(SeglogConnectionError):
            await c.append("t", [{"data": 1}])  # no key: sent once
        assert received[0] == 4


async def test_an_early_answer_is_reported_rather_than_the_broken_pipe() -> None:
    err = b'{"error":{"code":"payload_too_large","message":"too big"}}'

    def serve(srv: socket.socket) -> None:
        s, _ = srv.accept()
        with s:
            s.recv(65536)
            s.sendall(response(err, "413 Payload Too Large", "Connection: close\r\n"))
            s.shutdown(socket.SHUT_WR)
            time.sleep(0.2)  # then close with the body unread: the client's write fails

    url, _t = raw_server(serve)
    async with AsyncClient(url, retries=0, timeout=2) as c:
        with pytest.raises(PayloadTooLarge):
            await c.append("t", [{"data": "x" * 1000}] * 20000)


async def test_an_idle_connection_the_server_closed_is_not_written_to() -> None:
    requests: list[bytes] = []
    closed = threading.Event()

    def serve(srv: socket.socket) -> None:
        s, _ = srv.accept()
        requests.append(s.recv(65536))
        s.sendall(response(HEALTH))  # keep-alive, then an idle close (FIN)
        s.close()
        closed.set()
        s, _ = srv.accept()
        requests.append(s.recv(65536))
        s.sendall(response(APPENDED))
        s.close()

    url, _t = raw_server(serve)
    async with AsyncClient(url, retries=3, timeout=2) as c:
        await c.health()
        assert await asyncio.to_thread(closed.wait, 5)
        assert c._h1 is not None
        idle = c._h1._idle[0][0]
        for _ in range(200):  # until the loop has seen the FIN
            if not idle.idle_ok:
                break
            await asyncio.sleep(0.01)
        assert (await c.append("t", [{"data": 1}])).last_seq == 1  # no key: a fresh socket
    assert len(requests) == 2


async def test_interim_responses_are_skipped(scripted: Start) -> None:
    early = b"HTTP/1.1 103 Early Hints\r\nLink: </x>\r\n\r\n"
    url, seen = scripted(lambda n, line: early + response(HEALTH))
    async with AsyncClient(url, retries=0, timeout=2) as c:
        assert (await c.health()).status == "ok"
        assert (await c.health()).status == "ok"
    assert seen.connections == 1


async def test_a_non_ascii_response_header_is_kept(scripted: Start) -> None:
    answer = (
        b"HTTP/1.1 200 OK\r\nX-Note: caf\xe9\r\nContent-Length: "
        + str(len(HEALTH)).encode()
        + b"\r\n\r\n"
        + HEALTH
    )
    url, _seen = scripted(lambda n, line: answer)
    async with AsyncClient(url, timeout=2) as c:
        assert (await c.health()).status == "ok"


@pytest.mark.parametrize("key", ["a\r\nX-Evil: 1", "a\x00b"])
async def test_a_header_that_cannot_be_sent_is_a_local_error_sent_nowhere(
    scripted: Start, key: str
) -> None:
    url, seen = scripted(lambda n, line: response(HEALTH))
    async with AsyncClient(url, api_key=key, retries=3, timeout=2) as c:
        with pytest.raises(SeglogConnectionError, match="LocalProtocolError"):
            await c.health()
    assert seen.requests == []


async def test_a_request_header_replaces_the_default_of_the_same_name(scripted: Start) -> None:
    url, seen = scripted(lambda n, line: response(b"# metrics\n"))
    async with AsyncClient(url, timeout=2) as c:
        await c.metrics()
    assert seen.requests[0][1]["accept"] == "text/plain"


@pytest.mark.parametrize("run", [asyncio.run, uvloop.run], ids=["asyncio", "uvloop"])
def test_a_client_used_from_a_second_event_loop_opens_new_connections(
    scripted: Start, run: Callable[[Coroutine[Any, Any, Any]], Any]
) -> None:
    url, seen = scripted(lambda n, line: response(HEALTH))
    c = AsyncClient(url)

    async def twice() -> str:
        await c.health()  # the second request reuses (and asks the socket of) the first's
        return (await c.health()).status

    assert run(twice()) == "ok"
    assert run(twice()) == "ok"  # the first loop's socket is not used
    run(c.close())
    assert seen.connections == 2


async def test_a_compressed_answer_from_a_proxy_is_decoded(scripted: Start) -> None:
    packed = gzip.compress(HEALTH)
    url, seen = scripted(lambda n, line: response(packed, extra="Content-Encoding: gzip\r\n"))
    async with AsyncClient(url, retries=0, timeout=2) as c:
        assert (await c.health()).status == "ok"
    assert seen.requests[0][1]["accept-encoding"] == "identity"


async def test_a_pool_closed_while_connecting_refuses_the_request(scripted: Start) -> None:
    url, _seen = scripted(lambda n, line: response(HEALTH))
    pool = _h1_aio.AsyncH1Pool(url, {})
    opened: list[Any] = []
    connect = pool._connect

    async def closing_connect(loop: asyncio.AbstractEventLoop, timeout: float) -> Any:
        conn = await connect(loop, timeout)
        opened.append(conn)
        await pool.close()  # the client is closed meanwhile
        return conn

    pool._connect = closing_connect  # type: ignore[method-assign]
    with pytest.raises(RuntimeError, match="closed"):
        await pool.send("GET", "/v0/health", None, None, None, 2.0)
    assert len(opened) == 1 and opened[0].transport.is_closing()
