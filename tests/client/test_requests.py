"""Request shapes (method, path, query, JSON body, headers) and result parsing, endpoint by
endpoint, for both clients."""

from __future__ import annotations

import dataclasses
from typing import Any

import httpx
import msgspec
import orjson
import pytest

from seglog.client import (
    Appended,
    AsyncClient,
    Client,
    Deleted,
    DiffResult,
    Health,
    ReadRecord,
    Ready,
    SeglogProtocolError,
    Tombstone,
    TopicDeleted,
    TopicPage,
    TopicPut,
    TopicState,
    TopicSummary,
)
from tests.client.conftest import MakeApi, body_of, ok

PERF = {"server_total_ms": 0.25}
CONFIG = {
    "type": "log",
    "ttl_ms": 60000,
    "cap_records": 0,
    "cap_bytes": 0,
    "discard": "old",
    "durable": True,
    "durability": "fsync",
    "priority": None,
    "auto_priority": True,
    "auto_create": True,
    "idempotency_window_ms": 120000,
    "dedupe_node": True,
    "lease_ms": 30000,
    "claim_jitter_ms": 0,
    "max_deliveries": 0,
    "dead_letter": None,
    "leases_durable": False,
}


def answer(body: Any, status: int = 200) -> Any:
    return lambda _req: ok(body, status)


async def test_health_and_ready(make_api: MakeApi) -> None:
    def handler(req: httpx.Request) -> httpx.Response:
        if req.url.path == "/v0/health":
            return ok({"status": "ok", "version": "0.1.0", "uptime_ms": 84012, "extra": 1})
        return ok({"status": "ready", "wal_replay_complete": True, "topics": 42})

    api = make_api(handler)
    assert await api("health") == Health("ok", "0.1.0", 84012)
    assert (api.last.method, api.last.url.path) == ("GET", "/v0/health")
    assert await api("ready") == Ready("ready", True, 42)
    assert api.last.url.path == "/v0/ready"


async def test_default_headers_and_bearer(make_api: MakeApi) -> None:
    api = make_api(answer({"status": "ok", "version": "x", "uptime_ms": 1}), api_key="s3cret")
    await api("health")
    assert api.last.headers["authorization"] == "Bearer s3cret"
    assert api.last.headers["accept"] == "application/json"
    assert api.last.headers["user-agent"].startswith("seglog-python/")

    anon = make_api(answer({"status": "ok", "version": "x", "uptime_ms": 1}))
    await anon("health")
    assert "authorization" not in anon.last.headers


async def test_base_url_path_prefix_is_kept(make_api: MakeApi) -> None:
    api = make_api(answer({"status": "ok", "version": "x", "uptime_ms": 1}), url="http://h/seglog/")
    await api("health")
    assert api.last.url.raw_path == b"/seglog/v0/health"


async def test_put_topic_body_encoding_and_result(make_api: MakeApi) -> None:
    api = make_api(
        answer({"topic": "t:a.b-c_d", "created": True, "config": CONFIG, "performance": PERF}, 201)
    )
    res = await api("put_topic", "t:a.b-c_d", {"ttl_ms": 60000, "durable": True})
    assert res == TopicPut("t:a.b-c_d", True, CONFIG, PERF)
    req = api.last
    assert req.method == "PUT"
    assert req.url.raw_path == b"/v0/topics/t%3Aa.b-c_d"
    assert req.headers["content-type"] == "application/json"
    assert body_of(req) == {"ttl_ms": 60000, "durable": True}

    await api("put_topic", "plain")
    assert body_of(api.last) == {}


@pytest.mark.parametrize(
    ("name", "encoded"),
    [
        ("a/b", b"a%2Fb"),
        ("..", b"%2E%2E"),
        (".", b"%2E"),
        ("x y?#", b"x%20y%3F%23"),
        ("é", b"%C3%A9"),
    ],
)
async def test_topic_names_are_one_escaped_segment(
    make_api: MakeApi, name: str, encoded: bytes
) -> None:
    api = make_api(answer({"topic": name, "deleted": False, "routers_removed": []}))
    await api("delete_topic", name)
    assert api.last.url.raw_path == b"/v0/topics/" + encoded


async def test_empty_topic_name_is_rejected_locally(make_api: MakeApi) -> None:
    api = make_api(answer({}))
    with pytest.raises(ValueError):
        await api("get_topic", "")
    assert api.requests == []


async def test_get_topic_parses_every_field(make_api: MakeApi) -> None:
    state = {
        "topic": "jobs",
        "type": "queue",
        "head_seq": 480231,
        "earliest_seq": 479101,
        "next_seq": 480232,
        "count": 1130,
        "bytes": 2310912,
        "config": CONFIG,
        "effective_priority": 500,
        "last_write_ts": 1748450000123,
        "last_read_ts": None,
        "queue": {"ready": 3, "in_flight": 1, "dead_lettered": 0},
        "performance": PERF,
    }
    api = make_api(answer(state))
    res = await api("get_topic", "jobs")
    assert res == TopicState(
        "jobs",
        "queue",
        480231,
        479101,
        480232,
        1130,
        2310912,
        CONFIG,
        500,
        1748450000123,
        None,
        {"ready": 3, "in_flight": 1, "dead_lettered": 0},
        PERF,
    )
    assert api.last.method == "GET" and api.last.url.query == b""

    del state["queue"]
    await api("get_topic", "jobs", touch=False)
    assert api.last.url.params["touch"] == "false"


async def test_list_topics_query_and_result(make_api: MakeApi) -> None:
    summary = {
        "topic": "events",
        "head_seq": 99,
        "earliest_seq": 1,
        "count": 99,
        "bytes": 8112,
        "durable": False,
        "effective_priority": 3,
    }
    api = make_api(answer({"topics": [summary], "next_cursor": "eyJ9", "performance": PERF}))
    page = await api("list_topics", prefix="ev", page_size=10, cursor="abc=")
    assert page == TopicPage([TopicSummary("events", 99, 1, 99, 8112, False, 3)], "eyJ9", PERF)
    assert dict(api.last.url.params) == {"prefix": "ev", "page_size": "10", "cursor": "abc="}
    assert api.last.url.path == "/v0/topics"

    await api("list_topics")
    assert api.last.url.query == b""


async def test_delete_topic(make_api: MakeApi) -> None:
    body = {
        "topic": "jobs",
        "deleted": True,
        "routers_removed": ["jobs->audit"],
        "performance": PERF,
    }
    api = make_api(answer(body))
    assert await api("delete_topic", "jobs", if_empty=True) == TopicDeleted(
        "jobs", True, ["jobs->audit"], PERF
    )
    assert api.last.method == "DELETE"
    assert dict(api.last.url.params) == {"if_empty": "true"}
    await api("delete_topic", "jobs")
    assert api.last.url.query == b""


APPENDED = {
    "topic": "jobs",
    "first_seq": 5,
    "last_seq": 6,
    "seqs": [5, 6],
    "head_seq": 6,
    "count": 2,
    "created": True,
    "deduped": False,
    "performance": PERF,
}


async def test_append_body_query_and_result(make_api: MakeApi) -> None:
    api = make_api(answer(APPENDED, 201))
    records = [
        {"data": {"type": "resize"}, "tag": "t42:job-1", "node": "eu-1", "meta": {"trace": "abc"}},
        {"data": None},
    ]
    res = await api(
        "append",
        "jobs",
        records,
        node="eu-1",
        idempotency_key="k-1",
        create=True,
        config={"ttl_ms": 5},
        return_seqs=False,
    )
    assert res == Appended("jobs", 5, 6, [5, 6], 6, 2, True, False, PERF)
    req = api.last
    assert (req.method, req.url.path) == ("POST", "/v0/topics/jobs")
    assert dict(req.url.params) == {"return_seqs": "false"}
    assert req.headers["content-type"] == "application/json"
    assert body_of(req) == {
        "records": records,
        "node": "eu-1",
        "idempotency_key": "k-1",
        "create": True,
        "config": {"ttl_ms": 5},
    }


async def test_append_minimal_body_and_missing_seqs(make_api: MakeApi) -> None:
    without_seqs = {k: v for k, v in APPENDED.items() if k != "seqs"}
    api = make_api(answer(without_seqs))
    res = await api("append", "jobs", [{"data": 1}])
    assert res.seqs is None
    assert body_of(api.last) == {"records": [{"data": 1}]}
    assert api.last.url.query == b""


async def test_append_one(make_api: MakeApi) -> None:
    api = make_api(answer(APPENDED))
    await api("append_one", "jobs", {"x": 1}, tag="t", node="n", meta={"m": 2}, idempotency_key="k")
    assert body_of(api.last) == {
        "records": [{"data": {"x": 1}, "tag": "t", "node": "n", "meta": {"m": 2}}],
        "idempotency_key": "k",
    }
    await api("append_one", "jobs", None)
    assert body_of(api.last) == {"records": [{"data": None}]}


DIFF = {
    "topic": "jobs",
    "records": [
        {
            "$seq": 4,
            "$ts": 1748450001000,
            "$node": "us-2",
            "$tag": "a",
            "data": {"x": 1},
            "meta": {"trace": "z9"},
        },
        {"$seq": 5, "$ts": 1748450002000, "data": None},
    ],
    "next_from_seq": 5,
    "head_seq": 9,
    "earliest_seq": 4,
    "caught_up": False,
    "tombstone": {
        "gap_from": 1,
        "gap_to": 3,
        "reason": "cap",
        "missed_estimate": 3,
        "earliest_seq": 4,
        "head_seq": 9,
    },
    "lag": 4,
    "performance": {"server_total_ms": 0.3, "records_scanned": 2},
}


async def test_diff_body_and_result(make_api: MakeApi) -> None:
    api = make_api(answer(DIFF))
    res = await api("diff", "jobs")
    assert body_of(api.last) == {
        "from_seq": 0,
        "include_tags": False,
        "include_meta": True,
        "wait_ms": 0,
        "max_batch_bytes": 0,
    }
    assert (api.last.method, api.last.url.path) == ("POST", "/v0/topics/jobs/diff")
    assert res == DiffResult(
        topic="jobs",
        records=[
            ReadRecord(4, 1748450001000, {"x": 1}, node="us-2", tag="a", meta={"trace": "z9"}),
            ReadRecord(5, 1748450002000, None),
        ],
        next_from_seq=5,
        head_seq=9,
        earliest_seq=4,
        caught_up=False,
        tombstone=Tombstone(1, 3, "cap", 3, 4, 9),
        lag=4,
        performance={"server_total_ms": 0.3, "records_scanned": 2},
    )


async def test_diff_options_and_long_poll_timeout(make_api: MakeApi) -> None:
    api = make_api(answer({**DIFF, "tombstone": None}), timeout=5.0)
    res = await api(
        "diff",
        "jobs",
        7,
        limit=10,
        node=["a", "b"],
        include_tags=True,
        include_meta=False,
        wait_ms=2500,
        max_batch_bytes=4096,
    )
    assert res.tombstone is None
    assert body_of(api.last) == {
        "from_seq": 7,
        "limit": 10,
        "node": ["a", "b"],
        "include_tags": True,
        "include_meta": False,
        "wait_ms": 2500,
        "max_batch_bytes": 4096,
    }
    # the read timeout covers the server's long-poll on top of the normal timeout
    assert api.last.extensions["timeout"]["read"] == pytest.approx(7.5)
    await api("diff", "jobs", node="solo")
    assert body_of(api.last)["node"] == "solo"
    assert api.last.extensions["timeout"]["read"] == pytest.approx(5.0)


async def test_delete_records(make_api: MakeApi) -> None:
    body = {
        "topic": "jobs",
        "deleted": 14,
        "earliest_seq": 480001,
        "head_seq": 480234,
        "count": 234,
        "bytes": 478820,
        "performance": PERF,
    }
    api = make_api(answer(body))
    res = await api("delete_records", "jobs", before_seq=480001)
    assert res == Deleted("jobs", 14, 480001, 480234, 234, 478820, PERF)
    assert (api.last.method, api.last.url.path) == ("POST", "/v0/topics/jobs/delete")
    assert body_of(api.last) == {"before_seq": 480001}
    await api("delete_records", "jobs", match=("tag", "Glob", "chat-42:*"), before_seq=77)
    assert body_of(api.last) == {"before_seq": 77, "match": ["tag", "Glob", "chat-42:*"]}
    await api("delete_records", "jobs", match="tenant42:job-9001")
    assert body_of(api.last) == {"match": "tenant42:job-9001"}


async def test_metrics_text_and_json(make_api: MakeApi) -> None:
    text = "# HELP topics_topics x\n# TYPE topics_topics gauge\ntopics_topics 3\n"

    def handler(req: httpx.Request) -> httpx.Response:
        if "application/json" in req.headers["accept"]:
            return ok({"topics": 3, "wal": {"fsyncs": 10}})
        return httpx.Response(200, text=text, headers={"Content-Type": "text/plain; version=0.0.4"})

    api = make_api(handler)
    assert await api("metrics") == text
    assert api.last.url.path == "/v0/metrics"
    assert api.last.headers["accept"] == "text/plain"
    assert await api("metrics_json") == {"topics": 3, "wal": {"fsyncs": 10}}
    assert api.last.headers["accept"] == "application/json"


@pytest.mark.parametrize(
    "body",
    [
        b"<html>proxy</html>",
        b"[1, 2]",
        b'{"status": "ok"}',  # missing fields
        b'{"status": "ok", "version": "1", "uptime_ms": "soon"}',  # wrong type
    ],
)
async def test_malformed_success_body_is_a_protocol_error(make_api: MakeApi, body: bytes) -> None:
    api = make_api(lambda _req: httpx.Response(200, content=body))
    with pytest.raises(SeglogProtocolError):
        await api("health")


@pytest.mark.parametrize(
    "change",
    [
        {"records": [{"$ts": 1, "data": 1}]},  # a record without `$seq`
        {"records": [{"$seq": "4", "$ts": 1}]},  # a seq that is not an integer
        {"records": {"$seq": 4}},  # not a list
        {"head_seq": None},
        {"tombstone": {"gap_from": 1}},  # a tombstone missing fields
    ],
)
async def test_malformed_diff_body_is_a_protocol_error(
    make_api: MakeApi, change: dict[str, Any]
) -> None:
    api = make_api(answer({**DIFF, **change}))
    with pytest.raises(SeglogProtocolError):
        await api("diff", "jobs")


@pytest.mark.parametrize("body", [b"<html>proxy</html>", b"[1, 2]", b'{"topic": "jobs"}'])
async def test_a_diff_body_that_is_not_a_page_is_a_protocol_error(
    make_api: MakeApi, body: bytes
) -> None:
    api = make_api(lambda _req: httpx.Response(200, content=body))
    with pytest.raises(SeglogProtocolError):
        await api("diff", "jobs")


def test_diff_result_from_parsed_json_is_the_decoded_page() -> None:
    from seglog.client.types import decode_diff

    assert DiffResult.from_json(DIFF) == decode_diff(orjson.dumps(DIFF))
    with pytest.raises(msgspec.ValidationError):
        DiffResult.from_json({**DIFF, "records": [{"$ts": 1}]})


async def test_diff_without_a_performance_block(make_api: MakeApi) -> None:
    for change in ({"performance": None}, {}):
        body = {**DIFF, **change}
        if not change:
            del body["performance"]
        api = make_api(answer(body))
        assert (await api("diff", "jobs")).performance == {}


async def test_diff_records_keep_big_integers_exact(make_api: MakeApi) -> None:
    big = 2**70 + 1  # orjson would read it as a float (and cannot write it)
    body = orjson.dumps({**DIFF, "records": [{"$seq": 4, "$ts": 1, "data": {"n": 0}}]})
    body = body.replace(b'{"n":0}', b'{"n":%d}' % big)
    api = make_api(lambda _req: httpx.Response(200, content=body))
    res = await api("diff", "jobs")
    assert res.records[0].data == {"n": big}


def test_results_are_frozen_slotted_dataclasses() -> None:
    h = Health("ok", "0.1.0", 1)
    with pytest.raises(dataclasses.FrozenInstanceError):
        h.status = "bad"  # type: ignore[misc]
    for cls in (
        Health,
        Ready,
        TopicPut,
        TopicState,
        TopicSummary,
        TopicPage,
        TopicDeleted,
        Appended,
        Tombstone,
        DiffResult,
        Deleted,
    ):
        assert dataclasses.is_dataclass(cls) and hasattr(cls, "__slots__"), cls


def test_read_records_are_frozen_values() -> None:
    """`ReadRecord` is a frozen msgspec Struct (decoded in C with its page): immutable,
    slotted, equal and hashed by value, built positionally or by keyword."""
    r = ReadRecord(4, 1748450001000, "x", node="us-2", tag="a")
    with pytest.raises(AttributeError):
        r.seq = 5  # type: ignore[misc]
    assert not hasattr(r, "__dict__")
    assert r == ReadRecord(seq=4, ts=1748450001000, data="x", node="us-2", tag="a", meta=None)
    assert r != ReadRecord(4, 1748450001000, "y", node="us-2", tag="a")
    assert len({r, ReadRecord(4, 1748450001000, "x", node="us-2", tag="a")}) == 1
    assert repr(r).startswith("ReadRecord(seq=4, ts=1748450001000, data='x'")


@pytest.mark.parametrize("cls", [Client, AsyncClient])
@pytest.mark.parametrize(("url", "h1"), [("http://127.0.0.1:4000", False), ("https://x", True)])
async def test_http2_uses_prior_knowledge_on_cleartext(cls: Any, url: str, h1: bool) -> None:
    client = cls(url, http2=True)
    pool = client._http._transport._pool
    assert (pool._http1, pool._http2) == (h1, True)
    plain = cls(url)
    assert (plain._http._transport._pool._http1, plain._http._transport._pool._http2) == (
        True,
        False,
    )
    for c in (client, plain):
        result = c.close()
        if result is not None:
            await result


def test_constructor_rejects_bad_settings() -> None:
    with pytest.raises(ValueError):
        Client(retries=-1)
    with pytest.raises(ValueError):
        Client(timeout=0)
