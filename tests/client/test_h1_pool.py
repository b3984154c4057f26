"""The sync client's lean HTTP/1.1 path (`seglog.client._h1`) against a scripted server on
a real socket: what goes on the wire, connection reuse, and how each kind of failure comes
back (the httpx error the retry policy already handles, sent at most once per attempt)."""

from __future__ import annotations

import gzip
import select
import socket
import struct
import threading
import time
import urllib.request
from collections.abc import Callable

import httpx
import orjson
import pytest

from seglog.client import (
    Client,
    PayloadTooLarge,
    SeglogConnectionError,
    SeglogTimeoutError,
    _base,
    _h1,
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


@pytest.fixture(autouse=True)
def _no_proxies(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(urllib.request, "getproxies", lambda: {})


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


def test_an_answer_that_closes_its_connection_is_not_pooled(scripted: Start) -> None:
    # Every answer says the server closes after it: the next request opens a new one.
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
        assert c._h1 is not None
        idle = c._h1._idle[0][0].sock
        assert idle is not None and _h1.readable(idle)
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


@pytest.mark.parametrize("answer", MALFORMED_ANSWERS, ids=MALFORMED_IDS)
def test_a_malformed_answer_is_a_protocol_failure(scripted: Start, answer: bytes) -> None:
    url, _seen = scripted(lambda n, line: answer)
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


def test_a_long_poll_gets_its_wait_added_to_the_timeout(scripted: Start) -> None:
    answer = threading.Event()
    url, _seen = scripted(lambda n, line: [lambda: answer.wait(0.5), response(DIFF)])
    with Client(url, timeout=0.2, retries=0) as c:
        c.diff("t", 0, wait_ms=2000)  # answered after 0.5 s: inside 0.2 s + the wait


def test_a_reused_socket_gets_the_new_requests_timeout(scripted: Start) -> None:
    hold = threading.Event()

    def script(n: int, line: str) -> list[bytes | Callable[[], object]]:
        if n == 0:
            return [response(DIFF)]
        return [lambda: hold.wait(5), response(HEALTH)]

    url, seen = scripted(script)
    try:
        with Client(url, timeout=0.2, retries=0) as c:
            c.diff("t", 0, wait_ms=5000)  # the socket's timeout was 5.2 s for this one
            with pytest.raises(SeglogTimeoutError):
                c.health()  # 0.2 s again, not 5.2 s (hold.wait(5) would outlast it)
    finally:
        hold.set()
    assert seen.connections == 1


def test_a_timed_out_connection_is_never_reused(scripted: Start) -> None:
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
        with Client(url, timeout=0.2, retries=0) as c:
            with pytest.raises(SeglogTimeoutError):
                c.health()
            late.set()
            assert c.health().status == "ok"  # never the late answer to the first request
    finally:
        late.set()
    assert seen.connections == 2


def test_close_closes_idle_connections(scripted: Start) -> None:
    url, _seen = scripted(lambda n, line: response(HEALTH))
    c = Client(url)
    c.health()
    assert c._h1 is not None
    idle = c._h1._idle[0][0]
    c.close()
    assert idle.sock is None


def test_close_ends_a_request_in_flight(scripted: Start) -> None:
    started, release = threading.Event(), threading.Event()

    def script(n: int, line: str) -> list[bytes | Callable[[], object]]:
        started.set()
        return [lambda: release.wait(5), response(HEALTH)]

    url, _seen = scripted(script)
    c = Client(url, timeout=10, retries=3, sleep=lambda _s: None)
    failed: list[BaseException] = []

    def call() -> None:
        try:
            c.health()
        except BaseException as e:
            failed.append(e)

    t = threading.Thread(target=call)
    t.start()
    try:
        assert started.wait(5)
        c.close()
        t.join(5)
    finally:
        release.set()
    assert not t.is_alive()
    # the dropped connection is retried (a health check is idempotent) into a closed client
    assert len(failed) == 1 and "closed" in str(failed[0])


def test_the_idle_list_is_capped_and_expires(scripted: Start) -> None:
    url, _seen = scripted(lambda n, line: response(HEALTH))
    now = [0.0]
    pool = _h1.H1Pool(url, {}, clock=lambda: now[0])
    conns = [pool._take(2.0) for _ in range(_h1.MAX_IDLE + 5)]
    for conn in conns:
        pool._give_back(conn, True)
    assert len(pool._idle) == _h1.MAX_IDLE
    assert all(c.sock is None for c in conns[:5])  # the oldest were closed
    now[0] = _h1.IDLE_EXPIRY_S + 1
    assert pool.send("GET", "/v0/health", None, None, None, 2.0).status_code == 200
    assert len(pool._idle) == 1  # the expired ones closed, the fresh one kept
    assert all(c.sock is None for c in conns)
    pool.close()


def test_a_reset_while_waiting_is_a_network_error_retried_only_if_idempotent() -> None:
    received = [0]

    def serve(srv: socket.socket) -> None:
        while True:
            s, _ = srv.accept()
            s.recv(65536)
            received[0] += 1
            s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            s.close()  # RST

    url, _t = raw_server(serve)
    with Client(url, retries=2, sleep=lambda _s: None, timeout=2) as c:
        with pytest.raises(SeglogConnectionError) as e:
            c.append("t", [{"data": 1}], idempotency_key="k")  # may be resent
        assert not isinstance(e.value, SeglogTimeoutError)
        assert received[0] == 3
        with pytest.raises(SeglogConnectionError):
            c.append("t", [{"data": 1}])  # no key: sent once
        assert received[0] == 4


def test_an_early_answer_is_reported_rather_than_the_broken_pipe() -> None:
    # A server refusing a body over its limit answers from the declared length and
    # closes without reading it: the caller must see the 413, not the failed write.
    err = b'{"error":{"code":"payload_too_large","message":"too big"}}'

    def serve(srv: socket.socket) -> None:
        s, _ = srv.accept()
        with s:
            s.recv(65536)
            s.sendall(response(err, "413 Payload Too Large", "Connection: close\r\n"))
            s.shutdown(socket.SHUT_WR)
            time.sleep(0.2)  # then close with the body unread: the client's write fails

    url, _t = raw_server(serve)
    with Client(url, retries=0, timeout=2) as c, pytest.raises(PayloadTooLarge):
        c.append("t", [{"data": "x" * 1000}] * 20000)


def test_an_idle_connection_the_server_closed_is_not_written_to() -> None:
    appended = {"topic": "t", "first_seq": 1, "last_seq": 1, "seqs": [1], "head_seq": 1,
                "count": 1, "created": False, "deduped": False,
                "performance": {"server_total_ms": 0.1}}  # fmt: skip
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
        s.sendall(response(orjson.dumps(appended)))
        s.close()

    url, _t = raw_server(serve)
    with Client(url, retries=3, timeout=2) as c:
        c.health()
        assert closed.wait(5)
        assert c._h1 is not None
        sock = c._h1._idle[0][0].sock
        assert sock is not None
        select.select([sock], [], [], 2)  # the FIN has arrived
        assert c.append("t", [{"data": 1}]).last_seq == 1  # no key: on a fresh connection
    assert len(requests) == 2


def test_interim_responses_are_skipped(scripted: Start) -> None:
    early = b"HTTP/1.1 103 Early Hints\r\nLink: </x>\r\n\r\n"
    url, seen = scripted(lambda n, line: early + response(HEALTH))
    with Client(url, retries=0, timeout=2) as c:
        assert c.health().status == "ok"
        assert c.health().status == "ok"
    assert seen.connections == 1


def test_a_non_ascii_response_header_is_kept(scripted: Start) -> None:
    answer = (
        b"HTTP/1.1 200 OK\r\nX-Note: caf\xe9\r\nContent-Length: "
        + str(len(HEALTH)).encode()
        + b"\r\n\r\n"
        + HEALTH
    )
    url, _seen = scripted(lambda n, line: answer)
    with Client(url, timeout=2) as c:
        assert c.health().status == "ok"


def test_a_header_that_cannot_be_sent_is_a_local_error_sent_nowhere(scripted: Start) -> None:
    url, seen = scripted(lambda n, line: response(HEALTH))
    c = Client(url, api_key="a\r\nX-Evil: 1", retries=3, timeout=2)
    with c, pytest.raises(SeglogConnectionError, match="LocalProtocolError"):
        c.health()
    assert seen.requests == []


def test_a_request_header_replaces_the_default_of_the_same_name(scripted: Start) -> None:
    url, seen = scripted(lambda n, line: response(b"# metrics\n", extra=""))
    with Client(url, timeout=2) as c:
        c.metrics()
    assert seen.requests[0][1]["accept"] == "text/plain"


def test_credentials_in_the_url_stay_with_httpx() -> None:
    assert not _h1.usable("http://user:pw@h:1", http2=False, has_transport=False)
    assert not _h1.usable("http://h:1/?x=1", http2=False, has_transport=False)


def test_a_large_body_arrives_whole_and_a_cut_one_is_an_error() -> None:
    big = b"x" * (4 * 1024 * 1024 + 17)
    cut = threading.Event()

    def serve(srv: socket.socket) -> None:
        s, _ = srv.accept()
        with s:  # two requests on one kept-alive connection, each answered whole
            for _ in range(2):
                s.recv(65536)
                s.sendall(response(big))
            s.recv(65536)  # the client's close
        s, _ = srv.accept()
        with s:  # then an answer cut 1,000 bytes short by the close
            s.recv(65536)
            s.sendall(response(big)[:-1000])
            cut.set()

    url, _t = raw_server(serve)
    pool = _h1.H1Pool(url, {})
    try:
        for _ in range(2):
            r = pool.send("GET", "/big", None, None, None, 5.0)
            assert r.status_code == 200 and r.content == big
        pool.close()
        pool = _h1.H1Pool(url, {})
        with pytest.raises(httpx.RemoteProtocolError, match="disconnected"):
            pool.send("GET", "/big", None, None, None, 5.0)
        assert cut.is_set()
    finally:
        pool.close()


def test_a_compressed_answer_from_a_proxy_is_decoded(scripted: Start) -> None:
    packed = gzip.compress(HEALTH)
    url, seen = scripted(lambda n, line: response(packed, extra="Content-Encoding: gzip\r\n"))
    with Client(url, retries=0, timeout=2) as c:
        assert c.health().status == "ok"
    assert seen.requests[0][1]["accept-encoding"] == "identity"


@pytest.mark.parametrize("declared", [64 * 1024 * 1024, 10**15])
def test_a_declared_length_that_never_arrives_is_a_disconnect(declared: int) -> None:
    # Not a MemoryError: a length beyond BODY_MAX_BYTES is read as its bytes arrive.
    def serve(srv: socket.socket) -> None:
        s, _ = srv.accept()
        with s:
            s.recv(65536)
            s.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n" % declared + b"x" * 10)

    url, _t = raw_server(serve)
    pool = _h1.H1Pool(url, {})
    try:
        with pytest.raises(httpx.RemoteProtocolError, match="disconnected"):
            pool.send("GET", "/", None, None, None, 5.0)
    finally:
        pool.close()


def test_bytes_after_the_answer_in_the_same_segment_spoil_the_connection(
    scripted: Start,
) -> None:
    stray = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nno"
    url, seen = scripted(lambda n, line: response(HEALTH) + (stray if n == 0 else b""))
    with Client(url, retries=0, timeout=2) as c:
        assert c.health().status == "ok"
        assert c._h1 is not None and c._h1._idle == []  # not pooled
        assert c.health().status == "ok"  # never the stray answer
    assert seen.connections == 2


def test_a_pool_closed_while_connecting_refuses_the_request(scripted: Start) -> None:
    url, _seen = scripted(lambda n, line: response(HEALTH))
    pool = _h1.H1Pool(url, {})
    opened: list[object] = []
    connect = pool._connect

    def closing_connect(timeout: float) -> object:
        conn = connect(timeout)
        opened.append(conn)
        pool.close()  # another thread closes the client meanwhile
        return conn

    pool._connect = closing_connect  # type: ignore[method-assign,assignment]
    with pytest.raises(RuntimeError, match="closed"):
        pool.send("GET", "/v0/health", None, None, None, 2.0)
    assert [getattr(c, "sock", 0) for c in opened] == [None]  # its socket closed too


def test_a_large_body_grows_with_what_arrives() -> None:
    sizes: list[int] = []
    real = _h1._recv_body

    def spy(sock: socket.socket, buf: bytearray, missing: int) -> bytearray:
        body = real(sock, buf, missing)
        sizes.append(len(body))
        return body

    big = bytes(range(256)) * (3 * 1024 * 1024 // 256 + 7)

    def serve(srv: socket.socket) -> None:
        s, _ = srv.accept()
        with s:
            s.recv(65536)
            s.sendall(response(big))
            s.recv(65536)

    url, _t = raw_server(serve)
    pool = _h1.H1Pool(url, {})
    try:
        with pytest.MonkeyPatch.context() as m:
            m.setattr(_h1, "_recv_body", spy)
            assert pool.send("GET", "/", None, None, None, 5.0).content == big
        assert sizes == [len(big)]
    finally:
        pool.close()


def test_a_large_body_that_stalls_is_a_read_timeout_and_the_socket_dropped() -> None:
    release = threading.Event()

    def serve(srv: socket.socket) -> None:
        s, _ = srv.accept()
        with s:
            s.recv(65536)
            head = b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n" % (2 * 1024 * 1024)
            s.sendall(head + b"x" * (300 * 1024))  # then nothing more
            release.wait(5)

    url, _t = raw_server(serve)
    pool = _h1.H1Pool(url, {})
    try:
        with pytest.raises(httpx.ReadTimeout):
            pool.send("GET", "/", None, None, None, 0.3)
        assert pool._idle == []  # a connection whose answer timed out is never reused
    finally:
        release.set()
        pool.close()
