"""Black-box: the multiplexed SSE watch (API §7; SEMANTICS §4.4, §6, §9) — session create,
stream open, frame encoding, the composite cursor and resume, tombstones, node filtering,
topic deletion, slow consumers, caps, shutdown, and SSE over h2c.

The stream is read off a raw socket (`SseConn`): exact bytes, socket-level timeouts, an
abrupt close (RST) for forced disconnects, and a tiny receive buffer for a consumer that
never reads. `SseParser` turns body bytes into frames for both it and the h2c test.
"""

from __future__ import annotations

import base64
import random
import re
import signal
import socket
import struct
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import httpx
import orjson
import pytest

from tests.http.conftest import ServerFactory
from tests.http.live import JSON, describe, diff, error_of, ok, put_topic, write
from tests.support.server import ServerProcess

Names = Callable[[str], str]

WID_RE = re.compile(r"^wid_[A-Za-z0-9_-]{22}$")
CREATE_KEYS = ["wid", "stream_url", "session_ttl_ms", "topics", "performance"]
SHUTDOWN_DATA = {"code": "server_shutting_down", "message": "server is shutting down; reconnect"}
STREAM_TIMEOUT_S = 10.0

# --------------------------------------------------------------------------- SSE helpers


@dataclass
class Frame:
    """One SSE block (everything up to a blank line), as sent."""

    raw: bytes
    id: str | None = None
    event: str | None = None
    data_text: str | None = None
    retry: int | None = None
    comments: list[str] = field(default_factory=list)

    @property
    def data(self) -> Any:
        assert self.data_text is not None, self.raw
        return orjson.loads(self.data_text)

    @property
    def topic(self) -> str:
        t = self.data["topic"]
        assert isinstance(t, str)
        return t


def parse_block(block: bytes) -> Frame:
    f = Frame(raw=block + b"\n\n")
    for line in block.split(b"\n"):
        text = line.decode("utf-8")
        if text.startswith(":"):
            f.comments.append(text[1:].strip())
            continue
        name, _, value = text.partition(":")
        value = value.removeprefix(" ")
        if name == "id":
            f.id = value
        elif name == "event":
            f.event = value
        elif name == "data":
            assert f.data_text is None, f"more than one data line: {block!r}"
            f.data_text = value
        elif name == "retry":
            f.retry = int(value)
        else:
            raise AssertionError(f"unknown SSE field line {line!r}")
    return f


class SseParser:
    def __init__(self) -> None:
        self._buf = b""

    def feed(self, data: bytes) -> list[Frame]:
        assert b"\r" not in data, f"SSE frames use \\n line endings: {data!r}"
        self._buf += data
        out: list[Frame] = []
        while b"\n\n" in self._buf:
            block, _, self._buf = self._buf.partition(b"\n\n")
            out.append(parse_block(block))
        return out

    @property
    def pending(self) -> bytes:
        return self._buf


class StreamEnded(AssertionError):
    pass


class SseConn:
    """`GET path` over a raw HTTP/1.1 socket. `status`/`headers` after the constructor; for a
    200 the body is decoded (chunked or close-delimited) and parsed into frames on demand."""

    def __init__(
        self,
        address: str,
        path: str,
        headers: Mapping[str, str] | None = None,
        *,
        accept: str | None = "text/event-stream",
        rcvbuf: int | None = None,
        read_head: bool = True,
    ) -> None:
        host, _, port = address.rpartition(":")
        s = socket.socket(socket.AF_INET6 if ":" in host.strip("[]") else socket.AF_INET)
        if rcvbuf is not None:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
        s.settimeout(STREAM_TIMEOUT_S)
        s.connect((host.strip("[]"), int(port)))
        self.sock = s
        lines = [f"GET {path} HTTP/1.1", f"Host: {address}"]
        if accept is not None:
            lines.append(f"Accept: {accept}".rstrip())
        lines += [f"{k}: {v}" for k, v in (headers or {}).items()]
        s.sendall(("\r\n".join(lines) + "\r\n\r\n").encode("latin-1"))
        self._raw = b""
        self._chunked = False
        self._chunk_left = 0  # bytes of the current chunk's payload still to come
        self._need_crlf = False  # the CRLF after a chunk's payload is still to come
        self._in_trailer = False
        self.ended = False
        self.parser = SseParser()
        self._frames: list[Frame] = []
        self.status = 0
        self.headers: dict[str, str] = {}
        self.body = b""
        if read_head:
            self.read_head()

    # ---- response head and non-200 bodies
    def read_head(self, timeout: float = STREAM_TIMEOUT_S) -> None:
        deadline = time.monotonic() + timeout
        while b"\r\n\r\n" not in self._raw:
            if not self._recv(deadline):
                raise StreamEnded(f"connection closed before the response head: {self._raw!r}")
        head, _, rest = self._raw.partition(b"\r\n\r\n")
        status_line, *header_lines = head.decode("latin-1").split("\r\n")
        assert status_line.startswith("HTTP/1.1 "), status_line
        self.status = int(status_line.split()[1])
        for line in header_lines:
            k, _, v = line.partition(":")
            self.headers[k.strip().lower()] = v.strip()
        self._raw = rest
        self._chunked = self.headers.get("transfer-encoding", "").lower() == "chunked"
        if self.status != 200:
            self.body = self._read_whole(deadline)

    def _read_whole(self, deadline: float) -> bytes:
        if "content-length" in self.headers:
            n = int(self.headers["content-length"])
            while len(self._raw) < n and self._recv(deadline):
                pass
            return self._raw[:n]
        out = b""
        while not self.ended:
            out += self._decode()
            if not self.ended and not self._recv(deadline):
                self.ended = True
        return out

    def json(self) -> Any:
        return orjson.loads(self.body)

    def error(self, status: int, code: str) -> dict[str, Any]:
        assert self.status == status, (self.status, self.body)
        assert self.headers.get("content-type", "").startswith("application/json")
        body = self.json()
        assert set(body) == {"error"} and body["error"]["code"] == code, body
        if status == 429:
            assert self.headers.get("retry-after") == "1", self.headers
        err = body["error"]
        assert isinstance(err, dict)
        return err

    # ---- body
    def _recv(self, deadline: float) -> bool:
        left = deadline - time.monotonic()
        if left <= 0:
            raise TimeoutError("SSE read deadline passed")
        self.sock.settimeout(left)
        try:
            data = self.sock.recv(65536)
        except ConnectionResetError:
            data = b""
        if not data:
            return False
        self._raw += data
        return True

    def _decode(self) -> bytes:
        """Body bytes decodable from `_raw` so far."""
        if not self._chunked:
            out, self._raw = self._raw, b""
            return out
        out = b""
        while True:
            if self._in_trailer:
                if b"\r\n" not in self._raw:
                    return out
                line, _, self._raw = self._raw.partition(b"\r\n")
                if not line:
                    self.ended = True
                    return out
                continue
            if self._chunk_left > 0:
                take = self._raw[: self._chunk_left]
                self._raw = self._raw[len(take) :]
                self._chunk_left -= len(take)
                out += take
                if self._chunk_left:
                    return out
                self._need_crlf = True
            if self._need_crlf:
                if len(self._raw) < 2:
                    return out
                assert self._raw[:2] == b"\r\n", self._raw[:20]
                self._raw = self._raw[2:]
                self._need_crlf = False
            if b"\r\n" not in self._raw:
                return out
            size_line, _, self._raw = self._raw.partition(b"\r\n")
            size = int(size_line.split(b";")[0], 16)
            if size == 0:
                self._in_trailer = True
            else:
                self._chunk_left = size

    def next_frame(self, timeout: float = STREAM_TIMEOUT_S) -> Frame | None:
        """The next frame, or None when the stream ended (after every complete frame)."""
        assert self.status == 200, (self.status, self.body)
        deadline = time.monotonic() + timeout
        while not self._frames:
            self._frames.extend(self.parser.feed(self._decode()))
            if self._frames:
                break
            if self.ended:
                return None
            if not self._recv(deadline):
                self._frames.extend(self.parser.feed(self._decode()))
                self.ended = True
                if not self._frames:
                    return None
        return self._frames.pop(0)

    def read_until(
        self, pred: Callable[[Frame], bool], timeout: float = STREAM_TIMEOUT_S
    ) -> list[Frame]:
        """Frames up to and including the first one satisfying `pred`."""
        deadline = time.monotonic() + timeout
        got: list[Frame] = []
        while True:
            left = deadline - time.monotonic()
            try:
                f = self.next_frame(max(left, 0.001))
            except TimeoutError:
                raise AssertionError(f"timed out; frames so far: {got!r}") from None
            if f is None:
                raise StreamEnded(f"stream ended; frames so far: {got!r}")
            got.append(f)
            if pred(f):
                return got

    def until_caught_up(
        self, heads: Mapping[str, int], timeout: float = STREAM_TIMEOUT_S
    ) -> list[Frame]:
        """Frames until every topic in `heads` sent `caught-up` at (at least) that head."""
        todo = dict(heads)

        def done(f: Frame) -> bool:
            if (
                f.event == "caught-up"
                and f.data["topic"] in todo
                and f.data["head_seq"] >= todo[f.data["topic"]]
            ):
                del todo[f.data["topic"]]
            return not todo

        if not todo:
            return []
        return self.read_until(done, timeout)

    def read_to_end(self, timeout: float = STREAM_TIMEOUT_S) -> list[Frame]:
        deadline = time.monotonic() + timeout
        got: list[Frame] = []
        while (f := self.next_frame(max(deadline - time.monotonic(), 0.001))) is not None:
            got.append(f)
        return got

    def abort(self) -> None:
        """Close with a RST (SO_LINGER 0): the harshest client disconnect."""
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        self.sock.close()

    def close(self) -> None:
        self.sock.close()

    def __enter__(self) -> SseConn:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def encode_id(cursors: Mapping[str, int]) -> str:
    raw = orjson.dumps(dict(sorted(cursors.items())))
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode("ascii")


def decode_id(value: str) -> dict[str, int]:
    assert "=" not in value and re.fullmatch(r"[A-Za-z0-9_-]+", value), value
    d = orjson.loads(base64.urlsafe_b64decode(value + "=" * (-len(value) % 4)))
    assert isinstance(d, dict)
    return d


def create_watch(
    c: httpx.Client, topics: Mapping[str, Mapping[str, Any]], **opts: Any
) -> dict[str, Any]:
    return ok(c.post("/v0/watch", json={"topics": dict(topics), **opts}))


def open_stream(
    srv: ServerProcess, wid: str, headers: Mapping[str, str] | None = None, **kw: Any
) -> SseConn:
    conn = SseConn(srv.address, f"/v0/watch/{wid}", headers, **kw)
    assert conn.status == 200, (conn.status, conn.body)
    first = conn.next_frame()
    assert first is not None and first.raw == b"retry: 2000\n\n", first
    return conn


def records_of(frames: list[Frame], topic: str | None = None) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for f in frames:
        if f.event == "record" and (topic is None or f.topic == topic):
            out.extend(f.data["records"])
    return out


def seqs(frames: list[Frame], topic: str | None = None) -> list[int]:
    return [r["$seq"] for r in records_of(frames, topic)]


class CursorModel:
    """The client's view of the composite cursor, checked against every frame's `id`."""

    def __init__(self, cursors: Mapping[str, int]) -> None:
        self.cursors = dict(cursors)

    def apply(self, f: Frame) -> None:
        if f.event is None:  # retry or heartbeat: no id
            assert f.id is None, f
            return
        d = f.data
        t = d.get("topic")
        if f.event == "record":
            # a read that only skipped records (own node) moves the cursor silently
            assert d["from_seq"] >= self.cursors[t], (f, self.cursors)
            assert d["from_seq"] < d["records"][0]["$seq"], f
            assert d["to_seq"] >= d["records"][-1]["$seq"], f
            self.cursors[t] = d["to_seq"]
        elif f.event == "tombstone":
            self.cursors[t] = d["gap_to"]
        elif f.event == "caught-up":
            self.cursors[t] = d["head_seq"]
        assert f.id is not None, f
        assert f.id == encode_id(self.cursors), (decode_id(f.id), self.cursors, f)


def check_frames(frames: list[Frame], model: CursorModel) -> None:
    for f in frames:
        model.apply(f)


# --------------------------------------------------------------------------- create


def test_create_response_shape_and_defaults(client: httpx.Client, tname: Names) -> None:
    a, b, e = tname("a"), tname("b"), tname("empty")
    write(client, a, [{"data": i} for i in range(5)])
    put_topic(client, b, {"cap_records": 3})
    write(client, b, [{"data": i} for i in range(7)])
    put_topic(client, e)
    body = create_watch(client, {a: {"from_seq": 2}, b: {"tail": True, "from_seq": 1}, e: {}})
    assert list(body) == CREATE_KEYS, body
    wid = body["wid"]
    assert WID_RE.match(wid) and len(wid) == 26, wid
    assert len(base64.urlsafe_b64decode(wid[4:] + "==")) == 16
    assert body["stream_url"] == f"/v0/watch/{wid}"
    assert body["session_ttl_ms"] == 300000
    assert body["topics"] == {
        a: {"from_seq": 2, "head_seq": 5, "earliest_seq": 1},
        b: {"from_seq": 7, "head_seq": 7, "earliest_seq": 5},
        e: {"from_seq": 0, "head_seq": 0, "earliest_seq": 1},
    }
    for entry in body["topics"].values():
        assert list(entry) == ["from_seq", "head_seq", "earliest_seq"]
    # a from_seq beyond the head is echoed as given
    again = create_watch(client, {a: {"from_seq": 99}})
    assert again["topics"] == {a: {"from_seq": 99, "head_seq": 5, "earliest_seq": 1}}
    assert again["wid"] != wid


def test_wids_are_unique(client: httpx.Client, topic: str) -> None:
    put_topic(client, topic)
    wids = {create_watch(client, {topic: {}})["wid"] for _ in range(20)}
    assert len(wids) == 20 and all(WID_RE.match(w) for w in wids)


def test_create_accepts_all_documented_fields(client: httpx.Client, topic: str) -> None:
    put_topic(client, topic)
    for consistency in ("eventual", "strong"):
        body = create_watch(
            client,
            {topic: {"from_seq": 0, "tail": False}},
            node=["n1", "n2"],
            limit=0,
            max_batch_bytes=0,
            heartbeat_ms=10**9,
            include_meta=False,
            include_tags=True,
            include_data=False,
            consistency=consistency,
            unknown_field={"ignored": True},
        )
        assert list(body["topics"]) == [topic]
    create_watch(client, {topic: {}}, node="solo", limit=5000, max_batch_bytes=10**12)


def test_create_accepts_256_topics(client: httpx.Client, topic: str) -> None:
    put_topic(client, topic)
    many: dict[str, dict[str, Any]] = {f"{topic}-nope-{i}": {} for i in range(255)}
    many[topic] = {}
    r = client.post("/v0/watch?lenient=true", json={"topics": many})
    assert list(ok(r)["topics"]) == [topic]


BAD_BODIES: list[Any] = [
    {},
    {"topics": {}},
    {"topics": None},
    {"topics": []},
    {"topics": ["x"]},
    {"topics": "x"},
    {"topics": {"x": 5}},
    {"topics": {"x": []}},
    {"topics": {"x": "tail"}},
    {"topics": {"x": {"from_seq": -1}}},
    {"topics": {"x": {"from_seq": "1"}}},
    {"topics": {"x": {"from_seq": 1.5}}},
    {"topics": {"x": {"from_seq": True}}},
    {"topics": {"x": {"from_seq": 2**64}}},
    {"topics": {"x": {"tail": "yes"}}},
    {"topics": {"x": {"tail": 1}}},
    {"topics": {"x": {}}, "limit": -1},
    {"topics": {"x": {}}, "limit": "10"},
    {"topics": {"x": {}}, "max_batch_bytes": -5},
    {"topics": {"x": {}}, "heartbeat_ms": True},
    {"topics": {"x": {}}, "include_meta": "no"},
    {"topics": {"x": {}}, "include_tags": 0},
    {"topics": {"x": {}}, "include_data": None},
    {"topics": {"x": {}}, "node": 5},
    {"topics": {"x": {}}, "node": [1]},
    {"topics": {"x": {}}, "node": {"a": "b"}},
    {"topics": {"x": {}}, "consistency": "bogus"},
    {"topics": {"x": {}}, "consistency": "Strong"},
    {"topics": {"x": {}}, "consistency": 1},
    {"topics": {"x": {}}, "consistency": None},
    [],
    "topics",
]


@pytest.mark.parametrize("body", BAD_BODIES, ids=lambda b: repr(b)[:60])
def test_create_bad_body_400(client: httpx.Client, body: Any) -> None:
    error_of(client.post("/v0/watch", json=body), 400, "invalid_request")


def test_create_too_many_topics_400(client: httpx.Client, topic: str) -> None:
    put_topic(client, topic)
    many: dict[str, dict[str, Any]] = {f"{topic}-{i}": {} for i in range(256)}
    many[topic] = {}
    assert len(many) == 257
    error_of(client.post("/v0/watch", json={"topics": many}), 400, "invalid_request")
    error_of(client.post("/v0/watch?lenient=true", json={"topics": many}), 400, "invalid_request")


@pytest.mark.parametrize("raw", [b"", b"{", b'{"topics":{}', b"\xff", b"null"])
def test_create_malformed_json_400(client: httpx.Client, raw: bytes) -> None:
    r = client.post("/v0/watch", content=raw, headers=JSON)
    error_of(r, 400, "invalid_request", message_prefix="malformed JSON body:")


@pytest.mark.parametrize(
    "headers", [{}, {"Content-Type": "text/plain"}, {"Content-Type": "text/json"}]
)
def test_create_needs_json_content_type_415(
    client: httpx.Client, topic: str, headers: dict[str, str]
) -> None:
    put_topic(client, topic)
    body = orjson.dumps({"topics": {topic: {}}})
    error_of(client.post("/v0/watch", content=body, headers=headers), 415, "unsupported_media_type")
    # the content-type check comes before parsing
    error_of(client.post("/v0/watch", content=b"{", headers=headers), 415, "unsupported_media_type")
    ok(client.post("/v0/watch", content=body, headers={"Content-Type": "application/json; x=1"}))


def test_create_unknown_topic_404_and_lenient(client: httpx.Client, tname: Names) -> None:
    known, missing = tname("known"), tname("missing")
    write(client, known, [{"data": 1}])
    r = client.post("/v0/watch", json={"topics": {known: {}, missing: {}}})
    error_of(r, 404, "topic_not_found", detail={"topic": missing})
    body = ok(client.post("/v0/watch?lenient=true", json={"topics": {missing: {}, known: {}}}))
    assert body["topics"] == {known: {"from_seq": 0, "head_seq": 1, "earliest_seq": 1}}
    # a watch never creates topics
    error_of(client.get(f"/v0/topics/{missing}"), 404, "topic_not_found")
    # an invalid name cannot exist: 404 like any read
    error_of(client.post("/v0/watch", json={"topics": {"-bad/": {}}}), 404, "topic_not_found")


def test_lenient_session_watches_only_known_topics(
    server: ServerProcess, client: httpx.Client, tname: Names
) -> None:
    known, missing = tname("known"), tname("missing")
    write(client, known, [{"data": 1}])
    body = ok(client.post("/v0/watch?lenient=true", json={"topics": {missing: {}, known: {}}}))
    with open_stream(server, body["wid"]) as conn:
        frames = conn.until_caught_up({known: 1})
        check_frames(frames, CursorModel({known: 0}))
        assert all(decode_id(f.id) == {known: 1} for f in frames[-1:] if f.id)
        write(client, missing, [{"data": "not watched"}])
        write(client, known, [{"data": 2}])
        frames = conn.until_caught_up({known: 2})
        assert {f.topic for f in frames} == {known}


@pytest.mark.parametrize("method", ["GET", "PUT", "DELETE", "PATCH"])
def test_create_wrong_method_405(client: httpx.Client, method: str) -> None:
    error_of(client.request(method, "/v0/watch"), 405, "method_not_allowed")


@pytest.mark.parametrize("method", ["POST", "PUT", "DELETE", "PATCH"])
def test_stream_wrong_method_405(client: httpx.Client, topic: str, method: str) -> None:
    put_topic(client, topic)
    wid = create_watch(client, {topic: {}})["wid"]
    error_of(client.request(method, f"/v0/watch/{wid}"), 405, "method_not_allowed")


# --------------------------------------------------------------------------- stream open


@pytest.mark.parametrize(
    "accept",
    [
        "application/json",
        "text/html",
        "text/*",
        "text/plain, application/json;q=0.9",
    ],
)
def test_stream_accept_406(
    server: ServerProcess, client: httpx.Client, topic: str, accept: str
) -> None:
    put_topic(client, topic)
    wid = create_watch(client, {topic: {}})["wid"]
    with SseConn(server.address, f"/v0/watch/{wid}", accept=accept) as conn:
        conn.error(406, "not_acceptable")
    # Accept is checked before the session exists
    with SseConn(server.address, "/v0/watch/wid_AAAAAAAAAAAAAAAAAAAAAA", accept=accept) as conn:
        conn.error(406, "not_acceptable")


@pytest.mark.parametrize(
    "accept",
    [
        None,
        "",
        "*/*",
        "text/event-stream",
        "application/json, text/event-stream;q=0.5",
        "text/*, */*",
    ],
)
def test_stream_accept_ok(
    server: ServerProcess, client: httpx.Client, topic: str, accept: str | None
) -> None:
    put_topic(client, topic)
    wid = create_watch(client, {topic: {}})["wid"]
    with SseConn(server.address, f"/v0/watch/{wid}", accept=accept) as conn:
        assert conn.status == 200, conn.body
        first = conn.next_frame()
        assert first is not None and first.retry == 2000


@pytest.mark.parametrize("wid", ["wid_AAAAAAAAAAAAAAAAAAAAAA", "nope", "wid_", "wid_" + "A" * 40])
def test_stream_unknown_wid_404(server: ServerProcess, wid: str) -> None:
    with SseConn(server.address, f"/v0/watch/{wid}") as conn:
        conn.error(404, "not_found")


def test_stream_headers_retry_and_first_frames(
    server: ServerProcess, client: httpx.Client, topic: str
) -> None:
    put_topic(client, topic)
    wid = create_watch(client, {topic: {}})["wid"]
    with SseConn(server.address, f"/v0/watch/{wid}") as conn:
        assert conn.status == 200
        assert conn.headers["content-type"].split(";")[0].strip() == "text/event-stream"
        assert conn.headers["cache-control"] == "no-store"
        assert conn.headers["x-accel-buffering"] == "no"
        first = conn.next_frame()
        assert first is not None and first.raw == b"retry: 2000\n\n"
        # an empty topic drains at once: caught-up at head 0, id = the full map
        cu = conn.next_frame()
        assert cu is not None
        assert (
            cu.raw
            == (
                f"id: {encode_id({topic: 0})}\nevent: caught-up\n"
                f'data: {{"topic":"{topic}","head_seq":0}}\n\n'
            ).encode()
        )


def test_auth_disabled_stream_ignores_credentials(
    server: ServerProcess, client: httpx.Client, topic: str
) -> None:
    put_topic(client, topic)
    wid = create_watch(client, {topic: {}})["wid"]
    for headers, path in (
        ({"Authorization": "Bearer whatever"}, f"/v0/watch/{wid}"),
        ({}, f"/v0/watch/{wid}?token=junk"),
        ({"Authorization": "Basic x"}, f"/v0/watch/{wid}"),
    ):
        with SseConn(server.address, path, headers) as conn:
            assert conn.status == 200, conn.body


# --------------------------------------------------------------------------- record frames


def test_record_frames_match_diff_records(
    server: ServerProcess, client: httpx.Client, topic: str
) -> None:
    recs: list[dict[str, Any]] = [
        {"data": {"k": [1, 2, {"z": None}]}, "tag": "t1", "node": "n1", "meta": {"m": 1}},
        {"data": None},
        {"data": "s", "tag": "t2"},
        {"data": 3.5, "meta": {"trace": "x"}},
        {"data": [], "node": "n2"},
    ]
    write(client, topic, recs)
    full = diff(client, topic, include_tags=True, include_meta=True)["records"]
    assert len(full) == 5
    variants: list[tuple[dict[str, Any], Callable[[dict[str, Any]], dict[str, Any]]]] = [
        ({}, lambda r: {k: v for k, v in r.items() if k != "$tag"}),
        ({"include_tags": True}, lambda r: r),
        (
            {"include_meta": False},
            lambda r: {k: v for k, v in r.items() if k not in ("$tag", "meta")},
        ),
        (
            {"include_data": False, "include_tags": True},
            lambda r: {k: v for k, v in r.items() if k != "data"},
        ),
        (
            {"include_data": False, "include_meta": False},
            lambda r: {k: v for k, v in r.items() if k in ("$seq", "$ts", "$node")},
        ),
    ]
    for opts, expect in variants:
        wid = create_watch(client, {topic: {}}, **opts)["wid"]
        with open_stream(server, wid) as conn:
            frames = conn.until_caught_up({topic: 5})
        check_frames(frames, CursorModel({topic: 0}))
        rec_frames = [f for f in frames if f.event == "record"]
        assert len(rec_frames) == 1, frames
        f = rec_frames[0]
        assert f.raw.startswith(f"id: {f.id}\nevent: record\ndata: {{".encode()), f.raw
        d = f.data
        assert list(d) == ["topic", "from_seq", "head_seq", "records", "to_seq"], d
        assert (d["topic"], d["from_seq"], d["head_seq"], d["to_seq"]) == (topic, 0, 5, 5)
        assert d["records"] == [expect(r) for r in full], opts
        assert frames[-1].event == "caught-up" and frames[-1].data == {
            "topic": topic,
            "head_seq": 5,
        }


def test_limit_per_frame(server: ServerProcess, client: httpx.Client, topic: str) -> None:
    write(client, topic, [{"data": i} for i in range(10)])
    wid = create_watch(client, {topic: {"from_seq": 0}}, limit=3)["wid"]
    with open_stream(server, wid) as conn:
        frames = conn.until_caught_up({topic: 10})
    check_frames(frames, CursorModel({topic: 0}))
    recs = [f for f in frames if f.event == "record"]
    assert [[r["$seq"] for r in f.data["records"]] for f in recs] == [
        [1, 2, 3],
        [4, 5, 6],
        [7, 8, 9],
        [10],
    ]
    assert [(f.data["from_seq"], f.data["to_seq"]) for f in recs] == [
        (0, 3),
        (3, 6),
        (6, 9),
        (9, 10),
    ]
    assert [f.event for f in frames][-1] == "caught-up"
    assert [f.event for f in frames].count("caught-up") == 1


def test_limit_clamps(server: ServerProcess, client: httpx.Client, topic: str) -> None:
    write(client, topic, [{"data": i} for i in range(1200)])
    for limit, sizes in ((0, [256, 256, 256, 256, 176]), (5000, [1000, 200])):
        wid = create_watch(client, {topic: {}}, limit=limit, max_batch_bytes=8_388_608)["wid"]
        with open_stream(server, wid) as conn:
            frames = conn.until_caught_up({topic: 1200})
        assert [len(f.data["records"]) for f in frames if f.event == "record"] == sizes
        assert seqs(frames) == list(range(1, 1201))


def test_max_batch_bytes_per_frame(server: ServerProcess, client: httpx.Client, topic: str) -> None:
    # each record is 100 bytes of data; a 250-byte budget fits two; a lone oversized record
    # still goes out alone
    write(client, topic, [{"data": "x" * 98, "meta": None} for _ in range(5)])
    write(client, topic, [{"data": "y" * 400}])
    write(client, topic, [{"data": "z" * 98}])
    wid = create_watch(client, {topic: {}}, max_batch_bytes=250)["wid"]
    with open_stream(server, wid) as conn:
        frames = conn.until_caught_up({topic: 7})
    check_frames(frames, CursorModel({topic: 0}))
    assert [[r["$seq"] for r in f.data["records"]] for f in frames if f.event == "record"] == [
        [1, 2],
        [3, 4],
        [5],
        [6],
        [7],
    ]


def test_default_batch_budget_is_262144(
    server: ServerProcess, client: httpx.Client, topic: str
) -> None:
    # 10 records of ~100000 bytes: the default 262144 budget fits two per frame
    write(client, topic, [{"data": "d" * 99_998} for _ in range(10)])
    wid = create_watch(client, {topic: {}})["wid"]
    with open_stream(server, wid) as conn:
        frames = conn.until_caught_up({topic: 10})
    assert [len(f.data["records"]) for f in frames if f.event == "record"] == [2] * 5
    wid = create_watch(client, {topic: {}}, max_batch_bytes=0)["wid"]  # 0 => 1 MiB
    with open_stream(server, wid) as conn:
        frames = conn.until_caught_up({topic: 10})
    assert [len(f.data["records"]) for f in frames if f.event == "record"] == [10]


def test_caught_up_once_per_transition_and_heartbeat(
    server: ServerProcess, client: httpx.Client, topic: str
) -> None:
    write(client, topic, [{"data": 1}, {"data": 2}])
    wid = create_watch(client, {topic: {}}, heartbeat_ms=1000)["wid"]
    model = CursorModel({topic: 0})
    with open_stream(server, wid) as conn:
        frames = conn.until_caught_up({topic: 2})
        check_frames(frames, model)
        assert [f.event for f in frames] == ["record", "caught-up"]
        # idle: only heartbeats (comment lines, no id/event), no repeated caught-up
        t0 = int(time.time() * 1000)
        idle = conn.read_until(lambda f: bool(f.comments) and len(f.comments) == 1, timeout=5)
        assert [f.event for f in idle] == [None], idle
        hb = idle[-1]
        assert re.fullmatch(rb": hb \d+\n\n", hb.raw), hb.raw
        hb_ms = int(hb.comments[0].split()[1])
        assert t0 - 5000 <= hb_ms <= int(time.time() * 1000) + 5000
        assert hb.id is None and hb.event is None and hb.data_text is None
        write(client, topic, [{"data": 3}])
        frames = conn.read_until(lambda f: f.event == "caught-up")
        frames = [f for f in frames if f.event is not None]
        check_frames(frames, model)
        assert [f.event for f in frames] == ["record", "caught-up"]
        assert seqs(frames) == [3]


def test_multi_topic_watch(server: ServerProcess, client: httpx.Client, tname: Names) -> None:
    ts = [tname(s) for s in ("a", "b", "c")]
    for i, t in enumerate(ts):
        write(client, t, [{"data": [t, j]} for j in range(i + 2)])
    start = {ts[0]: 0, ts[1]: 1, ts[2]: 4}  # ts[2] starts at its head
    wid = create_watch(client, {ts[0]: {}, ts[1]: {"from_seq": 1}, ts[2]: {"tail": True}})["wid"]
    model = CursorModel(start)
    with open_stream(server, wid) as conn:
        frames = conn.until_caught_up({ts[0]: 2, ts[1]: 3, ts[2]: 4})
        check_frames(frames, model)
        assert seqs(frames, ts[0]) == [1, 2]
        assert seqs(frames, ts[1]) == [2, 3]
        assert seqs(frames, ts[2]) == []
        for t in reversed(ts):
            write(client, t, [{"data": "more"}])
        frames = conn.until_caught_up({ts[0]: 3, ts[1]: 4, ts[2]: 5})
        check_frames(frames, model)
        assert (seqs(frames, ts[0]), seqs(frames, ts[1]), seqs(frames, ts[2])) == ([3], [4], [5])
    assert model.cursors == {ts[0]: 3, ts[1]: 4, ts[2]: 5}


# --------------------------------------------------------------------------- resume


def test_reconnect_resumes_from_session_cursors(make_server: ServerFactory) -> None:
    """Records written after the server saw the stream close come on the next stream of the
    session, from its cursors. (Written while the close is still in flight, they may go
    into the dying connection and advance the cursors: `Last-Event-ID` is what rewinds
    them, see test_last_event_id_only_rewinds.) A server of its own, so that its SSE
    connection count tells when the close has been seen."""
    server = make_server()
    topic = "resume"
    with httpx.Client(base_url=server.url, timeout=10) as client:
        write(client, topic, [{"data": i} for i in range(5)])
        wid = create_watch(client, {topic: {}})["wid"]
        with open_stream(server, wid) as conn:
            assert seqs(conn.until_caught_up({topic: 5})) == [1, 2, 3, 4, 5]
        _wait_metric(client, "sse_connections", 0)
        write(client, topic, [{"data": i} for i in range(3)])
        with open_stream(server, wid) as conn:
            frames = conn.until_caught_up({topic: 8})
    check_frames(frames, CursorModel({topic: 5}))
    assert seqs(frames) == [6, 7, 8]
    assert frames[0].data["from_seq"] == 5


def test_last_event_id_only_rewinds(
    server: ServerProcess, client: httpx.Client, tname: Names
) -> None:
    a, b = tname("a"), tname("b")
    write(client, a, [{"data": i} for i in range(4)])
    write(client, b, [{"data": i} for i in range(4)])
    wid = create_watch(client, {a: {}, b: {}}, limit=2)["wid"]
    with open_stream(server, wid) as conn:
        frames = conn.until_caught_up({a: 4, b: 4})
    ids = [f.id for f in frames if f.event == "record" and f.topic == a]
    mid = ids[0]
    assert mid is not None and decode_id(mid)[a] == 2
    # rewind a to 2 (b's value in that id is 0 or 2: rewinds b too, never forwards)
    with open_stream(server, wid, {"Last-Event-ID": mid}) as conn:
        frames = conn.until_caught_up({a: 4, b: 4})
    assert seqs(frames, a) == [3, 4]
    assert seqs(frames, b) == list(range(decode_id(mid)[b] + 1, 5))
    # a higher value never skips: the session stays at 4 and new records still arrive
    write(client, a, [{"data": "new"}])
    write(client, b, [{"data": "new"}])
    high = encode_id({a: 1000, b: 2**64 - 1})
    with open_stream(server, wid, {"Last-Event-ID": high}) as conn:
        frames = conn.until_caught_up({a: 5, b: 5})
    assert (seqs(frames, a), seqs(frames, b)) == ([5], [5])
    # only topics in both maps move; unknown topics and bad values are ignored
    partial = encode_id({b: 3, "other-topic": 0})
    with open_stream(server, wid, {"Last-Event-ID": partial}) as conn:
        frames = conn.until_caught_up({a: 5, b: 5})
    assert (seqs(frames, a), seqs(frames, b)) == ([], [4, 5])
    junk_ids = [
        "!!!not-base64",
        base64.urlsafe_b64encode(b"[1,2]").decode(),
        encode_id({}).rstrip("=") or "e30",
        base64.urlsafe_b64encode(orjson.dumps({a: -1, b: "0"})).decode().rstrip("="),
        base64.urlsafe_b64encode(orjson.dumps({a: True, b: 1.5})).decode().rstrip("="),
        "",
    ]
    for junk in junk_ids:
        with open_stream(server, wid, {"Last-Event-ID": junk}) as conn:
            frames = conn.until_caught_up({a: 5, b: 5})
        assert seqs(frames) == [], (junk, frames)
    # a padded (standard) base64 id of a valid map still decodes
    padded = base64.urlsafe_b64encode(orjson.dumps({a: 4})).decode()
    with open_stream(server, wid, {"Last-Event-ID": padded}) as conn:
        frames = conn.until_caught_up({a: 5, b: 5})
    assert (seqs(frames, a), seqs(frames, b)) == ([5], [])


def _abort_mid_stream(conn: SseConn, model: CursorModel, got: dict[str, list[int]], n: int) -> str:
    """Read `n` id-bearing frames, then RST the socket. Returns the last id seen."""
    last = ""
    seen = 0
    while seen < n:
        f = conn.next_frame()
        assert f is not None
        model.apply(f)
        if f.event == "record":
            got[f.topic].extend(r["$seq"] for r in f.data["records"])
        if f.id is not None:
            last = f.id
            seen += 1
    conn.abort()
    return last


def test_forced_disconnect_during_writes_resumes_exactly_once(
    server: ServerProcess, client: httpx.Client, tname: Names
) -> None:
    ts = [tname("a"), tname("b")]
    for t in ts:
        put_topic(client, t)
    wid = create_watch(client, {t: {} for t in ts}, limit=7)["wid"]
    heads: dict[str, int] = {t: 0 for t in ts}
    errors: list[str] = []
    started = threading.Event()

    def writer() -> None:
        rng = random.Random(7)
        with httpx.Client(base_url=server.url, timeout=10) as w:
            for i in range(300):
                t = ts[i % 2]
                n = rng.randint(1, 12)
                r = w.post(f"/v0/topics/{t}", json={"records": [{"data": i}] * n})
                if r.status_code != 200:
                    errors.append(describe(r))
                    return
                heads[t] = r.json()["head_seq"]
                started.set()

    th = threading.Thread(target=writer)
    th.start()
    got: dict[str, list[int]] = {t: [] for t in ts}
    model = CursorModel({t: 0 for t in ts})
    aborts_during_writes = 0
    try:
        assert started.wait(10)
        last = ""
        for n in (5, 9, 3, 12, 1, 20, 2, 7):
            headers = {"Last-Event-ID": last} if last else {}
            conn = open_stream(server, wid, headers)
            if last:
                model.cursors = decode_id(last)
            last = _abort_mid_stream(conn, model, got, n)
            aborts_during_writes += th.is_alive()
    finally:
        th.join(60)
    assert not errors, errors
    assert aborts_during_writes >= 3, "the writer finished before the disconnects"
    with open_stream(server, wid, {"Last-Event-ID": last}) as conn:
        model.cursors = decode_id(last)
        frames = conn.until_caught_up(heads, timeout=20)
    check_frames(frames, model)
    for t in ts:
        got[t].extend(seqs(frames, t))
        assert got[t] == list(range(1, heads[t] + 1)), (t, heads[t], got[t][:50])


def test_stalled_stream_closed_after_resume_steals_nothing(
    server: ServerProcess, client: httpx.Client, topic: str
) -> None:
    """A client whose connection stalls reconnects with its last id, then closes the stalled
    socket. The old stream must stop with its client (API §11: slots are released when the
    stream closes; SEMANTICS §9): it must not keep reading the session's shared cursors
    after its client is gone, or the new stream skips records no one received."""
    n = 12_000
    blob = "b" * 1000  # ~12 MB of frames: far more than the socket buffers hold
    for _ in range(n // 1000):
        write(client, topic, [{"data": blob}] * 1000)
    wid = create_watch(client, {topic: {}}, limit=1)["wid"]
    old = SseConn(server.address, f"/v0/watch/{wid}", rcvbuf=4096)
    got: list[int] = []
    last = ""
    try:
        assert old.status == 200
        while len(got) < 5:  # read a little, then stop reading: the server blocks in send
            f = old.next_frame()
            assert f is not None
            if f.event == "record":
                got.extend(seqs([f]))
            if f.id:
                last = f.id
        new = open_stream(server, wid, {"Last-Event-ID": last})
        try:
            first = new.read_until(lambda f: f.event == "record")
            got.extend(seqs(first))
            assert first[-1].data["from_seq"] == 5, first[-1].data
            old.abort()  # the stalled connection is finally closed
            old_closed = True
            rest = new.until_caught_up({topic: n}, timeout=30)
            got.extend(seqs(rest))
        finally:
            new.close()
    finally:
        if not locals().get("old_closed"):
            old.close()
    assert got == sorted(set(got)), "duplicates or disorder"
    missing = sorted(set(range(1, n + 1)) - set(got))
    # At most the one frame (limit 1) that may be in flight when the old connection dies;
    # the old stream must not run on through the backlog without a client.
    assert len(missing) <= 1, f"{len(missing)} records never delivered, from {missing[0]}"


def test_disconnected_watcher_with_backlog_does_not_stall_the_server(
    server: ServerProcess, client: httpx.Client, topic: str
) -> None:
    """A client that goes away mid-backlog must not keep the server busy on its behalf:
    other requests are answered at once (API §0.1 "flush every frame"; §11 the stream and
    its slot end when the client goes away)."""
    for k in range(6):
        write(client, topic, [{"data": k}] * 10_000)
    wid = create_watch(client, {topic: {}}, limit=1)["wid"]
    with httpx.Client(base_url=server.url, timeout=30) as probe:
        probe.get("/v0/health")  # connected before the clock starts
        conn = open_stream(server, wid)
        conn.read_until(lambda f: f.event == "record" and f.data["to_seq"] >= 3)
        conn.abort()
        t0 = time.monotonic()
        r = probe.get("/v0/health")
        took = time.monotonic() - t0
        assert r.status_code == 200
        t1 = time.monotonic()
        write(probe, topic, [{"data": "after"}])
        took_write = time.monotonic() - t1
    assert took < 0.5 and took_write < 0.5, (
        f"health took {took:.3f}s and a write {took_write:.3f}s after a watcher disconnected"
    )


def test_backlog_reader_does_not_starve_other_requests(
    server: ServerProcess, client: httpx.Client, topic: str
) -> None:
    """A watcher reading a long backlog one record per frame keeps the event loop busy;
    other requests must still be answered promptly. Before the stream loop rested (see
    `seglog.http.loop_share`), granian's thread could not take the GIL from the busy loop
    and a health check waited 0.3–0.8 s in nearly every run."""
    for k in range(3):
        write(client, topic, [{"data": k}] * 10_000)
    wid = create_watch(client, {topic: {}}, limit=1)["wid"]
    conn = SseConn(server.address, f"/v0/watch/{wid}")
    assert conn.status == 200
    done = threading.Event()
    received = bytearray(conn._raw)

    def drain() -> None:
        # Raw bytes only: parsing frames here would compete for this process's GIL with
        # the probes below and measure the test instead of the server.
        try:
            while b"event: caught-up" not in received[-65_536:]:
                chunk = conn.sock.recv(1 << 20)
                if not chunk:
                    break
                received.extend(chunk)
        finally:
            done.set()

    reader = threading.Thread(target=drain, daemon=True)
    probes: list[float] = []
    with httpx.Client(base_url=server.url, timeout=30) as probe:
        probe.get("/v0/health")
        reader.start()
        while not done.is_set():
            t0 = time.monotonic()
            assert probe.get("/v0/health").status_code == 200
            probes.append(time.monotonic() - t0)
            done.wait(0.01)
    reader.join()
    conn.abort()
    assert b"event: caught-up" in received, "the backlog was not delivered"
    assert received.count(b"event: record") == 30_000
    assert len(probes) >= 10, probes
    assert max(probes) < 0.25, f"health checks during the backlog: max {max(probes):.3f}s"


# --------------------------------------------------------------------------- tombstones


def test_from_seq_below_earliest_tombstone_first(
    server: ServerProcess, client: httpx.Client, topic: str
) -> None:
    put_topic(client, topic, {"cap_records": 3})
    write(client, topic, [{"data": i} for i in range(10)])
    body = create_watch(client, {topic: {"from_seq": 2}})
    assert body["topics"][topic] == {"from_seq": 2, "head_seq": 10, "earliest_seq": 8}
    with open_stream(server, body["wid"]) as conn:
        frames = conn.until_caught_up({topic: 10})
    check_frames(frames, CursorModel({topic: 2}))
    assert [f.event for f in frames] == ["tombstone", "record", "caught-up"]
    tomb = frames[0]
    assert list(tomb.data) == ["topic", "reason", "gap_from", "gap_to", "earliest_seq", "head_seq"]
    assert tomb.data == {
        "topic": topic,
        "reason": "from_seq_too_old",
        "gap_from": 3,
        "gap_to": 7,
        "earliest_seq": 8,
        "head_seq": 10,
    }
    assert decode_id(tomb.id or "") == {topic: 7}
    rec = frames[1].data
    assert (rec["from_seq"], rec["to_seq"], seqs(frames)) == (7, 10, [8, 9, 10])


def test_later_gap_reports_cap(server: ServerProcess, client: httpx.Client, topic: str) -> None:
    put_topic(client, topic, {"cap_records": 3})
    write(client, topic, [{"data": i} for i in range(4)])
    wid = create_watch(client, {topic: {"tail": True}})["wid"]
    model = CursorModel({topic: 4})
    with open_stream(server, wid) as conn:
        frames = conn.until_caught_up({topic: 4})
        check_frames(frames, model)
        assert [f.event for f in frames] == ["caught-up"]
        write(client, topic, [{"data": i} for i in range(10)])  # seqs 5..14, 12..14 live
        frames = conn.until_caught_up({topic: 14})
    check_frames(frames, model)
    assert [f.event for f in frames] == ["tombstone", "record", "caught-up"], frames
    assert frames[0].data == {
        "topic": topic,
        "reason": "cap",
        "gap_from": 5,
        "gap_to": 11,
        "earliest_seq": 12,
        "head_seq": 14,
    }
    assert decode_id(frames[0].id or "") == {topic: 11}
    assert frames[1].data["from_seq"] == 11 and seqs(frames) == [12, 13, 14]


def test_first_read_after_reconnect_reports_from_seq_too_old(
    server: ServerProcess, client: httpx.Client, topic: str
) -> None:
    put_topic(client, topic, {"cap_records": 2})
    write(client, topic, [{"data": 1}])
    wid = create_watch(client, {topic: {}})["wid"]
    with open_stream(server, wid) as conn:
        assert seqs(conn.until_caught_up({topic: 1})) == [1]
    write(client, topic, [{"data": i} for i in range(5)])  # 2..6, live 5..6
    with open_stream(server, wid) as conn:
        frames = conn.until_caught_up({topic: 6})
    assert frames[0].event == "tombstone"
    assert frames[0].data["reason"] == "from_seq_too_old"
    assert (frames[0].data["gap_from"], frames[0].data["gap_to"]) == (2, 4)
    assert seqs(frames) == [5, 6]


def test_future_cursor_tombstone_then_records(
    server: ServerProcess, client: httpx.Client, topic: str
) -> None:
    write(client, topic, [{"data": i} for i in range(3)])
    wid = create_watch(client, {topic: {"from_seq": 50}})["wid"]
    with open_stream(server, wid) as conn:
        frames = conn.until_caught_up({topic: 3})
    assert frames[0].event == "tombstone"
    assert frames[0].data == {
        "topic": topic,
        "reason": "from_seq_too_old",
        "gap_from": 1,
        "gap_to": 3,
        "earliest_seq": 1,
        "head_seq": 3,
    }
    # SEMANTICS §4.4 rule 1: the walk continues after earliest - 1
    assert seqs(frames) == [1, 2, 3]


# --------------------------------------------------------------------------- node filter


@pytest.mark.parametrize(
    ("node", "expect", "expect_tail"),
    [("A", [2, 3, 4], [7, 8]), (["A", "B"], [3, 4], [8]), ([], [1, 2, 3, 4, 5], [6, 7, 8])],
)
def test_node_loop_prevention(
    server: ServerProcess,
    client: httpx.Client,
    tname: Names,
    node: Any,
    expect: list[int],
    expect_tail: list[int],
) -> None:
    dd, nd = tname("dedupe"), tname("nodedupe")
    put_topic(client, nd, {"dedupe_node": False})
    recs: list[dict[str, Any]] = [
        {"data": 1, "node": "A"},
        {"data": 2, "node": "B"},
        {"data": 3},
        {"data": 4, "node": "Ab"},
        {"data": 5, "node": "A"},
    ]
    for t in (dd, nd):
        write(client, t, recs)
    wid = create_watch(client, {dd: {}, nd: {}}, node=node)["wid"]
    model = CursorModel({dd: 0, nd: 0})
    with open_stream(server, wid) as conn:
        frames = conn.until_caught_up({dd: 5, nd: 5})
        check_frames(frames, model)
        assert seqs(frames, dd) == expect
        assert seqs(frames, nd) == [1, 2, 3, 4, 5]  # dedupe_node:false delivers them
        assert [f.data["to_seq"] for f in frames if f.event == "record" and f.topic == dd] == [5]
        # a tailing stream skips own-node records silently and still advances
        write(client, dd, [{"data": 6, "node": "A"}, {"data": 7, "node": "B"}])
        write(client, dd, [{"data": 8, "node": "C"}])
        frames = conn.until_caught_up({dd: 8})
        frames = [f for f in frames if f.event]
        check_frames(frames, model)
        assert seqs(frames, dd) == expect_tail
    assert model.cursors[dd] == 8


def test_node_only_skips_end_caught_up(
    server: ServerProcess, client: httpx.Client, topic: str
) -> None:
    write(client, topic, [{"data": i, "node": "me"} for i in range(4)])
    wid = create_watch(client, {topic: {}}, node="me")["wid"]
    with open_stream(server, wid) as conn:
        frames = conn.until_caught_up({topic: 4})
    assert [f.event for f in frames] == ["caught-up"]
    assert decode_id(frames[0].id or "") == {topic: 4}


# --------------------------------------------------------------------------- deletion


def test_topic_deleted_frames_and_stream_end(
    server: ServerProcess, client: httpx.Client, tname: Names
) -> None:
    a, b = tname("a"), tname("b")
    write(client, a, [{"data": 1}])
    write(client, b, [{"data": 1}])
    wid = create_watch(client, {a: {}, b: {}}, heartbeat_ms=1000)["wid"]
    model = CursorModel({a: 0, b: 0})
    with open_stream(server, wid) as conn:
        check_frames(conn.until_caught_up({a: 1, b: 1}), model)
        assert ok(client.delete(f"/v0/topics/{a}"))["deleted"] is True
        frames = conn.read_until(lambda f: f.event == "topic-deleted")
        frames = [f for f in frames if f.event]
        assert len(frames) == 1
        td = frames[0]
        assert list(td.data) == ["topic", "head_seq", "reason"]
        assert td.data == {"topic": a, "head_seq": 0, "reason": "deleted"}
        # the id is still the full map (the deleted topic keeps its last cursor)
        assert td.id == encode_id({a: 1, b: 1})
        # a deleted topic is not read again, even if recreated
        write(client, a, [{"data": "reborn"}])
        write(client, b, [{"data": 2}])
        frames = conn.until_caught_up({b: 2})
        assert {f.topic for f in frames if f.event} == {b}
        assert seqs(frames, b) == [2]
        ok(client.delete(f"/v0/topics/{b}"))
        rest = conn.read_to_end()
        events = [f.event for f in rest if f.event]
        assert events == ["topic-deleted"], rest
        assert rest[-1].data == {"topic": b, "head_seq": 0, "reason": "deleted"}
        assert conn.ended


def test_watched_topic_deleted_before_stream_opens(
    server: ServerProcess, client: httpx.Client, topic: str
) -> None:
    write(client, topic, [{"data": 1}])
    wid = create_watch(client, {topic: {}})["wid"]
    ok(client.delete(f"/v0/topics/{topic}"))
    with open_stream(server, wid) as conn:
        rest = conn.read_to_end()
    assert [f.event for f in rest] == ["topic-deleted"]
    assert rest[0].data == {"topic": topic, "head_seq": 0, "reason": "deleted"}


# --------------------------------------------------------------------------- slow consumer


def test_slow_consumer_does_not_block_others(
    server: ServerProcess, client: httpx.Client, topic: str
) -> None:
    put_topic(client, topic)
    slow_wid = create_watch(client, {topic: {}})["wid"]
    fast_wid = create_watch(client, {topic: {}})["wid"]
    slow = SseConn(server.address, f"/v0/watch/{slow_wid}", rcvbuf=4096, read_head=False)
    try:
        with open_stream(server, fast_wid) as fast:
            fast.until_caught_up({topic: 0})
            payload = "p" * 6000  # ~9 MB in all: more than any socket buffer holds
            total = 0
            for i in range(60):
                t0 = time.monotonic()
                r = client.post(
                    f"/v0/topics/{topic}", json={"records": [{"data": [i, payload]}] * 25}
                )
                assert r.status_code == 200, describe(r)
                assert time.monotonic() - t0 < 5, "a write waited on a slow watcher"
                total = r.json()["head_seq"]
            assert total == 1500
            frames = fast.until_caught_up({topic: total}, timeout=30)
            assert seqs(frames) == list(range(1, total + 1))
        # the slow one now reads: everything, in order, from the log
        slow.read_head()
        assert slow.status == 200
        frames = slow.until_caught_up({topic: total}, timeout=30)
        assert frames[0].retry == 2000
        assert seqs(frames) == list(range(1, total + 1))
    finally:
        slow.close()


# --------------------------------------------------------------------------- metrics & caps


def _metrics(c: httpx.Client) -> dict[str, Any]:
    return ok(c.get("/v0/metrics", headers={"Accept": "application/json"}), perf=False)


def _wait_metric(c: httpx.Client, key: str, want: int, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while True:
        got = _metrics(c)[key]
        if got == want:
            return
        assert time.monotonic() < deadline, f"{key} stayed {got}, wanted {want}"
        time.sleep(0.02)


def _prom_value(c: httpx.Client, name: str) -> float:
    text = c.get("/v0/metrics").text
    m = re.search(rf"^{name} (\S+)$", text, re.M)
    assert m, f"{name} missing"
    assert f"# TYPE {name} gauge" in text
    return float(m.group(1))


@pytest.fixture
def capped(make_server: ServerFactory) -> Iterator[ServerProcess]:
    yield make_server(env={"SEGLOG_MAX_WATCH_SESSIONS": "2", "SEGLOG_MAX_SSE_CONNECTIONS": "1"})


def test_caps_and_metrics(capped: ServerProcess) -> None:
    with httpx.Client(base_url=capped.url, timeout=10) as c:
        put_topic(c, "t")
        m = _metrics(c)
        assert (m["sse_connections"], m["watch_sessions"]) == (0, 0)
        w1 = create_watch(c, {"t": {}})["wid"]
        w2 = create_watch(c, {"t": {}})["wid"]
        r = c.post("/v0/watch", json={"topics": {"t": {}}})
        error_of(r, 429, "throttled", detail={"limit": "max_watch_sessions", "max": 2})
        assert _metrics(c)["watch_sessions"] == 2
        assert _prom_value(c, "topics_watch_sessions") == 2
        first = open_stream(capped, w1)
        try:
            first.until_caught_up({"t": 0})
            assert _metrics(c)["sse_connections"] == 1
            assert _prom_value(c, "topics_sse_connections") == 1
            with SseConn(capped.address, f"/v0/watch/{w2}") as second:
                err = second.error(429, "throttled")
                assert "detail" not in err
            # the same session is refused too (the cap counts connections)
            with SseConn(capped.address, f"/v0/watch/{w1}") as again:
                again.error(429, "throttled")
        finally:
            first.abort()
        _wait_metric(c, "sse_connections", 0)
        with open_stream(capped, w2) as conn:
            conn.until_caught_up({"t": 0})
            _wait_metric(c, "sse_connections", 1)
        _wait_metric(c, "sse_connections", 0)
        # a refused open does not leak a slot
        assert _prom_value(c, "topics_sse_connections") == 0


def test_watch_session_cap_1(make_server: ServerFactory) -> None:
    srv = make_server(env={"SEGLOG_MAX_WATCH_SESSIONS": "1"})
    with httpx.Client(base_url=srv.url, timeout=10) as c:
        put_topic(c, "t")
        create_watch(c, {"t": {}})
        r = c.post("/v0/watch", json={"topics": {"t": {}}})
        error_of(r, 429, "throttled", detail={"limit": "max_watch_sessions", "max": 1})
        # the cap is semantic: bad input is still 400
        error_of(c.post("/v0/watch", json={"topics": {}}), 400, "invalid_request")


def test_stream_end_by_deletion_releases_slot(capped: ServerProcess) -> None:
    with httpx.Client(base_url=capped.url, timeout=10) as c:
        put_topic(c, "gone")
        wid = create_watch(c, {"gone": {}})["wid"]
        with open_stream(capped, wid) as conn:
            conn.until_caught_up({"gone": 0})
            ok(c.delete("/v0/topics/gone"))
            assert [f.event for f in conn.read_to_end()] == ["topic-deleted"]
        _wait_metric(c, "sse_connections", 0)


# --------------------------------------------------------------------------- shutdown


def test_sigterm_sends_error_frame_then_ends(make_server: ServerFactory) -> None:
    srv = make_server()
    with httpx.Client(base_url=srv.url, timeout=10) as c:
        write(c, "s1", [{"data": 1}, {"data": 2}])
        write(c, "s2", [{"data": 1}])
        wid = create_watch(c, {"s1": {}, "s2": {}})["wid"]
    conn = open_stream(srv, wid)
    try:
        conn.until_caught_up({"s1": 2, "s2": 1})
        assert srv.proc is not None
        srv.proc.send_signal(signal.SIGTERM)
        rest = conn.read_to_end(timeout=15)
    finally:
        conn.close()
    events = [f for f in rest if f.event]
    assert [f.event for f in events] == ["error"], rest
    err = events[0]
    assert err.id == encode_id({"s1": 2, "s2": 1})
    assert err.data == SHUTDOWN_DATA
    assert (
        err.raw
        == f"id: {err.id}\nevent: error\ndata: ".encode() + orjson.dumps(SHUTDOWN_DATA) + b"\n\n"
    )
    assert srv.proc.wait(15) == 0


# --------------------------------------------------------------------------- h2c


def test_sse_over_h2c(server: ServerProcess, client: httpx.Client, topic: str) -> None:
    write(client, topic, [{"data": 1}, {"data": 2}])
    wid = create_watch(client, {topic: {}})["wid"]
    parser = SseParser()
    frames: list[Frame] = []
    model = CursorModel({topic: 0})
    with httpx.Client(base_url=server.url, http1=False, http2=True, timeout=10) as h2:
        with h2.stream("GET", f"/v0/watch/{wid}", headers={"Accept": "text/event-stream"}) as r:
            assert r.status_code == 200 and r.http_version == "HTTP/2"
            assert r.headers["content-type"].startswith("text/event-stream")
            assert r.headers["cache-control"] == "no-store"
            assert r.headers["x-accel-buffering"] == "no"
            wrote = False
            for chunk in r.iter_raw():
                frames.extend(parser.feed(chunk))
                if not wrote and any(f.event == "caught-up" for f in frames):
                    write(client, topic, [{"data": 3}])
                    wrote = True
                if seqs(frames) == [1, 2, 3] and frames[-1].event == "caught-up":
                    break
        assert frames[0].raw == b"retry: 2000\n\n"
        check_frames(frames[1:], model)
        assert seqs(frames) == [1, 2, 3]
        # the session is still usable over h2 after the stream closed; errors are JSON
        r2 = h2.get(f"/v0/watch/{wid}", headers={"Accept": "application/json"})
        error_of(r2, 406, "not_acceptable")
        assert r2.http_version == "HTTP/2"
