"""Routers across restarts and crashes (STORAGE §5.2–§5.3, §6 step 9, §7; SEMANTICS §8.4):
snapshots keep cursor, total and dest_base; recovery re-derives copies made after the last
snapshot at the same dest seqs (deterministic: dest_base + k, counting trims)."""

from __future__ import annotations

import threading
from typing import Any

import pytest

from seglog.clock import ManualClock
from seglog.core.frame_bodies import TopicDeleteBody
from seglog.core.frames import FrameType
from seglog.engine.engine import Engine
from seglog.engine.routers import Router, RouterTable
from seglog.model import Durability, RecordIn, Selector, TopicConfig
from seglog.router_model import Guarantee, RouterSpec
from tests.conftest import EngineFactory
from tests.engine.oracle import abandon, image, open_engine, read_all
from tests.support.faultfs import FaultFs


def _dest(e: Engine, name: str) -> list[tuple[int, Any]]:
    return [(seq, r.data) for seq, r in sorted(read_all(e, name).items())]


def _state(e: Engine, name: str) -> tuple[int, int, int]:
    r = e.routers.get(name)
    assert r is not None
    return r.cursor, r.forwarded_total, r.dest_base


def test_snapshot_keeps_router_state_and_restart_rederives_same_seqs(
    make_engine: EngineFactory,
) -> None:
    e = make_engine()
    e.write("d", [RecordIn.of("own")])  # dest_base 1
    e.put_router(RouterSpec("r", "s", "d"))
    e.write("s", [RecordIn.of(i) for i in range(3)])
    e.forwarder.forward_all()
    e.snapshot()
    snap_state = _state(e, "r")
    assert snap_state == (3, 3, 1)
    e.write("s", [RecordIn.of(i) for i in range(3, 6)])
    e.forwarder.forward_all()
    before, state_before = _dest(e, "d"), _state(e, "r")
    assert [s for s, _ in before] == list(range(1, 8))
    e.close(snapshot=False)  # no final snapshot: copies 5..7 exist only in memory

    e2 = make_engine()
    assert _dest(e2, "d") == before
    # The disk source's unwritten head reservation became holes: walked past, not copies.
    assert _state(e2, "r") == (e2.topics["s"].head, *state_before[1:])
    assert e2.topics["s"].head >= state_before[0]


def test_graceful_close_snapshots_after_a_final_drain(make_engine: EngineFactory) -> None:
    e = make_engine()
    e.put_router(RouterSpec("r", "s", "d"))
    e.write("s", [RecordIn.of(1), RecordIn.of(2)])  # nobody forwarded these yet
    e.close()
    e2 = make_engine()
    # the snapshot holds the copies and the cursor past them
    assert _state(e2, "r") == (2, 2, 0)
    assert _dest(e2, "d") == [(1, 1), (2, 2)]


def test_rederivation_counts_trims_for_deterministic_seqs(
    make_engine: EngineFactory, clock: ManualClock
) -> None:
    e = make_engine()
    e.put_topic("s", TopicConfig(cap_records=2))
    e.put_router(RouterSpec("r", "s", "d"))
    e.snapshot()
    e.write("s", [RecordIn.of(i) for i in range(4)])  # 1, 2 evicted before forwarding
    e.forwarder.forward_all()
    res = e.read("d", 0)
    assert res.tombstone is not None and (res.tombstone.gap_from, res.tombstone.gap_to) == (1, 2)
    before = _dest(e, "d")
    e.close(snapshot=False)
    e2 = make_engine()
    assert _dest(e2, "d") == before == [(3, 2), (4, 3)]
    assert e2.read("d", 0).tombstone is not None
    assert _state(e2, "r")[1:] == (4, 0)


@pytest.mark.parametrize(
    ("cls", "kind"),
    [
        (Durability.DISK, "process"),
        (Durability.FSYNC, "process"),
        (Durability.FSYNC, "power"),
    ],
)
def test_crash_image_dest_holds_every_acked_source_record_in_order(
    cls: Durability, kind: str
) -> None:
    fs = FaultFs()
    clock = ManualClock()
    e = open_engine(fs, shards=2, clock=clock)
    e.put_topic("src", TopicConfig(durability=cls))
    e.put_router(RouterSpec("r", "src", "dst"))
    acked: list[Any] = []
    for w in range(6):
        vals = [{"w": w, "i": i} for i in range(3)]
        e.write("src", [RecordIn.of(v) for v in vals])
        acked += vals
        if w == 2:
            e.forwarder.forward_all()
            e.snapshot()
        if w == 4:
            e.forwarder.forward_all()  # copies after the snapshot: never logged
    img = image(fs, kind)  # type: ignore[arg-type]
    abandon(e, fs)
    e2 = open_engine(img, shards=2, clock=clock)
    try:
        assert _dest(e2, "dst") == [(k + 1, v) for k, v in enumerate(acked)]
        assert _state(e2, "r") == (e2.topics["src"].head, 18, 0)
        # and the router goes on from there
        e2.write("src", [RecordIn.of("after")])
        assert _dest(e2, "dst")[-1] == (19, "after")
    finally:
        e2.close(snapshot=False)


def test_router_create_is_durable_before_the_ack() -> None:
    fs = FaultFs()
    e = open_engine(fs)
    e.put_router(RouterSpec("r", "s", "d"))
    img = fs.crash_image("none")
    abandon(e, fs)
    e2 = open_engine(img)
    try:
        assert [r.spec.name for r in e2.routers.all()] == ["r"]
        assert set(e2.topics) == {"s", "d"}
    finally:
        e2.close(snapshot=False)


def test_router_with_a_missing_endpoint_is_dropped_at_recovery(
    make_engine: EngineFactory,
) -> None:
    e = make_engine()
    e.put_router(RouterSpec("r", "s", "d"))
    e.snapshot()
    # Remove the dest behind the cascade's back: only the TopicDelete reaches the WAL.
    d = e.topics["d"]
    e.log_durable(d.topic_id, FrameType.TOPIC_DELETE, TopicDeleteBody("d").encode())
    e.close(snapshot=False)
    e2 = make_engine()
    assert "d" not in e2.topics
    assert len(e2.routers) == 0


def test_exactly_once_duplicate_index_is_rebuilt_from_the_dest(make_engine: EngineFactory) -> None:
    e = make_engine()
    e.put_router(RouterSpec("r", "s", "d", guarantee=Guarantee.EXACTLY_ONCE))
    e.write("s", [RecordIn.of(1), RecordIn.of(2)])
    e.forwarder.forward_all()
    e.close()
    e2 = make_engine()
    r = e2.routers.get("r")
    assert r is not None and r.copies == {1: 1, 2: 2}
    r.cursor = 0
    e2.forwarder.forward_all()
    assert _dest(e2, "d") == [(1, 1), (2, 2)]


def test_snapshots_racing_forwarding_stay_consistent(make_engine: EngineFactory) -> None:
    """Snapshots taken while writers and the forwarder run: each captured cursor matches its
    captured dest, so a restart from any of them re-derives without loss or duplicates."""
    e = make_engine()
    e.put_topic("s", TopicConfig(durability=Durability.FSYNC))
    e.put_router(RouterSpec("r", "s", "d"))
    stop = threading.Event()
    errors: list[BaseException] = []

    def forward() -> None:
        try:
            while not stop.is_set():
                e.forwarder.forward_all()
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    def snap() -> None:
        try:
            while not stop.is_set():
                e.snapshot()
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    workers = [threading.Thread(target=forward), threading.Thread(target=snap)]
    for t in workers:
        t.start()
    for i in range(200):
        e.write("s", [RecordIn.of(i)])
    stop.set()
    for t in workers:
        t.join()
    assert not errors
    e.close(snapshot=False)
    e2 = make_engine()
    assert _dest(e2, "d") == [(k + 1, k) for k in range(200)]
    assert _state(e2, "r")[1:] == (200, 0)


def test_router_table_capture_restore_round_trip() -> None:
    t = RouterTable()
    t.add(Router(RouterSpec("a", "s", "d", filter=Selector("Eq", "x")), 5, 4, 1))
    t.add(Router(RouterSpec("b", "s", "e", guarantee=Guarantee.EXACTLY_ONCE), 2, 2, 0))
    t2 = RouterTable()
    t2.restore(t.capture())
    assert [(r.spec, r.cursor, r.forwarded_total, r.dest_base) for r in t2.all()] == [
        (r.spec, r.cursor, r.forwarded_total, r.dest_base) for r in t.all()
    ]
    assert [r.spec.name for r in t2.feeding("d")] == ["a"]
    assert t2.is_source("s") and not t2.is_source("d")
    t2.remove("a")
    assert t2.feeding("d") == [] and t2.is_source("s")
    t2.remove("b")
    assert not t2.is_source("s")
