"""`watch()` over a scripted SSE server: requests, decoding, cursors, closing (reconnecting
and resuming are in `test_watch_reconnect.py`).

Every test runs against `Client` and `AsyncClient` (`make_api`). Sleeps are recorded, not
slept; the RNG is fixed at 0.5, so a reconnect after the server's `retry: 2000` waits exactly
2.0 · 2^attempt · 0.75 seconds.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import httpx
import pytest

from seglog.client import (
    AsyncClient,
    InternalError,
    ReconnectPolicy,
    SeglogConnectionError,
    SeglogProtocolError,
    TopicNotFound,
    WatchCaughtUp,
    WatchRecord,
    WatchTombstone,
    WatchTopicDeleted,
)
from tests.client.conftest import BASE_URL, Api, FixedRng, MakeApi, err, ok
from tests.client.watch_fakes import (
    RETRY,
    ChunkStream,
    ScriptedWatchServer,
    Step,
    cursor_id,
    deleted,
    disconnect,
    frame,
    records_frame,
    recs,
    seqs_of,
    settle,
    split,
)


async def test_create_body_and_stream_headers(make_api: MakeApi) -> None:
    server = ScriptedWatchServer(
        [Step([RETRY, deleted("jobs"), deleted("events")])], heads={"events": 88123}
    )
    api = make_api(server, api_key="k1")
    w = api.client.watch(
        {"jobs": 4096, "events": None},
        node="worker-eu-1",
        topic_nodes={"jobs": ("relay-1", "relay-2")},
        limit=256,
        max_batch_bytes=262144,
        heartbeat_ms=15000,
        include_tags=True,
    )
    events = await api.collect(w)
    assert server.creates == [
        {
            "topics": {
                "jobs": {"from_seq": 4096, "node": ["relay-1", "relay-2"]},
                "events": {"tail": True},
            },
            "node": "worker-eu-1",
            "limit": 256,
            "max_batch_bytes": 262144,
            "heartbeat_ms": 15000,
            "include_meta": True,
            "include_tags": True,
            "include_data": True,
        }
    ]
    assert server.create_params == [{}]
    post, get = api.requests
    assert post.headers["authorization"] == get.headers["authorization"] == "Bearer k1"
    assert get.url.path == "/v0/watch/wid_0000000000000000000001"
    assert get.headers["accept"] == "text/event-stream"
    assert get.headers["last-event-id"] == cursor_id({"events": 88123, "jobs": 4096})
    assert events == [WatchTopicDeleted("jobs", 0), WatchTopicDeleted("events", 0)]
    assert api.sleeps == []


async def test_frames_decode_to_typed_events(make_api: MakeApi) -> None:
    batch = {
        "topic": "jobs",
        "from_seq": 4096,
        "head_seq": 5210,
        "to_seq": 4099,
        "records": [
            {"$seq": 4097, "$ts": 1748467200111, "$node": "node-B", "data": {"url": "..."}},
            {"$seq": 4098, "$ts": 1748467200112, "$tag": "t1", "data": None, "meta": {"m": 1}},
        ],
    }
    tomb = {
        "topic": "events",
        "reason": "cap",
        "gap_from": 80000,
        "gap_to": 83000,
        "earliest_seq": 83001,
        "head_seq": 88130,
    }
    stream = (
        RETRY
        + frame("record", batch, "x")
        + b": hb 1748467215000\n"
        + frame("tombstone", tomb, "y", sep=":")
        + frame("caught-up", {"topic": "jobs", "head_seq": 5210})
        + deleted("jobs")
        + deleted("events")
    )
    server = ScriptedWatchServer([Step(split(stream, [7, 1, 300, 2]))])
    api = make_api(server)
    w = api.client.watch({"jobs": 4096, "events": 79999})
    events = await api.collect(w)
    assert events == [
        WatchRecord("jobs", 4097, 1748467200111, {"url": "..."}, 5210, node="node-B"),
        WatchRecord("jobs", 4098, 1748467200112, None, 5210, tag="t1", meta={"m": 1}),
        WatchTombstone("events", "cap", 80000, 83000, 83001, 88130),
        WatchCaughtUp("jobs", 5210),
        WatchTopicDeleted("jobs", 0),
        WatchTopicDeleted("events", 0),
    ]
    assert w.topics == []


async def test_cursor_moves_as_each_event_is_handed_out(make_api: MakeApi) -> None:
    stream = (
        RETRY
        + recs("jobs", 0, [1, 2], to=5)
        + frame("record", records_frame("jobs", 5, [], 100, 9))
    )
    server = ScriptedWatchServer([Step([stream], fail=disconnect())])
    api = make_api(server, retries=0)
    w = api.client.watch("jobs", reconnect=ReconnectPolicy(attempts=0))
    await settle(w.open())
    assert w.cursors == {"jobs": 0}
    assert w.last_event_id == cursor_id({"jobs": 0})
    assert [e.seq for e in await api.collect(w, 1)] == [1]
    assert w.cursors == {"jobs": 1}
    assert [e.seq for e in await api.collect(w, 1)] == [2]
    assert w.cursors == {"jobs": 2}  # the batch's to_seq applies once the batch is drained
    with pytest.raises(SeglogConnectionError):
        await api.collect(w, 1)
    # Skipped seqs (own-node records) advanced the cursor without any event.
    assert w.cursors == {"jobs": 9}
    assert w.last_event_id == cursor_id({"jobs": 9})


async def test_other_error_frames_raise_typed(make_api: MakeApi) -> None:
    boom = frame("error", {"code": "internal", "message": "disk on fire"})
    server = ScriptedWatchServer([Step([RETRY + boom])])
    api = make_api(server)
    with pytest.raises(InternalError, match="disk on fire"):
        await api.collect(api.client.watch("jobs"))


async def test_a_stream_that_is_not_sse_is_refused(make_api: MakeApi) -> None:
    page = httpx.Response(200, headers={"Content-Type": "text/html"}, text="<html>proxy</html>")
    server = ScriptedWatchServer([Step(response=page)])
    api = make_api(server)
    with pytest.raises(SeglogProtocolError, match="not text/event-stream"):
        await api.collect(api.client.watch("jobs"))


async def test_malformed_frame_is_a_protocol_error(make_api: MakeApi) -> None:
    server = ScriptedWatchServer([Step([RETRY + b"event: record\ndata: {nope\n\n"])])
    api = make_api(server)
    with pytest.raises(SeglogProtocolError):
        await api.collect(api.client.watch("jobs"))


async def test_open_surfaces_create_errors(make_api: MakeApi) -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        return err(404, "topic_not_found", detail={"topic": "nope"})

    api = make_api(handler)
    w = api.client.watch("nope")
    with pytest.raises(TopicNotFound):
        await settle(w.open())
    assert w.last_event_id is None


async def test_close_stops_and_releases_the_stream(make_api: MakeApi) -> None:
    server = ScriptedWatchServer([Step([RETRY + recs("jobs", 0, [1, 2, 3])])])
    api = make_api(server)
    w = api.client.watch("jobs")
    assert seqs_of(await api.collect(w, 1)) == [1]
    await settle(w.close())
    assert await api.collect(w) == []
    await settle(w.close())  # twice is fine


async def test_context_manager_opens_and_closes(make_api: MakeApi) -> None:
    server = ScriptedWatchServer([Step([RETRY + recs("jobs", 0, [1, 2])])])
    api = make_api(server)
    w = api.client.watch("jobs")
    if api.kind == "sync":
        with w as entered:  # type: ignore[union-attr]
            assert entered is w and w.session is not None
            assert seqs_of(await api.collect(w, 1)) == [1]
    else:
        async with w as entered:  # type: ignore[union-attr]
            assert entered is w and w.session is not None
            assert seqs_of(await api.collect(w, 1)) == [1]
    assert await api.collect(w) == []


async def test_last_event_id_resumes_a_new_watch(make_api: MakeApi) -> None:
    server = ScriptedWatchServer([Step([RETRY + deleted("jobs") + deleted("events")])])
    api = make_api(server)
    w = api.client.watch(["jobs", "events"], last_event_id=cursor_id({"jobs": 7, "other": 3}))
    await api.collect(w)
    assert server.creates[0]["topics"] == {"jobs": {"from_seq": 7}, "events": {"from_seq": 0}}


async def test_a_recreated_topic_restarts_the_cursor(make_api: MakeApi) -> None:
    # The topic was deleted and recreated: the old cursor 10 is past the new head 5, so the
    # server reports gap 1..5 and then delivers the new instance's live records 2..5.
    recreated = {
        "topic": "jobs",
        "reason": "recreated",
        "gap_from": 1,
        "gap_to": 5,
        "earliest_seq": 2,
        "head_seq": 5,
    }
    stream = (
        RETRY
        + recs("jobs", 9, [10])
        + frame("tombstone", recreated)
        + recs("jobs", 1, [2, 3, 4, 5])
        + deleted("jobs")
    )
    server = ScriptedWatchServer([Step([stream])])
    api = make_api(server)
    w = api.client.watch({"jobs": 9})
    events = await api.collect(w, 2)
    assert isinstance(events[1], WatchTombstone)
    assert w.cursors == {"jobs": 1}
    events += await api.collect(w)
    assert seqs_of(events) == [10, 2, 3, 4, 5]


async def test_a_gap_moves_the_cursor_to_its_end(make_api: MakeApi) -> None:
    gap = {
        "topic": "jobs",
        "reason": "ttl",
        "gap_from": 4,
        "gap_to": 7,
        "earliest_seq": 8,
        "head_seq": 9,
    }
    # A first read after a reopen reports `from_seq_too_old` whatever the cause.
    too_old = {**gap, "gap_from": 8, "gap_to": 8, "reason": "from_seq_too_old", "earliest_seq": 9}
    stream = RETRY + frame("tombstone", gap) + recs("jobs", 7, [8])
    server = ScriptedWatchServer(
        [
            Step([stream], fail=disconnect()),
            Step([RETRY + frame("tombstone", too_old) + recs("jobs", 8, [9]) + deleted("jobs")]),
        ]
    )
    api = make_api(server)
    w = api.client.watch({"jobs": 3})
    events = await api.collect(w, 1)
    assert w.cursors == {"jobs": 7}
    events += await api.collect(w)
    assert seqs_of(events) == [8, 9]
    assert [e.reason for e in events if isinstance(e, WatchTombstone)] == [
        "ttl",
        "from_seq_too_old",
    ]


async def test_lenient_and_unknown_topics(make_api: MakeApi) -> None:
    server = ScriptedWatchServer([Step([RETRY + deleted("jobs")])], drop_on_create={"nope"})
    api = make_api(server)
    w = api.client.watch(["jobs", "nope"], lenient=True)
    events = await api.collect(w)
    assert server.create_params == [{"lenient": "true"}]
    assert events == [WatchTopicDeleted("jobs", 0)]


async def test_cancelling_an_async_watch_releases_the_stream() -> None:
    class Stalled(ChunkStream):
        async def __aiter__(self) -> AsyncIterator[bytes]:
            yield RETRY + recs("jobs", 0, [1])
            await asyncio.Event().wait()  # a server that has nothing more to say

    stream = Stalled([])

    def handler(request: httpx.Request) -> httpx.Response:
        if request.method == "POST":
            return ScriptedWatchServer([])(request)
        return httpx.Response(200, headers={"Content-Type": "text/event-stream"}, stream=stream)

    async with AsyncClient(BASE_URL, transport=httpx.MockTransport(handler), rng=FixedRng()) as c:
        w = c.watch("jobs")
        first = await anext(w)
        assert isinstance(first, WatchRecord) and first.seq == 1
        pending = asyncio.ensure_future(anext(w))
        await asyncio.sleep(0)  # let it block on the stalled stream (scheduling, not timing)
        pending.cancel()
        with pytest.raises(asyncio.CancelledError):
            await pending
        await w.aclose()
    assert stream.closed


def test_watch_arguments_are_validated() -> None:
    api = Api("sync", lambda r: ok({}))
    with pytest.raises(ValueError, match="at least one topic"):
        api.client.watch([])
    with pytest.raises(ValueError, match="from_seq"):
        api.client.watch({"jobs": -1})
    with pytest.raises(SeglogProtocolError):
        api.client.watch("jobs", last_event_id="%%%")
