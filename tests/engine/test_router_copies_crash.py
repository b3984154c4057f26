"""Router copies across a crash (they are never logged: replay re-derives them through
their router): a snapshot must capture a router and its
dest together; a dest whose durable floor outlived the copies it covered must not hand its
seqs out again; copies outlive their router (deleted, or its source deleted) and keep
their seqs across a change of filter (SEMANTICS §8.1, §8.4, §12 invariants 1, 3 and 12;
STORAGE §5.3 steps 3–5, §6 step 9; API §6.4)."""

from __future__ import annotations

import threading
from pathlib import Path
from types import TracebackType
from typing import Any

import pytest

from seglog.clock import ManualClock
from seglog.core.leases import Claimer
from seglog.engine.engine import Engine, EngineOptions
from seglog.errors import ErrorCode, SeglogError
from seglog.model import Discard, Durability, RecordIn, Selector, TopicConfig, TopicType
from seglog.router_model import RouterSpec
from tests.engine.oracle import (
    IMAGES,
    ROOT,
    ImageKind,
    abandon,
    image,
    open_engine,
    read_all,
    reopen_after_crash,
)
from tests.support.faultfs import FaultFs


def _copies_expired_in_the_dest(source: Durability) -> tuple[Engine, FaultFs, ManualClock]:
    """s → d (TTL 1 s), three copies forwarded since the snapshot and expired: a durable
    expiry floor of 3 covers copies that only their router (or source) could bring back."""
    clock, fs = ManualClock(), FaultFs()
    e = open_engine(fs, clock=clock)
    e.put_topic("s", TopicConfig(durability=source))
    e.put_topic("d", TopicConfig(ttl_ms=1_000))
    e.put_router(RouterSpec("r", "s", "d"))
    e.snapshot()
    e.write("s", [RecordIn.of(i) for i in range(3)])
    e.forwarder.forward_all()
    clock.advance(5_000)
    assert read_all(e, "d") == {} and e.topics["d"].expiry_floor == 3
    return e, fs, clock


class _ReleaseHook:
    """The registry's lock, running `hook` on this thread right after its first release
    by a snapshot (the moment a concurrent control-plane request could take it)."""

    def __init__(self, lock: Any, hook: Any) -> None:
        self._lock, self._hook = lock, hook
        self.armed = False
        self.acquire, self.release = lock.acquire, lock.release

    def __enter__(self) -> bool:
        return bool(self._lock.__enter__())

    def __exit__(
        self, et: type[BaseException] | None, ev: BaseException | None, tb: TracebackType | None
    ) -> None:
        self._lock.__exit__(et, ev, tb)
        if self.armed:
            self.armed = False
            self._hook()


def test_a_router_created_while_a_snapshot_captures_is_in_it_wholly_or_not_at_all() -> None:
    """Another thread creates a router (and its dest) and forwards, just after the snapshot
    listed the topics: it must wait for the capture (the router table is taken before the
    registry is let go), or the snapshot holds the router's cursor without the dest's copies
    and a crash loses them silently."""
    clock, fs = ManualClock(), FaultFs()
    e = open_engine(fs, clock=clock)
    e.write("s", [RecordIn.of("x0")], create=True)
    done = threading.Event()

    def concurrent_request() -> None:
        e.put_router(RouterSpec("r", "s", "d"))
        e.write("s", [RecordIn.of(i) for i in range(3)])
        e.forwarder.forward_all()
        done.set()

    worker = threading.Thread(target=concurrent_request)
    hooked = _ReleaseHook(e.registry.lock, lambda: (worker.start(), done.wait(0.2)))
    e.registry.lock = hooked  # type: ignore[assignment]
    hooked.armed = True
    e.snapshot()
    worker.join(10)
    e.registry.lock = hooked._lock
    assert done.is_set()
    e.forwarder.forward_all()
    assert [r.data for r in read_all(e, "d").values()] == [0, 1, 2]
    e2 = reopen_after_crash(e, fs, clock)
    try:
        assert [r.data for r in read_all(e2, "d").values()] == [0, 1, 2]
    finally:
        e2.close(snapshot=False)


def test_a_dest_floor_above_what_replay_restores_is_padded_after_a_crash() -> None:
    """The copies expired (a durable EvictWatermark), then the router went: nothing
    re-derives them after a crash, and the next acked write must not take their seqs."""
    e, fs, clock = _copies_expired_in_the_dest(Durability.DISK)
    e.delete_router("r")
    e2 = reopen_after_crash(e, fs, clock)
    try:
        w = e2.write("d", [RecordIn.of("fresh")])
        assert w.first_seq == 4
        assert {s: r.data for s, r in read_all(e2, "d").items()} == {4: "fresh"}
    finally:
        e2.close(snapshot=False)


def test_an_ephemeral_sources_copies_expired_in_the_dest_leave_no_seq_to_reuse() -> None:
    e, fs, clock = _copies_expired_in_the_dest(Durability.EPHEMERAL)
    e2 = reopen_after_crash(e, fs, clock)
    try:
        w = e2.write("d", [RecordIn.of("fresh")])
        assert {s: r.data for s, r in read_all(e2, "d").items()} == {w.first_seq: "fresh"}
        assert w.first_seq > 3
    finally:
        e2.close(snapshot=False)


@pytest.mark.parametrize("kind", IMAGES)
@pytest.mark.parametrize("ends", ["router delete", "source delete"])
def test_copies_stay_in_the_dest_when_their_router_goes_before_a_crash(
    kind: ImageKind, ends: str
) -> None:
    """API §6.4: already-forwarded records stay in the dest — also after a crash, though
    nothing is left to re-derive them from (the delete snapshots them first)."""
    clock, fs = ManualClock(), FaultFs()
    e = open_engine(fs, clock=clock)
    e.put_topic("d", TopicConfig(durability=Durability.FSYNC))
    e.put_router(RouterSpec("r", "s", "d"))
    e.snapshot()
    e.write("s", [RecordIn.of(i) for i in range(3)])
    e.forwarder.forward_all()
    e.write("s", [RecordIn.of(3)])  # not forwarded yet: the delete forwards it first
    if ends == "router delete":
        assert e.delete_router("r").deleted
    else:
        assert e.drop_topic("s").deleted
    assert [r.data for r in read_all(e, "d").values()] == [0, 1, 2, 3]
    img = image(fs, kind)
    abandon(e, fs)
    e2 = open_engine(img, clock=clock)
    try:
        assert [r.data for r in read_all(e2, "d").values()] == [0, 1, 2, 3]
        assert e2.write("d", [RecordIn.of("next")]).first_seq == 5  # no seq handed out again
    finally:
        e2.close(snapshot=False)


def test_a_changed_filter_applies_from_the_change_on_after_a_crash() -> None:
    """A re-PUT with another filter keeps the runtime state (§8.1): the copies made before
    it must come back as they were, not re-derived under the new filter at other seqs."""
    clock, fs = ManualClock(), FaultFs()
    e = open_engine(fs, clock=clock)
    e.write("s", [RecordIn.of("seed")], create=True)
    e.write("d", [RecordIn.of("seed")], create=True)
    e.snapshot()
    e.put_router(RouterSpec("r", "s", "d"))
    e.write("s", [RecordIn.of("1", tag="a"), RecordIn.of("2", tag="b"), RecordIn.of("3", tag="a")])
    e.forwarder.forward_all()
    before = {s: r.data for s, r in read_all(e, "d").items()}
    assert before == {1: "seed", 2: "1", 3: "2", 4: "3"}
    e.put_router(RouterSpec("r", "s", "d", filter=Selector.parse(["tag", "Eq", "a"])))
    e.write("s", [RecordIn.of("4", tag="b"), RecordIn.of("5", tag="a")])
    e.forwarder.forward_all()
    want = {**before, 5: "5"}
    assert {s: r.data for s, r in read_all(e, "d").items()} == want
    e2 = reopen_after_crash(e, fs, clock)
    try:
        assert {s: r.data for s, r in read_all(e2, "d").items()} == want
    finally:
        e2.close(snapshot=False)


@pytest.mark.parametrize("kind", IMAGES)
def test_an_acked_router_copy_stays_acked_after_a_crash(kind: ImageKind) -> None:
    """A job a router forwarded into a queue, acked (its delete fsynced): replay meets the
    delete before step 9 re-derives the copy, and must apply it again after, or the job
    is claimable again."""
    clock, fs = ManualClock(), FaultFs()
    e = open_engine(fs, clock=clock)
    e.put_topic("q", TopicConfig(type=TopicType.QUEUE, durability=Durability.FSYNC))
    e.put_router(RouterSpec("r", "s", "q"))
    e.snapshot()
    e.write("s", [RecordIn.of("job"), RecordIn.of("other")])
    jobs = e.queues.claim("q", [Claimer("w", 1)], None).jobs[0]
    assert e.queues.ack("q", "w", [jobs[0].record.seq], []).done == [1]
    img = image(fs, kind)
    abandon(e, fs)
    e2 = open_engine(img, clock=clock)
    try:
        again = e2.queues.claim("q", [Claimer("w", 5)], None).jobs[0]
        assert [j.record.data for j in again] == ["other"]
    finally:
        e2.close(snapshot=False)


def test_a_selector_delete_past_the_replayed_head_applies_to_rederived_copies() -> None:
    clock, fs = ManualClock(), FaultFs()
    e = open_engine(fs, clock=clock)
    e.put_topic("d", TopicConfig(durability=Durability.FSYNC))
    e.put_router(RouterSpec("r", "s", "d"))
    e.snapshot()
    e.write("s", [RecordIn.of(i, tag="x" if i % 2 else None) for i in range(4)])
    e.forwarder.forward_all()
    e.delete_records("d", match=Selector.parse(["tag", "Eq", "x"]))
    e.delete_records("d", before_seq=2)
    assert [r.data for r in read_all(e, "d").values()] == [2]
    e2 = reopen_after_crash(e, fs, clock)
    try:
        assert [r.data for r in read_all(e2, "d").values()] == [2]
    finally:
        e2.close(snapshot=False)


def test_an_offline_read_leaves_out_an_acked_router_copy(tmp_path: Path) -> None:
    """The offline reader (Spark, `seglog verify`) replays as recovery does: the acked
    job a router fed into the queue is not among its live seqs either."""
    from seglog.offline import OfflineDir

    clock = ManualClock()
    e = Engine(EngineOptions(data_dir=tmp_path / "data", wal_shards=1), clock=clock)
    e.open()
    try:
        e.put_topic("q", TopicConfig(type=TopicType.QUEUE, durability=Durability.FSYNC))
        e.put_router(RouterSpec("r", "s", "q"))
        e.snapshot()
        e.write("s", [RecordIn.of("job"), RecordIn.of("other")])
        assert [j.record.seq for j in e.queues.claim("q", [Claimer("w", 1)], None).jobs[0]] == [1]
        assert e.queues.ack("q", "w", [1], []).done == [1]
        d = OfflineDir.open(tmp_path / "data", None, clock.now_ms(), running=False)
        (view,) = [v for v in d.topics() if v.name == "q"]
        assert view.live == ((2, 2),) and view.count == 1
    finally:
        e.close(snapshot=False)


def test_ending_a_router_snapshots_only_when_it_moved_since_the_last_snapshot() -> None:
    clock, fs = ManualClock(), FaultFs()
    e = open_engine(fs, clock=clock)
    e.put_router(RouterSpec("r", "s", "d"))
    e.put_router(RouterSpec("idle", "s2", "d2"))
    e.write("s", [RecordIn.of(1)])
    first = e.snapshot()
    assert e.delete_router("idle").deleted
    assert e.last_snapshot is not None and e.last_snapshot.id == first  # nothing to settle
    e.write("s", [RecordIn.of(2)])
    assert e.delete_router("r").deleted
    assert e.last_snapshot.id > first
    e.close(snapshot=False)


def test_a_refused_empty_only_drop_takes_no_snapshot(make_engine: Any) -> None:
    e = make_engine()
    e.put_router(RouterSpec("r", "s", "d"))
    e.write("s", [RecordIn.of(1)])
    before = e.snapshot()
    e.write("s", [RecordIn.of(2)])
    with pytest.raises(SeglogError) as info:
        e.drop_topic("s", if_empty=True)
    assert info.value.code is ErrorCode.TOPIC_NOT_EMPTY
    assert e.last_snapshot is not None and e.last_snapshot.id == before


def test_a_router_delete_goes_on_when_its_snapshot_fails(
    make_engine: Any, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """On a full disk an operator must still be able to delete: the delete lands, and the
    log says which copies a crash before the next snapshot would lose."""
    e = make_engine()
    e.put_router(RouterSpec("r", "s", "d"))
    e.write("s", [RecordIn.of(1)])

    def full(*_a: object, **_k: object) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(e, "_snapshot_held", full)
    assert e.delete_router("r").deleted
    assert e.routers.get("r") is None
    assert "router(s) r failed" in caplog.text and "No space left" in caplog.text


def test_an_offline_read_matches_the_restarted_server_past_a_padded_floor() -> None:
    """The dest of the padding case: offline (Spark, verify) sees the head and earliest the
    restarted server has."""
    from seglog.offline import OfflineDir

    e, fs, clock = _copies_expired_in_the_dest(Durability.EPHEMERAL)
    img = image(fs, "process")
    abandon(e, fs)
    d = OfflineDir.open(ROOT, None, clock.now_ms(), running=False, fs=img)
    (view,) = [v for v in d.topics() if v.name == "d"]
    e2 = open_engine(img, clock=clock)
    try:
        t = e2.topics["d"]
        assert (view.head, view.earliest) == (t.head, t.earliest()) == (3, 4)
    finally:
        e2.close(snapshot=False)


@pytest.mark.parametrize("reader", ["restarted server", "offline"])
@pytest.mark.parametrize("delete_first", [True, False])
def test_a_copy_deleted_midway_down_a_chain_after_a_crash(
    tmp_path: Path, reader: str, delete_first: bool
) -> None:
    """s → b → c, the copy of x in b deleted before or after b → c forwarded it. No log
    says which (copies are never logged), so after a crash the delete holds in b and c
    gets x at least once: never a loss, a duplicate at most (SEMANTICS §8.4)."""
    from seglog.offline import OfflineDir

    clock, fs = ManualClock(), FaultFs()
    e = open_engine(fs, clock=clock)
    for name in ("b", "c"):
        e.put_topic(name, TopicConfig(durability=Durability.FSYNC))
    e.put_router(RouterSpec("sb", "s", "b"))
    e.put_router(RouterSpec("bc", "b", "c"))
    e.snapshot()
    e.write("s", [RecordIn.of("x", tag="doomed"), RecordIn.of("y")])
    sb = e.routers.get("sb")
    assert sb is not None
    e.forwarder.advance(sb)  # into b only
    if delete_first:
        e.delete_records("b", match=Selector.parse(["tag", "Eq", "doomed"]))
        e.forwarder.forward_all()
    else:
        e.forwarder.forward_all()
        e.delete_records("b", match=Selector.parse(["tag", "Eq", "doomed"]))
    assert [r.data for r in read_all(e, "b").values()] == ["y"]
    img = image(fs, "process")
    abandon(e, fs)
    if reader == "offline":
        d = OfflineDir.open(ROOT, None, clock.now_ms(), running=False, fs=img)
        views = {v.name: v for v in d.topics()}
        assert views["b"].count == 1 and views["c"].count == 2
        return
    e2 = open_engine(img, clock=clock)
    try:
        assert [r.data for r in read_all(e2, "b").values()] == ["y"]
        assert [r.data for r in read_all(e2, "c").values()] == ["x", "y"]
    finally:
        e2.close(snapshot=False)


@pytest.mark.parametrize("reader", ["restarted server", "offline"])
def test_a_copy_deleted_in_a_cycle_stays_deleted_after_a_crash(reader: str) -> None:
    """a ↔ b (allow_cycle), b's copies deleted: they stay deleted after a crash, and
    nothing a held is lost (more copies may go round again: at least once, up to the hop
    cap)."""
    from seglog.offline import OfflineDir

    clock, fs = ManualClock(), FaultFs()
    e = open_engine(fs, clock=clock)
    for name in ("a", "b"):
        e.put_topic(name, TopicConfig(durability=Durability.FSYNC))
    e.put_router(RouterSpec("ab", "a", "b", allow_cycle=True))
    e.put_router(RouterSpec("ba", "b", "a", allow_cycle=True))
    e.snapshot()
    e.write("a", [RecordIn.of("x")])
    ab, ba = e.routers.get("ab"), e.routers.get("ba")
    assert ab is not None and ba is not None
    e.forwarder.advance(ab)  # b1 = copy of a1
    e.forwarder.advance(ba)  # a2 = copy of b1
    e.forwarder.advance(ab)  # b2 = copy of a2
    e.delete_records("b", before_seq=3)  # ba forwards first (b2 → a3): it reads b
    assert not {1, 2} & set(read_all(e, "b")) and {1, 2} <= set(read_all(e, "a"))
    img = image(fs, "process")
    abandon(e, fs)
    if reader == "offline":
        d = OfflineDir.open(ROOT, None, clock.now_ms(), running=False, fs=img)
        views = {v.name: v for v in d.topics()}
        assert views["a"].count >= 2 and views["b"].earliest >= 3
        return
    e2 = open_engine(img, clock=clock)
    try:
        assert {1, 2} <= set(read_all(e2, "a"))
        assert not {1, 2} & set(read_all(e2, "b"))
    finally:
        e2.close(snapshot=False)


def test_acked_jobs_behind_backpressure_stay_acked_after_a_crash() -> None:
    """A reject-capped queue fed by a router: after a crash its router re-derives the jobs
    two at a time as acks make room; every one of them was acked."""
    clock, fs = ManualClock(), FaultFs()
    e = open_engine(fs, clock=clock)
    e.put_topic(
        "q",
        TopicConfig(
            type=TopicType.QUEUE,
            durability=Durability.FSYNC,
            cap_records=2,
            discard=Discard.REJECT,
        ),
    )
    e.put_router(RouterSpec("r", "s", "q"))
    e.snapshot()
    e.write("s", [RecordIn.of(f"j{i}") for i in range(4)])
    done: list[str] = []
    for _ in range(4):
        jobs = e.queues.claim("q", [Claimer("w", 5)], None).jobs[0]
        if not jobs:
            break
        e.queues.ack("q", "w", [j.record.seq for j in jobs], [])
        done += [j.record.data for j in jobs]
    assert done == ["j0", "j1", "j2", "j3"]
    e2 = reopen_after_crash(e, fs, clock)
    try:
        assert e2.queues.claim("q", [Claimer("w", 5)], None).jobs[0] == []
    finally:
        e2.close(snapshot=False)
