"""A WebSocket's sends in flight, started on the server's own ASGI `send` without a task
to await each one (API §8; used by `ws_session`).

Why: granian answers every WebSocket send with a future that completes on its I/O thread
(a tokio task per message). Awaited, each completion crosses back into the event loop
(`call_soon_threadsafe`, a self-pipe wake) and wakes the awaiting task: at 100 sockets
that was most of the loop's cost per delivered batch (BENCHMARKS.md, "Live delivery").
A future nobody waits on completes without touching the loop, and its `done()` is a
cheap check: so sends are started here and only counted, up to `limit` in flight per
socket. Only a socket at its limit (a client that stops reading) makes its writer wait,
on the oldest send; that is the backpressure, bounded per socket.

Order holds: granian's embedded worker (pinned <2.9 in pyproject.toml) runs one
current-thread tokio runtime, so sends started in order queue on the socket's fair lock
in order; test_live_ws checks the order of a busy stream. Under a server whose `send` is
a coroutine, a send that does not complete at once is finished by a task of its own.

Owner: the socket's session, on the event loop.
"""

from __future__ import annotations

import asyncio
from collections import deque
from typing import Any

from starlette.types import Send

from seglog.http.live_fanout import start as start_send


class Outbound:
    def __init__(self, send: Send, limit: int) -> None:
        self._send = send
        self._limit = limit
        self._inflight: deque[asyncio.Future[Any]] = deque()

    def room(self) -> int:
        """How many more sends may start now. Raises what a finished send raised (the
        socket is gone): the session ends as it would have on an awaited send."""
        inflight = self._inflight
        while inflight and inflight[0].done():
            error = inflight.popleft().exception()
            if error is not None:
                raise error
        return self._limit - len(inflight)

    def start(self, text: str) -> None:
        """Start sending one text message, after every message started before it."""
        sent = self._send({"type": "websocket.send", "text": text})
        if asyncio.isfuture(sent):
            if not sent.done() or sent.exception() is not None:
                self._inflight.append(sent)
            return
        rest = start_send(sent)
        if rest is not None:
            self._inflight.append(asyncio.ensure_future(rest))

    async def wait_room(self) -> None:
        """Until a send may start (the oldest in flight completed)."""
        while self.room() <= 0:
            await asyncio.wait([self._inflight[0]])

    async def drain(self) -> None:
        """Until every started send completed (or failed: the socket is closing anyway)."""
        while self._inflight:
            sent = self._inflight.popleft()
            await asyncio.wait([sent])
            if not sent.cancelled():
                sent.exception()  # retrieved: a failed send is no news here
