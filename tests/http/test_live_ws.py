"""Black-box tests of the WebSocket data plane `GET /v0/ws` (API §8) against a real server:
commands and their replies, delivery (records, caught_up, tombstones, topic_deleted),
node loop prevention, per-command scope checks, connection caps, backpressure, shutdown."""

from __future__ import annotations

import asyncio
import json
import signal
from collections.abc import Callable
from typing import Any

import httpx
import orjson
import pytest
from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import InvalidStatus

from tests.http.conftest import ServerFactory
from tests.support.server import ServerProcess

JSON = {"Content-Type": "application/json"}
TIMEOUT = 10.0


def ws_url(srv: ServerProcess) -> str:
    return srv.url.replace("http://", "ws://") + "/v0/ws"


async def send(ws: ClientConnection, cmd: dict[str, Any]) -> None:
    await ws.send(orjson.dumps(cmd).decode())


async def recv(ws: ClientConnection) -> dict[str, Any]:
    msg = await asyncio.wait_for(ws.recv(), TIMEOUT)
    assert isinstance(msg, str), msg
    out = orjson.loads(msg)
    assert isinstance(out, dict)
    return out


async def recv_until(
    ws: ClientConnection, done: Callable[[dict[str, Any]], bool]
) -> list[dict[str, Any]]:
    got: list[dict[str, Any]] = []
    while True:
        m = await recv(ws)
        got.append(m)
        if done(m):
            return got


async def reply(ws: ClientConnection, rid: Any) -> dict[str, Any]:
    """The reply to command `rid`, skipping deliveries that arrive in between."""
    msgs = await recv_until(ws, lambda m: m.get("request_id", object()) == rid)
    return msgs[-1]


def write(srv: ServerProcess, topic: str, records: list[dict[str, Any]], **kw: Any) -> None:
    r = httpx.post(f"{srv.url}/v0/topics/{topic}", json={"records": records, **kw}, timeout=TIMEOUT)
    assert r.status_code in (200, 201), r.text


def delivered(messages: list[dict[str, Any]]) -> list[int]:
    return [r["$seq"] for m in messages if m["op"] == "record" for r in m["records"]]


async def test_ping_publish_subscribe_unsubscribe(server: ServerProcess, topic: str) -> None:
    async with connect(ws_url(server)) as ws:
        await send(ws, {"op": "ping", "request_id": "ping-1"})
        assert await recv(ws) == {"op": "pong", "request_id": "ping-1"}
        await send(ws, {"op": "ping"})
        assert await recv(ws) == {"op": "pong", "request_id": None}

        await send(
            ws,
            {
                "op": "publish",
                "request_id": "p1",
                "topic": topic,
                "records": [{"data": {"n": 1}}, {"data": {"n": 2}}],
            },
        )
        ack = await recv(ws)
        assert list(ack) == [
            "op",
            "request_id",
            "topic",
            "first_seq",
            "last_seq",
            "seqs",
            "head_seq",
            "count",
            "created",
            "deduped",
            "performance",
        ]
        assert ack["op"] == "ack" and ack["request_id"] == "p1" and ack["topic"] == topic
        assert (ack["first_seq"], ack["last_seq"], ack["seqs"]) == (1, 2, [1, 2])
        assert ack["created"] is True and ack["deduped"] is False and ack["count"] == 2
        assert {"server_total_ms", "wal_append_ms", "fsync_ms"} <= set(ack["performance"])

        await send(ws, {"op": "subscribe", "request_id": "s1", "topic": topic, "from_seq": 1})
        sub = await recv(ws)
        assert sub == {
            "op": "subscribed",
            "request_id": "s1",
            "topics": {topic: {"from_seq": 1, "head_seq": 2, "earliest_seq": 1}},
        }
        rec = await recv(ws)
        assert rec == {
            "op": "record",
            "topic": topic,
            "from_seq": 1,
            "to_seq": 2,
            "head_seq": 2,
            "records": [{"$seq": 2, "$ts": rec["records"][0]["$ts"], "data": {"n": 2}}],
        }
        assert await recv(ws) == {"op": "caught_up", "topic": topic, "head_seq": 2}

        await send(
            ws,
            {
                "op": "publish",
                "request_id": 7,
                "topic": topic,
                "return_seqs": False,
                "records": [{"data": "x", "node": "u1"}],
            },
        )
        msgs = await recv_until(ws, lambda m: m["op"] == "caught_up")
        ack = next(m for m in msgs if m["op"] == "ack")
        assert ack["seqs"] is None and ack["first_seq"] == 3 and ack["created"] is False
        assert delivered(msgs) == [3]
        rec = next(m for m in msgs if m["op"] == "record")
        assert rec["records"][0]["$node"] == "u1"

        await send(ws, {"op": "unsubscribe", "request_id": "u1", "topic": topic})
        assert await recv(ws) == {"op": "unsubscribed", "request_id": "u1", "topics": [topic]}
        write(server, topic, [{"data": 4}])
        await send(ws, {"op": "ping", "request_id": "after"})
        assert await recv(ws) == {"op": "pong", "request_id": "after"}  # no record in between


async def test_bad_commands(server: ServerProcess, tname: Callable[[str], str]) -> None:
    async with connect(ws_url(server)) as ws:
        await ws.send("{not json")
        err = await recv(ws)
        assert err["op"] == "error" and err["code"] == "invalid_json"
        assert err["request_id"] is None and err["message"]
        await ws.send(b"\x00binary")
        err = await recv(ws)
        assert err["code"] == "unsupported_message" and "request_id" not in err
        await send(ws, {"op": "subscribe", "request_id": "s"})
        err = await recv(ws)
        assert (err["code"], err["request_id"]) == ("invalid_request", "s")
        await send(ws, {"op": "unsubscribe", "request_id": "u"})
        assert (await recv(ws))["code"] == "invalid_request"
        await send(ws, {"op": "subscribe", "request_id": "nf", "topic": tname("absent")})
        err = await recv(ws)
        assert (err["code"], err["request_id"]) == ("topic_not_found", "nf")
        present = tname("present")
        write(server, present, [{"data": 1}])
        absent = tname("absent")
        await send(
            ws,
            {
                "op": "subscribe",
                "request_id": "len",
                "lenient": True,
                "topics": {present: {"tail": True}, absent: {}},
            },
        )
        sub = await recv(ws)
        assert sub["op"] == "subscribed" and list(sub["topics"]) == [present]
        assert sub["topics"][present]["from_seq"] == 1
        await send(ws, {"op": "publish", "request_id": "np", "records": []})
        assert (await reply(ws, "np"))["code"] == "invalid_request"
        await send(
            ws,
            {
                "op": "publish",
                "request_id": "big",
                "topic": present,
                "records": [{"data": 1}] * 10_001,
            },
        )
        assert (await reply(ws, "big"))["code"] == "batch_too_large"
        await send(ws, {"op": "nope", "request_id": 1})
        assert (await reply(ws, 1))["code"] == "invalid_request"


def test_plain_get_without_upgrade(server: ServerProcess) -> None:
    r = httpx.get(f"{server.url}/v0/ws")
    assert r.status_code == 400 and r.json()["error"]["code"] == "invalid_request"
    r = httpx.post(f"{server.url}/v0/ws")
    assert r.status_code == 405


async def test_node_filter_and_tombstone_and_topic_deleted(
    server: ServerProcess, tname: Callable[[str], str]
) -> None:
    capped = tname("capped")
    r = httpx.put(f"{server.url}/v0/topics/{capped}", json={"cap_records": 3})
    assert r.status_code == 201
    write(server, capped, [{"data": 0}])
    async with connect(ws_url(server)) as ws:
        await send(
            ws,
            {
                "op": "subscribe",
                "request_id": "s",
                "topic": capped,
                "node": "me",
                "include_tags": True,
            },
        )
        msgs = await recv_until(ws, lambda m: m["op"] == "caught_up")
        assert delivered(msgs) == [1]
        # Own node skipped silently; another node delivered, with its tag.
        write(server, capped, [{"data": 1, "node": "me"}, {"data": 2, "node": "other", "tag": "t"}])
        msgs = await recv_until(ws, lambda m: m["op"] == "caught_up")
        recs = [r for m in msgs if m["op"] == "record" for r in m["records"]]
        assert [(r["$seq"], r["$node"], r["$tag"]) for r in recs] == [(3, "other", "t")]
        # One write of 10 into a cap of 3: 7 evicted past the cursor ⇒ a computed `cap`
        # tombstone (never `from_seq_too_old` on a WebSocket), then the 3 survivors.
        write(server, capped, [{"data": i} for i in range(10)])
        msgs = await recv_until(ws, lambda m: m["op"] == "caught_up")
        tomb = next(m for m in msgs if m["op"] == "tombstone")
        assert tomb == {
            "op": "tombstone",
            "topic": capped,
            "reason": "cap",
            "gap_from": 4,
            "gap_to": 10,
            "earliest_seq": 11,
            "head_seq": 13,
        }
        assert delivered(msgs) == [11, 12, 13]
        assert httpx.delete(f"{server.url}/v0/topics/{capped}").status_code == 200
        gone = await recv(ws)
        assert gone == {"op": "topic_deleted", "topic": capped, "head_seq": 0, "reason": "deleted"}


async def test_slow_reader_blocks_only_itself(
    server: ServerProcess, tname: Callable[[str], str]
) -> None:
    """A socket that stops reading fills its small queue and blocks; writes keep being
    acked, another subscriber keeps receiving, and the slow one later gets everything in
    order (it catches up from the log)."""
    topic = tname("slow")
    write(server, topic, [{"data": 0}])
    payload = "x" * 1000
    async with connect(ws_url(server), max_queue=1) as slow, connect(ws_url(server)) as fast:
        for ws in (slow, fast):
            await send(ws, {"op": "subscribe", "request_id": "s", "topic": topic, "limit": 100})
            await recv_until(ws, lambda m: m["op"] == "caught_up")
        total = 0
        async with httpx.AsyncClient(base_url=server.url, timeout=TIMEOUT) as c:
            for _ in range(40):
                r = await c.post(f"/v0/topics/{topic}", json={"records": [{"data": payload}] * 250})
                assert r.status_code == 200
                total += 250
        fast_seqs: list[int] = []
        while len(fast_seqs) < total:
            m = await recv(fast)
            if m["op"] == "record":
                fast_seqs.extend(r["$seq"] for r in m["records"])
        assert fast_seqs == list(range(2, total + 2))
        slow_seqs: list[int] = []
        while len(slow_seqs) < total:
            m = await recv(slow)
            if m["op"] == "record":
                slow_seqs.extend(r["$seq"] for r in m["records"])
        assert slow_seqs == list(range(2, total + 2))
        for ws in (slow, fast):  # drained to the head: each ends with caught_up
            last = await recv_until(ws, lambda m: m["op"] == "caught_up")
            assert last[-1]["head_seq"] == total + 1


async def test_scopes_per_command(make_server: ServerFactory) -> None:
    srv = make_server(env={"SEGLOG_API_KEYS": "adm,ro:r,wo:w,pre:rw:ok."})
    url = ws_url(srv)
    with pytest.raises(InvalidStatus) as info:
        async with connect(url):
            pass
    assert info.value.response.status_code == 401
    assert orjson.loads(info.value.response.body or b"{}")["error"]["code"] == "unauthorized"
    with pytest.raises(InvalidStatus) as info:
        async with connect(url, additional_headers={"Authorization": "Bearer wrong"}):
            pass
    assert info.value.response.status_code == 401
    headers = {"Authorization": "Bearer adm"}
    r = httpx.post(f"{srv.url}/v0/topics/ok.t", json={"records": [{"data": 1}]}, headers=headers)
    assert r.status_code == 201

    async def first_error(key: str, cmd: dict[str, Any]) -> dict[str, Any]:
        async with connect(url, additional_headers={"Authorization": f"Bearer {key}"}) as ws:
            await send(ws, {"request_id": "r", **cmd})
            return await reply(ws, "r")

    pub = {"op": "publish", "topic": "ok.t", "records": [{"data": 1}]}
    sub = {"op": "subscribe", "topic": "ok.t"}
    assert (await first_error("ro", pub))["code"] == "forbidden"
    assert (await first_error("wo", sub))["code"] == "forbidden"
    # scope before parse, as for publish: a malformed subscribe from a key that may not
    # read is refused for the key, not for the command
    assert (await first_error("wo", {"op": "subscribe"}))["code"] == "forbidden"
    assert (await first_error("ro", {"op": "subscribe"}))["code"] == "invalid_request"
    assert (await first_error("ro", sub))["op"] == "subscribed"
    assert (await first_error("wo", pub))["op"] == "ack"
    cfg = {**pub, "config": {"cap_records": 5}}
    assert (await first_error("wo", cfg))["code"] == "forbidden"  # config needs admin
    out = await first_error("pre", {"op": "subscribe", "topics": {"ok.t": {}, "other": {}}})
    assert out["code"] == "forbidden" and out["detail"] == {"topic": "other"}
    out = await first_error("pre", {**pub, "topic": "other"})
    assert out["code"] == "forbidden"
    assert (await first_error("pre", {"op": "ping"}))["op"] == "pong"
    # Nothing was written by the refused publishes.
    state = httpx.get(f"{srv.url}/v0/topics/ok.t", headers=headers).json()
    assert state["head_seq"] == 2


async def test_connection_cap_shared_with_sse(make_server: ServerFactory) -> None:
    srv = make_server(env={"SEGLOG_MAX_SSE_CONNECTIONS": "1"})
    write(srv, "t", [{"data": 1}])
    async with connect(ws_url(srv)):
        with pytest.raises(InvalidStatus) as info:
            async with connect(ws_url(srv)):
                pass
        assert info.value.response.status_code == 429
        assert info.value.response.headers.get("Retry-After") == "1"
        wid = httpx.post(f"{srv.url}/v0/watch", json={"topics": {"t": {}}}).json()["wid"]
        r = httpx.get(f"{srv.url}/v0/watch/{wid}")
        assert r.status_code == 429
    # The slot comes back when the socket closes.
    for _ in range(100):
        m = httpx.get(f"{srv.url}/v0/metrics", headers={"Accept": "application/json"}).json()
        if m["sse_connections"] == 0:
            break
        await asyncio.sleep(0.05)
    async with connect(ws_url(srv)) as ws:
        await send(ws, {"op": "ping", "request_id": 1})
        assert (await recv(ws))["op"] == "pong"


async def test_shutdown_sends_error_and_closes(make_server: ServerFactory) -> None:
    srv = make_server()
    write(srv, "t", [{"data": 1}])
    async with connect(ws_url(srv)) as ws:
        await send(ws, {"op": "subscribe", "request_id": "s", "topic": "t"})
        await recv_until(ws, lambda m: m["op"] == "caught_up")
        assert srv.proc is not None
        srv.proc.send_signal(signal.SIGTERM)
        msg = await recv(ws)
        assert msg["op"] == "error" and msg["code"] == "server_shutting_down"
        assert srv.proc.wait(20) == 0


async def test_per_topic_node_adds_to_the_subscription_node(
    server: ServerProcess, tname: Callable[[str], str]
) -> None:
    """seglog's addition: `node` inside a `topics` entry is this reader's node id in that
    topic's topology, skipped there on top of the command's own `node`."""
    a, b = tname("a"), tname("b")
    for t in (a, b):
        write(
            server,
            t,
            [
                {"data": "x", "node": "na"},
                {"data": "y", "node": "nb"},
                {"data": "z", "node": "top"},
            ],
        )
    async with connect(ws_url(server)) as ws:
        await send(
            ws,
            {
                "op": "subscribe",
                "request_id": "s",
                "node": "top",
                "topics": {a: {"node": "na"}, b: {"node": ["nb"]}},
            },
        )
        seen: dict[str, list[str]] = {a: [], b: []}
        caught: set[str] = set()
        while caught != {a, b}:
            m = await recv(ws)
            if m["op"] == "record":
                seen[m["topic"]].extend(r["$node"] for r in m["records"])
            elif m["op"] == "caught_up":
                caught.add(m["topic"])
        assert seen == {a: ["nb"], b: ["na"]}


def _fanout(srv: ServerProcess) -> dict[str, int]:
    r = httpx.get(f"{srv.url}/v0/metrics", headers={"Accept": "application/json"})
    m = r.json()
    out: dict[str, int] = m["delivery"]["fanout"]
    return out


async def test_parked_socket_gets_rounds_and_a_resubscribe_takes_effect_at_once(
    server: ServerProcess, topic: str
) -> None:
    """A caught-up socket is served by the shared rounds (no read of its own), and a
    subscribe that replaces its subscription while it is parked wins over any round: the
    next record comes with the new options."""
    write(server, topic, [{"data": 0}])
    async with connect(ws_url(server)) as ws:
        await send(ws, {"op": "subscribe", "request_id": "s", "topic": topic})
        await recv_until(ws, lambda m: m["op"] == "caught_up")
        before = _fanout(server)["served"]
        for i in range(1, 4):
            write(server, topic, [{"data": i}])
            rec = (await recv_until(ws, lambda m: m["op"] == "record"))[-1]
            assert [r["data"] for r in rec["records"]] == [i]
        assert _fanout(server)["served"] >= before + 3
        await send(
            ws,
            {
                "op": "subscribe",
                "request_id": "s2",
                "topic": topic,
                "tail": True,
                "include_data": False,
            },
        )
        await recv_until(ws, lambda m: m["op"] == "subscribed")
        write(server, topic, [{"data": 4}])
        rec = (await recv_until(ws, lambda m: m["op"] == "record"))[-1]
        assert [r["$seq"] for r in rec["records"]] == [5]
        assert all("data" not in r for r in rec["records"])


async def test_a_busy_stream_stays_in_order(server: ServerProcess, topic: str) -> None:
    """Many small writes from concurrent writers while one socket follows: the messages
    form one unbroken chain (each `record` starts where the previous one ended, its seqs
    increase, every `caught_up` comes after the record that reached its head, and never
    twice in a row), the order a client relies on even when several messages are in
    flight on the socket at once."""
    write(server, topic, [{"data": 0}])
    writers, per_writer = 8, 60
    async with connect(ws_url(server)) as ws:
        await send(ws, {"op": "subscribe", "request_id": "s", "topic": topic})
        await recv_until(ws, lambda m: m["op"] == "caught_up")

        async def writer(k: int, c: httpx.AsyncClient) -> None:
            for i in range(per_writer):
                r = await c.post(f"/v0/topics/{topic}", json={"records": [{"data": [k, i]}]})
                assert r.status_code == 200

        async with httpx.AsyncClient(base_url=server.url, timeout=TIMEOUT) as c:
            await asyncio.gather(*(writer(k, c) for k in range(writers)))
        head = 1 + writers * per_writer
        cursor, last_op, seqs = 1, "caught_up", []
        while not (last_op == "caught_up" and cursor == head):
            m = await recv(ws)
            if m["op"] == "record":
                assert m["from_seq"] == cursor, f"a record message out of order: {m}"
                got = [r["$seq"] for r in m["records"]]
                assert got == sorted(got) and got[0] > cursor and got[-1] <= m["to_seq"]
                seqs += got
                cursor = m["to_seq"]
            else:
                assert m["op"] == "caught_up", m
                assert last_op == "record", "caught_up twice in a row"
                assert m["head_seq"] == cursor, "caught_up before the record it follows"
            last_op = m["op"]
        assert seqs == list(range(2, head + 1))


@pytest.mark.parametrize("literal", ["123456789012345678901234567890", "-99999999999999999999"])
async def test_publish_refuses_an_integer_outside_64_bits(
    server: ServerProcess, topic: str, literal: str
) -> None:
    """As over HTTP (API §0.4: data comes back equal to what was written): a literal orjson
    would read as a float is `invalid_request`, and nothing is appended."""
    async with connect(ws_url(server)) as ws:
        cmd = {"op": "publish", "request_id": "big", "topic": topic, "records": [{"data": 0}]}
        text = orjson.dumps(cmd).decode().replace('"data":0', f'"data":{{"id":{literal}}}')
        await ws.send(text)
        got = await reply(ws, "big")
        assert got["op"] == "error" and got["code"] == "invalid_request", got
        await send(
            ws,
            {"op": "publish", "request_id": "ok", "topic": topic, "records": [{"data": 2**64 - 1}]},
        )
        assert (await reply(ws, "ok"))["op"] == "ack"
        # only a publish's records are held to 64 bits: a ping with a big id is a ping
        # and its id comes back as sent (API §8: echoed), not as the float orjson reads
        await ws.send('{"op":"ping","request_id":123456789012345678901234567890}')
        raw = await ws.recv()
        assert raw == '{"op":"pong","request_id":123456789012345678901234567890}', raw
        await ws.send('{"op":"nope","request_id":[-99999999999999999999,{"k":1}]}')
        raw = await ws.recv()
        assert json.loads(raw)["request_id"] == [-99999999999999999999, {"k": 1}], raw
    r = httpx.post(f"{server.url}/v0/topics/{topic}/diff", json={}, timeout=TIMEOUT)
    assert [x["data"] for x in r.json()["records"]] == [2**64 - 1]


@pytest.mark.parametrize(
    ("request_id", "echoed"),
    [
        # deeper than orjson writes (255 levels), no big integer: echoed all the same
        ("[" * 300 + "]" * 300, True),
        # deep, and the command holds an integer beyond 64 bits (parsed exactly again)
        ("[" * 800 + "1" + "]" * 800, True),
        # deeper than any echo can go: refused with `invalid_request`, the socket lives
        ("[" * 1000 + "1" + "]" * 1000, False),
    ],
    ids=["300-deep", "800-deep-big-int", "1000-deep-big-int"],
)
async def test_a_deeply_nested_request_id_never_kills_the_socket(
    server: ServerProcess, request_id: str, echoed: bool
) -> None:
    """API §8: `request_id` is any JSON value, echoed back, and every command gets an
    answer. A request_id nested past what orjson writes (255 levels) closed the socket
    without a reply (a TypeError in the reply's encoding), and one nested ~1000 deep in a
    command holding an integer beyond 64 bits did too (a RecursionError in the exact
    re-parse, outside the command's error handling)."""
    big_int = ',"x":123456789012345678901234567890' if "1" in request_id else ""
    text = '{"op":"ping","request_id":' + request_id + big_int + "}"
    async with connect(ws_url(server)) as ws:
        await ws.send(text)
        first = await recv(ws)
        if echoed:
            assert first["op"] == "pong"
            assert json.dumps(first["request_id"], separators=(",", ":")) == request_id
        else:
            assert first["op"] == "error" and first["code"] == "invalid_request"
            assert first["request_id"] is None
        await send(ws, {"op": "ping", "request_id": "after"})
        assert await recv(ws) == {"op": "pong", "request_id": "after"}
