"""One WebSocket data-plane connection (API §8; SEMANTICS §9): commands in, acks and
deliveries out, through one small outbound queue.

Three tasks per socket: the reader runs commands in arrival order (a publish is awaited
before the next command, so acks come back in order); the delivery loop reads each
subscription from its cursor through the shared `TopicFeed` (the same walk, tombstones
and skips as diff and SSE) and, when everything is caught up, parks the session on its
topics in the shared fan-out (`live_fanout`): rounds then start the sends of new
batches' messages themselves (`ws_outbound`), waking no task, until a (un)subscribe, a
tombstone, a deleted topic or 30 s wakes it; the writer starts the sends of what the
other two queue. At most IN_FLIGHT sends are started and not yet complete, and the queue
holds OUTBOUND_QUEUE messages: when the client stops reading, sends stop completing,
the writer waits for room, the queue fills, and delivery (and acks) block with it —
nothing is buffered without bound, and only this socket waits.

Owner: the event loop. Subscriptions belong to this socket and are touched only by its
reader (replace/remove) and its delivery loop (cursors), never concurrently in one tick.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable
from dataclasses import dataclass
from typing import Any

import orjson
from starlette.websockets import WebSocket

from seglog.errors import ErrorCode, SeglogError
from seglog.http.app_state import RAW_SEND, ServerState
from seglog.http.auth import Principal, Scope
from seglog.http.live_fanout import Signal
from seglog.http.loop_share import LoopShare
from seglog.http.topic_feed import FeedBatch
from seglog.http.watch_request import DeliveryOptions
from seglog.http.ws_commands import (
    coded_error,
    error_message,
    parse_subscribe,
    parse_unsubscribe,
    request_id_of,
)
from seglog.http.ws_outbound import Outbound
from seglog.http.ws_publish import publish

OUTBOUND_QUEUE = 4
IN_FLIGHT = 8
# Time charged to the fan-out's pacing per message a round sends: the part of a send that
# runs on granian's I/O thread (a tokio task and a socket write per message), on the same
# cores as the loop and the writers but outside the round's clock.
WS_SEND_COST_S = 1e-6
IDLE_WAKE_S = 30.0
CAUGHT_UP = '{"op":"caught_up",'  # how `_build_messages` starts one
DRAIN_S = 1.0  # how long a closing socket may take to send what it already queued
SHUTDOWN = orjson.dumps(
    {"op": "error", "code": "server_shutting_down", "message": "server is shutting down"}
)


@dataclass(slots=True)
class _Sub:
    cursor: int
    options: DeliveryOptions
    tailing: bool = False
    head_seen: int = -1


class WsSession:
    def __init__(self, ws: WebSocket, st: ServerState, who: Principal) -> None:
        self._ws = ws
        self._st = st
        self._who = who
        self._out: asyncio.Queue[str] = asyncio.Queue(OUTBOUND_QUEUE)
        self._outbound = Outbound(ws.scope.get(RAW_SEND, ws.send), IN_FLIGHT)
        self._holding = False  # the writer took a message from `_out` and not started it
        self._subs: dict[str, _Sub] = {}
        self._kick = asyncio.Event()
        self._share = LoopShare(st.engine.clock)

    async def run(self) -> None:
        tasks = [
            asyncio.ensure_future(self._read_loop()),
            asyncio.ensure_future(self._write_loop()),
            asyncio.ensure_future(self._deliver_loop()),
            asyncio.ensure_future(self._st.stopping.wait()),
        ]
        writer = tasks[1]
        try:
            done, _ = await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
        finally:
            others = [t for t in tasks if t is not writer]
            for t in others:
                t.cancel()
            await asyncio.gather(*others, return_exceptions=True)
            if not writer.done():
                # Sends are started before earlier ones complete: cancelling the writer
                # could drop one while later ones still go out, a gap that a client
                # resuming from its last `to_seq` would never see. Let it finish what is
                # queued (bounded: a client that stopped reading gets DRAIN_S).
                drained = asyncio.ensure_future(self._drain())
                await asyncio.wait(
                    [drained, writer], timeout=DRAIN_S, return_when=asyncio.FIRST_COMPLETED
                )
                drained.cancel()
                writer.cancel()
            await asyncio.gather(writer, return_exceptions=True)
            self._outbound.abandon()
        if tasks[3] in done:  # shutdown: say so, then close
            await self._say_shutdown()
            return
        for t in done:
            if not t.cancelled() and t.exception() is not None:
                raise t.exception()  # type: ignore[misc]

    async def _say_shutdown(self) -> None:
        """The shutdown error, then a close (1001), within DRAIN_S: a client that stopped
        reading must not hold the server's stop up."""

        async def say() -> None:
            await self._ws.send_text(SHUTDOWN.decode())
            await self._ws.close(1001)

        try:
            await asyncio.wait_for(say(), DRAIN_S)
        except TimeoutError:
            pass

    # ---- writer ------------------------------------------------------------------------
    async def _put(self, message: bytes) -> None:
        await self._out.put(message.decode())

    async def _put_all(self, messages: list[str]) -> None:
        for m in messages:
            await self._out.put(m)

    async def _write_loop(self) -> None:
        out = self._out
        outbound = self._outbound
        while True:
            message = await out.get()
            self._holding = True
            await outbound.wait_room()
            rest = outbound.start(message)
            self._holding = False
            if rest is not None:
                await rest  # a send that is not a future: one at a time, in this task
            out.task_done()

    async def _finish(self, rest: Awaitable[Any], messages: list[str]) -> None:
        await rest
        await self._put_all(messages)

    async def _drain(self) -> None:
        await self._out.join()
        await self._outbound.drain()

    # ---- reader ------------------------------------------------------------------------
    async def _read_loop(self) -> None:
        while True:
            msg = await self._ws.receive()
            if msg["type"] == "websocket.disconnect":
                return
            text = msg.get("text")
            if text is None:
                message = "binary messages are not supported; send JSON text"
                await self._put(
                    coded_error(None, "unsupported_message", message, with_request_id=False)
                )
                continue
            try:
                cmd = orjson.loads(text)
            except orjson.JSONDecodeError as e:
                await self._put(coded_error(None, "invalid_json", f"unparseable command: {e}"))
                continue
            rid = None
            try:
                rid = request_id_of(cmd, text)
                if not isinstance(cmd, dict):
                    raise SeglogError(ErrorCode.INVALID_REQUEST, "a command is a JSON object")
                await self._put(await self._command(cmd, rid, text))
            except SeglogError as e:
                await self._put(error_message(rid, e))

    async def _command(self, cmd: dict[str, Any], rid: Any, text: str) -> bytes:
        op = cmd.get("op")
        if op == "ping":
            return orjson.dumps({"op": "pong", "request_id": rid})
        if op == "subscribe":
            return await self._subscribe(cmd, rid)
        if op == "unsubscribe":
            names = parse_unsubscribe(cmd)
            for name in names:
                self._subs.pop(name, None)
            self._kick_now()
            return orjson.dumps({"op": "unsubscribed", "request_id": rid, "topics": names})
        if op == "publish":
            return await self._publish(cmd, rid, text)
        raise SeglogError(ErrorCode.INVALID_REQUEST, f"unknown op {op!r}")

    async def _subscribe(self, cmd: dict[str, Any], rid: Any) -> bytes:
        if not self._who.has(Scope.READ):  # scope before parse (API §0.2), as `publish`
            raise SeglogError(ErrorCode.FORBIDDEN, "api key lacks read scope")
        sub = parse_subscribe(cmd)
        for name in sub.topics:
            if not self._who.allows(name):
                raise SeglogError(
                    ErrorCode.FORBIDDEN, f"api key may not access {name!r}", {"topic": name}
                )
        described: dict[str, dict[str, int]] = {}
        starts: dict[str, int] = {}
        for name, start in sub.topics.items():
            try:
                info = await self._st.db.get_topic(name, touch=False)
            except SeglogError as e:
                if e.code is ErrorCode.TOPIC_NOT_FOUND and sub.lenient:
                    continue
                raise
            cursor = info.head_seq if start.tail else start.from_seq
            starts[name] = cursor
            described[name] = {
                "from_seq": cursor,
                "head_seq": info.head_seq,
                "earliest_seq": info.earliest_seq,
            }
        for name, cursor in starts.items():
            options = sub.options.for_topic(sub.topics[name])
            self._subs[name] = _Sub(cursor, options)  # replaces an older subscription
        self._kick_now()
        return orjson.dumps({"op": "subscribed", "request_id": rid, "topics": described})

    async def _publish(self, cmd: dict[str, Any], rid: Any, text: str) -> bytes:
        name = cmd.get("topic")
        if not isinstance(name, str):
            raise SeglogError(ErrorCode.INVALID_REQUEST, "publish needs a topic")
        return await publish(self._st, self._who, name, cmd, rid, text)

    # ---- delivery ----------------------------------------------------------------------
    async def _deliver_loop(self) -> None:
        while True:
            self._kick.clear()  # a (un)subscribe during the pass below leaves it set
            backlog = False
            for name in list(self._subs):
                backlog |= await self._deliver(name)
            if backlog:
                await self._share.pause()  # a long backlog must not hold the loop (or the GIL)
                continue
            await self._idle()
            self._share.rested()

    async def _deliver(self, name: str) -> bool:
        """One read for one subscription; True if it has more to read at once."""
        sub = self._subs.get(name)
        if sub is None:
            return False
        try:
            batch = await self._st.feed.read(name, sub.cursor, sub.options)
        except SeglogError as e:
            if e.code is not ErrorCode.TOPIC_NOT_FOUND:
                raise
            if self._subs.get(name) is sub:
                del self._subs[name]
                await self._put(
                    b'{"op":"topic_deleted","topic":%b,"head_seq":0,"reason":"deleted"}'
                    % orjson.dumps(name)
                )
            return False
        if self._subs.get(name) is not sub:
            return False  # replaced or removed while reading
        sub.head_seen = batch.head_seq
        for message in _messages(batch, sub):
            if self._subs.get(name) is not sub:
                return False  # unsubscribed or replaced meanwhile: nothing more for it
            await self._out.put(message)
        return not batch.caught_up

    def _changed(self) -> bool:
        for name, sub in self._subs.items():
            try:
                if self._st.db.head_of(name) != sub.head_seen:
                    return True
            except SeglogError:
                return True
        return self._kick.is_set()

    def _kick_now(self) -> None:
        """Subscriptions changed: the delivery loop must look at them now (and a parked
        session must not take a round's batch read for a subscription it no longer has)."""
        self._kick.set()
        self._st.fanout.release(self)

    async def _idle(self) -> None:
        if self._st.shutting_down:  # `run` says goodbye and cancels us; nothing to deliver
            await asyncio.get_running_loop().create_future()
        if not self._subs:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._kick.wait(), IDLE_WAKE_S)
            return
        while not self._kick.is_set():
            # Parked even when a head moved since our last read, or a parked read stopped
            # short of the head: the next round reads on for us (`kick`).
            behind = self._changed() or not all(s.tailing for s in self._subs.values())
            got = await self._st.park(self, list(self._subs), IDLE_WAKE_S, behind)
            if got is Signal.WAKE or got is Signal.TIMEOUT:
                return
            await got  # a round's messages that had to wait for room in the queue

    # ---- parked (see live_fanout) ------------------------------------------------------
    def cursor_of(self, topic: str) -> int | None:
        sub = self._subs.get(topic)
        return None if sub is None else sub.cursor

    def options_of(self, topic: str) -> DeliveryOptions:
        return self._subs[topic].options

    def take_parked(self, topic: str, cursor: int, batch: FeedBatch) -> list[str] | None:
        """The messages of a batch a round read for us, as `_deliver` makes them; None (do
        your own read) for a tombstone or when the subscription moved meanwhile."""
        sub = self._subs.get(topic)
        if sub is None or sub.cursor != cursor or batch.tombstone is not None:
            return None
        sub.head_seen = batch.head_seq
        return _messages(batch, sub)

    def send_cost(self, frames: list[str]) -> float:
        return len(frames) * WS_SEND_COST_S

    def push(self, frames: list[str]) -> Awaitable[None]:
        """Send a round's messages: started right here when nothing waits to start ahead
        of them and the socket has room in flight (the common case: no task wakes), else
        queued behind the rest; when the queue is full, the rest is handed back for the
        delivery loop to wait on."""
        out = self._out
        outbound = self._outbound
        if (
            outbound.futures
            and out.empty()
            and not self._holding
            and outbound.room() >= len(frames)
        ):
            last = len(frames) - 1
            for i, m in enumerate(frames):
                if i == last and i and m.startswith(CAUGHT_UP):
                    outbound.start_later(m)  # other sockets' records go first
                    break
                rest = outbound.start(m)
                if rest is not None:  # not a future after all: finish it, queue the rest
                    return self._finish(rest, frames[i + 1 :])
            return _done()
        for i, m in enumerate(frames):
            if out.full():
                return self._put_all(frames[i:])
            out.put_nowait(m)
        return _done()


async def _done() -> None:
    return None


def _messages(batch: FeedBatch, sub: _Sub) -> list[str]:
    """The messages one read produces, moving the subscription's cursor (API §7.4 rules).
    Each is built once per batch (`FeedBatch.ws_text`) and shared by every socket that
    read it: what a message says depends on the batch alone, only which ones a socket
    gets depends on the socket."""
    text = batch.ws_text
    if not text:
        _build_messages(batch)
    out: list[str] = []
    if batch.tombstone is not None:
        out.append(text["tombstone"])
        sub.tailing = False
    sub.cursor = batch.next_cursor
    if batch.count:
        out.append(text["record"])
        sub.tailing = False
    if batch.caught_up and not sub.tailing:
        out.append(text["caught_up"])
        sub.tailing = True
    return out


def _build_messages(batch: FeedBatch) -> None:
    text = batch.ws_text
    topic = batch.topic_json
    t = batch.tombstone
    if t is not None:
        text["tombstone"] = (
            b'{"op":"tombstone","topic":%b,"reason":"%b","gap_from":%d,"gap_to":%d,'
            b'"earliest_seq":%d,"head_seq":%d}'
            % (topic, t.reason.value.encode(), t.gap_from, t.gap_to, t.earliest_seq, t.head_seq)
        ).decode()
    if batch.count:
        text["record"] = (
            b'{"op":"record","topic":%b,"from_seq":%d,"to_seq":%d,"head_seq":%d,"records":%b}'
            % (topic, batch.start, batch.next_cursor, batch.head_seq, batch.records_json)
        ).decode()
    text["caught_up"] = (
        b'{"op":"caught_up","topic":%b,"head_seq":%d}' % (topic, batch.head_seq)
    ).decode()
