"""`AppendWaiters.wait` with a `Kick`: one future serves both wake-ups (a `/work` stream's
"jobs settled" and an append), and the kick never outlives the wait it was armed for."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import pytest

from seglog.engine.aio import AppendWaiters, Kick
from seglog.engine.engine import Engine, EngineOptions
from seglog.model import RecordIn, TopicConfig

LONG_S = 3600.0  # never reached: each test ends by a wake-up, not by its timeout


@pytest.fixture
def engine(tmp_path: Path) -> Iterator[Engine]:
    e = Engine(EngineOptions(data_dir=tmp_path / "data", wal_shards=1))
    e.open()
    try:
        yield e
    finally:
        e.close()


async def test_a_kick_set_before_the_wait_returns_at_once(engine: Engine) -> None:
    waiters = AppendWaiters(engine, asyncio.get_running_loop())
    kick = Kick()
    kick.set()
    assert await asyncio.wait_for(waiters.wait(["t"], LONG_S, kick), 5) is True
    assert kick.is_set()  # the caller clears it
    kick.clear()
    assert not kick.is_set()
    waiters.close()


async def test_a_kick_set_during_the_wait_wakes_it_and_is_disarmed_after(engine: Engine) -> None:
    loop = asyncio.get_running_loop()
    waiters = AppendWaiters(engine, loop)
    kick = Kick()
    task = asyncio.ensure_future(waiters.wait(["t"], LONG_S, kick))
    await asyncio.sleep(0)  # the wait is armed
    assert not task.done()
    assert kick.armed
    loop.call_soon(kick.set)
    assert await asyncio.wait_for(task, 5) is True
    assert not kick.armed
    kick.clear()
    kick.set()  # no wait is armed any more: nothing to wake, nothing raised
    assert kick.is_set()
    waiters.close()


async def test_a_cancelled_wait_leaves_the_kick_disarmed(engine: Engine) -> None:
    waiters = AppendWaiters(engine, asyncio.get_running_loop())
    kick = Kick()
    task = asyncio.ensure_future(waiters.wait(["t"], LONG_S, kick))
    await asyncio.sleep(0)
    assert kick.armed
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)
    assert task.cancelled() and not kick.armed
    kick.set()  # a settle now is kept for the next wait, which returns at once
    assert await asyncio.wait_for(waiters.wait(["t"], LONG_S, kick), 5) is True
    waiters.close()


async def test_a_wait_without_a_wake_times_out_and_disarms(engine: Engine) -> None:
    waiters = AppendWaiters(engine, asyncio.get_running_loop())
    kick = Kick()
    assert await asyncio.wait_for(waiters.wait(["t"], 0.0, kick), 5) is False
    assert not kick.armed
    kick.set()
    assert kick.is_set()
    waiters.close()


async def test_an_append_wakes_a_wait_that_holds_a_kick(engine: Engine) -> None:
    waiters = AppendWaiters(engine, asyncio.get_running_loop())
    engine.put_topic("t", TopicConfig())
    kick = Kick()
    task = asyncio.ensure_future(waiters.wait(["t"], LONG_S, kick))
    await asyncio.sleep(0)
    engine.write("t", [RecordIn(b'{"a":1}')])
    assert await asyncio.wait_for(task, 5) is True
    assert not kick.is_set()  # woken by the append, not by the kick
    waiters.close()
