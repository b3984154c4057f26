"""Live delivery, black-box against a real server (API §7, §8; SEMANTICS §4.5, §6, §9,
§11): a shared live read follows the topic's `dedupe_node` and still marks the topic read,
and a lenient watch of only unknown topics is created with none (its stream then ends)."""

from __future__ import annotations

import socket
import time
from typing import Any

import httpx
import pytest

from tests.http.live import diff, ok, put_topic, write
from tests.http.test_live_watch import create_watch, open_stream, seqs
from tests.support.server import ServerProcess


def _watch_seqs(
    srv: ServerProcess, c: httpx.Client, name: str, head: int, **opts: Any
) -> list[int]:
    """A fresh session on `name` from seq 0, streamed until caught up at `head`."""
    wid = create_watch(c, {name: {}}, **opts)["wid"]
    with open_stream(srv, wid) as conn:
        return seqs(conn.until_caught_up({name: head}), name)


# --------------------------------------------------------------------------- feed cache


@pytest.mark.parametrize("dedupe_before", [True, False])
def test_a_watch_read_follows_a_dedupe_node_change_without_a_new_write(
    server: ServerProcess, client: httpx.Client, topic: str, dedupe_before: bool
) -> None:
    """SEMANTICS §6 (loop prevention "Disabled per topic with `dedupe_node:false`"), §4.5
    step 4 (the node filter applies "only if the topic's `dedupe_node` is true"), API §7.3
    (`record` frames follow the read rules).

    The shared live-read cache (`http/topic_feed.py` `TopicFeed.read`, keyed by
    `engine.read_version` = topic id, head, count, earliest) ignores the topic config, so a
    `PUT` that flips `dedupe_node` is not seen by a watcher that reads the same cursor as an
    earlier watcher did: it gets the earlier watcher's batch, read under the old setting.
    With `dedupe_before=True` (then disabled) the new watcher's cursor silently passes its
    own node's record, which it must now receive; with `dedupe_before=False` (then enabled)
    it is handed its own record back (loop prevention broken). A diff with the same `node`
    is the oracle."""
    put_topic(client, topic, {"dedupe_node": dedupe_before})
    write(client, topic, [{"data": 1, "node": "me"}, {"data": 2, "node": "other"}])
    before = [1, 2] if not dedupe_before else [2]
    assert _watch_seqs(server, client, topic, 2, node="me") == before  # fills the cache
    ok(client.put(f"/v0/topics/{topic}", json={"dedupe_node": not dedupe_before}))
    expected = [r["$seq"] for r in diff(client, topic, node="me")["records"]]
    assert expected == ([1, 2] if dedupe_before else [2])
    assert _watch_seqs(server, client, topic, 2, node="me") == expected


def test_a_shared_watch_read_marks_the_topic_read(
    server: ServerProcess, client: httpx.Client, topic: str
) -> None:
    """SEMANTICS §4.5 ("Every read marks the topic consumed (recency, §11) and sets
    `last_read_ts`") and §11 ("A topic is consumed by ... every SSE/WS read").

    A watch read answered from `TopicFeed`'s cache (`http/topic_feed.py` `TopicFeed.read`
    returns the cached batch without calling the engine) neither sets `last_read_ts` nor
    bumps the recency clock: a second watcher reading the same cursor a second later
    leaves `last_read_ts` at the first watcher's read. (Watch create reads the topic with
    `touch=false`, so only the stream's read can mark it.)"""
    write(client, topic, [{"data": 1}, {"data": 2}])
    assert _watch_seqs(server, client, topic, 2) == [1, 2]
    first = ok(client.get(f"/v0/topics/{topic}", params={"touch": "false"}))["last_read_ts"]
    assert isinstance(first, int)
    time.sleep(1.0)
    t0 = int(time.time() * 1000)
    assert _watch_seqs(server, client, topic, 2) == [1, 2]
    second = ok(client.get(f"/v0/topics/{topic}", params={"touch": "false"}))["last_read_ts"]
    assert second >= t0 - 50, (first, second, t0)


# --------------------------------------------------------------------------- lenient create


def test_a_lenient_watch_of_only_unknown_topics_is_created_with_none(
    client: httpx.Client, tname: Any
) -> None:
    """API §7.1: "unknown topic ⇒ `404 topic_not_found` unless the query has
    `lenient=true` (unknown topics are then silently dropped and absent from the
    response)". With `lenient=true` an unknown topic is never a 404, however many of the
    requested topics it leaves (the WebSocket's lenient `subscribe` of only unknown
    topics answers `subscribed` with `topics: {}` accordingly).

    `http/watch.py` `create` raises `topic_not_found(next(iter(req.topics)))` when every
    topic was dropped (`if not cursors:`), so a lenient create of topics that were all
    deleted is a 404."""
    r = client.post("/v0/watch", params={"lenient": "true"}, json={"topics": {tname("gone"): {}}})
    body = ok(r)
    assert body["topics"] == {}


def test_the_client_s_lenient_watch_of_missing_topics_does_not_raise(
    server: ServerProcess, tname: Any
) -> None:
    """API §7.1 (lenient: unknown topics are silently dropped, never 404) as the Python
    client relies on it: `Client.watch(lenient=True)` is documented "skip missing topics
    instead of failing with `TopicNotFound`", and `client/_watch.py` `WatchState.created`
    ends the watch when the session lists no topic. The server's 404 for a lenient create
    whose topics are all unknown (`http/watch.py` `create`, `if not cursors:`) makes the
    watch raise `TopicNotFound` instead."""
    from seglog.client import Client

    c = Client(server.url)
    try:
        with c.watch([tname("missing")], lenient=True) as w:
            assert list(w) == []
    finally:
        c.close()


def test_the_client_s_watch_ends_when_its_topics_were_deleted_across_a_restart(
    tmp_path: Any, tname: Any
) -> None:
    """API §7.1 lenient create (unknown topics are dropped, never 404); docs/client.md: the
    watch "reconnects and resumes by itself ... and runs until every watched topic is
    deleted". A restart loses the session, the client re-creates it (always with
    `lenient=true`, `client/_watch.py` `create_call`) from its cursors, and a topic
    deleted meanwhile should come out as `WatchTopicDeleted` and end the watch
    (`WatchState.created`). The server answers that re-create 404 (`http/watch.py`
    `create`, `if not cursors:`), a non-retryable error, so the consumer gets
    `TopicNotFound` raised out of its loop instead."""
    from seglog.client import Client, ReconnectPolicy, WatchCaughtUp, WatchTopicDeleted

    with socket.socket() as s:  # a fixed port, so the client finds the restarted server
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    srv = ServerProcess(data_dir=tmp_path / "data", extra_args=("--port", str(port)))
    srv.start()
    name = tname("t")
    c = Client(srv.url)
    try:
        with httpx.Client(base_url=srv.url, timeout=10) as h:
            write(h, name, [{"data": 1}])
        with c.watch([name], reconnect=ReconnectPolicy(initial=0.1, max_delay=0.5)) as w:
            it = iter(w)
            while not isinstance(next(it), WatchCaughtUp):
                pass
            srv.restart()
            with httpx.Client(base_url=srv.url, timeout=10) as h:
                assert ok(h.delete(f"/v0/topics/{name}"))["deleted"] is True
            rest = list(it)
        assert [type(e) for e in rest] == [WatchTopicDeleted], rest
        assert rest[0].topic == name
    finally:
        c.close()
        srv.close()


async def test_a_ws_subscription_follows_a_dedupe_node_change_without_a_new_write(
    server: ServerProcess, client: httpx.Client, topic: str
) -> None:
    """SEMANTICS §6 / §4.5 step 4 over the WebSocket (API §8: "Cursor rules match §7.4",
    same read path): the same stale `TopicFeed` cache entry (`http/topic_feed.py`, key
    without the topic config) serves a subscription made after `dedupe_node` was turned
    off, so the record of the subscriber's own node, which it must now receive, is
    skipped and its cursor passes it."""
    from websockets.asyncio.client import connect

    from tests.http.test_live_ws import recv_until, send, ws_url

    write(client, topic, [{"data": 1, "node": "me"}, {"data": 2, "node": "other"}])

    async def subscribed_seqs() -> list[int]:
        async with connect(ws_url(server)) as ws:
            await send(ws, {"op": "subscribe", "request_id": "s", "topic": topic, "node": "me"})
            msgs = await recv_until(ws, lambda m: m["op"] == "caught_up")
        return [r["$seq"] for m in msgs if m["op"] == "record" for r in m["records"]]

    assert await subscribed_seqs() == [2]  # dedupe_node true: own record skipped
    ok(client.put(f"/v0/topics/{topic}", json={"dedupe_node": False}))
    assert [r["$seq"] for r in diff(client, topic, node="me")["records"]] == [1, 2]
    assert await subscribed_seqs() == [1, 2]
