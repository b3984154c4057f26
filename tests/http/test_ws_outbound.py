"""A WebSocket's sends started without a task (`ws_outbound.Outbound`) and the session's
use of them (`WsSession.push` and its writer): messages leave in the order they were
produced, at most IN_FLIGHT are unconfirmed, a client that stops reading stops delivery
(bounded), and a failed send ends the session instead of being dropped silently."""

from __future__ import annotations

import asyncio
import contextlib
import gc
from collections.abc import AsyncIterator
from types import SimpleNamespace
from typing import Any, cast

import orjson
import pytest

from seglog.clock import ManualClock
from seglog.http.app_state import RAW_SEND
from seglog.http.live_fanout import start as start_send
from seglog.http.ws_outbound import Outbound
from seglog.http.ws_session import IN_FLIGHT, OUTBOUND_QUEUE, WsSession


class FutureSend:
    """granian's shape: `send` returns a future its I/O thread completes later."""

    def __init__(self) -> None:
        self.sent: list[str] = []
        self.pending: list[asyncio.Future[None]] = []

    def __call__(self, message: dict[str, Any]) -> asyncio.Future[None]:
        assert message["type"] == "websocket.send"
        self.sent.append(message["text"])
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.pending.append(fut)
        return fut

    def complete(self, n: int | None = None, error: Exception | None = None) -> None:
        done, self.pending = self.pending[:n], self.pending[len(self.pending[:n]) :]
        for fut in done:
            if error is None:
                fut.set_result(None)
            else:
                fut.set_exception(error)


class CoroutineSend:
    """uvicorn's shape: `send` is a coroutine function; it blocks while `gate` is clear."""

    sent: list[str]

    def __init__(self) -> None:
        self.sent: list[str] = []
        self.gate = asyncio.Event()
        self.gate.set()

    async def __call__(self, message: dict[str, Any]) -> None:
        await self.gate.wait()
        self.sent.append(message["text"])


async def test_sends_start_at_once_and_room_returns_as_they_complete() -> None:
    send = FutureSend()
    out = Outbound(send, 3)  # type: ignore[arg-type]
    assert out.room() == 3
    for m in ("a", "b", "c"):
        out.start(m)
    assert send.sent == ["a", "b", "c"]
    assert out.room() == 0
    send.complete(1)
    assert out.room() == 1
    send.complete()
    assert out.room() == 3


async def test_wait_room_waits_for_the_oldest_send() -> None:
    send = FutureSend()
    out = Outbound(send, 1)  # type: ignore[arg-type]
    out.start("a")
    waiter = asyncio.ensure_future(out.wait_room())
    await asyncio.sleep(0)
    assert not waiter.done()
    send.complete()
    await asyncio.wait_for(waiter, 5)
    assert out.room() == 1


async def test_a_failed_send_is_raised_by_the_next_room_check() -> None:
    send = FutureSend()
    out = Outbound(send, 4)  # type: ignore[arg-type]
    out.start("a")
    send.complete(error=ConnectionResetError("gone"))
    with pytest.raises(ConnectionResetError):
        out.room()


async def test_a_send_that_failed_at_once_is_raised_too() -> None:
    def failing(message: dict[str, Any]) -> asyncio.Future[None]:
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        fut.set_exception(RuntimeError("transport closed"))
        return fut

    out = Outbound(failing, 4)  # type: ignore[arg-type]
    out.start("a")
    with pytest.raises(RuntimeError, match="transport closed"):
        out.room()


async def test_a_coroutine_send_runs_as_far_as_it_goes_and_leaves_the_rest_to_await() -> None:
    send = CoroutineSend()
    out = Outbound(send, 2)  # type: ignore[arg-type]
    assert out.start("a") is None  # the gate is open: done at once
    assert send.sent == ["a"] and not out.futures and out.room() == 2
    send.gate.clear()
    rest = out.start("b")
    assert rest is not None and send.sent == ["a"]
    send.gate.set()
    await asyncio.wait_for(rest, 5)
    assert send.sent == ["a", "b"]


class ReadyAwaitable:
    """granian's answer on a closed socket: awaitable, complete, and neither a coroutine
    nor a future (it has `__next__` but no `send`)."""

    def __await__(self) -> ReadyAwaitable:
        return self

    def __iter__(self) -> ReadyAwaitable:
        return self

    def __next__(self) -> None:
        raise StopIteration(None)


async def test_an_awaitable_that_is_neither_coroutine_nor_future_is_accepted() -> None:
    out = Outbound(lambda message: ReadyAwaitable(), 2)  # type: ignore[arg-type,return-value]
    assert out.start("a") is None
    assert out.room() == 2


async def test_a_cancelled_send_ends_the_session_like_a_failed_one() -> None:
    send = FutureSend()
    out = Outbound(send, 2)  # type: ignore[arg-type]
    out.start("a")
    send.pending[0].cancel()
    with pytest.raises(ConnectionError):
        out.room()


async def test_abandoned_sends_have_their_failures_read() -> None:
    loop = asyncio.get_running_loop()
    reported: list[dict[str, Any]] = []
    loop.set_exception_handler(lambda _loop, context: reported.append(context))
    try:
        for abandon in (True, False):
            send = FutureSend()
            out = Outbound(send, 4)  # type: ignore[arg-type]
            out.start("a")
            if abandon:
                out.abandon()
            send.complete(error=ConnectionResetError("gone"))
            await asyncio.sleep(0)  # the done callbacks run
            del send, out
            gc.collect()
            if abandon:
                assert reported == []
        # The same sends not abandoned: the loop reports the unread failure.
        assert [c["message"] for c in reported] == ["Future exception was never retrieved"]
    finally:
        loop.set_exception_handler(None)


async def test_drain_waits_for_every_send_and_swallows_failures() -> None:
    send = FutureSend()
    out = Outbound(send, 4)  # type: ignore[arg-type]
    out.start("a")
    out.start("b")
    drained = asyncio.ensure_future(out.drain())
    await asyncio.sleep(0)
    assert not drained.done()
    send.complete(1)
    send.complete(error=ConnectionResetError("gone"))
    await asyncio.wait_for(drained, 5)
    assert out.room() == 4


# ---- the session's use of it -------------------------------------------------------------


def _session(send: FutureSend) -> WsSession:
    """A session whose first send (the `subscribed` ack, in a real one) went out: its
    server's sends are known to be futures."""
    ws = SimpleNamespace(scope={RAW_SEND: send}, send=None)
    st = SimpleNamespace(engine=SimpleNamespace(clock=ManualClock()))
    session = WsSession(cast(Any, ws), cast(Any, st), cast(Any, None))
    assert session._outbound.start("subscribed") is None
    send.complete()
    send.sent.clear()
    return session


@contextlib.asynccontextmanager
async def writing(session: WsSession) -> AsyncIterator[None]:
    """The session's writer task, running for the block."""
    writer = asyncio.ensure_future(session._write_loop())
    try:
        yield
    finally:
        writer.cancel()
        await asyncio.gather(writer, return_exceptions=True)


async def _drive(session: WsSession, frames: list[str]) -> bool:
    """Push like a fan-out round; True if the push completed without waiting."""
    pending = start_send(session.push(frames))
    return pending is None


async def test_pushes_start_in_order_and_queue_behind_a_held_message() -> None:
    send = FutureSend()
    session = _session(send)
    async with writing(session):
        assert await _drive(session, [f"m{i}" for i in range(IN_FLIGHT)])
        assert send.sent == [f"m{i}" for i in range(IN_FLIGHT)]  # started in the round
        # No room: the next one queues; the writer takes it and holds it for room.
        assert await _drive(session, ["q0"])
        await asyncio.sleep(0)
        assert len(send.sent) == IN_FLIGHT
        # One send completes: room for one, but the writer's held message goes first,
        # and a round's push meanwhile (the queue is empty) must not overtake it.
        send.complete(1)
        assert await _drive(session, ["late"])
        for _ in range(20):
            await asyncio.sleep(0)
            send.complete()
        assert send.sent == [f"m{i}" for i in range(IN_FLIGHT)] + ["q0", "late"]


async def test_a_client_that_stops_reading_stops_delivery_bounded() -> None:
    send = FutureSend()  # nothing ever completes: the client reads nothing
    session = _session(send)
    async with writing(session):
        handed_back = None
        for i in range(IN_FLIGHT + OUTBOUND_QUEUE + 5):
            pending = start_send(session.push([f"m{i}"]))
            await asyncio.sleep(0)
            if pending is not None:
                handed_back = (i, pending)
                break
        assert handed_back is not None, "a stalled socket must push back"
        # IN_FLIGHT started, one held by the writer, OUTBOUND_QUEUE queued: the next waits.
        assert handed_back[0] == IN_FLIGHT + 1 + OUTBOUND_QUEUE
        assert len(send.sent) == IN_FLIGHT
        send.complete()
        for _ in range(20):
            await asyncio.sleep(0)
            send.complete()
        await asyncio.wait_for(handed_back[1], 5)
        assert send.sent == [f"m{i}" for i in range(handed_back[0] + 1)]


async def test_a_failed_send_fails_the_next_push() -> None:
    send = FutureSend()
    session = _session(send)
    assert await _drive(session, ["a"])
    send.complete(error=ConnectionResetError("gone"))
    with pytest.raises(ConnectionResetError):
        session.push(["b"])
    assert send.sent == ["a"]


async def test_a_queued_message_is_never_overtaken_by_a_round() -> None:
    send = FutureSend()
    session = _session(send)
    assert await _drive(session, ["first"])
    # The delivery loop queued a message and the writer has not run yet: a round's push
    # must queue behind it, although there is room in flight.
    session._out.put_nowait("queued")
    assert await _drive(session, ["round"])
    assert send.sent == ["first"]
    async with writing(session):
        for _ in range(10):
            await asyncio.sleep(0)
        assert send.sent == ["first", "queued", "round"]


async def test_a_round_never_exceeds_the_limit_in_flight() -> None:
    send = FutureSend()
    session = _session(send)
    async with writing(session):
        assert await _drive(session, [f"m{i}" for i in range(IN_FLIGHT - 1)])
        assert await _drive(session, ["x", "y"])  # one slot left: both must queue
        await asyncio.sleep(0)
        assert len(send.pending) <= IN_FLIGHT
        assert send.sent == [f"m{i}" for i in range(IN_FLIGHT - 1)] + ["x"]
        send.complete()
        for _ in range(10):
            await asyncio.sleep(0)
        assert send.sent[-2:] == ["x", "y"]


async def test_a_closing_session_waits_for_its_sends_in_flight() -> None:
    send = FutureSend()
    session = _session(send)
    assert await _drive(session, ["a", "b"])
    drained = asyncio.ensure_future(session._drain())
    await asyncio.sleep(0)
    assert not drained.done()
    send.complete(1)
    await asyncio.sleep(0)
    assert not drained.done()
    send.complete()
    await asyncio.wait_for(drained, 5)


async def test_coroutine_sends_go_one_at_a_time_through_the_writer() -> None:
    """A server whose sends are coroutines: rounds never start them, and the writer
    finishes each before it starts the next, so a send that suspended is never
    overtaken by a later one."""
    send = CoroutineSend()
    ws = SimpleNamespace(scope={RAW_SEND: send}, send=None)
    st = SimpleNamespace(engine=SimpleNamespace(clock=ManualClock()))
    session = WsSession(cast(Any, ws), cast(Any, st), cast(Any, None))
    async with writing(session):
        send.gate.clear()
        assert await _drive(session, ["a"])
        assert await _drive(session, ["b"])
        for _ in range(10):
            await asyncio.sleep(0)
        assert send.sent == []  # "a" waits on the gate, "b" has not started
        send.gate.set()
        for _ in range(10):
            await asyncio.sleep(0)
        assert send.sent == ["a", "b"]


class _ShutdownWs:
    """A socket whose sends complete only if `open`; records what went out."""

    def __init__(self, open_: bool) -> None:
        self.open = open_
        self.sent: list[str] = []
        self.closed: int | None = None
        self.scope: dict[str, Any] = {}
        self.send = None  # the session's outbound sends are not exercised here
        self._stuck: asyncio.Future[None] | None = None

    async def _go(self) -> None:
        if not self.open:
            self._stuck = asyncio.get_running_loop().create_future()
            await self._stuck  # never completes: a client that stopped reading

    async def send_text(self, text: str) -> None:
        await self._go()
        self.sent.append(text)

    async def close(self, code: int) -> None:
        await self._go()
        self.closed = code


def _shutdown_session(ws: _ShutdownWs) -> WsSession:
    st = SimpleNamespace(engine=SimpleNamespace(clock=ManualClock()))
    return WsSession(cast(Any, ws), cast(Any, st), cast(Any, None))


async def test_shutdown_says_so_and_closes() -> None:
    ws = _ShutdownWs(open_=True)
    await _shutdown_session(ws)._say_shutdown()
    assert [orjson.loads(m)["code"] for m in ws.sent] == ["server_shutting_down"]
    assert ws.closed == 1001


async def test_shutdown_is_bounded_when_the_client_stopped_reading(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from seglog.http import ws_session

    monkeypatch.setattr(ws_session, "DRAIN_S", 0.001)  # the bound under test is a timeout
    ws = _ShutdownWs(open_=False)
    await asyncio.wait_for(_shutdown_session(ws)._say_shutdown(), 5)
    assert ws.sent == [] and ws.closed is None
    assert ws._stuck is not None and ws._stuck.cancelled()  # the stuck send was let go


# ---- a round's caught_up after every socket's record --------------------------------------

C1, C2, C3 = (f'{{"op":"caught_up","topic":"t","head_seq":{n}}}' for n in (1, 2, 3))


class LoggedSend(FutureSend):
    """A `FutureSend` that also notes each send, with its socket, in a shared log."""

    def __init__(self, name: str, log: list[tuple[str, str]]) -> None:
        super().__init__()
        self.name, self.log = name, log

    def __call__(self, message: dict[str, Any]) -> asyncio.Future[None]:
        self.log.append((self.name, message["text"]))
        return super().__call__(message)


async def test_a_rounds_caught_ups_start_after_every_sockets_record() -> None:
    """What a fan-out round does: each socket's push holds its record and caught_up; the
    records of all sockets go out first, each socket's caught_up right after the round."""
    log: list[tuple[str, str]] = []
    sends = [LoggedSend(name, log) for name in "abc"]
    sessions = [_session(s) for s in sends]
    log.clear()
    for session in sessions:  # the round
        assert await _drive(session, ["record", C1])
    assert log == [("a", "record"), ("b", "record"), ("c", "record")]
    await asyncio.sleep(0)  # the round's callback is over
    assert log[3:] == [("a", C1), ("b", C1), ("c", C1)]


async def test_a_deferred_caught_up_is_never_overtaken() -> None:
    """Anything started on the socket before the deferred caught_up went out takes it
    along first: the next round's record, the writer's message, a drain."""
    send = FutureSend()
    session = _session(send)
    assert await _drive(session, ["r1", C1])
    assert send.sent == ["r1"]
    assert await _drive(session, ["r2", C2])  # a second round in the same tick
    assert send.sent == ["r1", C1, "r2"]
    session._out.put_nowait("ack")
    async with writing(session):
        for _ in range(5):
            await asyncio.sleep(0)
    assert send.sent == ["r1", C1, "r2", C2, "ack"]
    assert await _drive(session, ["r3", C3])
    send.complete()
    drained = asyncio.ensure_future(session._outbound.drain())
    await asyncio.sleep(0)
    send.complete()
    await asyncio.wait_for(drained, 5)
    assert send.sent[-2:] == ["r3", C3]


async def test_a_deferred_caught_up_counts_in_flight_and_a_lone_one_is_not_deferred() -> None:
    send = FutureSend()
    session = _session(send)
    assert await _drive(session, [f"m{i}" for i in range(IN_FLIGHT - 2)] + ["r", C1])
    assert session._outbound.room() == 0  # IN_FLIGHT - 1 started, the caught_up held
    await asyncio.sleep(0)
    assert len(send.sent) == IN_FLIGHT and session._outbound.room() == 0
    send.complete()
    assert await _drive(session, [C2])  # nothing to go ahead of: at once
    assert send.sent[-1] == C2


async def test_a_deferred_caught_up_whose_send_fails_fails_the_next_push() -> None:
    send = FutureSend()
    session = _session(send)
    assert await _drive(session, ["r", C1])

    def broken(message: dict[str, Any]) -> Any:
        raise ConnectionResetError("gone")

    session._outbound._send = broken
    await asyncio.sleep(0)  # the deferred start raises: kept for the next room check
    send.complete()  # the record went out
    with pytest.raises(ConnectionResetError):
        session.push(["next"])
    assert send.sent == ["r"]
