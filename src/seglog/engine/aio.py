"""asyncio adapters over the thread-based engine: await a WAL commit without blocking the
event loop, and wait for appends to a topic (long-poll, SSE). The engine calls listeners
from whichever thread published; they hop onto the loop with `call_soon_threadsafe`."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from typing import Protocol

from seglog.engine.delivery import DeliveryScheduler
from seglog.engine.engine import Engine
from seglog.engine.ops import PendingOp, PendingWrite
from seglog.model import WriteResult
from seglog.storage.wal_commit import Commit


async def wait_commit(commit: Commit) -> None:
    """Resolve when the commit completes (successfully or not)."""
    if commit.done():
        return
    loop = asyncio.get_running_loop()
    fut: asyncio.Future[None] = loop.create_future()

    def _resolve() -> None:
        if not fut.done():
            fut.set_result(None)

    def _on_done(_c: Commit) -> None:
        loop.call_soon_threadsafe(_resolve)

    commit.add_done_callback(_on_done)
    await fut


async def finish_op(engine: Engine, op: PendingOp) -> None:
    """Await, on the loop, every commit up to and including `op`'s, applying completed
    ops in order as they land (the async twin of `Engine.drain`)."""
    while not op.applied:
        owner = op.owner
        first = owner.pending[0] if owner.pending else None
        if first is None:
            break
        await wait_commit(first.commit)
        with owner.lock:
            head = engine.publisher.apply_ready(owner, engine.clock.now_ms())
        if head is not None:
            engine.publisher.notify(owner.name, head)


async def finish_write(engine: Engine, pw: PendingWrite) -> WriteResult:
    """Await the write's commit on the loop, then publish it in order."""
    await finish_op(engine, pw.op)
    return engine.write_publish(pw)


def _running_loop() -> asyncio.AbstractEventLoop | None:
    try:
        return asyncio.get_running_loop()
    except RuntimeError:
        return None


def _expire(fut: asyncio.Future[bool]) -> None:
    if not fut.done():
        fut.set_result(False)


class Kick:
    """A flag that also wakes the `AppendWaiters.wait` it was passed to, if one is running
    (a `/work` stream's "jobs you held were settled"). Waiting on an `asyncio.Event` beside
    the append wait took two tasks and an `asyncio.wait` per wait, ~5× one future's cost.
    One wait at a time (a `/work` stream's own): a second `arm` replaces the first. Loop
    thread only."""

    __slots__ = ("_flag", "_waiter")

    def __init__(self) -> None:
        self._flag = False
        self._waiter: asyncio.Future[bool] | None = None

    def set(self) -> None:
        self._flag = True
        w = self._waiter
        if w is not None and not w.done():
            w.set_result(True)

    def is_set(self) -> bool:
        return self._flag

    def clear(self) -> None:
        self._flag = False

    def arm(self, waiter: asyncio.Future[bool] | None) -> None:
        """`waiter` is resolved by the next `set` (None: by none)."""
        self._waiter = waiter

    @property
    def armed(self) -> bool:
        return self._waiter is not None


class WakeHook(Protocol):
    """Other waiters on topics, woken in the scheduler's order with the plain ones (the
    HTTP layer's parked watch streams)."""

    def has_waiters(self, topic: str) -> bool: ...

    def wake(self, topic: str) -> None: ...

    def wake_all(self) -> None: ...


class AppendWaiters:
    """Per-topic asyncio wake-ups, fed by an engine append listener. A publish to a topic
    that has waiters marks it dirty in the `DeliveryScheduler`, which decides when (and in
    which order across topics) its waiters are woken; a topic nobody waits on costs one
    loop callback and nothing more."""

    def __init__(
        self,
        engine: Engine,
        loop: asyncio.AbstractEventLoop,
        on_level: Callable[[int], None] | None = None,
    ) -> None:
        self._engine = engine
        self._loop = loop
        # The loop's thread, when built on it (the app's startup); else every hop is
        # thread-safe.
        self._loop_thread = threading.get_ident() if _running_loop() is loop else None
        self._waiters: dict[str, set[asyncio.Future[bool]]] = {}
        self.hook: WakeHook | None = None
        self.scheduler = DeliveryScheduler(
            loop, engine.clock, engine.delivery_priority, self._wake, on_level
        )
        engine.add_listener(self._on_append)

    def close(self) -> None:
        self._engine.remove_listener(self._on_append)
        self.scheduler.stop_probe()

    def _on_append(self, topic: str, head: int) -> None:
        # Unconditional hop: a waiter may register on the loop between a publisher
        # thread's membership check and its wake-up, and must not sleep through it. From
        # the loop's own thread (a write published by its handler) a plain `call_soon`
        # does the same without writing to the loop's wake-up pipe.
        if threading.get_ident() == self._loop_thread:
            self._loop.call_soon(self._mark, topic)
        else:
            self._loop.call_soon_threadsafe(self._mark, topic)

    def _mark(self, topic: str) -> None:
        hook = self.hook
        if topic in self._waiters or (hook is not None and hook.has_waiters(topic)):
            self.scheduler.mark(topic)

    def _wake(self, topic: str) -> None:
        if self.hook is not None:
            self.hook.wake(topic)
        for fut in self._waiters.pop(topic, ()):
            if not fut.done():
                fut.set_result(True)

    def wake_all(self) -> None:
        if self.hook is not None:
            self.hook.wake_all()
        for topic in list(self._waiters):
            self._wake(topic)

    async def wait(self, topics: list[str], timeout_s: float, kick: Kick | None = None) -> bool:
        """Wait for an append to any of `topics`, or for `kick` to be set (at once if it
        is); False on timeout."""
        if kick is not None and kick.is_set():
            return True
        fut: asyncio.Future[bool] = self._loop.create_future()
        for t in topics:
            self._waiters.setdefault(t, set()).add(fut)
        if kick is not None:
            kick.arm(fut)
        # One future and one timer handle: `wait_for(shield(...))` built a task and more
        # per wake, a quarter of the loop's time with 100 watchers (py-spy).
        timer = self._loop.call_later(timeout_s, _expire, fut)
        try:
            return await fut
        finally:
            timer.cancel()
            if kick is not None:
                kick.arm(None)
            for t in topics:
                s = self._waiters.get(t)
                if s is not None:
                    s.discard(fut)
                    if not s:
                        del self._waiters[t]
