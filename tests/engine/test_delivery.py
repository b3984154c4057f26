"""The delivery scheduler on a real event loop with a manual clock: wake order by priority,
the drain budget, the pressure ladder's levels with hysteresis and its hooks."""

from __future__ import annotations

import asyncio
import time

import pytest

from seglog.clock import ManualClock
from seglog.engine import delivery
from seglog.engine.delivery import DeliveryScheduler, next_level


def test_levels_rise_at_thresholds_and_fall_with_hysteresis() -> None:
    assert [next_level(0, w) for w in (0, 4, 5, 19, 20, 99, 100, 999, 1000)] == [
        0, 0, 1, 1, 2, 2, 3, 3, 4,
    ]  # fmt: skip
    assert next_level(4, 600) == 4  # above half of 1000: stays
    assert next_level(4, 400) == 3  # under 500: leaves 4, but 400 ≥ 100 / 2 keeps 3
    assert next_level(3, 40) == 2
    assert next_level(2, 11) == 2
    assert next_level(2, 9) == 1
    assert next_level(1, 3) == 1
    assert next_level(1, 1) == 0


async def _settle(rounds: int = 5) -> None:
    for _ in range(rounds):
        await asyncio.sleep(0)


async def test_wakes_high_priority_topics_first_within_a_budget(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(delivery, "BUDGET", 3)
    clock = ManualClock()
    woken: list[str] = []
    prio = {"lo1": 0, "lo2": 0, "hi1": 900, "hi2": 900, "mid": 600}
    sch = DeliveryScheduler(
        asyncio.get_running_loop(), clock, lambda t, _now: prio[t], woken.append
    )
    for t in ("lo1", "lo2", "mid", "hi1", "hi2", "hi1"):
        sch.mark(t)
    assert sch.counters.coalesced == 1
    await _settle(1)
    assert woken == ["hi1", "hi2", "mid"]  # one pass = BUDGET topics, best bands first
    await _settle()
    assert woken[3:] == ["lo1", "lo2"]
    assert sch.depths == (0, 0, 0, 0, 0)


async def test_pressure_levels_drive_the_hooks() -> None:
    clock = ManualClock()
    levels: list[int] = []
    woken: list[str] = []
    loop = asyncio.get_running_loop()
    sch = DeliveryScheduler(loop, clock, lambda _t, _n: 0, woken.append, levels.append)
    sch.mark("a")
    clock.advance(25)  # the loop fell 25 ms behind before the drain ran
    await _settle(1)
    assert woken == ["a"]
    assert levels == [2, 0]  # the pass drained everything: pressure released at once
    sch.mark("b")
    clock.advance(1500)
    assert not sch.refuses_writes
    await _settle(1)
    assert levels[-1] == 4 and sch.refuses_writes
    assert woken == ["a"]  # priority 0 is deferred at level 4 ...
    clock.advance(600)  # ... until it has waited 2 s
    await asyncio.sleep(delivery.COALESCE_S * 3)
    assert woken == ["a", "b"]
    assert not sch.refuses_writes  # drained: back to 0
    assert levels[-1] == 0


async def test_deferral_keeps_low_priority_queued_until_its_limit() -> None:
    clock = ManualClock()
    woken: list[str] = []
    loop = asyncio.get_running_loop()
    prio = {"low": 0, "high": 800}
    sch = DeliveryScheduler(loop, clock, lambda t, _n: prio[t], woken.append)
    sch.mark("low")
    sch.mark("high")
    clock.advance(150)  # level 3: bands below 2 are deferred
    await _settle(1)
    assert woken == ["high"] and sch.level == 3
    assert sch.depths == (0, 1, 0, 0, 0)
    clock.advance(2000)  # the deferred entry reached its limit
    await asyncio.sleep(delivery.COALESCE_S * 3)
    assert woken == ["high", "low"]
    assert sch.counters.deferred_passes >= 1


async def test_loop_lag_alone_raises_and_releases_the_level() -> None:
    """Under fan-out the dirty queue drains at once while the loop falls behind in the
    readers' tasks: the loop-lag probe must raise the level by itself, and let it fall."""
    clock = ManualClock()
    levels: list[int] = []
    sch = DeliveryScheduler(
        asyncio.get_running_loop(), clock, lambda _t, _n: 0, lambda _t: None, levels.append
    )
    sch.observe_loop_lag(150)
    assert sch.level == 3 and levels == [3]
    sch.mark("t")  # a drain with an empty-after-pop queue keeps the lag's level
    await asyncio.sleep(delivery.COALESCE_S * 3)
    assert sch.level == 3
    sch.observe_loop_lag(1200)
    assert sch.refuses_writes
    sch.observe_loop_lag(0)
    assert sch.level == 0 and levels[-1] == 0


async def test_the_probe_measures_a_blocked_loop() -> None:
    sch = DeliveryScheduler(
        asyncio.get_running_loop(), ManualClock(), lambda _t, _n: 0, lambda _t: None
    )
    sch.start_probe(0.02)
    try:
        time.sleep(0.06)  # hold the loop: the probe's timer fires ~40 ms late
        await asyncio.sleep(0.005)  # it runs now; the next one is 20 ms away
        assert sch.loop_lag_ms >= 20 and sch.level >= 2
    finally:
        sch.stop_probe()
