"""`AsyncEngine.get_topic` and `list_topics` take topic state on the loop, as a read does:
the retention that became due and forwarding into the topic come first, so the state is
the one the blocking `Engine.get_topic` / `list_topics` give (and the loop never waits for
the disk to give it)."""

from __future__ import annotations

import threading

import pytest

from seglog.clock import ManualClock
from seglog.engine.aio import finish_op
from seglog.engine.engine import Engine
from seglog.engine.ops import PendingOp
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
    listed, more = await db.list_topics("", None, 10, touch=False)
    got = await db.get_topic("t", touch=False)
    assert (got.count, got.earliest_seq, got.head_seq) == (1, 3, 3)
    assert listed == [got] and not more
    assert got == e.get_topic("t", touch=False)


async def test_state_includes_what_a_router_has_yet_to_forward(make_engine: EngineFactory) -> None:
    e = make_engine()
    e.put_topic("src", TopicConfig())
    e.put_topic("dst", TopicConfig())
    e.put_router(RouterSpec("r", "src", "dst"))
    e.write("src", [RecordIn.of(1), RecordIn.of(2)])
    assert e.routers_pending_into("dst")  # no router worker runs here
    page, _more = await AsyncEngine(e).list_topics("d", None, 10, touch=False)
    assert [(x.topic, x.head_seq) for x in page] == [("dst", 2)]
    e.write("src", [RecordIn.of(3)])
    got = await AsyncEngine(e).get_topic("dst", touch=False)
    assert (got.head_seq, got.count) == (3, 3)


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
    await db.list_topics("a", None, 10, touch=True)
    assert ran == []
    await db.get_topic("c", touch=True)
    assert ran == [Engine.drain_routers_into.__name__]
    e.write("b", [RecordIn.of(2)])
    page, _more = await db.list_topics("", None, 10, touch=False)
    assert ran[1:] == [Engine.list_topics.__name__]
    assert [(x.topic, x.head_seq) for x in page] == [("a", 0), ("b", 2), ("c", 2)]


@pytest.mark.parametrize("limit", [1, 2, 3, 5])
async def test_pages_of_topics_match_the_blocking_listing(
    make_engine: EngineFactory, clock: ManualClock, limit: int
) -> None:
    e = make_engine()
    for name in ("a1", "a2", "a3", "b1", "b2"):
        e.put_topic(name, TopicConfig(ttl_ms=100 if name.endswith("2") else 0))
        e.write(name, [RecordIn.of(1)])
    clock.advance(200)  # the ttl topics' records expired
    db = AsyncEngine(e)
    for prefix in ("", "a", "b", "a2", "c"):
        after: str | None = None
        while True:
            got = await db.list_topics(prefix, after, limit, touch=False)
            assert got == e.list_topics(prefix, after, limit, touch=False), (prefix, after)
            if not got[1] or not got[0]:
                break
            after = got[0][-1].topic
    assert [x.count for x in (await db.list_topics("", None, 9, touch=False))[0]] == [1, 0, 1, 1, 0]


def drop_after_first_wait(monkeypatch: pytest.MonkeyPatch, victim: str) -> None:
    """The first retention watermark a listing awaits is followed by dropping `victim`."""

    async def finish_then_drop(engine: Engine, op: PendingOp) -> None:
        await finish_op(engine, op)
        if engine.exists(victim):
            engine.drop_topic(victim, if_empty=False)

    monkeypatch.setattr(async_engine, "finish_op", finish_then_drop)


async def test_a_page_whose_topics_were_all_dropped_gives_way_to_the_next(
    make_engine: EngineFactory, clock: ManualClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    e = make_engine()
    for name in ("a", "b", "c"):
        e.put_topic(name, TopicConfig(ttl_ms=10 if name == "a" else 0, durability=Durability.DISK))
        e.write(name, [RecordIn.of(1)])
    clock.advance(20)

    drop_after_first_wait(monkeypatch, "a")
    page, more = await AsyncEngine(e).list_topics("", None, 1, touch=False)
    assert [x.topic for x in page] == ["b"] and more  # not an empty page, "more to come"


async def test_listing_never_waits_for_the_registry_lock(make_engine: EngineFactory) -> None:
    """A control-plane change holds the registry lock across its fsync: a listing on the
    loop must not wait for it (here the lock is held by another thread throughout)."""
    e = make_engine()
    e.put_topic("a", TopicConfig())
    e.drop_topic("a", if_empty=False)  # the cached sorted names are stale now
    e.put_topic("b", TopicConfig())
    held, release, letting_go = threading.Event(), threading.Event(), threading.Event()

    def hold() -> None:
        with e.registry.lock:
            held.set()
            release.wait(3)
            letting_go.set()  # still inside: a listing that waited for the lock sees this

    holder = threading.Thread(target=hold)
    holder.start()
    try:
        assert held.wait(5)
        page, _more = await AsyncEngine(e).list_topics("", None, 10, touch=False)
        assert not letting_go.is_set()
        assert [x.topic for x in page] == ["b"]
    finally:
        release.set()
        holder.join()


async def test_a_topic_dropped_while_its_page_waits_is_left_out(
    make_engine: EngineFactory, clock: ManualClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    e = make_engine()
    for name in ("a", "b", "c"):
        e.put_topic(name, TopicConfig(ttl_ms=10, durability=Durability.DISK))
        e.write(name, [RecordIn.of(1)])
    clock.advance(20)

    drop_after_first_wait(monkeypatch, "b")
    page, more = await AsyncEngine(e).list_topics("", None, 10, touch=False)
    assert [x.topic for x in page] == ["a", "c"] and not more


def test_sorted_names_stay_true_while_topics_come_and_go(make_engine: EngineFactory) -> None:
    """Names are read without the registry lock while other threads create and drop
    topics: a listing never shows a topic that never existed, and once the churn stops
    the cached names are exactly the topics there are (no stale copy survives)."""
    e = make_engine()
    stop = threading.Event()
    made = [f"t{i:03d}" for i in range(60)]

    def churn(names: list[str]) -> None:
        while not stop.is_set():
            for name in names:
                e.put_topic(name, TopicConfig())
            for name in names[::2]:
                e.drop_topic(name, if_empty=False)

    workers = [threading.Thread(target=churn, args=(made[k::2],)) for k in range(2)]
    for w in workers:
        w.start()
    try:
        for _ in range(300):
            names = e.registry.sorted_names()
            assert names == sorted(names) and set(names) <= set(made)
    finally:
        stop.set()
        for w in workers:
            w.join()
    assert e.registry.sorted_names() == sorted(e.registry.by_name)
    assert [x.topic for x in e.list_topics(limit=100)[0]] == sorted(e.registry.by_name)
    e.put_topic("zz", TopicConfig())  # a create right after a cached listing shows up
    assert e.registry.sorted_names()[-1] == "zz"
    e.drop_topic("zz", if_empty=False)
    assert "zz" not in e.registry.sorted_names()
