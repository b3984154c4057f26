"""Every documented operation, sent for real to a live server, answers a status the document
lists for it, with a body its schema accepts (JSON Schema 2020-12, `jsonschema_rs`). Covers
the success paths of every operation plus a few error answers; the test fails if an
operation of the document was not exercised, so a new route needs a case here."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import jsonschema_rs
import orjson
import pytest

from seglog.http.openapi import HTTP_METHODS
from tests.support.server import ServerProcess

Json = dict[str, Any]


class Checker:
    """Sends requests by (method, path template) and checks each answer against the
    document the server itself serves."""

    def __init__(self, client: httpx.Client) -> None:
        self.client = client
        self.doc: Json = client.get("/v0/openapi.json").json()
        self.exercised: set[tuple[str, str]] = set()

    def schema_for(self, path: str, method: str, status: int, media: str) -> Json | None:
        responses = self.doc["paths"][path][method]["responses"]
        assert str(status) in responses, f"{method.upper()} {path}: undocumented {status}"
        resp = responses[str(status)]
        if "$ref" in resp:
            resp = self.doc["components"]["responses"][resp["$ref"].rsplit("/", 1)[1]]
        content = resp.get("content", {})
        assert media in content, f"{method.upper()} {path} {status}: undocumented {media}"
        schema: Json | None = content[media].get("schema")
        return schema

    def validate(self, schema: Json, body: Any, what: str) -> None:
        root = {**schema, "components": self.doc["components"]}
        errors = [str(e) for e in jsonschema_rs.Draft202012Validator(root).iter_errors(body)]
        assert not errors, f"{what}: {errors[:3]} in {body!r:.400}"

    def call(
        self, method: str, path: str, path_params: dict[str, str] | None = None, **kw: Any
    ) -> httpx.Response:
        url = path.format(**(path_params or {}))
        r = self.client.request(method.upper(), url, **kw)
        self.check(method, path, r)
        return r

    def check(self, method: str, path: str, r: httpx.Response) -> None:
        self.exercised.add((path, method))
        media = r.headers.get("content-type", "").split(";")[0].strip()
        if path == "/v0/metrics" and media == "text/plain":
            media = "text/plain; version=0.0.4"
        schema = self.schema_for(path, method, r.status_code, media)
        if media == "application/json" and schema is not None:
            self.validate(schema, orjson.loads(r.content), f"{method.upper()} {path}")

    def stream(self, path: str, path_params: dict[str, str], **kw: Any) -> None:
        """Open an SSE GET, check its status and content type, and close it."""
        with self.client.stream("GET", path.format(**path_params), **kw) as r:
            if r.status_code != 200:
                r.read()
            self.check("get", path, r)
            assert r.status_code == 200, r.text


@pytest.fixture(scope="module")
def checker() -> Iterator[Checker]:
    with ServerProcess() as srv, httpx.Client(base_url=srv.url, timeout=30.0) as c:
        yield Checker(c)


def test_every_operation_answers_as_documented(checker: Checker) -> None:
    c = checker
    for probe in ("/v0/health", "/healthz", "/v0/ready", "/readyz", "/v0/openapi.json"):
        c.call("get", probe)
    c.call("get", "/v0/metrics")
    c.call("get", "/v0/metrics", headers={"Accept": "application/json"})
    c.call("get", "/console")
    c.call("get", "/console/{name}", {"name": "app.js"})
    c.call("get", "/console/{name}", {"name": "nope.js"})

    t = {"topic": "oa-log"}
    assert c.call("put", "/v0/topics/{topic}", t, json={"ttl_ms": 0}).status_code == 201
    assert c.call("put", "/v0/topics/{topic}", t, content=b"").status_code == 200
    rec = {"data": {"n": 1}, "tag": "a", "meta": {"m": 1}}
    c.call("post", "/v0/topics/{topic}", t, json={"records": [rec, {"data": 2}], "node": "n1"})
    c.call("post", "/v0/topics/{topic}", {"topic": "oa-new"}, json={"records": [{"data": 1}]})
    nd = {"Content-Type": "application/x-ndjson"}
    c.call("post", "/v0/topics/{topic}", {"topic": "oa-nd"}, content=b'{"data":1}\n', headers=nd)
    c.call("post", "/v0/topics/{topic}", t, content=b'{"data":1}\n{"tag":2}\n', headers=nd)
    c.call("get", "/v0/topics/{topic}", t)
    c.call("get", "/v0/topics/{topic}", {"topic": "oa-missing"})
    c.call("get", "/v0/topics", params={"prefix": "oa-", "page_size": "1"})
    body = {"from_seq": 0, "include_tags": True, "include_meta": True}
    c.call("post", "/v0/topics/{topic}/diff", t, json=body)
    c.call("post", "/v0/topics/{topic}/diff", t, content=b"")
    c.call("post", "/v0/topics/{topic}/diff", t, content=b"{", headers={"Content-Type": "x/y"})
    c.call("post", "/v0/topics/{topic}/delete", t, json={"before_seq": 1})

    r = {"router": "oa-r"}
    route = {"source": "oa-log", "dest": "oa-dest", "create_dest": True, "filter": "a"}
    assert c.call("put", "/v0/routers/{router}", r, json=route).status_code == 201
    c.call("get", "/v0/routers/{router}", r)
    c.call("get", "/v0/routers", params={"source": "oa-log"})
    c.call("delete", "/v0/routers/{router}", r)
    c.call("get", "/v0/routers/{router}", r)

    q = {"topic": "oa-q"}
    c.call("put", "/v0/topics/{topic}", q, json={"type": "queue"})
    c.call("post", "/v0/topics/{topic}", q, json={"records": [{"data": i} for i in range(4)]})
    claimed = c.call("post", "/v0/topics/{topic}/claim", q, json={"node": "w", "max": 4})
    jobs = claimed.json()["claimed"]
    assert len(jobs) == 4
    seqs = [j["$seq"] for j in jobs]
    lease_ids = [j["lease_id"] for j in jobs]
    fence = {"node": "w", "seqs": seqs[:1], "lease_ids": lease_ids[:1]}
    c.call("post", "/v0/topics/{topic}/extend", q, json={**fence, "lease_ms": 60000})
    c.call("post", "/v0/topics/{topic}/ack", q, json=fence)
    c.call("post", "/v0/topics/{topic}/nack", q, json={"node": "w", "seqs": seqs[1:]})
    c.call("post", "/v0/topics/{topic}/claim", t, json={"node": "w"})  # 409 not_a_queue
    c.stream("/v0/topics/{topic}/work", q, params={"node": "w2", "max": "1"})

    watch = c.call("post", "/v0/watch", json={"topics": {"oa-log": {"from_seq": 0}}})
    c.stream("/v0/watch/{wid}", {"wid": watch.json()["wid"]})
    c.call("get", "/v0/watch/{wid}", {"wid": "wid_missing"})
    c.call("get", "/v0/ws")

    c.call("delete", "/v0/topics/{topic}", {"topic": "oa-new"})
    c.call("delete", "/v0/topics/{topic}", t, params={"if_empty": "true"})  # 409 not empty

    documented = {
        (path, m) for path, ops in c.doc["paths"].items() for m in ops if m in HTTP_METHODS
    }
    assert documented - c.exercised == set()
