"""Router copies across a crash when a dest's seqs move (a failed write's hole, a source
TTL with a filter), strict retention on the server's own read path, the order of checks
before settling a router dest's config change, and acks kept off the event loop when a
router appears (SEMANTICS §4.2, §8.4, §10.4; API §2.1)."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import pytest

from seglog.clock import ManualClock
from seglog.core.leases import Claimer
from seglog.engine.engine import Engine
from seglog.engine.queues import Job
from seglog.errors import ErrorCode, SeglogError
from seglog.http.async_engine import AsyncEngine, blocking
from seglog.model import Durability, RecordIn, Selector, TopicConfig, TopicType
from seglog.router_model import RouterSpec
from tests.engine.oracle import IMAGES, ImageKind, abandon, image, open_engine, read_all
from tests.support.faultfs import FaultFs


@pytest.mark.parametrize("kind", IMAGES)
def test_an_ack_after_a_failed_write_hole_in_a_router_dest_kills_no_other_job(
    kind: ImageKind,
) -> None:
    """SEMANTICS §10.4 (an ack deletes exactly the acked seq), §7.1 (a delete names only
    records existing at call time), §12 invariant 7, §3.1 (a failed write leaves a hole;
    "a failed write fails only itself"), §8.4 (deterministic dest seqs only "when the dest
    has no other writers").

    the recovery's re-application of deletes by seq (since removed) keeps the
    deletes of copies past the replayed head when `head == dest_base + forwarded_total`,
    and the re-application of deletes by seq (since removed) applies them by seq to the re-derived copies.
    A direct write into the dest that failed (WAL error) is not logged, so the check cannot
    see the hole it left: live, the copies after it sat one seq higher than they land when
    re-derived. The ack of job "c" (live seq 4) is replayed onto seq 4 after the crash,
    which is now job "d" — never acked — while "c" (now seq 3) comes back. docs/storage.md
    says such a delete is "not applied again" after "a failed write left a hole"."""
    clock, fs = ManualClock(), FaultFs()
    e = open_engine(fs, clock=clock)
    e.put_topic("q", TopicConfig(type=TopicType.QUEUE, durability=Durability.FSYNC))
    e.put_router(RouterSpec("r", "s", "q"))
    e.snapshot()
    e.write("s", [RecordIn.of("a"), RecordIn.of("b")])
    e.forwarder.forward_all()
    fs.fail_writes.add(fs.writes + 1)  # a direct write into the dest fails: seq 3 a hole
    with pytest.raises(SeglogError) as failed:
        e.write("q", [RecordIn.of("direct")])
    assert failed.value.code is ErrorCode.INTERNAL
    e.write("s", [RecordIn.of("c"), RecordIn.of("d")])
    e.forwarder.forward_all()
    assert {s: r.data for s, r in read_all(e, "q").items()} == {1: "a", 2: "b", 4: "c", 5: "d"}
    jobs = e.queues.claim("q", [Claimer("w", 10)], None).jobs[0]
    (c,) = [j for j in jobs if j.record.data == "c"]
    assert e.queues.ack("q", "w", [c.record.seq], []).done == [4]
    img = image(fs, kind)
    abandon(e, fs)
    e2 = open_engine(img, clock=clock)
    try:
        left = sorted(r.data for r in read_all(e2, "q").values())
        # "d" was never acked: it must survive. (Getting "c" back would be at-least-once
        # re-forwarding; losing "d" is a delete applied to the wrong record.)
        assert "d" in left, f"unacked job 'd' was deleted by the replayed ack: {left}"
    finally:
        e2.close(snapshot=False)


@pytest.mark.parametrize("kind", IMAGES)
def test_an_ack_kills_no_other_job_when_a_source_ttl_and_a_filter_move_the_copies(
    kind: ImageKind,
) -> None:
    """SEMANTICS §10.4 (an ack deletes exactly the acked job), §7.1, §12 invariant 7;
    §8.3 step 2 (a trim appends one hole per *source seq* in (cursor, E_inv)) vs step 3 (a
    filtered-out record is consumed without a dest seq).

    the recovery's check before re-applying deletes by seq (since removed) trusts that "the k-th
    copy lands at dest_base + k again" whenever the dest head equals `dest_base +
    forwarded_total`. It does not when the source has a TTL and the router a filter: live,
    s1 (filtered out) took no dest seq and s2, s3, s4 became jobs 1, 2, 3; at recovery s1
    and s2 have expired, so re-derivation trims 2 holes (seqs 1, 2) and s3, s4 land at 3, 4.
    The ack of s4 (live seq 3), replayed by seq at landing, kills s3 — never acked, not
    expired — and s4 comes back."""
    clock, fs = ManualClock(), FaultFs()
    e = open_engine(fs, clock=clock)
    e.put_topic("s", TopicConfig(durability=Durability.FSYNC, ttl_ms=10_000))
    e.put_topic("q", TopicConfig(type=TopicType.QUEUE, durability=Durability.FSYNC))
    e.put_router(RouterSpec("r", "s", "q", filter=Selector.parse(["tag", "Eq", "x"])))
    e.snapshot()
    e.write("s", [RecordIn.of("s1"), RecordIn.of("s2", tag="x")])
    clock.advance(6_000)
    e.write("s", [RecordIn.of("s3", tag="x"), RecordIn.of("s4", tag="x")])
    e.forwarder.forward_all()
    assert {s: r.data for s, r in read_all(e, "q").items()} == {1: "s2", 2: "s3", 3: "s4"}
    jobs = e.queues.claim("q", [Claimer("w", 10)], None).jobs[0]
    (s4,) = [j for j in jobs if j.record.data == "s4"]
    assert e.queues.ack("q", "w", [s4.record.seq], []).done == [3]
    img = image(fs, kind)
    abandon(e, fs)
    clock.advance(5_000)  # s1, s2 (ts 0) expired; s3, s4 (ts 6000) live for 5 s more
    e2 = open_engine(img, clock=clock)
    try:
        left = {s: r.data for s, r in read_all(e2, "q").items()}
        assert "s3" in left.values(), f"unacked, unexpired job s3 was deleted: {left}"
    finally:
        e2.close(snapshot=False)


def _ttl_topic_with_due_watermark_failing() -> tuple[Any, FaultFs]:
    clock, fs = ManualClock(), FaultFs()
    e = open_engine(fs, clock=clock)
    e.put_topic("t", TopicConfig(durability=Durability.FSYNC, ttl_ms=1_000))
    e.write("t", [RecordIn.of(i) for i in range(3)])
    clock.advance(5_000)  # all three expired: the read's pass must log an expiry watermark
    fs.fail_writes.add(fs.writes + 1)  # ... and that watermark's WAL write fails
    return e, fs


@pytest.mark.parametrize("columnar", [True, False], ids=["diff-columnar", "feed-records"])
def test_the_async_read_fails_when_the_expiry_watermark_failed(
    columnar: bool,
) -> None:
    """SEMANTICS §4.2 step 4 ("If that fails, nothing changes and the triggering operation
    fails (500)"), §12 invariant 4 (involuntary loss crossing a cursor yields a tombstone).

    `Engine.read` was made strict first (the sync read raises `internal`), but the read
    the HTTP diff, SSE and WebSocket use is `AsyncEngine.read`: it awaited
    `prepare_read`'s op with `finish_op`, which ignores the op's `error`, then
    `Engine.read(wait=False)` re-ran the pass, which re-submitted the watermark and —
    since one was in flight again — read on. The read
    answers 200 with no records, no tombstone and `next_from_seq` past the expired seqs:
    the reader's cursor crosses the TTL loss silently, and never gets its tombstone."""
    e, fs = _ttl_topic_with_due_watermark_failing()
    db = AsyncEngine(e)

    async def read() -> Any:
        # the HTTP diff reads columnar; SSE/WS feeds read records
        return await db.read("t", 0, 100, frozenset(), 1 << 20, columnar)

    try:
        try:
            res = asyncio.run(read())
        except SeglogError as err:
            assert err.code is ErrorCode.INTERNAL
            return
        pytest.fail(
            f"read answered with records={res.records!r} columns={res.columns!r} "
            f"tombstone={res.tombstone} "
            f"next_from_seq={res.next_from_seq} although its watermark failed"
        )
    finally:
        abandon(e, fs)


def test_the_sync_read_fails_when_the_expiry_watermark_failed() -> None:
    """(Passes: the engine's own read is strict, which the async read above is not.)"""
    e, fs = _ttl_topic_with_due_watermark_failing()
    try:
        with pytest.raises(SeglogError) as err:
            e.read("t", 0)
        assert err.value.code is ErrorCode.INTERNAL
    finally:
        abandon(e, fs)


def test_a_type_change_of_a_router_dest_is_409_even_when_the_settle_snapshot_would_fail(
    make_engine: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """API §2.1 validation order ("... → type immutability (409) → ..."), API error table
    (type change ⇒ 409 topic_exists_incompatible); the project's rule that bad input gets
    the spec's error.

    `Engine.put_topic` now settles a router dest's
    routers in a strict snapshot before `_put_topic` runs any check, so a PUT that must be
    refused for changing the type gets `500 internal` ("snapshot before settling router
    copies failed") on a full disk instead of its 409. (`drop_topic` checks `if_empty`
    before its snapshot for exactly this reason.)"""
    e = make_engine()
    e.put_topic("d", TopicConfig())
    e.put_router(RouterSpec("r", "s", "d"))
    e.write("s", [RecordIn.of(1)])  # the router moves: a settle would snapshot

    def full(*_a: object, **_k: object) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(e, "_snapshot_held", full)
    with pytest.raises(SeglogError) as info:
        e.put_topic("d", TopicConfig(type=TopicType.QUEUE))
    assert info.value.code is ErrorCode.TOPIC_EXISTS_INCOMPATIBLE, info.value.message


def test_a_queue_ack_settles_off_the_event_loop_when_a_router_appears_meanwhile(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The event-loop rule (`http.async_engine`: nothing on the loop waits for the disk).

    `AsyncEngine.ack` used to check `delete_waits(name)` once, then await the retention
    pass (a real suspension whenever a watermark is due) and call `q.ack_begin` on the
    loop: a router PUT on the queue served in that window made the delete settle —
    snapshot lock, registry and router locks, maybe a whole snapshot, then the delete's
    fsync — on the event loop thread, stalling every request. The test stands in for that
    concurrent PUT by completing it (in a worker thread) at the end of the ack's
    retention await."""
    e, fs, job = _claimed_fsync_job()
    db = AsyncEngine(e)
    threads = _threads_calling(monkeypatch, e, "_delete_settled")
    original = db._retained

    async def retained(name: str) -> None:
        await original(name)
        await blocking(e.put_router, RouterSpec("r", "q", "d"))  # a concurrent router PUT

    monkeypatch.setattr(db, "_retained", retained)

    async def ack() -> int:
        res = await db.ack("q", "w", [job.record.seq], [])
        assert res.done == [job.record.seq]
        return threading.get_ident()

    try:
        loop_thread = asyncio.run(ack())
    finally:
        abandon(e, fs)
    assert threads, "the ack did not settle the router (delete_waits changed meanwhile)"
    assert threads[0] != loop_thread, "the settled delete ran on the event loop thread"


@pytest.mark.parametrize("kind", IMAGES)
def test_an_fsync_delete_racing_a_router_create_into_its_topic_survives_a_crash(
    kind: ImageKind, monkeypatch: pytest.MonkeyPatch
) -> None:
    """SEMANTICS §12 invariant 7 (deletes are permanent), invariant 10 (a record delete on
    an fsync topic is durable before its 2xx); STORAGE §3.3 (`POST …/delete` on `fsync`:
    durable). docs/storage.md: "A delete on a topic a router feeds settles it too".

    `Engine.delete_records` decides `delete_waits(name)` before taking any lock; a router
    PUT into the topic that completed between that check and `_delete_begin` taking the
    topic lock went unsettled: its copies (never logged) were covered by the delete's
    `bound_head` and reported deleted, but the delete replays with a ceiling below them,
    and recovery re-derived them — the deleted record came back. `_delete_begin` now checks
    again under the topic lock. The test stands in for the concurrent PUT (plus a source
    write and the forwarding worker) by running them at the start of `_delete_begin`,
    in the unlocked window."""
    clock, fs = ManualClock(), FaultFs()
    e = open_engine(fs, clock=clock)
    e.put_topic("s", TopicConfig(durability=Durability.FSYNC))
    e.put_topic("q", TopicConfig(durability=Durability.FSYNC))
    e.snapshot()
    real = e._delete_begin
    done: list[bool] = []

    def racing(*a: Any, **k: Any) -> Any:
        if not done:
            done.append(True)
            e.put_router(RouterSpec("r", "s", "q"))  # a concurrent client's PUT
            e.write("s", [RecordIn.of("secret", tag="k")])
            e.forwarder.forward_all()  # the background forwarding worker
        return real(*a, **k)

    monkeypatch.setattr(e, "_delete_begin", racing)
    res = e.delete_records("q", match=Selector.parse(["tag", "Eq", "k"]))
    assert res.deleted == 1
    assert read_all(e, "q") == {}
    img = image(fs, kind)
    abandon(e, fs)
    e2 = open_engine(img, clock=clock)
    try:
        left = {s: r.data for s, r in read_all(e2, "q").items()}
        assert "secret" not in left.values(), f"acked fsync delete undone by a crash: {left}"
    finally:
        e2.close(snapshot=False)


def test_an_ack_settles_off_the_event_loop_when_a_router_appears_in_ack_begin(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The event-loop rule (`http.async_engine`: nothing on the loop waits for
    the disk; `Engine.delete_begin`: "Where it must settle routers first ... call it off the
    loop then").

    A router PUT (a worker thread) completing while `ack_begin` runs on the loop — after
    it removed the leases and logged their events — used to send the ack into the
    settled delete on the loop thread: snapshot lock, a snapshot, the delete's fsync. The
    ack is now left deferred there and settled in a thread. The test stands in for the
    concurrent PUT by completing it in a worker thread while `ack_begin` logs the lease
    events."""
    e, fs, job = _claimed_fsync_job()
    db = AsyncEngine(e)
    snap_threads = _threads_calling(monkeypatch, e, "_snapshot_held")
    real_log = e.queues._log
    fired: list[bool] = []

    def log_then_put(t: Any, events: Any, now: int) -> None:
        real_log(t, events, now)
        if events and not fired:
            fired.append(True)
            th = threading.Thread(target=e.put_router, args=(RouterSpec("r", "q", "d"),))
            th.start()
            th.join()

    monkeypatch.setattr(e.queues, "_log", log_then_put)

    async def ack() -> int:
        res = await db.ack("q", "w", [job.record.seq], [])
        assert res.done == [job.record.seq]
        return threading.get_ident()

    try:
        loop_thread = asyncio.run(ack())
    finally:
        abandon(e, fs)
    assert fired
    assert loop_thread not in snap_threads, "a settle snapshot ran on the event loop thread"


def _claimed_fsync_job() -> tuple[Engine, FaultFs, Job]:
    """An engine with one job of an `fsync` queue `q` leased to `w`."""
    clock, fs = ManualClock(), FaultFs()
    e = open_engine(fs, clock=clock)
    e.put_topic("q", TopicConfig(type=TopicType.QUEUE, durability=Durability.FSYNC))
    e.write("q", [RecordIn.of("job")])
    (job,) = e.queues.claim("q", [Claimer("w", 1)], None).jobs[0]
    return e, fs, job


def _threads_calling(monkeypatch: pytest.MonkeyPatch, obj: object, attr: str) -> list[int]:
    """The ids of the threads that call `obj.attr` from now on, in call order."""
    threads: list[int] = []
    real = getattr(obj, attr)

    def recorded(*a: Any, **k: Any) -> Any:
        threads.append(threading.get_ident())
        return real(*a, **k)

    monkeypatch.setattr(obj, attr, recorded)
    return threads
