"""Long work on the event loop that leaves room for the HTTP server's own threads.

A stream with a backlog (SSE watch, WebSocket delivery) reads and sends on the event loop
pass after pass, yielding to other tasks between passes. That is not enough: granian
hands every new request and every completed send to Python from its own thread, which
must take the GIL. CPython forces the GIL away from a busy thread only when a waiter has
seen no switch for a whole switch interval, and uvloop drops and retakes the GIL on every
loop iteration — so the waiter never gets its forced switch and is starved while the loop
stays busy: measured, a `limit` 1 backlog of 60,000 records delayed other requests by
0.3–0.8 s, `sys.setswitchinterval` made no difference, and a 1 ms rest every 10 ms
brought the worst case to ~15 ms (and the stream itself ran faster).

So such loops call `LoopShare.pause()` between passes: it always yields to other tasks,
and after `BUSY_S` of work sleeps `REST_S` in the loop's poll, where the GIL is free.
Time comes from the injectable clock; with a frozen test clock it never rests.
"""

from __future__ import annotations

import asyncio

from seglog.clock import Clock

BUSY_S = 0.010
REST_S = 0.001


class LoopShare:
    """The rest schedule of one long-running loop task."""

    def __init__(self, clock: Clock) -> None:
        self._clock = clock
        self._rested = clock.monotonic()

    async def pause(self) -> None:
        await asyncio.sleep(0)
        if self._clock.monotonic() - self._rested >= BUSY_S:
            await asyncio.sleep(REST_S)
            self._rested = self._clock.monotonic()

    def rested(self) -> None:
        """The task just waited (idle, or blocked in a send): its busy time starts over."""
        self._rested = self._clock.monotonic()
