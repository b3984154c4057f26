"""The WebSocket session (API.md §8) against `FakeWsServer`, sync and async alike."""

from __future__ import annotations

import asyncio
import inspect
import socket
from collections.abc import Iterator
from typing import Any

import pytest

from seglog.client import (
    Appended,
    AsyncClient,
    InvalidRequest,
    SeglogConnectionError,
    SeglogProtocolError,
    ShuttingDown,
    Subscribed,
    TopicNotFound,
    TopicStart,
    Unauthorized,
    Unsubscribed,
    WatchCaughtUp,
    WatchRecord,
    WatchTombstone,
    WatchTopicDeleted,
)
from seglog.client._ws import Pushed, Reply, SessionError, WsProtocol, ws_url
from tests.client.conftest import MakeApi, ok
from tests.client.ws_fakes import FakeWsServer


@pytest.fixture
def fake() -> Iterator[FakeWsServer]:
    server = FakeWsServer(key="k1")
    yield server
    server.close()


async def settle(value: Any) -> Any:
    return await value if inspect.isawaitable(value) else value


def session(make_api: MakeApi, url: str, key: str | None = "k1") -> Any:
    return make_api(lambda r: ok({}), url=url, api_key=key).client.websocket()


async def events(ws: Any, n: int) -> list[Any]:
    return [await settle(ws.next_event(5.0)) for _ in range(n)]


async def test_subscribe_pushes_backlog_then_caught_up(
    make_api: MakeApi, fake: FakeWsServer
) -> None:
    fake.topics["room"] = [{"$seq": 1, "$ts": 10, "data": "a"}, {"$seq": 2, "$ts": 11, "data": "b"}]
    ws = session(make_api, fake.url)
    try:
        sub = await settle(ws.subscribe({"room": 1}, include_tags=True, topic_nodes={"room": "me"}))
        assert sub == Subscribed({"room": TopicStart(1, 2, 1)})
        assert await events(ws, 2) == [
            WatchRecord("room", 2, 11, "b", 2),
            WatchCaughtUp("room", 2),
        ]
        assert ws.cursors == {"room": 2}
        cmd = fake.received[0]
        assert cmd == {
            "op": "subscribe",
            "request_id": cmd["request_id"],
            "topics": {"room": {"from_seq": 1, "node": "me"}},
            "include_data": True,
            "include_tags": True,
            "include_meta": True,
            "lenient": False,
        }
        assert fake.upgrade_headers[0]["Authorization"] == "Bearer k1"
    finally:
        await settle(ws.close())


async def test_publish_acks_while_events_are_buffered(
    make_api: MakeApi, fake: FakeWsServer
) -> None:
    fake.topics["room"] = []
    ws = session(make_api, fake.url)
    try:
        await settle(ws.subscribe("room", tail=True))
        ack = await settle(
            ws.publish("room", [{"data": {"p": 1}}], node="u018", idempotency_key="i1")
        )
        assert isinstance(ack, Appended)
        assert (ack.first_seq, ack.last_seq, ack.seqs, ack.head_seq) == (1, 1, [1], 1)
        assert fake.received[-1] == {
            "op": "publish",
            "request_id": fake.received[-1]["request_id"],
            "topic": "room",
            "records": [{"data": {"p": 1}}],
            "node": "u018",
            "idempotency_key": "i1",
            "return_seqs": True,
        }
        got = await events(ws, 2)
        assert got == [
            WatchCaughtUp("room", 0),
            WatchRecord("room", 1, 1_780_420_000_001, {"p": 1}, 1, node="u018"),
        ]
    finally:
        await settle(ws.close())


async def test_command_errors_raise_and_the_session_goes_on(
    make_api: MakeApi, fake: FakeWsServer
) -> None:
    ws = session(make_api, fake.url)
    try:
        with pytest.raises(TopicNotFound, match="does not exist") as info:
            await settle(ws.subscribe("nope"))
        assert info.value.status == 404 and info.value.wire_code == "topic_not_found"
        assert await settle(ws.ping()) >= 0.0
        fake.topics["room"] = []
        assert await settle(ws.unsubscribe(["room"])) == Unsubscribed(["room"])
        ids = [c["request_id"] for c in fake.received]
        assert len(set(ids)) == len(ids)  # every command has its own id
    finally:
        await settle(ws.close())


async def test_shutdown_error_ends_the_session_typed(make_api: MakeApi, fake: FakeWsServer) -> None:
    fake.topics["room"] = [{"$seq": 1, "$ts": 1, "data": 1}]
    ws = session(make_api, fake.url)
    try:
        await settle(ws.subscribe("room"))
        assert len(await events(ws, 2)) == 2
        fake_cmd = ws._proto.command("_shutdown", {})[1]
        if inspect.iscoroutinefunction(ws.ping):
            await ws._conn.send(fake_cmd)
        else:
            ws._conn.send(fake_cmd)
        with pytest.raises(ShuttingDown) as info:
            await settle(ws.next_event(5.0))
        assert info.value.wire_code == "server_shutting_down"
    finally:
        await settle(ws.close())


async def test_a_normal_close_ends_iteration(make_api: MakeApi, fake: FakeWsServer) -> None:
    ws = session(make_api, fake.url)
    await settle(ws.connect())
    text = ws._proto.command("_close", {})[1]
    if inspect.iscoroutinefunction(ws.ping):
        await ws._conn.send(text)
        assert [e async for e in ws] == []
    else:
        ws._conn.send(text)
        assert list(ws) == []
    await settle(ws.close())


async def test_a_bad_key_is_unauthorized_at_upgrade(make_api: MakeApi, fake: FakeWsServer) -> None:
    ws = session(make_api, fake.url, key="wrong")
    with pytest.raises(Unauthorized, match="missing or bad key"):
        await settle(ws.connect())


async def test_no_server_is_a_connection_error(make_api: MakeApi) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    ws = session(make_api, f"http://127.0.0.1:{port}")
    with pytest.raises(SeglogConnectionError):
        await settle(ws.ping())


# --- the protocol, without a socket -------------------------------------------------------------


def test_ws_url() -> None:
    assert ws_url("http://127.0.0.1:4000") == "ws://127.0.0.1:4000/v0/ws"
    assert ws_url("https://h/base/") == "wss://h/base/v0/ws"
    with pytest.raises(ValueError):
        ws_url("ftp://h")


def test_decode_every_server_message() -> None:
    p = WsProtocol()
    assert p.decode('{"op":"pong","request_id":"ping-1"}') == Reply(
        "ping-1", "pong", {"op": "pong", "request_id": "ping-1"}
    )
    rec = p.decode(
        '{"op":"record","topic":"room","from_seq":42,"to_seq":44,"head_seq":44,'
        '"records":[{"$seq":43,"$ts":1780420000000,"$node":"u018","data":{"packet":1}}]}'
    )
    assert rec == Pushed([WatchRecord("room", 43, 1780420000000, {"packet": 1}, 44, node="u018")])
    assert p.cursors == {"room": 44}
    tomb = p.decode(
        '{"op":"tombstone","topic":"room","reason":"cap","gap_from":1,"gap_to":10,'
        '"earliest_seq":11,"head_seq":43}'
    )
    assert tomb == Pushed([WatchTombstone("room", "cap", 1, 10, 11, 43)])
    assert p.cursors == {"room": 10}
    gone = p.decode('{"op":"topic_deleted","topic":"room","head_seq":0,"reason":"deleted"}')
    assert gone == Pushed([WatchTopicDeleted("room", 0)])
    assert p.cursors == {}
    assert p.decode('{"op":"something_new"}') == Pushed([])


def test_decode_errors() -> None:
    p = WsProtocol()
    reply = p.decode('{"op":"error","request_id":"p2","code":"forbidden","message":"no"}')
    assert isinstance(reply, Reply) and reply.request_id == "p2"
    assert reply.error is not None and reply.error.code == "forbidden"
    bad = p.decode('{"op":"error","request_id":null,"code":"invalid_json","message":"x"}')
    assert isinstance(bad, SessionError) and isinstance(bad.error, InvalidRequest)
    binary = p.decode('{"op":"error","code":"unsupported_message","message":"x"}')
    assert isinstance(binary, SessionError) and binary.error.wire_code == "unsupported_message"
    with pytest.raises(SeglogProtocolError):
        p.decode("not json")
    with pytest.raises(SeglogProtocolError):
        p.decode('{"op":"record","topic":"room"}')


async def test_async_one_task_iterates_while_another_publishes(fake: FakeWsServer) -> None:
    fake.topics["room"] = []
    async with AsyncClient(fake.url, api_key="k1") as client, client.websocket() as ws:
        await ws.subscribe("room")

        async def reader() -> list[int]:
            seqs: list[int] = []
            async for ev in ws:
                if isinstance(ev, WatchRecord):
                    seqs.append(ev.seq)
                    if len(seqs) == 5:
                        return seqs
            return seqs

        task = asyncio.ensure_future(reader())
        acks = [await ws.publish("room", [{"data": i}]) for i in range(5)]
        assert [a.first_seq for a in acks] == [1, 2, 3, 4, 5]
        assert await asyncio.wait_for(task, 10) == [1, 2, 3, 4, 5]
