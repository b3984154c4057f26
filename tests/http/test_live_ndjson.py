"""Black-box: the streaming append (API §13.2, `Content-Type: application/x-ndjson`) —
chunked commits, per-line errors that keep earlier chunks, query fields, limits, scopes."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator

import httpx
import orjson
import pytest

from seglog.http.ndjson_append import CHUNK_RECORDS
from tests.http.live import diff, error_of, ok, put_topic, state
from tests.support.server import ServerProcess

NDJSON = {"Content-Type": "application/x-ndjson"}
Names = Callable[[str], str]


def lines(records: list[dict[str, object]]) -> bytes:
    return b"".join(orjson.dumps(r) + b"\n" for r in records)


def all_records(c: httpx.Client, name: str) -> list[dict[str, object]]:
    out: list[dict[str, object]] = []
    cursor = 0
    while True:
        d = diff(c, name, from_seq=cursor, limit=1000, include_tags=True)
        out += d["records"]
        if d["caught_up"]:
            return out
        cursor = d["next_from_seq"]


def test_lines_append_in_order_and_autocreate(client: httpx.Client, topic: str) -> None:
    recs = [{"data": {"i": i}, "tag": f"t{i % 3}"} for i in range(5)]
    body = lines(recs[:2]) + b"\r\n  \n" + lines(recs[2:])  # blank lines are skipped
    r = client.post(f"/v0/topics/{topic}", content=body, headers=NDJSON)
    got = ok(r, 201)
    assert got["topic"] == topic and got["count"] == 5 and got["head_seq"] == 5
    assert got["chunks"] == [{"first_seq": 1, "last_seq": 5, "count": 5}]
    stored = all_records(client, topic)
    assert [(x["$seq"], x["data"], x["$tag"]) for x in stored] == [
        (i + 1, {"i": i}, f"t{i % 3}") for i in range(5)
    ]
    again = ok(client.post(f"/v0/topics/{topic}", content=lines(recs[:1]), headers=NDJSON))
    assert again["chunks"] == [{"first_seq": 6, "last_seq": 6, "count": 1}]


def test_a_large_body_commits_in_chunks_streamed(client: httpx.Client, topic: str) -> None:
    n = CHUNK_RECORDS * 2 + 7

    def body() -> Iterator[bytes]:  # sent chunked, without a Content-Length
        yield lines([{"data": i} for i in range(n)])

    got = ok(client.post(f"/v0/topics/{topic}", content=body(), headers=NDJSON), 201)
    assert got["count"] == n
    # Chunks fill up to CHUNK_RECORDS; lines that wait LINGER_S for more (a loaded machine
    # can stall the sender that long) are committed early, so the split is not exact.
    counts = [c["count"] for c in got["chunks"]]
    assert sum(counts) == n and max(counts) == CHUNK_RECORDS and 3 <= len(counts) <= 6
    seq = 1
    for c in got["chunks"]:  # contiguous, in order
        assert (c["first_seq"], c["last_seq"]) == (seq, seq + c["count"] - 1)
        seq += c["count"]
    assert state(client, topic)["head_seq"] == n


def test_bad_line_stops_and_keeps_earlier_chunks(client: httpx.Client, topic: str) -> None:
    good = lines([{"data": i} for i in range(CHUNK_RECORDS)])  # one whole chunk first
    bad = b'{"data": 1}\n{"tag": "no data"}\n{"data": 3}\n'
    r = client.post(f"/v0/topics/{topic}", content=good + bad, headers=NDJSON)
    err = error_of(r, 400, "invalid_request")
    assert err["detail"]["line"] == CHUNK_RECORDS + 2
    assert err["detail"]["committed_through_seq"] == CHUNK_RECORDS
    assert err["message"] == f"malformed JSON body: line {CHUNK_RECORDS + 2}.data is required"
    assert state(client, topic)["head_seq"] == CHUNK_RECORDS  # the bad chunk: nothing


def test_first_chunk_bad_commits_nothing(client: httpx.Client, topic: str) -> None:
    put_topic(client, topic)
    for body, code, line in [
        (b'{"data":1}\nnot json\n', "invalid_request", 2),
        (b'{"data":1}\n{"data":2},{"data":3}\n', "invalid_request", 2),
        (b'{"data":1}\n{"data":2,"tag":7}\n', "invalid_request", 2),
        (b'\n\n{"data":1,"tag":"' + b"x" * 300 + b'"}\n', "invalid_request", 3),
        (b'{"data":"' + b"x" * (1 << 20) + b'"}\n', "record_too_large", 1),
    ]:
        r = client.post(f"/v0/topics/{topic}", content=body, headers=NDJSON)
        err = error_of(r, 400, code)
        assert err["detail"]["line"] == line, err
        assert err["detail"]["committed_through_seq"] is None, err
    assert state(client, topic)["head_seq"] == 0


def test_empty_body_and_query_fields(client: httpx.Client, tname: Names) -> None:
    t = tname("q")
    error_of(
        client.post(f"/v0/topics/{t}", content=b"\n \n", headers=NDJSON), 400, "invalid_request"
    )
    r = client.post(f"/v0/topics/{t}?create=false", content=b'{"data":1}\n', headers=NDJSON)
    error_of(r, 404, "topic_not_found")
    r = client.post(f"/v0/topics/{t}?create=maybe", content=b'{"data":1}\n', headers=NDJSON)
    error_of(r, 400, "invalid_request")
    body = b'{"data":1}\n{"data":2,"node":"own"}\n'
    ok(client.post(f"/v0/topics/{t}?node=edge-1", content=body, headers=NDJSON), 201)
    nodes = [x.get("$node") for x in diff(client, t)["records"]]
    assert nodes == ["edge-1", "own"]
    r = client.post(f"/v0/topics/{t}", content=body, headers={**NDJSON, "Idempotency-Key": "k"})
    error_of(r, 400, "invalid_request")
    r = client.post(f"/v0/topics/{t}?node={'n' * 129}", content=body, headers=NDJSON)
    error_of(r, 400, "invalid_request")
    assert state(client, t)["head_seq"] == 2


def test_refused_chunk_reports_its_first_line(client: httpx.Client, topic: str) -> None:
    put_topic(client, topic, {"cap_records": 3, "discard": "reject"})
    r = client.post(
        f"/v0/topics/{topic}", content=lines([{"data": i} for i in range(5)]), headers=NDJSON
    )
    err = error_of(r, 400, "record_too_large")  # more records than the cap (API §3)
    assert err["detail"]["line"] == 1 and err["detail"]["committed_through_seq"] is None


def test_scope_is_checked(make_server: Callable[..., ServerProcess]) -> None:
    srv = make_server(env={"SEGLOG_API_KEYS": "ro:r,rw:rw"})
    with httpx.Client(base_url=srv.url) as c:
        r = c.post(
            "/v0/topics/t1",
            content=b'{"data":1}\n',
            headers={**NDJSON, "Authorization": "Bearer ro"},
        )
        error_of(r, 403, "forbidden")
        r = c.post(
            "/v0/topics/t1",
            content=b'{"data":1}\n',
            headers={**NDJSON, "Authorization": "Bearer rw"},
        )
        ok(r, 201)


def test_lines_that_trickle_in_are_committed_while_the_body_is_open(
    server: ServerProcess, topic: str
) -> None:
    """`tail -f | curl -T -`: lines are readable shortly after they arrive, before the
    body ends (no waiting for a chunk of 10,000 to fill)."""
    import socket
    import time

    host, port = server.url.removeprefix("http://").rsplit(":", 1)
    with (
        socket.create_connection((host, int(port)), timeout=30) as s,
        httpx.Client(base_url=server.url) as c,
    ):
        s.sendall(
            f"POST /v0/topics/{topic} HTTP/1.1\r\nHost: x\r\n"
            "Content-Type: application/x-ndjson\r\nTransfer-Encoding: chunked\r\n\r\n".encode()
        )

        def chunk(data: bytes) -> None:
            s.sendall(b"%x\r\n%b\r\n" % (len(data), data))

        def visible(n: int) -> bool:
            deadline = time.monotonic() + 10
            while time.monotonic() < deadline:
                r = c.get(f"/v0/topics/{topic}")
                if r.status_code == 200 and r.json()["head_seq"] >= n:
                    return True
                time.sleep(0.02)
            return False

        chunk(b'{"data":1}\n{"data":2}\n{"da')  # a line split across chunks stays pending
        assert visible(2)
        chunk(b'ta":3}\n')
        assert visible(3)
        chunk(b"")
        response = s.recv(65536).decode()
    assert response.startswith("HTTP/1.1 201"), response
    body = orjson.loads(response.split("\r\n\r\n", 1)[1])
    assert body["count"] == 3
    assert body["chunks"] == [
        {"first_seq": 1, "last_seq": 2, "count": 2},
        {"first_seq": 3, "last_seq": 3, "count": 1},
    ]


@pytest.mark.parametrize("durability", ["disk", "fsync"])
def test_sigkill_mid_stream_keeps_every_visible_record_in_order(
    make_server: Callable[..., ServerProcess], durability: str
) -> None:
    """A server killed (SIGKILL: a process crash) while an NDJSON body is still arriving:
    after the restart the topic holds a gap-free prefix of the stream, in line order, at
    least as long as what readers saw before the kill — committed chunks survive whole,
    and the chunk being parsed is simply absent."""
    import socket
    import threading
    import time

    srv = make_server()
    host, port = srv.url.removeprefix("http://").rsplit(":", 1)
    with httpx.Client(base_url=srv.url) as c:
        put_topic(c, "ks", {"durability": durability})
    stop = threading.Event()

    def send() -> None:
        with contextlib.suppress(OSError), socket.create_connection((host, int(port))) as s:
            s.sendall(
                b"POST /v0/topics/ks HTTP/1.1\r\nHost: x\r\n"
                b"Content-Type: application/x-ndjson\r\nTransfer-Encoding: chunked\r\n\r\n"
            )
            i = 0
            while not stop.is_set():
                data = b"".join(b'{"data":%d}\n' % n for n in range(i, i + 500))
                s.sendall(b"%x\r\n%b\r\n" % (len(data), data))
                i += 500

    sender = threading.Thread(target=send, daemon=True)
    sender.start()
    seen = 0
    with httpx.Client(base_url=srv.url) as c:
        deadline = time.monotonic() + 30
        while seen < 25_000 and time.monotonic() < deadline:
            seen = c.get("/v0/topics/ks").json()["head_seq"]
    assert seen >= 25_000, "the stream never got going"
    srv.kill()
    stop.set()
    sender.join(10)
    srv.start()
    with httpx.Client(base_url=srv.url, timeout=30) as c:
        head = c.get("/v0/topics/ks").json()["head_seq"]
        values: list[int] = []
        cursor = 0
        while cursor < head:
            d = diff(c, "ks", from_seq=cursor, limit=1000)
            values += [r["data"] for r in d["records"]]
            cursor = d["next_from_seq"]
    # A gap-free prefix of the lines, in order, holding everything seen. (A `disk` topic's
    # head may stand past it: its unwritten head reservation became holes, SEMANTICS §3.2.)
    assert values == list(range(len(values)))
    assert len(values) >= seen
