"""Black-box: hand-made bad requests never answer 5xx (issue 9), and the HTTP server's own
rejections keep the statuses docs/http-errors.md documents.

Some requests here are ones httpx refuses to send (broken chunking, NUL bytes, a body cut
short); they go over a raw socket."""

from __future__ import annotations

import socket
from collections.abc import Callable, Iterator

import httpx
import orjson
import pytest

from tests.http.live import JSON, error_of, ok, put_topic, write
from tests.support.server import ServerProcess

Names = Callable[[str], str]
DEPTH = 1020  # above Python's recursion limit, below orjson's 1024 levels


@pytest.fixture(autouse=True)
def no_internal_error_logged(server: ServerProcess) -> Iterator[None]:
    """Every test here sends bad input: none of it may reach a 500 (which logs a traceback)."""
    yield
    log = server.log_text()
    assert "500 internal error" not in log and "Traceback" not in log, log[-3000:]


def nested(inner: bytes, depth: int = DEPTH) -> bytes:
    return b"[" * depth + inner + b"]" * depth


# --------------------------------------------------------------------------- raw socket


class Raw:
    """A response read to EOF off a raw socket; `status` 0 means no response at all."""

    def __init__(self, data: bytes) -> None:
        head, _, self.body = data.partition(b"\r\n\r\n")
        lines = head.decode("latin-1").split("\r\n")
        self.status = int(lines[0].split()[1]) if data else 0
        self.headers = {}
        for line in lines[1:]:
            k, _, v = line.partition(":")
            self.headers[k.strip().lower()] = v.strip()

    def __repr__(self) -> str:
        return f"Raw({self.status}, {self.headers}, {self.body[:300]!r})"

    def error_code(self) -> str:
        assert self.headers.get("content-type", "").startswith("application/json"), self
        body = orjson.loads(self.body)
        assert set(body) == {"error"} and body["error"]["message"], self
        assert set(body["error"]) <= {"code", "message", "detail"}, self
        return str(body["error"]["code"])


def exchange(address: str, payload: bytes, *, half_close: bool = False) -> Raw:
    """Send `payload`, optionally shut our side down (`SHUT_WR`), read until EOF."""
    host, _, port = address.rpartition(":")
    with socket.create_connection((host.strip("[]"), int(port)), timeout=15) as s:
        try:
            s.sendall(payload)
            if half_close:
                s.shutdown(socket.SHUT_WR)
        except OSError:  # the server may answer and close before a huge request is sent
            pass
        chunks: list[bytes] = []
        while True:
            try:
                chunk = s.recv(65536)
            except ConnectionResetError:
                break
            if not chunk:
                break
            chunks.append(chunk)
    return Raw(b"".join(chunks))


def request(head: bytes, body: bytes = b"") -> bytes:
    return head + b"\r\nHost: seglog.test\r\nConnection: close\r\n\r\n" + body


# --------------------------------------------------------------------------- JSON


def test_out_of_range_integer_nested_deep_is_400(client: httpx.Client, topic: str) -> None:
    put_topic(client, topic)
    deep = b'{"records":[{"data":1}],"x":' + nested(b"18446744073709551616") + b"}"
    r = client.post(f"/v0/topics/{topic}", content=deep, headers=JSON)
    error_of(r, 400, "invalid_request", message_prefix="malformed JSON body:")
    assert ok(client.get(f"/v0/topics/{topic}"))["head_seq"] == 0  # nothing was appended


def test_deep_document_with_long_in_range_integer_still_works(
    client: httpx.Client, topic: str
) -> None:
    put_topic(client, topic)
    deep = b'{"records":[{"data":1}],"x":' + nested(b"18446744073709551615") + b"}"
    r = client.post(f"/v0/topics/{topic}", content=deep, headers=JSON)
    assert ok(r)["head_seq"] == 1  # the unknown deep field is ignored, the write lands
    body = b'{"from_seq":0,"x":' + nested(b"-9223372036854775808") + b"}"
    r = client.post(f"/v0/topics/{topic}/diff", content=body, headers=JSON)
    assert [rec["data"] for rec in ok(r)["records"]] == [1]


def test_nesting_beyond_the_parser_limit_is_400(client: httpx.Client, topic: str) -> None:
    body = b'{"x":' + nested(b"18446744073709551616", 2000) + b"}"
    r = client.post(f"/v0/topics/{topic}/diff", content=body, headers=JSON)
    error_of(r, 400, "invalid_request", message_prefix="malformed JSON body:")


# --------------------------------------------------------------------------- page_size


def test_page_size_with_thousands_of_digits_clamps(client: httpx.Client, tname: Names) -> None:
    prefix = tname("p")
    for suffix in ("a", "b"):
        put_topic(client, f"{prefix}-{suffix}")
    big = ok(client.get("/v0/topics", params={"prefix": prefix, "page_size": "9" * 4301}))
    assert len(big["topics"]) == 2 and "next_cursor" not in big  # clamped to 1000
    small = ok(client.get("/v0/topics", params={"prefix": prefix, "page_size": "-" + "9" * 5000}))
    assert len(small["topics"]) == 1 and "next_cursor" in small  # clamped to 1


# --------------------------------------------------------------------------- config nulls


def test_durability_null_is_400_on_put_and_on_creating_write(
    client: httpx.Client, topic: str
) -> None:
    r = client.put(f"/v0/topics/{topic}", json={"durability": None})
    error_of(r, 400, "invalid_request", message_prefix="malformed JSON body:")
    r = client.post(
        f"/v0/topics/{topic}", json={"records": [{"data": 1}], "config": {"durability": None}}
    )
    error_of(r, 400, "invalid_request", message_prefix="malformed JSON body:")
    error_of(client.get(f"/v0/topics/{topic}"), 404, "topic_not_found")
    created = put_topic(client, topic, {"durable": True})  # absent still resolves from `durable`
    assert created["config"]["durability"] == "fsync"


# --------------------------------------------------------------------------- broken bodies


def test_malformed_chunked_body_is_400(server: ServerProcess, topic: str) -> None:
    head = (
        f"POST /v0/topics/{topic} HTTP/1.1\r\nContent-Type: application/json\r\n"
        "Transfer-Encoding: chunked"
    ).encode()
    r = exchange(server.address, request(head, b"zz\r\n{}\r\n0\r\n\r\n"))
    assert r.status == 400, r
    assert r.error_code() == "invalid_request"


@pytest.mark.parametrize("route", ["", "/diff", "/delete"])
def test_body_cut_short_by_the_client_is_never_500(
    server: ServerProcess, client: httpx.Client, topic: str, route: str
) -> None:
    put_topic(client, topic)
    head = (
        f"POST /v0/topics/{topic}{route} HTTP/1.1\r\nContent-Type: application/json\r\n"
        "Content-Length: 100"
    ).encode()
    r = exchange(server.address, request(head, b'{"records"'), half_close=True)
    # Either answered as bad input or dropped; the server must stay healthy either way.
    assert r.status in (0, 400), r
    if r.status == 400:
        assert r.error_code() == "invalid_request"
    assert write(client, topic, [{"data": 1}])["head_seq"] == 1


# --------------------------------------------------------------------------- server rejections

# Refused by granian before the application sees the request: the status is pinned, and
# so is the empty body docs/http-errors.md documents (update both together).
REJECTED = [
    ("nul-in-path", request(b"GET /v0/topics/a\x00b HTTP/1.1"), 400),
    ("ff-in-path", request(b"GET /v0/topics/a\xffb HTTP/1.1"), 400),
    ("lone-0x80-in-path", request(b"GET /v0/topics/a\x80b HTTP/1.1"), 400),
    ("ff-in-query", request(b"GET /v0/topics?prefix=\xff HTTP/1.1"), 400),
    ("control-char-in-path", request(b"GET /v0/topics/a\x01b HTTP/1.1"), 400),
    ("space-in-path", request(b"GET /v0/topics/a b HTTP/1.1"), 400),
    ("unknown-http-version", request(b"GET /v0/health HTTP/1.2"), 400),
    ("garbage-request-line", b"GARBAGE\r\n\r\n", 400),
    ("nul-in-header", request(b"GET /v0/health HTTP/1.1\r\nX-A: a\x00b"), 400),
    ("del-in-header", request(b"GET /v0/health HTTP/1.1\r\nX-A: a\x7fb"), 400),
    ("content-length-letters", request(b"PUT /v0/topics/x HTTP/1.1\r\nContent-Length: ab"), 400),
    ("content-length-negative", request(b"PUT /v0/topics/x HTTP/1.1\r\nContent-Length: -1"), 400),
    (
        "content-length-plus",
        request(b"PUT /v0/topics/x HTTP/1.1\r\nContent-Length: +2", b"{}"),
        400,
    ),
    (
        "content-length-superscript",
        request(b"PUT /v0/topics/x HTTP/1.1\r\nContent-Length: \xb2", b"{}"),
        400,
    ),
    (
        "content-length-5000-digits",
        request(b"PUT /v0/topics/x HTTP/1.1\r\nContent-Length: " + b"1" * 5000),
        400,
    ),
    (
        "content-length-conflicting",
        request(b"PUT /v0/topics/x HTTP/1.1\r\nContent-Length: 2\r\nContent-Length: 3", b"{}"),
        400,
    ),
    ("uri-too-long", request(b"GET /v0/topics/" + b"a" * 70_000 + b" HTTP/1.1"), 414),
    ("header-too-large", request(b"GET /v0/health HTTP/1.1\r\nX-Big: " + b"a" * 1_000_000), 431),
    (
        "too-many-headers",
        request(b"GET /v0/health HTTP/1.1\r\n" + b"\r\n".join(b"X-H%d: v" % i for i in range(150))),
        431,
    ),
]


@pytest.mark.parametrize(
    ("payload", "status"), [(p, s) for _, p, s in REJECTED], ids=[n for n, _, _ in REJECTED]
)
def test_server_rejection_status_and_empty_body(
    server: ServerProcess, payload: bytes, status: int
) -> None:
    r = exchange(server.address, payload)
    assert r.status == status, r
    assert r.body == b"" and r.headers.get("content-length") == "0", r


def test_limits_just_inside_are_served(server: ServerProcess) -> None:
    """The documented limits are limits, not accidents: just under them the app answers."""
    r = exchange(server.address, request(b"GET /v0/topics/" + b"a" * 60_000 + b" HTTP/1.1"))
    assert r.status == 404 and r.error_code() == "topic_not_found", r
    many = b"\r\n".join(b"X-H%d: v" % i for i in range(90))
    r = exchange(server.address, request(b"GET /v0/health HTTP/1.1\r\n" + many))
    assert r.status == 200, r
    r = exchange(server.address, request(b"GET /v0/health HTTP/1.1\r\nX-Big: " + b"a" * 300_000))
    assert r.status == 200, r
