"""Queue topics on a real engine (SEMANTICS §10): claims, expiry as the visibility timeout,
nack delays, acks that delete, dead-lettering, counters, durable and non-durable leases
across restarts and crashes of both kinds, and one holder per job under concurrent
claimers. Time comes from a ManualClock."""

from __future__ import annotations

import threading
from collections import Counter

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from seglog.clock import ManualClock
from seglog.core.leases import Claimer
from seglog.engine.engine import Engine
from seglog.errors import ErrorCode, SeglogError
from seglog.model import Discard, Durability, RecordIn, TopicConfig, TopicType
from tests.conftest import EngineFactory
from tests.engine.oracle import IMAGES, ImageKind, abandon, image, open_engine, read_all
from tests.support.faultfs import FaultFs

LEASE = 1_000


def queue(**kw: object) -> TopicConfig:
    kw.setdefault("lease_ms", LEASE)
    return TopicConfig(type=TopicType.QUEUE, **kw)  # type: ignore[arg-type]


def jobs(e: Engine, name: str, n: int, offset: int = 0) -> None:
    e.write(name, [RecordIn.of({"job": i}, tag=f"t{i}") for i in range(offset, offset + n)])


def claim(e: Engine, name: str, node: str, n: int, lease_ms: int | None = None) -> list[int]:
    res = e.queues.claim(name, [Claimer(node, n)], lease_ms)
    return [j.record.seq for j in res.jobs[0]]


def test_claim_hands_out_each_job_once_in_order(make_engine: EngineFactory) -> None:
    e = make_engine()
    e.put_topic("q", queue())
    jobs(e, "q", 5)
    res = e.queues.claim("q", [Claimer("w1", 2)], None)
    first = res.jobs[0]
    assert [j.record.seq for j in first] == [1, 2] and res.ready == 3
    assert [j.record.data for j in first] == [{"job": 0}, {"job": 1}]
    assert first[0].record.tag == "t0" and first[0].deliveries == 1
    assert first[0].deadline == e.clock.now_ms() + LEASE
    assert first[0].lease_id != first[1].lease_id
    assert claim(e, "q", "w2", 10) == [3, 4, 5]
    assert claim(e, "q", "w3", 10) == []
    c = e.queues.counts("q")
    assert (c.ready, c.in_flight, c.dead_lettered) == (0, 5, 0)


def test_a_cohort_shares_jobs_round_robin(make_engine: EngineFactory) -> None:
    e = make_engine()
    e.put_topic("q", queue())
    jobs(e, "q", 50)
    res = e.queues.claim("q", [Claimer(f"w{i}", 10) for i in range(10)], None)
    assert [len(j) for j in res.jobs] == [5] * 10
    seqs = [j.record.seq for per in res.jobs for j in per]
    assert sorted(seqs) == list(range(1, 51))


def test_expiry_redelivers_and_counts_deliveries(
    make_engine: EngineFactory, clock: ManualClock
) -> None:
    e = make_engine()
    e.put_topic("q", queue())
    jobs(e, "q", 2)
    assert claim(e, "q", "w1", 1) == [1]
    clock.advance(LEASE)  # deadline reached, not passed: still held
    assert claim(e, "q", "w2", 1) == [2]
    assert e.queues.ack("q", "w1", [1], []).done == [1]
    assert claim(e, "q", "w2", 1) == []
    clock.advance(LEASE + 1)
    res = e.queues.claim("q", [Claimer("w3", 5)], None)
    assert [(j.record.seq, j.deliveries) for j in res.jobs[0]] == [(2, 2)]
    late = e.queues.ack("q", "w2", [2], [])  # w2's lease expired and the job moved on
    assert late.done == [] and late.skipped == [2]


def test_ack_deletes_the_job_and_fences_check_lease_ids(make_engine: EngineFactory) -> None:
    e = make_engine()
    e.put_topic("q", queue())
    jobs(e, "q", 3)
    res = e.queues.claim("q", [Claimer("w", 3)], None)
    ids = {j.record.seq: j.lease_id for j in res.jobs[0]}
    out = e.queues.ack("q", "w", [1, 2, 3], [ids[1], ids[2] + 1000, 0])
    assert out.done == [1, 3] and out.skipped == [2]
    assert out.in_flight == 1 and out.ready == 0
    assert sorted(read_all(e, "q")) == [2]
    again = e.queues.ack("q", "w", [1], [])
    assert again.skipped == [1]  # re-acking is harmless
    assert e.queues.ack("q", "other", [2], []).skipped == [2]  # not its lease


def test_nack_with_and_without_delay(make_engine: EngineFactory, clock: ManualClock) -> None:
    e = make_engine()
    e.put_topic("q", queue(lease_ms=60_000))
    jobs(e, "q", 3)
    assert claim(e, "q", "w", 3) == [1, 2, 3]
    out = e.queues.nack("q", "w", [3, 1], [], 0)
    assert out.done == [3, 1] and out.ready == 2 and out.in_flight == 1
    assert e.queues.nack("q", "w", [2], [], 5_000).ready == 2  # delayed: not ready yet
    assert claim(e, "q", "w", 10) == [1, 3]  # reclaimed work, ascending
    clock.advance(4_999)
    assert claim(e, "q", "w", 10) == []
    clock.advance(1)
    res = e.queues.claim("q", [Claimer("w", 10)], None)
    assert [(j.record.seq, j.deliveries) for j in res.jobs[0]] == [(2, 2)]


def test_extend_moves_the_deadline(make_engine: EngineFactory, clock: ManualClock) -> None:
    e = make_engine()
    e.put_topic("q", queue())
    jobs(e, "q", 1)
    assert claim(e, "q", "w", 1) == [1]
    clock.advance(900)
    out = e.queues.extend("q", "w", [1], [], 5_000)
    assert out.deadlines == {1: clock.now_ms() + 5_000}
    clock.advance(4_000)  # past the first deadline, within the extended one
    assert claim(e, "q", "x", 1) == []
    assert e.queues.extend("q", "w", [1], [], 50).deadlines[1] == clock.now_ms() + 100  # clamp
    clock.advance(101)
    assert e.queues.extend("q", "w", [1], [], 5_000).skipped == [1]  # expired: no extending
    assert claim(e, "q", "x", 1) == [1]


def test_dead_letter_after_max_deliveries(make_engine: EngineFactory, clock: ManualClock) -> None:
    e = make_engine()
    e.put_topic("q", queue(max_deliveries=2, dead_letter="dlq"))
    e.write(
        "q", [RecordIn.of({"a": 1}, meta={"m": 1}, node="n1", tag="x"), RecordIn.of(2, meta=[1])]
    )
    for _ in range(2):
        assert claim(e, "q", "w", 5) == [1, 2]
        clock.advance(LEASE + 1)
    res = e.queues.claim("q", [Claimer("w", 5)], None)
    assert res.jobs[0] == [] and res.ready == 0
    assert e.queues.counts("q").dead_lettered == 2
    assert read_all(e, "q") == {}  # removed from the queue like an ack
    dead = list(read_all(e, "dlq").values())
    assert [(r.data, r.node, r.tag) for r in dead] == [({"a": 1}, "n1", "x"), (2, None, None)]
    assert dead[0].meta == {
        "m": 1,
        "$dead_letter_from": "q",
        "$dead_letter_deliveries": "2",
        "$dead_letter_src_seq": "1",
    }
    assert dead[1].meta["$dead_letter_src_seq"] == "2" and "m" not in dead[1].meta
    assert dead[0].ts == clock.now_ms()


def test_dead_letters_land_one_by_one_where_the_batch_does_not_fit(
    make_engine: EngineFactory,
) -> None:
    """SEMANTICS §10.6, each diverted job is appended: two due jobs and a dead-letter topic
    that rejects past one record — one lands, the other waits: a batch of both would be
    refused on every pass, and neither would ever leave."""
    e = make_engine()
    e.put_topic("dlq", TopicConfig(cap_records=1, discard=Discard.REJECT))
    e.put_topic("q", queue(max_deliveries=1, dead_letter="dlq"))
    jobs(e, "q", 2)
    assert claim(e, "q", "w", 2) == [1, 2]
    e.queues.nack("q", "w", [1, 2], [], 0)
    res = e.queues.claim("q", [Claimer("w", 5)], None)
    assert res.jobs[0] == []
    c = e.queues.counts("q")
    assert (c.ready, c.dead_lettered) == (1, 1)
    assert [r.data for r in read_all(e, "dlq").values()] == [{"job": 0}]
    assert list(read_all(e, "q")) == [2]
    e.delete_records("dlq", before_seq=10)  # room again: the other one follows
    assert e.queues.claim("q", [Claimer("w", 5)], None).jobs[0] == []
    assert [r.data for r in read_all(e, "dlq").values()] == [{"job": 1}]
    assert read_all(e, "q") == {} and e.queues.counts("q").dead_lettered == 2


def test_a_dead_letter_whose_queue_delete_fails_keeps_its_count_and_the_claim_its_leases(
    make_engine: EngineFactory,
) -> None:
    """The copy landed, the job's delete did not: the claim that found it
    still hands out its leases, and the job keeps its delivery count, so the next pass
    diverts it again (a second copy: at least once) instead of delivering it again."""
    e = make_engine()
    e.put_topic("q", queue(max_deliveries=1, dead_letter="dlq"))
    jobs(e, "q", 2)
    assert claim(e, "q", "w", 1) == [1]
    e.queues.nack("q", "w", [1], [], 0)
    real = e.delete_records
    failed: list[str] = []

    def failing_once(name: str, *a: object, **kw: object) -> object:
        if name == "q" and not failed:
            failed.append(name)
            raise SeglogError(ErrorCode.INTERNAL, "injected")
        return real(name, *a, **kw)  # type: ignore[arg-type]

    e.delete_records = failing_once  # type: ignore[method-assign]
    assert claim(e, "q", "w", 1) == [2]  # 1 was diverted on the way; its delete failed
    assert failed and e.topics["q"].leases is not None
    assert e.topics["q"].leases.deliveries.get(1) == 1
    assert claim(e, "q", "x", 5) == []  # 1 is diverted again, not leased
    assert [r.data for r in read_all(e, "dlq").values()] == [{"job": 0}, {"job": 0}]
    assert list(read_all(e, "q")) == [2]


def test_errors(make_engine: EngineFactory) -> None:
    e = make_engine()
    e.put_topic("log", TopicConfig())
    with pytest.raises(SeglogError) as ei:
        e.queues.claim("log", [Claimer("w", 1)], None)
    assert ei.value.code is ErrorCode.NOT_A_QUEUE and ei.value.detail == {"topic": "log"}
    with pytest.raises(SeglogError) as ei:
        e.queues.ack("absent", "w", [1], [])
    assert ei.value.code is ErrorCode.TOPIC_NOT_FOUND
    assert not e.exists("absent")  # never auto-created


def test_topic_info_and_stats_carry_queue_counts(make_engine: EngineFactory) -> None:
    e = make_engine()
    e.put_topic("q", queue())
    e.put_topic("log", TopicConfig())
    jobs(e, "q", 4)
    claim(e, "q", "w", 1)
    info = e.get_topic("q")
    assert info.queue is not None and (info.queue.ready, info.queue.in_flight) == (3, 1)
    assert e.get_topic("log").queue is None
    rows = {t.topic: t for t in e.stats().topics}
    assert rows["q"].queue == info.queue and rows["log"].queue is None


def test_deleted_jobs_are_not_handed_out(make_engine: EngineFactory) -> None:
    e = make_engine()
    e.put_topic("q", queue(cap_records=3))
    jobs(e, "q", 5)  # the cap evicts 1 and 2
    e.delete_records("q", seqs=[4])
    assert claim(e, "q", "w", 10) == [3, 5]
    assert e.queues.counts("q").in_flight == 2


def test_work_connection_release(make_engine: EngineFactory) -> None:
    e = make_engine()
    e.put_topic("q", queue())
    jobs(e, "q", 4)
    e.queues.claim("q", [Claimer("w", 2, conn=7)], None)
    assert claim(e, "q", "w", 1) == [3]  # an ordinary claim by the same node
    assert e.queues.held_by_conn("q", 7) == 2
    assert e.queues.release_conn("q", 7) == 2
    assert e.queues.held_by_conn("q", 7) == 0
    assert claim(e, "q", "x", 10) == [1, 2, 4]  # released at once; 3 still leased


def test_sealed_payloads_are_read_back_for_claims(make_engine: EngineFactory) -> None:
    e = make_engine(segment_max_events=10, segment_payload_cache=0)
    e.put_topic("q", queue())
    jobs(e, "q", 25)
    from seglog.engine.maintenance import seal_topic

    seal_topic(e, e.topics["q"])
    assert not e.topics["q"].has_payload(1)  # the payload left memory
    res = e.queues.claim("q", [Claimer("w", 25)], None)
    assert [j.record.data for j in res.jobs[0]] == [{"job": i} for i in range(25)]


@pytest.mark.parametrize("durable_leases", [False, True], ids=["leases", "durable-leases"])
def test_restart_keeps_acks_and_durable_leases(
    make_engine: EngineFactory, clock: ManualClock, durable_leases: bool
) -> None:
    e = make_engine()
    e.put_topic("q", queue(leases_durable=durable_leases, lease_ms=60_000))
    jobs(e, "q", 6)
    e.snapshot()
    assert claim(e, "q", "w", 4) == [1, 2, 3, 4]
    e.queues.ack("q", "w", [1], [])
    e.queues.nack("q", "w", [2], [], 0)
    e.close(snapshot=False)
    e2 = make_engine()
    got = claim(e2, "q", "x", 10)
    if durable_leases:
        assert got == [2, 5, 6]  # 3 and 4 are still w's; 2 was released
        assert e2.queues.ack("q", "w", [3], []).done == [3]
    else:
        assert got == [2, 3, 4, 5, 6]  # every unacked job is claimable again
    assert 1 not in read_all(e2, "q")


@pytest.mark.parametrize("kind", IMAGES)
@pytest.mark.parametrize("durability", [Durability.FSYNC, Durability.DISK])
def test_acked_jobs_never_come_back_after_a_crash(kind: ImageKind, durability: Durability) -> None:
    """A crash right after the acks returned. `fsync`: every acked job stays gone under both
    crash images. `disk`: the acks survive a process crash (a power cut may undo a `disk`
    write, and its acks with it: ack durability is the class's, SEMANTICS §10.8)."""
    fs = FaultFs()
    e = open_engine(fs)
    e.put_topic("q", queue(durability=durability, leases_durable=True))
    jobs(e, "q", 40)
    e.write("q", [RecordIn.of("sync")])  # a barrier; the fsync class's jobs are durable
    acked: list[int] = []
    for _ in range(4):
        got = claim(e, "q", "w", 7)
        e.queues.ack("q", "w", got[:5], [])
        acked += got[:5]
    snap_after = len(acked)
    e.snapshot()
    got = claim(e, "q", "w", 5)
    e.queues.ack("q", "w", got, [])
    acked += got
    crashed = image(fs, kind)
    abandon(e, fs)
    if durability is Durability.DISK and kind == "power":
        acked = acked[:snap_after]  # what the snapshot made durable
    e2 = open_engine(crashed)
    try:
        left = set(read_all(e2, "q"))
        assert not left & set(acked)
        e2.clock.advance(LEASE + 1)  # type: ignore[attr-defined]  # w's durable leases expire
        handed: list[int] = []
        while more := claim(e2, "q", "w2", 100):
            handed += more
            e2.queues.ack("q", "w2", more, [])
        assert not set(handed) & set(acked)
        assert set(handed) == left  # every unacked job is claimable again
    finally:
        e2.close(snapshot=False)


def test_concurrent_claimers_never_share_a_job(make_engine: EngineFactory) -> None:
    e = make_engine()
    e.put_topic("q", queue(lease_ms=60_000))
    jobs(e, "q", 2_000)
    got: Counter[int] = Counter()
    lock = threading.Lock()

    def worker(i: int) -> None:
        while True:
            seqs = claim(e, "q", f"w{i}", 7)
            if not seqs:
                return
            with lock:
                got.update(seqs)
            if i % 2:
                e.queues.ack("q", f"w{i}", seqs, [])

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(got) == list(range(1, 2_001)) and max(got.values()) == 1


@pytest.mark.parametrize("kind", IMAGES)
def test_durable_leases_outlive_a_snapshot(kind: ImageKind) -> None:
    """Snapshots do not keep leases, and the WAL before a snapshot is not replayed: a
    durable lease taken before the last snapshot must still hold after a crash."""
    fs = FaultFs()
    e = open_engine(fs)
    e.put_topic("q", queue(durability=Durability.FSYNC, leases_durable=True, lease_ms=600_000))
    jobs(e, "q", 5)
    assert claim(e, "q", "w", 2) == [1, 2]
    e.queues.extend("q", "w", [2], [], 900_000)
    e.snapshot()
    assert claim(e, "q", "w", 1) == [3]
    e.write("q", [RecordIn.of("barrier")])  # fsync: everything before it is durable
    crashed = image(fs, kind)
    abandon(e, fs)
    e2 = open_engine(crashed)
    try:
        assert claim(e2, "q", "x", 10) == [4, 5, 6]
        lease = e2.topics["q"].leases.leases[2]
        assert lease.node == "w" and lease.deadline == e.clock.now_ms() + 900_000
        assert e2.queues.ack("q", "w", [1, 2, 3], []).done == [1, 2, 3]
    finally:
        e2.close(snapshot=False)


@pytest.mark.parametrize("kind", IMAGES)
def test_delayed_nacks_and_delivery_counts_outlive_a_snapshot(kind: ImageKind) -> None:
    """With durable leases the whole projection survives a snapshot, not only the held
    leases: a delayed nack stays delayed, and a released job keeps its delivery count (so
    `max_deliveries` still dead-letters it on time)."""
    fs = FaultFs()
    e = open_engine(fs)
    cfg = queue(
        durability=Durability.FSYNC,
        leases_durable=True,
        max_deliveries=2,
        dead_letter="dlq",
        lease_ms=600_000,
    )
    e.put_topic("q", cfg)
    jobs(e, "q", 3)
    assert claim(e, "q", "w", 2) == [1, 2]
    assert e.queues.nack("q", "w", [1], [], 60_000).done == [1]  # due again in a minute
    assert e.queues.nack("q", "w", [2], [], 0).done == [2]  # due now, 1 delivery so far
    e.snapshot()
    e.write("q", [RecordIn.of("barrier")])  # fsync: everything before it is durable
    crashed = image(fs, kind)
    abandon(e, fs)
    e2 = open_engine(crashed)
    try:
        clock = e2.clock
        assert isinstance(clock, ManualClock)
        assert claim(e2, "q", "x", 1) == [2]  # reclaimed work first; 1 is still delayed
        assert e2.topics["q"].leases.deliveries[2] == 2
        assert e2.queues.nack("q", "x", [2], [], 0).done == [2]
        assert claim(e2, "q", "x", 10) == [3, 4]  # 2 is dead-lettered (third delivery)
        assert e2.queues.counts("q").dead_lettered == 1
        assert [r.data for r in read_all(e2, "dlq").values()] == [{"job": 1}]
        clock.advance(60_000)
        assert claim(e2, "q", "x", 10) == [1]
        assert e2.topics["q"].leases.deliveries[1] == 2
    finally:
        e2.close(snapshot=False)


@pytest.mark.parametrize("how", ["refused", "commit-failed"])
def test_an_ack_whose_delete_fails_leaves_the_jobs_claimable(
    make_engine: EngineFactory, monkeypatch: pytest.MonkeyPatch, how: str
) -> None:
    """SEMANTICS §10.4: if the durable delete fails, the acked seqs go back to `reclaim`
    and the request fails; nothing was deleted."""
    from seglog.core.frames import FrameType
    from seglog.storage.wal_commit import Commit, WalError

    e = make_engine()
    e.put_topic("q", queue(lease_ms=60_000))
    jobs(e, "q", 3)
    assert claim(e, "q", "w", 3) == [1, 2, 3]
    real = e._submit

    def failing(tid: int, frames: list[bytes], durable: bool) -> Commit:
        if frames[0][4] == FrameType.DELETE:  # the type byte after the u32 frame length
            if how == "refused":
                raise SeglogError(ErrorCode.THROTTLED, "WAL ingest queue is full")
            c = Commit()
            c._complete(WalError("disk on fire"))
            return c
        return real(tid, frames, durable)

    monkeypatch.setattr(e, "_submit", failing)
    with pytest.raises(SeglogError):
        e.queues.ack("q", "w", [1, 2], [])
    monkeypatch.setattr(e, "_submit", real)
    assert sorted(read_all(e, "q")) == [1, 2, 3]
    assert claim(e, "q", "x", 10) == [1, 2]  # back in reclaim at once; 3 is still w's


@settings(max_examples=60, deadline=None)
@given(
    n=st.integers(1, 60),
    cap=st.integers(0, 40),
    deletes=st.lists(st.integers(1, 70), max_size=10),
    before=st.integers(0, 70),
    expired=st.integers(0, 70),
)
def test_liveness_agrees_with_is_live(
    n: int, cap: int, deletes: list[int], before: int, expired: int
) -> None:
    """The claim pass and the counts use `liveness()`, `is_live` with the floors read once."""
    from seglog.engine.topic import TopicState

    t = TopicState("q", 1, TopicConfig(cap_records=cap))
    t.replay_rows(1, [0] * n, [b"1"] * n, [None] * n, [None] * n, [None] * n)
    t.apply_delete(before or None, None, n + 1, [s for s in deletes if s <= n])
    t.apply_record_cap()
    t.expiry_floor = expired  # a TTL watermark whose slots are not popped yet
    live = t.liveness()
    assert [live(s) for s in range(-2, n + 5)] == [t.is_live(s) for s in range(-2, n + 5)]


@pytest.mark.parametrize(
    ("durability", "restart"),
    [
        (Durability.DISK, "clean"),
        (Durability.DISK, "process"),
        (Durability.FSYNC, "clean"),
        (Durability.FSYNC, "process"),
        (Durability.FSYNC, "power"),  # a `disk` lease may not outlive a power cut
    ],
)
def test_a_job_whose_ack_is_in_flight_is_not_claimed_again(
    durability: Durability, restart: str
) -> None:
    """SEMANTICS §10.4, §10.8: an ack drops the lease before its delete lands. After a
    restart the claim cursor walks from seq 1 again, past jobs whose durable leases were
    replayed: a claim arriving between the ack and its delete must not lease them anew."""
    fs = FaultFs()
    e = open_engine(fs)
    e.put_topic("q", queue(durability=durability, leases_durable=True, lease_ms=600_000))
    jobs(e, "q", 20)
    assert claim(e, "q", "a", 10) == list(range(1, 11))
    if restart == "clean":
        e.close(snapshot=False)
    else:
        e.write("q", [RecordIn.of("barrier")])  # fsync: the leases before it are durable
        crashed = image(fs, restart)  # type: ignore[arg-type]
        abandon(e, fs)
        fs = crashed
    e = open_engine(fs)  # the leases replayed, the claim cursor back at 1
    try:
        pending = e.queues.ack_begin("q", "a", list(range(1, 11)), [])
        assert pending.done == list(range(1, 11)) and pending.delete is not None
        assert not pending.delete.applied  # the delete has not landed yet
        fresh = list(range(11, 21 if restart == "clean" else 22))  # and the barrier
        assert claim(e, "q", "b", 100) == fresh  # not the jobs being acked
        e.drain(pending.delete)
        assert e.queues.ack_finish(pending).done == list(range(1, 11))
        assert claim(e, "q", "b", 100) == []
        assert sorted(read_all(e, "q")) == fresh
    finally:
        e.close(snapshot=False)
