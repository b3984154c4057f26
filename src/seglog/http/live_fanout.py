"""One read per wake for every idle reader of a topic (SEMANTICS §9; API §7.3, §8).

A watch stream (or a WebSocket session: its frames are messages put into the socket's
outbound queue) that has caught up on all its topics parks here instead of waiting for a
bare wake-up. When a parked topic is written, one broadcast reads the new batch once per
distinct (cursor, delivery options) — through `TopicFeed`, the very read each stream would
make — and offers it to every parked stream, which takes its frames (built once per
distinct cursor map and shared) and starts their send right there. A send that completes
at once (the server's body channel had room: the common case) leaves the stream parked,
never woken; one that would block is handed to the stream's own task to finish, so a slow
client holds up nobody but itself. A stream whose batch has no records for it
(node-filtered) moves its cursor and stays parked. Anything off that common path — a
tombstone, a batch that stops short of the head, a deleted topic, a stream superseded or
rewound meanwhile, shutdown — wakes the stream (`WAKE`) for its own read pass as before.

Why: woken one by one, each watcher paid a task wake, a cache lookup, a composite-cursor
id and a frame assembly per record — about 40 µs of the one event loop per frame at 100
watchers (BENCHMARKS.md, "Live delivery"); the broadcast pays the read, the id and the
frames once per group, and no task wakes at all.

No lost wake-up: a stream parks only after checking that no watched head moved since its
last read, with no await in between; any later append marks the topic, and the wake that
follows offers the new batch to every stream parked on it then.

Owner: the event loop; no locks.
"""

from __future__ import annotations

import asyncio
import enum
import logging
import math
import time
from collections.abc import Awaitable, Callable, Generator
from dataclasses import dataclass, field
from typing import Any, Protocol

from seglog.errors import SeglogError
from seglog.http.topic_feed import FeedBatch, TopicFeed
from seglog.http.watch_request import DeliveryOptions

log = logging.getLogger("seglog.http")

# While writers are active (`AsyncEngine.writers_active`), a round that cost `c` seconds
# (the loop thread's CPU time, averaged over paced rounds: COST_WEIGHT) is
# followed by up to IDLE_FACTOR × c for everything else (all of it while the loop is
# saturated, see SATURATED_BUSY): over time, fan-out takes at most about a ninth of a
# busy loop however many watchers there are, and appends that land meanwhile go out
# together in fewer, larger frames. Watchers that cannot keep up with a write burst fall
# behind and catch up once it ends (rounds then run back to back). A round reads at most
# BATCHES_PER_ROUND batches per group, so a long backlog cannot hold the loop either.
# Measured (bench_live, SSE, 100 watchers, `memory`; BENCHMARKS.md): writers with 100
# watchers 0.37 → 0.83 of their rate alone, and at 1 record/ms the writers' acks p50
# 5.8 → 1.5 ms, delivery p50 7.3 → 3.9 ms, against no pacing.
IDLE_FACTOR = 8.0
# A round cheaper than this is never followed by a pause (nor does it count towards the
# averaged cost, COST_WEIGHT): it cannot starve a writer, and
# with writes that complete without waiting (inline WAL writes) writers count as active
# right after every write, so pausing after a small round only delays the next frame (1
# and 10 watchers at 1 record/ms: delivery p50 1.2–1.5 ms paced, 0.58–0.65 ms not).
MIN_PACED_ROUND_S = 0.0002
# The loop's clock misses part of what an SSE round costs: every byte it hands to a
# connection is copied again by the server's I/O threads and through the kernel's socket
# buffers, on the same (here two) cores the loop and the writers run on — at most ~0.4 ns
# per byte measured (benchmarks/bench_sse_bytes.py). A watch stream charges this much per
# byte it is handed (`WatchStream.send_cost`; a WebSocket charges per message instead,
# `ws_session.WS_SEND_COST_S`). On bench_live (SSE, 100 watchers, `disk`, writers at full
# rate; BENCHMARKS.md) writers keep 0.84–0.89 of their rate alone (0.73–0.76 without it);
# watchers that cannot keep up with the burst catch up after it.
SEND_BYTE_COST_S = 0.5e-9
BATCHES_PER_ROUND = 1
# The pause is for work that needs the loop, so it follows how much of the loop that work
# used between the previous round and this one (the loop thread's CPU time over the wall
# time between them): from MIN_PAUSE_SHARE of IDLE_FACTOR × c when it used IDLE_BUSY or
# less (the loop had room to spare) to all of it at SATURATED_BUSY (the loop thread also
# waits for the GIL while granian's threads hold it, time its CPU clock does not count).
# Measured (bench_live, 100 SSE watchers; BENCHMARKS.md): at 1 record/ms the loop was
# ~0.5 busy and delivery p50 went 6.9–11.5 → 3.9–4.5 ms; writers at full rate kept
# 0.75–0.93 of their rate alone, median 0.88 (0.84–0.95 with the fixed pause, median 0.86).
SATURATED_BUSY = 0.65
IDLE_BUSY = 0.3
# The CPU clock also stops while another process or a CPU quota keeps the loop thread off
# its core, so a starved loop can read as an idle one: however idle it reads, writers get
# at least this share of the pause (two rounds' cost, against eight when saturated).
MIN_PAUSE_SHARE = 0.25
# Each gap between rounds moves the busy estimate by 1 - exp(-gap / BUSY_TAU_S): a gap of
# a few microseconds between back-to-back rounds hardly, a gap of milliseconds mostly.
BUSY_TAU_S = 0.005
# The pause follows the paced rounds' cost averaged (each moves it by COST_WEIGHT), and a
# round's cost is the loop thread's CPU time in it (min(wall, CPU), plus what its pushes
# are charged), not its wall time: a round that stalled — its thread descheduled by
# another tenant, or waiting for the GIL that granian's threads hold — paid eight times
# its stall in the pause after it. Measured (bench_live, 100 WebSocket watchers, 1
# record/ms, `disk`): rounds' wall time p50 / p99 / max 1.56 / 5.16 / 12.9 ms against
# CPU 1.51 / 2.29 / 7.35 ms, and pauses up to 46 ms, the delivery p99. Every paced round
# feeds the average and is paused by it, so over paced rounds the pauses add up to
# IDLE_FACTOR × their cost, as before; one expensive round lengthens the next few.
COST_WEIGHT = 0.2


class ParkedStream(Protocol):
    """A parked reader: an SSE watch stream (frames are bytes) or a WebSocket session
    (frames are its messages); the fanout only passes them from `take_parked` to `push`."""

    def cursor_of(self, topic: str) -> int | None:
        """The stream's cursor on `topic` (None if it no longer reads it)."""

    def options_of(self, topic: str) -> DeliveryOptions: ...

    def take_parked(self, topic: str, cursor: int, batch: FeedBatch) -> Any:
        """Apply `batch` (read after `cursor`) while parked: the frames to send (empty when
        it has nothing to send and stays parked), or None to be woken for a normal pass."""

    def push(self, frames: Any) -> Awaitable[Any]:
        """Start sending `frames` on the stream's connection (the awaitable of its send)."""

    def send_cost(self, frames: Any) -> float:
        """Seconds a push of `frames` costs beyond the round's own clock (work the stream's
        task does later, or other threads on the same cores), counted towards the round's
        pacing."""


class Signal(enum.Enum):
    WAKE = "wake"  # run a normal read pass (or see shutdown)
    TIMEOUT = "timeout"  # the park's timeout passed (the heartbeat may be due)


ParkResult = Signal | Awaitable[Any]  # or a started send the stream must finish


@dataclass(eq=False, slots=True)
class _Parked:
    stream: ParkedStream
    topics: tuple[str, ...]
    fut: asyncio.Future[ParkResult]


@dataclass(slots=True)
class FanoutCounters:
    broadcasts: int = 0  # wakes served by one shared read
    served: int = 0  # frames sent for parked streams, the send complete at once
    handed: int = 0  # ... whose send would block, handed to the stream's task to finish
    passed: int = 0  # parked streams that only moved their cursor (nothing for them)
    woken: int = 0  # parked streams woken for their own pass


@dataclass(slots=True)
class LiveFanout:
    feed: TopicFeed
    idle_factor: float = IDLE_FACTOR
    writers_active: Callable[[], bool] = lambda: True
    counters: FanoutCounters = field(default_factory=FanoutCounters)
    _parked: dict[str, dict[_Parked, None]] = field(default_factory=dict)
    _by_stream: dict[ParkedStream, _Parked] = field(default_factory=dict)
    _tasks: set[asyncio.Future[Any]] = field(default_factory=set)
    _pending: dict[str, None] = field(default_factory=dict)
    _timer: asyncio.TimerHandle | None = None
    _next_ok: float = 0.0
    _running: bool = False
    _charged: float = 0.0  # what a round's pushes cost outside it (`ParkedStream.send_cost`)
    # The loop thread's clocks (injectable for tests) and where the last round ended on
    # them: they time each round's cost, and the gap between rounds tells how busy the
    # rest of the loop's work kept it.
    wall_clock: Callable[[], float] = time.perf_counter
    cpu_clock: Callable[[], float] = time.thread_time
    _last_end: tuple[float, float] | None = None
    _others_busy: float = 1.0  # smoothed; 1.0 until measured (the full pause)
    _cost: float | None = None  # paced rounds' cost, smoothed (COST_WEIGHT); None before one
    _suspended: bool = False  # the running round waited for a read (it runs in a task)

    def has_waiters(self, topic: str) -> bool:
        return topic in self._parked

    async def park(
        self, stream: ParkedStream, topics: list[str], timeout_s: float, kick: bool = False
    ) -> ParkResult:
        """Stay parked on `topics` (broadcasts send what appends bring) until a normal pass
        is due (`WAKE`), `timeout_s` passed (`TIMEOUT`), or a send must be finished by the
        caller (the awaitable)."""
        loop = asyncio.get_running_loop()
        p = _Parked(stream, tuple(topics), loop.create_future())
        for t in p.topics:
            self._parked.setdefault(t, {})[p] = None
        self._by_stream[stream] = p
        timer = loop.call_later(timeout_s, _resolve, p.fut, Signal.TIMEOUT)
        if kick:  # the stream has not read what its topics hold: a round reads it for it
            loop.call_soon(self._kick, p.topics)
        try:
            return await p.fut
        finally:
            timer.cancel()
            self._unpark(p)

    def release(self, stream: ParkedStream) -> None:
        """Wake `stream` if it is parked (its subscriptions changed)."""
        p = self._by_stream.get(stream)
        if p is not None:
            _resolve(p.fut, Signal.WAKE)

    def _unpark(self, p: _Parked) -> None:
        if self._by_stream.get(p.stream) is p:
            del self._by_stream[p.stream]
        for t in p.topics:
            parked = self._parked.get(t)
            if parked is not None:
                parked.pop(p, None)
                if not parked:
                    del self._parked[t]

    def wake(self, topic: str) -> None:
        """`topic` was written (or deleted): offer its new batch to the streams parked on
        it in the next round (paced, see IDLE_FACTOR)."""
        if topic not in self._parked or topic in self._pending:
            return
        self._pending[topic] = None
        if self._timer is not None or self._running:
            return
        loop = asyncio.get_running_loop()
        gap = self._next_ok - loop.time()
        if gap > 0:
            self._timer = loop.call_later(gap, self._fire)
        else:
            self._fire()

    def _fire(self) -> None:
        self._timer = None
        pending, self._pending = self._pending, {}
        if not pending:
            return
        # Run the round here when its reads complete at once (hot data: the common case),
        # in a task only when one must wait (retention, routers, the cold tier).
        topics = list(pending)
        try:
            rest = start(self._broadcast_all(topics))
        except Exception:
            self._failed(topics)
            return
        if rest is not None:
            self._suspended = True
            task = asyncio.ensure_future(rest)
            self._tasks.add(task)
            task.add_done_callback(lambda t: self._round_done(t, topics))

    def _round_done(self, task: asyncio.Future[Any], topics: list[str]) -> None:
        self._tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            try:
                raise task.exception()  # type: ignore[misc]
            except Exception:
                self._failed(topics)

    def _failed(self, topics: list[str]) -> None:
        """A bug in a round must not strand the streams: they read on their own."""
        log.exception("live fan-out round failed")
        for topic in topics:
            for p in list(self._parked.get(topic, ())):
                self._wake_one(p)

    async def _broadcast_all(self, topics: list[str]) -> None:
        t0, cpu0 = self.wall_clock(), self.cpu_clock()
        if self._last_end is not None:
            self._others_busy = smoothed_busy(self._others_busy, self._last_end, (t0, cpu0))
        self._running = True
        try:
            for topic in topics:
                parked = self._parked.get(topic)
                if parked:
                    await self._broadcast(topic, list(parked))
        finally:
            self._running = False
        # While writers are active they get up to `idle_factor` times the paced rounds'
        # averaged cost before the next round (as much as they kept the loop busy,
        # `pause_after_round`); with none, rounds run back to back, so watchers that fell
        # behind during a write burst catch up at full speed once it ends. Only paced
        # rounds feed the average, so it spreads their pauses without losing any; a round
        # that waited for a read is paced at the average (its clocks also ran through the
        # loop's other work while it waited).
        now, cpu = self.wall_clock(), self.cpu_clock()
        self._last_end = (now, cpu)
        cost = min(now - t0, cpu - cpu0) + self._charged
        self._charged = 0.0
        suspended, self._suspended = self._suspended, False
        delay = 0.0
        if cost >= MIN_PACED_ROUND_S and self.writers_active():
            if self._cost is None:
                self._cost = cost
            elif not suspended:
                self._cost += COST_WEIGHT * (cost - self._cost)
            delay = pause_after_round(self._cost, self.idle_factor, True, self._others_busy)
        loop = asyncio.get_running_loop()
        self._next_ok = loop.time() + delay
        if self._pending and self._timer is None:
            self._timer = loop.call_later(delay, self._fire)

    def _kick(self, topics: tuple[str, ...]) -> None:
        for t in topics:
            self.wake(t)

    def wake_all(self) -> None:
        for parked in list(self._parked.values()):
            for p in list(parked):
                _resolve(p.fut, Signal.WAKE)

    async def _broadcast(self, topic: str, parked: list[_Parked]) -> None:
        self.counters.broadcasts += 1
        groups: dict[tuple[int, DeliveryOptions], list[_Parked]] = {}
        for p in parked:
            if p.fut.done():
                continue
            cursor = p.stream.cursor_of(topic)
            if cursor is None:
                self._wake_one(p)
                continue
            groups.setdefault((cursor, p.stream.options_of(topic)), []).append(p)
        for (cursor, opts), members in groups.items():
            # A group behind by more than one batch is walked here, shared, up to
            # BATCHES_PER_ROUND reads; the rest waits for the next (paced) round.
            for _ in range(BATCHES_PER_ROUND):
                batch: FeedBatch | None
                try:
                    batch = await self.feed.read(topic, cursor, opts)
                except SeglogError:
                    batch = None  # topic_not_found and kin: each stream's own pass reports it
                still: list[_Parked] = []
                for p in members:
                    if p.fut.done():
                        continue
                    frames = None if batch is None else p.stream.take_parked(topic, cursor, batch)
                    if frames is None:
                        self._wake_one(p)
                        continue
                    if not frames:
                        self.counters.passed += 1
                    elif not self._send(p, frames):
                        continue  # its own task finishes the send, and reads on by itself
                    still.append(p)
                if batch is None or batch.caught_up or not still:
                    break
                members, cursor = still, batch.next_cursor
            else:
                self._pending[topic] = None  # still behind: the next round goes on

    def _send(self, p: _Parked, frames: Any) -> bool:
        """Start the send; True if it completed at once (the stream stays parked)."""
        self._charged += p.stream.send_cost(frames)
        try:
            pending = start(p.stream.push(frames))
        except Exception as e:  # the stream's own task raises it, as its own send would
            p.fut.set_exception(e)
            return False
        if pending is None:
            self.counters.served += 1
            return True
        self.counters.handed += 1
        p.fut.set_result(pending)
        return False

    def _wake_one(self, p: _Parked) -> None:
        self.counters.woken += 1
        _resolve(p.fut, Signal.WAKE)


def pause_after_round(
    cost_s: float, idle_factor: float, writers_active: bool, others_busy: float = 1.0
) -> float:
    """How long the loop belongs to everything else after a round that cost `cost_s` (the
    paced rounds' averaged cost, from `LiveFanout`): `idle_factor` × `cost_s` when the
    rest of the loop's work kept it saturated between rounds (`others_busy` ≥
    SATURATED_BUSY), MIN_PAUSE_SHARE of it when it left the loop mostly idle
    (≤ IDLE_BUSY), linearly in between."""
    if cost_s < MIN_PACED_ROUND_S or not writers_active:
        return 0.0
    share = min(max((others_busy - IDLE_BUSY) / (SATURATED_BUSY - IDLE_BUSY), 0.0), 1.0)
    return cost_s * idle_factor * (MIN_PAUSE_SHARE + (1.0 - MIN_PAUSE_SHARE) * share)


def smoothed_busy(
    previous: float, last_end: tuple[float, float], start: tuple[float, float]
) -> float:
    """The loop's busy fraction between two rounds — its thread's CPU time over the wall
    time, each a `(wall, cpu)` reading — folded into the previous estimate with a weight
    that grows with the gap (BUSY_TAU_S): a gap of a few microseconds says little."""
    wall = start[0] - last_end[0]
    if wall <= 0.0:
        return previous
    busy = min(max((start[1] - last_end[1]) / wall, 0.0), 1.0)
    weight = 1.0 - math.exp(-wall / BUSY_TAU_S)
    return previous + weight * (busy - previous)


def _resolve(fut: asyncio.Future[ParkResult], value: ParkResult) -> None:
    if not fut.done():
        fut.set_result(value)


def start(aw: Awaitable[Any]) -> Awaitable[Any] | None:
    """Run `aw` up to its first suspension, here and now: None if it completed (its result
    is dropped), else an awaitable that finishes it in whichever task awaits it. What a
    task does with `await aw`, minus the task: the server's send completes at once while
    the connection's body channel has room, and then no task needs to run at all."""
    it = aw.__await__()
    try:
        first = it.send(None)
    except StopIteration:
        return None
    return _Resume(it, first)


class _Resume:
    """The rest of a started awaitable: `yield from` by hand, from its first yield on (the
    awaiting task sees the very futures the awaitable yields, and throws into it)."""

    __slots__ = ("_first", "_it")

    def __init__(self, it: Generator[Any, Any, Any], first: Any) -> None:
        self._it = it
        self._first = first

    def __await__(self) -> Generator[Any, Any, Any]:
        it, out = self._it, self._first
        while True:
            try:
                sent = yield out
            except BaseException as e:  # thrown in by the task (cancellation)
                try:
                    out = it.throw(e)
                except StopIteration as stop:
                    return stop.value
                continue
            try:
                out = it.send(sent)
            except StopIteration as stop:
                return stop.value
