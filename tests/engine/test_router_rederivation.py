"""Router copies re-derived after a crash (SEMANTICS §8.4, §7.1, §10.4, §12 invariants 3,
7, 11, 12; STORAGE §6 step 9). Copies are never logged, so a delete on a topic a router
reads, a durable delete on one it feeds, and a config change of a router's dest first
settle the router in a snapshot: every delete then replays against the records it named,
and no delete by seq ever meets a re-derived copy."""

from __future__ import annotations

import pytest

from seglog.clock import ManualClock
from seglog.core.leases import Claimer
from seglog.model import Discard, Durability, RecordIn, Selector, TopicConfig, TopicType
from seglog.router_model import RouterSpec
from tests.engine.oracle import (
    IMAGES,
    ImageKind,
    abandon,
    image,
    open_engine,
    read_all,
    reopen_after_crash,
)
from tests.support.faultfs import FaultFs


def test_an_ack_of_a_copy_only_its_router_could_bring_back_spares_new_copies() -> None:
    """SEMANTICS §7.1 ("only records existing at call time can be deleted"), §12 invariant 7
    (deletes are point-in-time): an ack logged before a crash, of a copy that an ephemeral
    source cannot re-derive, used to outlive recovery as a delete by seq and kill the first
    new copy forwarded into that seq after the restart. Now the ack (an `fsync` queue's,
    durable) settles the router first: the snapshot keeps the copies, the ack replays
    against them, and the unacked `a` is claimable again beside the new jobs."""
    clock, fs = ManualClock(), FaultFs()
    e = open_engine(fs, clock=clock)
    e.put_topic("s", TopicConfig(durability=Durability.EPHEMERAL))
    e.put_topic("q", TopicConfig(type=TopicType.QUEUE, durability=Durability.FSYNC))
    e.put_router(RouterSpec("r", "s", "q"))
    e.snapshot()
    e.write("s", [RecordIn.of("a"), RecordIn.of("b")])
    jobs = e.queues.claim("q", [Claimer("w", 2)], None).jobs[0]
    assert [j.record.seq for j in jobs] == [1, 2]
    assert e.queues.ack("q", "w", [2], []).done == [2]
    e2 = reopen_after_crash(e, fs, clock)
    try:
        e2.write("s", [RecordIn.of("c"), RecordIn.of("d")])  # acked after the restart
        again = e2.queues.claim("q", [Claimer("w", 5)], None).jobs[0]
        assert [j.record.data for j in again] == ["a", "c", "d"]
    finally:
        e2.close(snapshot=False)


def test_a_match_delete_of_lost_copies_spares_a_write_acked_after_restart() -> None:
    """SEMANTICS §7.1 / §12 invariants 3 and 7: a match delete logged before a crash whose
    bound lies past the replayed head (copies of an ephemeral source, never re-derived) is
    re-run by the first router copy landing after the restart — over the whole topic, so
    an fsync write acked after the restart is deleted."""
    clock, fs = ManualClock(), FaultFs()
    e = open_engine(fs, clock=clock)
    e.put_topic("s", TopicConfig(durability=Durability.EPHEMERAL))
    e.put_topic("d", TopicConfig(durability=Durability.FSYNC))
    e.put_router(RouterSpec("r", "s", "d"))
    e.snapshot()
    e.write("s", [RecordIn.of("x", tag="t"), RecordIn.of("y")])
    e.forwarder.forward_all()
    e.delete_records("d", match=Selector.parse(["tag", "Eq", "t"]))
    assert [r.data for r in read_all(e, "d").values()] == ["y"]
    e2 = reopen_after_crash(e, fs, clock)
    try:
        w = e2.write("d", [RecordIn.of("w", tag="t")])  # acked (fsync) after the restart
        e2.write("s", [RecordIn.of("z")])
        e2.forwarder.forward_all()
        live = {r.data for r in read_all(e2, "d").values()}
        assert "w" in live, f"acked write at seq {w.first_seq} deleted; live: {live}"
        assert "z" in live
    finally:
        e2.close(snapshot=False)


def test_deletes_in_a_middle_topic_behind_backpressure_stay_after_a_crash() -> None:
    """SEMANTICS §7.1 / §12 invariant 7 (deletes are permanent): s → b → c, b reject-capped.
    After a crash recovery's forwarding stops at b's cap, the deletes past b's head are
    redone once (`Engine.open`), and the copies re-derived later into b (a topic a router
    reads, so `PendingOp.leaf` is False) never meet the delete still in
    the deletes past the head (since removed): a record deleted before the crash is live again."""
    clock, fs = ManualClock(), FaultFs()
    e = open_engine(fs, clock=clock)
    e.put_topic(
        "b",
        TopicConfig(durability=Durability.FSYNC, cap_records=2, discard=Discard.REJECT),
    )
    e.put_topic("c", TopicConfig(durability=Durability.FSYNC))
    e.put_router(RouterSpec("sb", "s", "b"))
    e.put_router(RouterSpec("bc", "b", "c"))
    e.snapshot()
    doomed = Selector.parse(["tag", "Eq", "t"])
    e.write("s", [RecordIn.of(f"x{i}", tag="t" if i < 3 else None) for i in range(4)])
    e.forwarder.forward_all()  # x0, x1 into b (full), then on to c
    e.delete_records("b", match=doomed)
    e.forwarder.forward_all()  # x2, x3 into b
    e.delete_records("b", match=doomed)
    assert {s: r.data for s, r in read_all(e, "b").items()} == {4: "x3"}
    e2 = reopen_after_crash(e, fs, clock)
    try:
        e2.forwarder.forward_all()
        assert {s: r.data for s, r in read_all(e2, "b").items()} == {4: "x3"}
    finally:
        e2.close(snapshot=False)


def test_an_acked_job_in_a_queue_a_router_reads_stays_acked_after_a_crash() -> None:
    """SEMANTICS §10.4 (an ack permanently deletes the job; `fsync`: durable before the
    response), §12 invariant 7. The queue variant of the middle-topic case: q feeds a router
    (so its forwarded copies are not `leaf`), q is reject-capped; recovery's forwarding stops
    at the cap, the re-application of deletes past the head (since removed) runs once, and the job acked before the crash is
    re-derived afterwards with nothing left to delete it: claimable again."""
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
    e.put_router(RouterSpec("sq", "s", "q"))
    e.put_router(RouterSpec("audit", "q", "log"))
    e.snapshot()
    e.write("s", [RecordIn.of(f"j{i}") for i in range(4)])
    done: list[str] = []
    for want in (2, 1):
        jobs = e.queues.claim("q", [Claimer("w", want)], None).jobs[0]
        assert e.queues.ack("q", "w", [j.record.seq for j in jobs], []).done
        done += [j.record.data for j in jobs]
    assert done == ["j0", "j1", "j2"]
    e2 = reopen_after_crash(e, fs, clock)
    try:
        again = e2.queues.claim("q", [Claimer("w", 5)], None).jobs[0]
        assert [j.record.data for j in again] == ["j3"]
    finally:
        e2.close(snapshot=False)


def test_an_ack_never_deletes_another_job_when_the_queue_also_takes_direct_writes() -> None:
    """SEMANTICS §8.2 (a dest may still take direct writes), §10.4 (an ack deletes exactly
    the acked seq), §12 invariants 3 and 7. q is fed by a router and by a direct write, so
    after a crash the replayed direct write holds its seq and the re-derived copies land
    after it, at other seqs than before. A delete by seq re-applied to the copies then
    killed the unacked job x and let the acked y come back. Now the ack (durable, an
    `fsync` queue's) settles the router first: it replays against the copies it named."""
    clock, fs = ManualClock(), FaultFs()
    e = open_engine(fs, clock=clock)
    e.put_topic("q", TopicConfig(type=TopicType.QUEUE, durability=Durability.FSYNC))
    e.put_router(RouterSpec("r", "s", "q"))
    e.snapshot()
    e.write("s", [RecordIn.of("x")])
    e.forwarder.forward_all()  # q1 = x
    e.write("q", [RecordIn.of("w")])  # q2 = w, logged
    e.write("s", [RecordIn.of("y")])
    e.forwarder.forward_all()  # q3 = y
    assert {s: r.data for s, r in read_all(e, "q").items()} == {1: "x", 2: "w", 3: "y"}
    jobs = e.queues.claim("q", [Claimer("w", 3)], None).jobs[0]
    assert [j.record.seq for j in jobs] == [1, 2, 3]
    assert e.queues.ack("q", "w", [3], []).done == [3]  # y acked, fsynced
    e2 = reopen_after_crash(e, fs, clock)
    try:
        again = e2.queues.claim("q", [Claimer("w", 5)], None).jobs[0]
        assert sorted(j.record.data for j in again) == ["w", "x"]
    finally:
        e2.close(snapshot=False)


@pytest.mark.parametrize("kind", IMAGES)
def test_a_copy_deleted_in_the_dest_after_its_source_record_was_deleted_stays_deleted(
    kind: ImageKind,
) -> None:
    """s → d (`fsync` both): three copies forwarded since the snapshot, then the source
    record behind the first is deleted and the second copy is deleted in d (both acked,
    durable). Re-derivation used to skip the deleted source record, so every later copy
    landed one seq lower: after a crash d held b (deleted by the client, back) and had
    lost a and c. The source delete now settles the router in a snapshot first (SEMANTICS
    §8.4, §12 invariants 7, 10, 12)."""
    clock, fs = ManualClock(), FaultFs()
    e = open_engine(fs, clock=clock)
    e.put_topic("s", TopicConfig(durability=Durability.FSYNC))
    e.put_topic("d", TopicConfig(durability=Durability.FSYNC))
    e.put_router(RouterSpec("r", "s", "d"))
    e.snapshot()
    e.write("s", [RecordIn.of(x) for x in ("a", "b", "c")])
    assert {s: r.data for s, r in read_all(e, "d").items()} == {1: "a", 2: "b", 3: "c"}
    e.delete_records("s", seqs=[1])
    e.delete_records("d", seqs=[2])
    live = {s: r.data for s, r in read_all(e, "d").items()}
    assert live == {1: "a", 3: "c"}
    img = image(fs, kind)
    abandon(e, fs)
    e2 = open_engine(img, clock=clock)
    try:
        assert {s: r.data for s, r in read_all(e2, "d").items()} == live
    finally:
        e2.close(snapshot=False)


@pytest.mark.parametrize("kind", IMAGES)
def test_acks_of_jobs_a_snapshot_saw_forwarded_take_no_snapshot_and_stay_after_a_crash(
    kind: ImageKind,
) -> None:
    """q (an `fsync` queue) is read by a router (an audit trail). Acks of jobs that the
    newest snapshot saw forwarded cannot move a copy, so they take no snapshot; an ack of
    a job forwarded since does. After a crash the acked jobs stay acked and the audit keeps
    every copy at its seq (SEMANTICS §8.4, §10.4)."""
    clock, fs = ManualClock(), FaultFs()
    e = open_engine(fs, clock=clock)
    e.put_topic("q", TopicConfig(type=TopicType.QUEUE, durability=Durability.FSYNC))
    e.put_topic("audit", TopicConfig(durability=Durability.FSYNC))
    e.put_router(RouterSpec("r", "q", "audit"))
    e.write("q", [RecordIn.of(f"j{i}") for i in range(4)])
    e.forwarder.forward_all()
    e.snapshot()
    first = e.last_snapshot
    jobs = e.queues.claim("q", [Claimer("w", 2)], None).jobs[0]
    assert e.queues.ack("q", "w", [j.record.seq for j in jobs], []).done == [1, 2]
    assert e.last_snapshot == first  # covered: no snapshot
    e.write("q", [RecordIn.of("j4")])
    e.forwarder.forward_all()  # audit 5 = j4, after the snapshot
    jobs = e.queues.claim("q", [Claimer("w", 3)], None).jobs[0]
    assert [j.record.data for j in jobs] == ["j2", "j3", "j4"]
    assert e.queues.ack("q", "w", [5], []).done == [5]
    assert e.last_snapshot != first  # j4's copy was made since: settled first
    audit = {s: r.data for s, r in read_all(e, "audit").items()}
    assert audit == {1: "j0", 2: "j1", 3: "j2", 4: "j3", 5: "j4"}
    img = image(fs, kind)
    abandon(e, fs)
    e2 = open_engine(img, clock=clock)
    try:
        assert {s: r.data for s, r in read_all(e2, "audit").items()} == audit
        left = e2.queues.claim("q", [Claimer("w", 5)], None).jobs[0]
        assert [j.record.data for j in left] == ["j2", "j3"]
    finally:
        e2.close(snapshot=False)
