"""`AsyncEngine.get_topic` takes a topic's state on the loop, as a read does: the retention
that became due and forwarding into the topic come first, so the state is the one the
blocking `Engine.get_topic` gives (and the loop never waits for the disk to give it)."""

from __future__ import annotations

import pytest

from seglog.clock import ManualClock
from seglog.engine.engine import Engine
from seglog.http import async_engine
from seglog.http.async_engine import AsyncEngine
from seglog.model import Durability, RecordIn, TopicConfig
from seglog.router_model import RouterSpec
from tests.conftest import EngineFactory


@pytest.mark.parametrize("durability", [Durability.MEMORY, Durability.DISK, Durability.FSYNC])
async def test_state_shows_records_expired_since_the_last_write(
    make_engine: EngineFactory, clock: ManualClock, durability: Durability
) -> None:
    e = make_engine()
    e.put_topic("t", TopicConfig(ttl_ms=1000, durability=durability))
    e.write("t", [RecordIn.of(1), RecordIn.of(2)])
    clock.advance(600)
    e.write("t", [RecordIn.of(3)])
    db = AsyncEngine(e)
    got = await db.get_topic("t", touch=False)
    assert (got.count, got.earliest_seq, got.head_seq) == (3, 1, 3)
    clock.advance(500)  # the first two expired; nothing has run a retention pass since
    got = await db.get_topic("t", touch=False)
    assert (got.count, got.earliest_seq, got.head_seq) == (1, 3, 3)
    assert got == e.get_topic("t", touch=False)


async def test_state_includes_what_a_router_has_yet_to_forward(make_engine: EngineFactory) -> None:
    e = make_engine()
    e.put_topic("src", TopicConfig())
    e.put_topic("dst", TopicConfig())
    e.put_router(RouterSpec("r", "src", "dst"))
    e.write("src", [RecordIn.of(1), RecordIn.of(2)])
    assert e.routers_pending_into("dst")  # no router worker runs here
    got = await AsyncEngine(e).get_topic("dst", touch=False)
    assert (got.head_seq, got.count) == (2, 2)


async def test_touching_state_marks_the_topic_read(
    make_engine: EngineFactory, clock: ManualClock
) -> None:
    e = make_engine()
    e.put_topic("t", TopicConfig())
    db = AsyncEngine(e)
    assert (await db.get_topic("t", touch=False)).last_read_ts is None
    clock.advance(5)
    assert (await db.get_topic("t", touch=True)).last_read_ts == clock.now_ms()


async def test_state_goes_to_a_worker_thread_only_for_forwarding(
    make_engine: EngineFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    e = make_engine()
    e.put_topic("a", TopicConfig(ttl_ms=10))
    e.put_topic("b", TopicConfig())
    e.put_router(RouterSpec("r", "b", "c"))
    e.write("b", [RecordIn.of(1)])
    ran: list[str] = []

    async def blocking(fn, *args, **kwargs):  # type: ignore[no-untyped-def]
        ran.append(fn.__name__)
        return fn(*args, **kwargs)

    monkeypatch.setattr(async_engine, "blocking", blocking)
    db = AsyncEngine(e)
    await db.get_topic("a", touch=True)
    assert ran == []
    await db.get_topic("c", touch=True)
    assert ran == [Engine.drain_routers_into.__name__]
