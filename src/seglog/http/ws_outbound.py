"""A WebSocket's sends in flight, started on the server's own ASGI `send` without a task
to await each one (API §8; used by `ws_session`).

Why: granian (on Linux) answers every WebSocket send with a future-like object that its
I/O thread completes (a tokio task per message). Awaited, each completion crosses back
into the event loop (`call_soon_threadsafe`, a self-pipe wake) and wakes the awaiting
task: at 100 sockets that was much of the loop's cost per delivered batch (BENCHMARKS.md,
"Live delivery"). Such a future that nobody waits on completes without touching the
loop, and its `done()` is a cheap check: so those sends are started and only counted, up
to `limit` in flight per socket, and may be started by a fan-out round itself
(`futures`). Only a socket at its limit (a client that stops reading) makes its writer
wait, on the oldest send; that is the backpressure, bounded per socket. (granian on
Windows answers with asyncio futures, whose completion does wake the loop: the same
behaviour, without the saving.) Order holds:
granian's embedded worker (pinned <2.9 in pyproject.toml) runs one current-thread tokio
runtime, so sends started in order queue on the socket's fair lock in order;
test_live_ws checks the order of a busy stream.

Any other awaitable (a server whose `send` is a coroutine function, or granian's
already-complete answers) is driven as far as it goes at once; what is left of it is
returned for the socket's writer task to await before it starts the next send, in that
task's context — one send at a time, as an awaited send always was.

Owner: the socket's session, on the event loop.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Awaitable
from typing import Any

from starlette.types import Send

from seglog.http.live_fanout import start as start_send


class Outbound:
    def __init__(self, send: Send, limit: int) -> None:
        self._send = send
        self._limit = limit
        self._inflight: deque[asyncio.Future[Any]] = deque()
        # The server's sends are futures, counted in flight (set by the first send): only
        # then may a fan-out round start sends itself.
        self.futures = False
        self._later: str | None = None  # `start_later`'s message, not started yet

    def room(self) -> int:
        """How many more sends may start now. Raises what a finished send raised (the
        socket is gone): the session ends as it would have on an awaited send."""
        inflight = self._inflight
        while inflight and inflight[0].done():
            sent = inflight.popleft()
            if sent.cancelled():
                raise ConnectionError("a WebSocket send was cancelled")
            error = sent.exception()
            if error is not None:
                raise error
        return self._limit - len(inflight) - (self._later is not None)

    def start(self, text: str) -> Awaitable[Any] | None:
        """Start sending one text message, after every message started before it. None
        when nothing is left to await here (complete, or a future counted in flight);
        else the rest of the send, for the caller's task to await before it starts
        another."""
        if self._later is not None:
            self._start_later()
        sent = self._send({"type": "websocket.send", "text": text})
        if asyncio.isfuture(sent):
            self.futures = True
            self._inflight.append(sent)
            return None
        self.futures = False
        return start_send(_awaited(sent))

    def start_later(self, text: str) -> None:
        """Start `text` once the loop's current callback is done, or before the next
        message started here, whichever comes first. A fan-out round sends every socket's
        `record` first and their `caught_up`s after (API §8's order per socket holds):
        each send costs the loop and granian's I/O thread several microseconds, and a
        record waiting behind other sockets' `caught_up`s is a record delivered later.
        Only for a server whose sends are futures (`futures`), with room for one more."""
        assert self.futures and self._later is None
        self._later = text
        asyncio.get_running_loop().call_soon(self._start_later)

    def _start_later(self) -> None:
        text, self._later = self._later, None
        if text is None:
            return  # started already, by `start`
        try:
            rest = self.start(text)
        except Exception as e:  # what an awaited send raises, `room` raises (socket gone)
            failed = asyncio.get_running_loop().create_future()
            failed.set_exception(e)
            self._inflight.append(failed)
            return
        if rest is not None:  # the server stopped answering with futures: finish it
            self._inflight.append(asyncio.ensure_future(rest))

    async def wait_room(self) -> None:
        """Until a send may start (the oldest in flight completed)."""
        while self.room() <= 0:
            await asyncio.wait([self._inflight[0]])

    async def drain(self) -> None:
        """Until every started send completed (or failed: the socket is closing anyway)."""
        if self._later is not None:
            self._start_later()
        inflight = self._inflight
        while inflight:
            await asyncio.wait([inflight[0]])
            _retrieve(inflight.popleft())

    def abandon(self) -> None:
        """The session is over: whatever is still in flight completes unobserved, its
        outcome read when it does (no "exception was never retrieved")."""
        self._later = None
        while self._inflight:
            self._inflight.popleft().add_done_callback(_retrieve)


async def _awaited(sent: Awaitable[Any]) -> Any:
    return await sent


def _retrieve(sent: asyncio.Future[Any]) -> None:
    if not sent.cancelled():
        sent.exception()
