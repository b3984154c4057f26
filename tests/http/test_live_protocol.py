"""Black-box: transport and protocol rules (API §0.1, §0.2, §0.5–§0.7, §10, §11, §12):
routing errors, content types and body rules, body size cap, error/success body shapes,
probes, HTTP/2 prior knowledge, resource caps."""

from __future__ import annotations

import socket
from collections.abc import Callable, Iterator

import httpx
import pytest

from tests.http.conftest import ServerFactory
from tests.http.live import (
    JSON,
    data_records,
    describe,
    diff,
    error_of,
    ok,
    put_topic,
    raw_error_of,
    raw_http,
    state,
    write,
)
from tests.support.server import ServerProcess

Names = Callable[[str], str]

# --------------------------------------------------------------------------- routing


@pytest.mark.parametrize(
    ("method", "path"),
    [
        ("GET", "/"),
        ("GET", "/v0"),
        ("GET", "/v1/topics"),
        ("GET", "/v0/nope"),
        ("POST", "/v0/nope"),
        ("GET", "/v0/topics/x/nope"),
        ("POST", "/v0/topics/x/y/z"),
        ("GET", "/v0/routers/a->b/x"),
        ("GET", "/v0/watch/wid_abc"),  # an unknown session
        ("GET", "/V0/health"),
        ("GET", "/v0/topics/a%2Fb/c"),
    ],
)
def test_unknown_route_404_not_found(client: httpx.Client, method: str, path: str) -> None:
    error_of(client.request(method, path, json={} if method != "GET" else None), 404, "not_found")


@pytest.mark.parametrize(
    ("method", "path"),
    [
        ("PATCH", "/v0/topics/x"),
        ("OPTIONS", "/v0/topics/x"),
        ("GET", "/v0/topics/x/diff"),
        ("PUT", "/v0/topics/x/diff"),
        ("DELETE", "/v0/topics/x/delete"),
        ("GET", "/v0/topics/x/delete"),
        ("POST", "/v0/topics"),
        ("DELETE", "/v0/topics"),
        ("POST", "/v0/health"),
        ("PUT", "/healthz"),
        ("DELETE", "/v0/ready"),
        ("POST", "/readyz"),
        ("POST", "/v0/metrics"),
    ],
)
def test_wrong_method_405(client: httpx.Client, method: str, path: str) -> None:
    error_of(client.request(method, path), 405, "method_not_allowed")


@pytest.mark.parametrize("path", ["/v0/health/", "/v0/topics/", "/v0/metrics/"])
def test_trailing_slash_is_404(client: httpx.Client, path: str) -> None:
    error_of(client.get(path, follow_redirects=False), 404, "not_found")


def test_head_never_writes(server: ServerProcess, client: httpx.Client, topic: str) -> None:
    put_topic(client, topic)
    r = raw_http(
        server.address,
        "HEAD",
        f"/v0/topics/{topic}",
        [("Content-Type", "application/json")],
        b'{"records":[{"data":"via-HEAD"}]}',
    )
    assert r.status_code in (200, 405), r.status_code
    assert state(client, topic)["head_seq"] == 0


def test_head_on_topic_is_get_or_405(client: httpx.Client, topic: str) -> None:
    put_topic(client, topic)
    assert client.head(f"/v0/topics/{topic}").status_code in (200, 405)


def test_head_on_probe(client: httpx.Client) -> None:
    assert client.head("/v0/health").status_code in (200, 405)


# --------------------------------------------------------------------------- bodies


def test_write_requires_json_content_type(client: httpx.Client, topic: str) -> None:
    body = b'{"records":[{"data":1}]}'
    for headers in (
        {},
        {"Content-Type": "text/plain"},
        {"Content-Type": "application/xml"},
        {"Content-Type": "text/json"},
        {"Content-Type": "json"},
        {"Content-Type": "application/x-www-form-urlencoded"},
    ):
        r = client.post(f"/v0/topics/{topic}", content=body, headers=headers)
        error_of(r, 415, "unsupported_media_type")
    error_of(client.get(f"/v0/topics/{topic}"), 404, "topic_not_found")
    for ct in (
        "application/json",
        "application/json; charset=utf-8",
        "application/json;charset=UTF-8",
    ):
        r = client.post(f"/v0/topics/{topic}", content=body, headers={"Content-Type": ct})
        assert r.status_code in (200, 201), describe(r)


def test_content_type_leading_whitespace_trimmed(server: ServerProcess, tname: Names) -> None:
    body = b'{"records":[{"data":1}]}'
    for ct in ("  application/json", "\t application/json; charset=utf-8"):
        r = raw_http(
            server.address, "POST", f"/v0/topics/{tname('ws')}", [("Content-Type", ct)], body
        )
        assert r.status_code == 201, r.content
    r = raw_http(
        server.address,
        "POST",
        f"/v0/topics/{tname('ws')}",
        [("Content-Type", "  text/plain")],
        body,
    )
    raw_error_of(r, 415, "unsupported_media_type")


def test_empty_body_rules(client: httpx.Client, tname: Names) -> None:
    t = tname("eb")
    # PUT and diff: empty body is {} (no content type needed)
    assert ok(client.put(f"/v0/topics/{t}", content=b""), 201)["created"] is True
    assert ok(client.post(f"/v0/topics/{t}/diff", content=b""))["records"] == []
    # write and delete: content type check, then parse
    error_of(client.post(f"/v0/topics/{t}", content=b""), 415, "unsupported_media_type")
    error_of(
        client.post(f"/v0/topics/{t}", content=b"", headers=JSON),
        400,
        "invalid_request",
        message_prefix="malformed JSON body:",
    )
    error_of(client.post(f"/v0/topics/{t}/delete", content=b""), 415, "unsupported_media_type")
    error_of(
        client.post(f"/v0/topics/{t}/delete", content=b"", headers=JSON), 400, "invalid_request"
    )


@pytest.mark.parametrize(
    "raw",
    [
        b"{",
        b"{]",
        b"not json",
        b'{"records":[{"data":1}]}x',
        b"\xff\xfe",
        b"[" * 5000 + b"]" * 5000,
        b"{'a':1}",
        b'{"records":[{"data":NaN}]}',
    ],
)
def test_malformed_json_400_prefix(client: httpx.Client, topic: str, raw: bytes) -> None:
    r = client.post(f"/v0/topics/{topic}", content=raw, headers=JSON)
    error_of(r, 400, "invalid_request", message_prefix="malformed JSON body:")


def test_deep_but_parseable_json(client: httpx.Client, topic: str) -> None:
    deep = b'{"records":[{"data":' + b"[" * 200 + b"1" + b"]" * 200 + b"}]}"
    r = client.post(f"/v0/topics/{topic}", content=deep, headers=JSON)
    assert r.status_code in (201, 400), describe(r)
    if r.status_code == 201:
        got = diff(client, topic)["records"][0]["data"]
        depth = 0
        while isinstance(got, list):
            got = got[0]
            depth += 1
        assert (depth, got) == (200, 1)
    else:
        error_of(r, 400, "invalid_request")


def test_unknown_request_fields_ignored(client: httpx.Client, topic: str) -> None:
    r = client.post(
        f"/v0/topics/{topic}",
        json={"records": [{"data": 1, "extra": [1]}], "future_field": {"x": 1}},
    )
    assert ok(r, 201)["seqs"] == [1]
    assert diff(client, topic, future=True)["records"][0]["data"] == 1
    r = client.post(f"/v0/topics/{topic}/delete", json={"before_seq": 2, "zzz": None})
    assert ok(r)["deleted"] == 1


def test_json_values_round_trip(client: httpx.Client, topic: str) -> None:
    values = [
        0,
        -1,
        2**63,
        1.5,
        -0.25,
        1e300,
        "",
        "ünïcødé ✓ \u0000 \n",
        True,
        False,
        None,
        [],
        {},
        {"b": 1, "a": [None, {"z": []}]},
        [1, "2", [3.0]],
    ]
    write(client, topic, [{"data": v, "meta": {"v": v}} for v in values])
    recs = diff(client, topic)["records"]
    assert [r["data"] for r in recs] == values
    assert [r["meta"] for r in recs] == [{"v": v} for v in values]


# --------------------------------------------------------------------------- shapes


def test_performance_on_every_success_and_never_on_errors(client: httpx.Client, topic: str) -> None:
    ok(client.put(f"/v0/topics/{topic}"), 201)
    ok(client.get(f"/v0/topics/{topic}"))
    ok(client.get("/v0/topics", params={"prefix": topic}))
    w = ok(client.post(f"/v0/topics/{topic}", json={"records": data_records(1)}))
    assert {"wal_append_ms", "fsync_ms"} <= set(w["performance"])
    d = ok(client.post(f"/v0/topics/{topic}/diff", json={}))
    assert isinstance(d["performance"]["records_scanned"], int)
    ok(client.post(f"/v0/topics/{topic}/delete", json={"before_seq": 1}))
    ok(client.delete(f"/v0/topics/{topic}"))
    for r in (
        client.get(f"/v0/topics/{topic}"),
        client.post(f"/v0/topics/{topic}", json={"records": []}),
        client.get("/v0/nope"),
        client.patch("/v0/topics/x"),
    ):
        assert set(r.json()) == {"error"}, describe(r)
        assert "performance" not in r.json()["error"], describe(r)


@pytest.mark.parametrize("path", ["/v0/health", "/healthz"])
def test_health(client: httpx.Client, path: str) -> None:
    body = ok(client.get(path), perf=False)
    assert set(body) >= {"status", "version", "uptime_ms"}
    assert body["status"] == "ok" and body["version"] == "0.1.0"
    assert isinstance(body["uptime_ms"], int) and body["uptime_ms"] >= 0
    assert "performance" not in body


@pytest.mark.parametrize("path", ["/v0/ready", "/readyz"])
def test_ready(client: httpx.Client, path: str) -> None:
    body = ok(client.get(path), perf=False)
    assert body["status"] == "ready" and body["wal_replay_complete"] is True
    assert isinstance(body["topics"], int) and body["topics"] >= 0
    assert "performance" not in body


def test_ready_topic_count_moves(client: httpx.Client, topic: str) -> None:
    before = client.get("/v0/ready").json()["topics"]
    put_topic(client, topic)
    assert client.get("/v0/ready").json()["topics"] == before + 1


def test_openapi_document(client: httpx.Client) -> None:
    r = client.get("/v0/openapi.json")
    assert r.status_code == 200, describe(r)
    doc = r.json()
    assert isinstance(doc, dict) and "openapi" in doc and "paths" in doc


def test_probe_ignores_bad_auth_header_when_auth_disabled(client: httpx.Client, topic: str) -> None:
    h = {"Authorization": "Bearer whatever"}
    assert client.get("/v0/health", headers=h).status_code == 200
    assert (
        client.put(f"/v0/topics/{topic}", headers={"Authorization": "Basic x"}).status_code == 201
    )


# --------------------------------------------------------------------------- HTTP/2


def test_http2_prior_knowledge_and_http11_same_port(server: ServerProcess, topic: str) -> None:
    with httpx.Client(base_url=server.url, http1=False, http2=True, timeout=10) as h2:
        r = h2.get("/v0/health")
        assert r.status_code == 200 and r.http_version == "HTTP/2"
        r = h2.post(f"/v0/topics/{topic}", json={"records": data_records("via-h2")})
        assert r.status_code == 201 and r.http_version == "HTTP/2", describe(r)
        r = h2.post(f"/v0/topics/{topic}/diff", json={})
        assert r.json()["records"][0]["data"] == "via-h2"
        error_of(h2.get("/v0/nope"), 404, "not_found")
        error_of(h2.post(f"/v0/topics/{topic}", content=b"x"), 415, "unsupported_media_type")
    with httpx.Client(base_url=server.url, timeout=10) as h1:
        r = h1.get("/v0/health")
        assert r.status_code == 200 and r.http_version == "HTTP/1.1"


def test_http11_keep_alive_raw_socket(server: ServerProcess) -> None:
    host, _, port = server.address.rpartition(":")
    with socket.create_connection((host.strip("[]"), int(port)), timeout=5) as s:
        for _ in range(2):
            s.sendall(f"GET /v0/health HTTP/1.1\r\nHost: {server.address}\r\n\r\n".encode())
            buf = b""
            while b"\r\n\r\n" not in buf:
                buf += s.recv(4096)
            head, _, rest = buf.partition(b"\r\n\r\n")
            assert head.startswith(b"HTTP/1.1 200"), head
            length = next(
                int(line.split(b":")[1])
                for line in head.split(b"\r\n")
                if line.lower().startswith(b"content-length")
            )
            while len(rest) < length:
                rest += s.recv(4096)


def test_http2_large_bodies(server: ServerProcess, topic: str) -> None:
    with httpx.Client(base_url=server.url, http1=False, http2=True, timeout=30) as h2:
        r = h2.post(
            f"/v0/topics/{topic}",
            json={"records": [{"data": "x" * 1_000_000}, {"data": "y" * 500_000}]},
        )
        assert r.http_version == "HTTP/2" and ok(r, 201)["seqs"] == [1, 2]
        d = ok(h2.post(f"/v0/topics/{topic}/diff", json={"max_batch_bytes": 8_388_608}))
        assert [len(x["data"]) for x in d["records"]] == [1_000_000, 500_000]


def test_cli_serve_entry_point(make_server: ServerFactory) -> None:
    srv = make_server(start=False)
    srv.use_cli = True
    srv.start()
    with httpx.Client(base_url=srv.url, timeout=10) as c:
        assert c.get("/v0/health").json()["status"] == "ok"
        assert ok(c.put("/v0/topics/cli"), 201)["created"] is True
    assert srv.stop() == 0


# --------------------------------------------------------------------------- body size cap


@pytest.fixture
def small_body_server(make_server: ServerFactory) -> Iterator[httpx.Client]:
    srv = make_server(env={"SEGLOG_MAX_BODY_BYTES": "1000"})
    with httpx.Client(base_url=srv.url, timeout=10) as c:
        yield c


def test_payload_too_large_before_content_type(small_body_server: httpx.Client) -> None:
    c = small_body_server
    big = b"x" * 1001
    for method, path in (
        ("POST", "/v0/topics/t"),
        ("PUT", "/v0/topics/t"),
        ("POST", "/v0/topics/t/diff"),
        ("POST", "/v0/topics/t/delete"),
    ):
        for headers in ({}, {"Content-Type": "text/plain"}, JSON):
            r = c.request(method, path, content=big, headers=headers)
            error_of(r, 413, "payload_too_large")
    # also without a Content-Length (chunked upload)
    r = c.post("/v0/topics/t", content=iter([b"x" * 600, b"y" * 600]), headers=JSON)
    error_of(r, 413, "payload_too_large")
    error_of(c.get("/v0/topics/t"), 404, "topic_not_found")
    # exactly at the limit is fine
    body = b'{"records":[{"data":"' + b"z" * (1000 - 25) + b'"}]}'
    assert len(body) == 1000
    r = c.post("/v0/topics/t", content=body, headers=JSON)
    assert ok(r, 201)["seqs"] == [1]


# --------------------------------------------------------------------------- resource caps


def test_max_topics_429(make_server: ServerFactory) -> None:
    srv = make_server(env={"SEGLOG_MAX_TOPICS": "1"})
    with httpx.Client(base_url=srv.url, timeout=10) as c:
        put_topic(c, "first")
        detail = {"limit": "max_topics", "max": 1}
        err = error_of(c.put("/v0/topics/second"), 429, "throttled", detail=detail)
        assert err["message"]
        r = c.post("/v0/topics/second", json={"records": data_records(1)})
        error_of(r, 429, "throttled", detail=detail)
        error_of(c.get("/v0/topics/second"), 404, "topic_not_found")
        # re-PUT of an existing topic and writes to it always succeed
        ok(c.put("/v0/topics/first", json={"ttl_ms": 5}), 200)
        assert write(c, "first", data_records(1))["seqs"] == [1]
        # deleting frees the slot
        ok(c.delete("/v0/topics/first"))
        put_topic(c, "second")
        assert ok(c.get("/v0/ready"), perf=False)["topics"] == 1


def test_cap_zero_disables(make_server: ServerFactory) -> None:
    srv = make_server(env={"SEGLOG_MAX_TOPICS": "0", "SEGLOG_MAX_BODY_BYTES": "0"})
    with httpx.Client(base_url=srv.url, timeout=30) as c:
        for i in range(5):
            put_topic(c, f"t{i}")
        r = c.post("/v0/topics/t0", json={"records": [{"data": "x" * 1_000_000}] * 3})
        assert ok(r)["count"] == 3
        assert state(c, "t0")["count"] == 3


def test_max_total_bytes_429(make_server: ServerFactory) -> None:
    srv = make_server(env={"SEGLOG_MAX_TOTAL_BYTES": "100"})
    with httpx.Client(base_url=srv.url, timeout=10) as c:
        write(c, "a", [{"data": "x" * 88}])  # 90 bytes
        write(c, "b", [{"data": "y" * 8}])  # 10 bytes: exactly at the cap
        detail = {"limit": "max_total_bytes", "max": 100}
        error_of(
            c.post("/v0/topics/a", json={"records": data_records(1)}),
            429,
            "throttled",
            detail=detail,
        )
        error_of(
            c.post("/v0/topics/b", json={"records": data_records(1, 2)}),
            429,
            "throttled",
            detail=detail,
        )
        assert (state(c, "a")["head_seq"], state(c, "b")["head_seq"]) == (1, 1)
        # freeing bytes (a record delete) admits writes again
        ok(c.post("/v0/topics/a/delete", json={"before_seq": 2}))
        assert write(c, "b", data_records(1, 2))["seqs"] == [2, 3]
