"""The delivery scheduler: the order in which dirty topics' readers are woken on the event
loop, and the pressure ladder that degrades latency — never correctness — under load.

A publish marks its topic dirty (once, however many publishes land before it is served:
the first rung, coalescing). A drain pass wakes up to `BUDGET` topics, picked by the
banded weighted round-robin of `core.scheduler` over each topic's effective priority
(SEMANTICS §11), then yields the loop to the readers it woke; what is left waits for the
next pass. Pressure is the wait of the oldest dirty topic, a direct measure of how far the
loop is behind — together with the event loop's own lag, probed every 50 ms (under
fan-out the backlog sits in the woken readers' tasks, and the dirty queue drains at
once). Levels (each includes the ones below; hysteresis: a level is left only
when the wait falls under half its threshold):

| level | oldest wait | rung |
|---|---|---|
| 1 | ≥ 5 ms | coalesce harder: drain passes at most every 2 ms, so a burst costs one wake |
| 2 | ≥ 20 ms | widen the WAL group-commit window (the `on_level` hook) |
| 3 | ≥ 100 ms | defer bands 0–1 (priority < 250) until aged or waiting 2 s |
| 4 | ≥ 1000 ms | refuse new record writes with `429 throttled` + `Retry-After: 1` |

Nothing is ever dropped: a deferred topic stays queued, readers re-read from their
cursors, and a refused write appended nothing.

Owner: the event loop; `mark` must be called on it (publisher threads hop with
`call_soon_threadsafe`).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass

from seglog.clock import Clock
from seglog.core.scheduler import BandedQueue

BUDGET = 64
COALESCE_S = 0.002
PROBE_S = 0.05
LEVEL_THRESHOLDS_MS = (5, 20, 100, 1000)  # oldest wait that enters levels 1..4
DEFER_BELOW_BAND = 2
THROTTLE_LEVEL = 4


def next_level(level: int, wait_ms: int) -> int:
    """The pressure level after observing `wait_ms`, with hysteresis (pure)."""
    up = sum(1 for t in LEVEL_THRESHOLDS_MS if wait_ms >= t)
    if up >= level:
        return up
    while level > up and wait_ms < LEVEL_THRESHOLDS_MS[level - 1] // 2:
        level -= 1
    return level


@dataclass(slots=True)
class DeliveryCounters:
    marked: int = 0  # publishes that marked a topic with readers dirty
    coalesced: int = 0  # ... of which the topic was already queued
    woken: int = 0  # topics whose readers a drain pass woke
    deferred_passes: int = 0  # passes that left deferred low-priority topics queued
    throttled_writes: int = 0  # writes refused at level 4
    max_wait_ms: int = 0


class DeliveryScheduler:
    def __init__(
        self,
        loop: asyncio.AbstractEventLoop,
        clock: Clock,
        priority_of: Callable[[str, int], int],
        wake: Callable[[str], None],
        on_level: Callable[[int], None] | None = None,
    ) -> None:
        self._loop = loop
        self._clock = clock
        self._priority_of = priority_of
        self._wake = wake
        self._on_level = on_level
        self._queue = BandedQueue()
        self._scheduled = False
        self.level = 0
        self.counters = DeliveryCounters()
        self.loop_lag_ms = 0  # how late the loop ran the last probe timer
        self._probe_handle: asyncio.TimerHandle | None = None

    @property
    def depths(self) -> tuple[int, ...]:
        return self._queue.depths()

    def lag_ms(self) -> int:
        return self._queue.oldest_wait_ms(self._clock.now_ms())

    @property
    def refuses_writes(self) -> bool:
        return self.level >= THROTTLE_LEVEL

    def start_probe(self, interval_s: float = PROBE_S) -> None:
        """Measure event-loop lag every `interval_s`: under fan-out the backlog is in the
        readers' tasks, not in the dirty queue (which drains at once), so the queue's wait
        alone would never see the loop falling behind."""
        due = self._loop.time() + interval_s
        self._probe_handle = self._loop.call_at(due, self._probe, due, interval_s)

    def stop_probe(self) -> None:
        if self._probe_handle is not None:
            self._probe_handle.cancel()
            self._probe_handle = None

    def _probe(self, due: float, interval_s: float) -> None:
        self.observe_loop_lag(round((self._loop.time() - due) * 1000))
        self.start_probe(interval_s)

    def observe_loop_lag(self, lag_ms: int) -> None:
        self.loop_lag_ms = max(0, lag_ms)
        self.counters.max_wait_ms = max(self.counters.max_wait_ms, self.loop_lag_ms)
        self._set_level(max(self.loop_lag_ms, self._queue.oldest_wait_ms(self._clock.now_ms())))

    def mark(self, topic: str) -> None:
        now = self._clock.now_ms()
        self.counters.marked += 1
        if not self._queue.push(topic, self._priority_of(topic, now), now):
            self.counters.coalesced += 1
        self._schedule()

    def _schedule(self) -> None:
        if self._scheduled or not len(self._queue):
            return
        self._scheduled = True
        if self.level >= 1:
            self._loop.call_later(COALESCE_S, self._drain)
        else:
            self._loop.call_soon(self._drain)

    def _set_level(self, wait_ms: int) -> None:
        level = next_level(self.level, wait_ms)
        if level != self.level:
            self.level = level
            if self._on_level is not None:
                self._on_level(level)

    def _drain(self) -> None:
        self._scheduled = False
        now = self._clock.now_ms()
        wait = self._queue.oldest_wait_ms(now)
        self.counters.max_wait_ms = max(self.counters.max_wait_ms, wait)
        self._set_level(max(wait, self.loop_lag_ms))
        min_band = DEFER_BELOW_BAND if self.level >= 3 else 0
        for _ in range(BUDGET):
            topic = self._queue.pop(now, min_band)
            if topic is None:
                break
            self.counters.woken += 1
            self._wake(topic)
        if len(self._queue):
            if min_band:
                self.counters.deferred_passes += 1
            self._scheduled = True
            # Deferred entries become eligible with time: poll for them, not a hot loop.
            self._loop.call_later(COALESCE_S if self.level else 0, self._drain)
        elif self.level:
            self._set_level(self.loop_lag_ms)  # the queue is empty: only loop lag counts
