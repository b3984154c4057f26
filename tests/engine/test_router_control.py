"""Router control plane (API §6.1 check order, §6.4, §2.4 cascade; STORAGE §3.3 frames)."""

from __future__ import annotations

import time
from typing import Any

import pytest

from seglog.engine.engine import Engine
from seglog.engine.router_worker import RouterWorker
from seglog.errors import ErrorCode, SeglogError
from seglog.model import RecordIn, Selector, TopicConfig
from seglog.router_model import Guarantee, RouterInfo, RouterSpec
from tests.conftest import EngineFactory
from tests.engine.oracle import abandon, open_engine
from tests.support.faultfs import FaultFs


def _err(fn: Any, *args: Any) -> SeglogError:
    with pytest.raises(SeglogError) as info:
        fn(*args)
    return info.value


def _unchanged(e: Engine, topics: set[str], routers: set[str]) -> None:
    assert set(e.topics) == topics
    assert {r.spec.name for r in e.routers.all()} == routers


def test_check_order_and_codes(make_engine: EngineFactory) -> None:
    e = make_engine(max_routers=3, max_topics=5)
    put = e.put_router
    e.put_router(RouterSpec("x->y", "x", "y"))
    base_topics, base_routers = {"x", "y"}, {"x->y"}
    cases: list[tuple[RouterSpec, ErrorCode, dict[str, Any] | None]] = [
        (RouterSpec("-bad", "a", "a"), ErrorCode.INVALID_REQUEST, None),  # name before same
        (RouterSpec("r", "a", "a"), ErrorCode.INVALID_REQUEST, None),
        (RouterSpec("r", "a/", "b"), ErrorCode.INVALID_REQUEST, None),
        (RouterSpec("r", "a", "b>"), ErrorCode.INVALID_REQUEST, None),
        (
            RouterSpec("r", "q", "nope", create_dest=False),
            ErrorCode.TOPIC_NOT_FOUND,
            {"topic": "nope"},
        ),
        (
            RouterSpec("r", "other", "y"),
            ErrorCode.TOPIC_EXISTS_INCOMPATIBLE,
            {"topic": "y", "reason": "router_dest_fan_in"},
        ),
        (
            RouterSpec("x->y", "x", "z"),
            ErrorCode.TOPIC_EXISTS_INCOMPATIBLE,
            {
                "router": "x->y",
                "reason": "router_repoint_forbidden",
                "existing_source": "x",
                "existing_dest": "y",
            },
        ),
        (RouterSpec("y->x", "y", "x"), ErrorCode.ROUTER_CYCLE, {"cycle": ["y", "x", "y"]}),
    ]
    for spec, code, detail in cases:
        err = _err(put, spec)
        assert err.code is code, (spec, err)
        if detail is not None:
            assert err.detail == detail, (spec, err.detail)
        _unchanged(e, base_topics, base_routers)
    # the cycle check is skipped with allow_cycle
    put(RouterSpec("y->x", "y", "x", allow_cycle=True))
    put(RouterSpec("q->w", "q", "w"))
    # fan-in (into w, fed from q) is checked before the re-point of x->y
    err = _err(put, RouterSpec("x->y", "other", "w"))
    assert err.detail is not None and err.detail["reason"] == "router_dest_fan_in"
    # the router cap comes before the cycle check
    err = _err(put, RouterSpec("w->q", "w", "q"))
    assert err.code is ErrorCode.THROTTLED
    assert err.detail == {"limit": "max_routers", "max": 3}
    # a re-PUT of an existing router is never refused by the cap
    assert not put(RouterSpec("q->w", "q", "w", preserve_tag=False)).created


def test_auto_create_topic_cap_creates_nothing(make_engine: EngineFactory) -> None:
    e = make_engine(max_topics=3)
    e.put_router(RouterSpec("a->b", "a", "b"))
    err = _err(e.put_router, RouterSpec("c->d", "c", "d"))  # needs two topics, one fits
    assert err.code is ErrorCode.THROTTLED
    assert err.detail == {"limit": "max_topics", "max": 3}
    _unchanged(e, {"a", "b"}, {"a->b"})
    assert e.put_router(RouterSpec("a->c", "a", "c")).created


def test_re_put_keeps_runtime_state_and_updates_fields(make_engine: EngineFactory) -> None:
    e = make_engine()
    e.put_router(RouterSpec("r", "s", "d"))
    e.write("s", [RecordIn.of(1, tag="t"), RecordIn.of(2)])
    assert e.get_router("r").forwarded_total == 2
    res = e.put_router(
        RouterSpec("r", "s", "d", filter=Selector("Eq", "t"), guarantee=Guarantee.EXACTLY_ONCE)
    )
    assert not res.created
    info = e.get_router("r")
    assert info.forwarded_total == 2
    assert info.spec.filter == Selector("Eq", "t")
    e.write("s", [RecordIn.of(3, tag="t"), RecordIn.of(4)])
    assert e.get_router("r").forwarded_total == 3


def test_delete_router_and_absent(make_engine: EngineFactory) -> None:
    e = make_engine()
    e.put_router(RouterSpec("r", "s", "d"))
    e.write("s", [RecordIn.of(1)])
    e.get_router("r")
    assert e.delete_router("r").deleted
    assert not e.delete_router("r").deleted
    assert _err(e.get_router, "r").code is ErrorCode.ROUTER_NOT_FOUND
    e.write("s", [RecordIn.of(2)])
    assert [x.data for x in e.read("d", 0).records] == [1]  # forwarded records stay


def test_list_filters_and_pages(make_engine: EngineFactory) -> None:
    e = make_engine()
    for name, s, d in [("a1", "s", "d1"), ("a2", "s", "d2"), ("b1", "t", "d3"), ("a3", "t", "d4")]:
        e.put_router(RouterSpec(name, s, d))

    def names(rows: list[RouterInfo]) -> list[str]:
        return [r.spec.name for r in rows]

    rows, more = e.list_routers()
    assert names(rows) == ["a1", "a2", "a3", "b1"] and not more
    rows, more = e.list_routers(prefix="a", limit=2)
    assert names(rows) == ["a1", "a2"] and more
    rows, more = e.list_routers(prefix="a", after="a2", limit=2)
    assert names(rows) == ["a3"] and not more
    assert names(e.list_routers(source="t")[0]) == ["a3", "b1"]
    assert names(e.list_routers(dest="d2")[0]) == ["a2"]


def test_topic_delete_cascades_durably(make_engine: EngineFactory) -> None:
    e = make_engine()
    e.put_router(RouterSpec("s->d", "s", "d"))
    e.put_router(RouterSpec("d->e", "d", "e"))
    e.put_router(RouterSpec("s->f", "s", "f"))
    res = e.drop_topic("d")
    assert res.deleted and res.routers_removed == ["d->e", "s->d"]
    assert {r.spec.name for r in e.routers.all()} == {"s->f"}
    assert e.drop_topic("d").routers_removed == []
    e.write("d", [RecordIn.of(1)])  # a new instance of "d": its old routers stay gone
    e.close(snapshot=False)  # crash-like: replay the frames
    e2 = make_engine()
    assert {r.spec.name for r in e2.routers.all()} == {"s->f"}


def test_router_frames_replay_without_a_snapshot(make_engine: EngineFactory) -> None:
    e = make_engine()
    e.put_router(RouterSpec("r", "s", "d", preserve_node=False, filter=Selector("Glob", "p")))
    e.put_router(RouterSpec("gone", "s", "g"))
    e.delete_router("gone")
    e.close(snapshot=False)
    e2 = make_engine()
    (r,) = e2.routers.all()
    assert r.spec == RouterSpec("r", "s", "d", preserve_node=False, filter=Selector("Glob", "p"))


def test_cascade_is_durable_on_every_shard_layout() -> None:
    """Topic frames go to the topic's shard, router frames to shard 0; after a power cut
    right after the response, neither the topic nor its routers come back."""
    fs = FaultFs()
    e = open_engine(fs, shards=4)
    for i in range(6):
        e.put_router(RouterSpec(f"s{i}->d{i}", f"s{i}", f"d{i}"))
    shards = {e._require_wal().shard_of(e.topics[f"d{i}"].topic_id) for i in range(6)}
    assert len(shards) > 1  # some dests live off shard 0
    for i in range(6):
        assert e.drop_topic(f"d{i}").routers_removed == [f"s{i}->d{i}"]
        # re-created at once: only a durable RouterDelete keeps the old router away
        e.put_topic(f"d{i}", TopicConfig())
    img = fs.crash_image("none")
    abandon(e, fs)
    e2 = open_engine(img, shards=4)
    try:
        assert len(e2.routers) == 0
        assert all(e2.topics[f"d{i}"].head == 0 for i in range(6))
    finally:
        e2.close(snapshot=False)


def test_worker_run_once_forwards_and_stops(make_engine: EngineFactory) -> None:
    e = make_engine()
    worker = RouterWorker(e, tick_ms=1)
    assert worker.run_once() == 0  # no routers
    e.put_router(RouterSpec("r", "s", "d"))
    e.write("s", [RecordIn.of(1)])
    assert worker.run_once() == 1
    assert e.topics["d"].head == 1
    assert worker.run_once() == 0
    worker.start()
    worker.stop()


def test_worker_is_kicked_by_a_source_publish(make_engine: EngineFactory) -> None:
    """A publish to a router's source wakes the worker at once (no waiting for the tick):
    with a one-minute tick, the copy still lands promptly."""
    e = make_engine()
    e.put_router(RouterSpec("r", "s", "d"))
    worker = RouterWorker(e, tick_ms=60_000)
    worker.start()
    try:
        e.write("s", [RecordIn.of(1)])
        deadline = time.monotonic() + 10
        while e.topics["d"].head < 1 and time.monotonic() < deadline:
            time.sleep(0.001)
        assert e.topics["d"].head == 1
        e.write("other", [RecordIn.of(1)])  # not a source: no kick needed, none harmful
    finally:
        worker.stop()
