"""Restart equivalence: cases shrunk from a differential test at the engine level (random
op sequences, then clean restart / process crash / power cut, comparing what the public
read and state API shows before and after), each deterministic."""

from __future__ import annotations

import pytest

from seglog.clock import ManualClock
from seglog.engine.engine import Engine
from seglog.model import Durability, RecordIn, Selector, TopicConfig
from seglog.router_model import RouterSpec
from tests.engine.oracle import ImageKind, abandon, image, open_engine, read_all
from tests.support.faultfs import FaultFs


def _datas(e: Engine, name: str) -> dict[int, bytes]:
    return {s: r.data_json for s, r in read_all(e, name).items()}


@pytest.mark.parametrize(
    ("durability", "kind"),
    [(Durability.FSYNC, "process"), (Durability.FSYNC, "power"), (Durability.DISK, "process")],
)
def test_an_explicit_seq_delete_past_the_head_spares_a_later_acked_write_on_replay(
    durability: Durability, kind: ImageKind
) -> None:
    """SEMANTICS §7.1: only records existing at call time can be deleted (bound = head + 1
    when the delete is ordered with appends); §12 invariant 7: deletes are point-in-time,
    bounded by the head at call time *also on replay*; §2.2 / §12 invariant 3: every acked
    `fsync` write survives any crash, an acked `disk` write survives a process crash;
    STORAGE §7 (a Delete frame replays "bounded by bound_head, so later appends are
    untouched").

    A delete naming seq 1 of an empty topic deletes nothing (`deleted: 0`). The next write
    is acked at seqs 1..2. After a crash, replay keeps the Delete frame as a "delete past
    the head" (recovery.py `_apply_topic_frame`) and re-applies it after recovery
    (the re-application of deletes past the head (since removed)), killing the acked record at seq 1."""
    fs, clock = FaultFs(), ManualClock()
    e = open_engine(fs, clock=clock)
    e.put_topic("b", TopicConfig(durability=durability))
    assert e.delete_records("b", seqs=[1]).deleted == 0
    assert e.write("b", [RecordIn.of({"y": 0}), RecordIn.of({"y": 1})]).seqs == [1, 2]
    before = _datas(e, "b")
    assert sorted(before) == [1, 2]
    img = image(fs, kind)
    abandon(e, fs)
    e2 = open_engine(img, clock=clock)
    try:
        assert _datas(e2, "b") == before
    finally:
        abandon(e2, img)


def test_an_explicit_seq_delete_past_the_head_with_records_below_it() -> None:
    """The same with records below the named seq (SEMANTICS §7.1, §12 invariant 7): the
    head is 3, a delete names seq 4 (deletes nothing), the next write is acked at 4..5; a
    process crash of an `fsync` topic loses the acked seq 4."""
    fs, clock = FaultFs(), ManualClock()
    e = open_engine(fs, clock=clock)
    e.put_topic("b", TopicConfig(durability=Durability.FSYNC))
    e.write("b", [RecordIn.of({"x": i}) for i in range(3)])
    assert e.delete_records("b", seqs=[4]).deleted == 0
    assert e.write("b", [RecordIn.of({"y": 0}), RecordIn.of({"y": 1})]).seqs == [4, 5]
    before = _datas(e, "b")
    img = image(fs, "process")
    abandon(e, fs)
    e2 = open_engine(img, clock=clock)
    try:
        assert _datas(e2, "b") == before
    finally:
        abandon(e2, img)


def test_a_tightened_byte_cap_applies_at_the_put_even_if_loosened_before_a_read() -> None:
    """SEMANTICS §2.1 ("a tightened cap/TTL applies immediately through a retention pass"),
    §4.2 (the pass runs after a config update; step 4 logs the eviction watermark, then
    applies it), §2.2 (a clean restart of a `disk` topic: everything survives, i.e. the
    same state comes back).

    Three records (66 bytes) in a `disk` topic; PUT config `cap_bytes: 30` then, before
    any read, PUT the default config back. `put_topic`'s retention pass submits the
    EvictWatermark (it is durable) but nothing ever applies the pending cut: the second
    config has no retention, so later passes return at once and reads/state show all
    three records. A clean restart (the snapshot publishes the pending cut, or replay
    raises the floor) then removes seqs 1..2 behind the readers' backs, with a `cap`
    tombstone. The live view must already be the evicted one, and a clean restart must
    not change it."""
    fs, clock = FaultFs(), ManualClock()
    e = open_engine(fs, clock=clock)
    try:
        e.put_topic("a", TopicConfig())
        e.write("a", [RecordIn.of({"k": i, "pad": "x" * 6}) for i in range(3)])
        e.put_topic("a", TopicConfig(cap_bytes=30))
        e.put_topic("a", TopicConfig())
        live = e.get_topic("a", touch=False)
        live_reads = _datas(e, "a")
        e.close()
        e = open_engine(fs, clock=clock)
        after = e.get_topic("a", touch=False)
        assert _datas(e, "a") == live_reads
        assert (after.count, after.earliest_seq) == (live.count, live.earliest_seq)
        assert live.count == 1  # the tightened cap applied at once (§2.1)
    finally:
        if e.wal is not None:
            e.close(snapshot=False)


@pytest.mark.parametrize("kind", ["clean", "process"])
def test_a_byte_cap_eviction_of_a_write_applies_live_when_the_cap_is_removed(kind: str) -> None:
    """Same root cause as above, reached from the write path (SEMANTICS §4.2: the pass runs
    "after publishing a write"; step 3 evicts, step 4 logs the watermark *then applies it*;
    §12 invariant 9; §2.2 restart survival).

    An `fsync` topic with `cap_bytes: 30` takes a 3-record write (66 bytes): the post-write
    pass logs an EvictWatermark but leaves the cut pending. The cap is then removed
    (PUT config) before any read. Live reads keep returning seqs 1..2 indefinitely (no
    later pass ever applies the logged cut), while a clean restart or a crash replays the
    watermark and they vanish. Before and after must agree (and per §4.2 only seq 3 is
    live)."""
    fs, clock = FaultFs(), ManualClock()
    e = open_engine(fs, clock=clock)
    img = fs
    try:
        e.put_topic("a", TopicConfig(durability=Durability.FSYNC, cap_bytes=30))
        e.write("a", [RecordIn.of({"k": i, "pad": "x" * 6}) for i in range(3)])
        e.put_topic("a", TopicConfig(durability=Durability.FSYNC))
        live = _datas(e, "a")
        if kind == "clean":
            e.close()
        else:
            img = image(fs, "process")
            abandon(e, fs)
        e = open_engine(img, clock=clock)
        assert _datas(e, "a") == live
        assert sorted(live) == [3]
    finally:
        if e.wal is not None:
            abandon(e, img)


@pytest.mark.parametrize("kind", ["process", "power"])
def test_a_source_delete_after_forwarding_keeps_router_copies_after_a_crash(
    kind: ImageKind,
) -> None:
    """SEMANTICS §8.4 ("Deterministic dest seqs: the k-th forwarded record of a router
    (counting trims) lands at `dest_base + k` when the dest has no other writers, so
    re-derivation after a restart reproduces the same seqs"), §7.1 ("Deletes never
    propagate through routers"), §12 invariant 1 (seqs of an `fsync` topic are never
    reused) and invariant 4/12 (no silent loss for a reader).

    Router a→b between two `fsync` topics, b written only by the router. Four records are
    forwarded (b: 1..4), then the source record behind b:2 is deleted (a normal, later
    delete) and one more record is forwarded (b:5). After a crash, re-derivation from the
    snapshot cursor skips the deleted source record, so every later copy lands one seq
    lower: b's head regresses 5 → 4 (seq 5 will be handed out again), x:2 moves from b:3
    to b:2, and a reader whose cursor is 3 silently misses x:3."""
    fs, clock = FaultFs(), ManualClock()
    e = open_engine(fs, clock=clock)
    e.put_topic("a", TopicConfig(durability=Durability.FSYNC))
    e.put_topic("b", TopicConfig(durability=Durability.FSYNC))
    e.put_router(RouterSpec("ab", "a", "b"))
    e.snapshot()
    e.write("a", [RecordIn.of({"x": i}, tag=f"t{i}") for i in range(4)])
    e.forwarder.forward_all()
    e.delete_records("a", match=Selector("Eq", "t1"))
    e.write("a", [RecordIn.of({"x": 9})])
    e.forwarder.forward_all()
    before = _datas(e, "b")
    assert sorted(before) == [1, 2, 3, 4, 5]
    img = image(fs, kind)
    abandon(e, fs)
    e2 = open_engine(img, clock=clock)
    try:
        assert _datas(e2, "b") == before
        assert e2.head_of("b") == 5
    finally:
        abandon(e2, img)


@pytest.mark.parametrize("kind", ["process", "power"])
def test_record_cap_evictions_of_router_copies_stay_after_the_cap_is_removed_and_a_crash(
    kind: ImageKind,
) -> None:
    """SEMANTICS §1.1 (a record is present or gone — evicted — never back), §4.1 (`E_inv`
    and `earliest_seq` never decrease within an instance), §12 invariant 4 (the reader
    that got the `cap` tombstone was told those seqs are gone), §2.2 (a config change is
    durable, and survives any crash).

    Router a→b between `fsync` topics; b has `cap_records: 2`. Four copies land in b (seqs
    1..4) and the cap evicts 1..2 (earliest_seq 3; record-cap floors are not logged, they
    are meant to re-derive from the head). Then b's cap is removed (a durable config
    change). After a crash the copies are re-derived at step 9 of recovery, *after* every
    ConfigUpdate of b was replayed, so they are appended under the final (uncapped)
    config: the evicted copies 1..2 come back and earliest_seq falls from 3 to 1. (Direct
    writes into b in the same sequence recover correctly: their Append frames replay
    in order with the ConfigUpdate frames.)"""
    fs, clock = FaultFs(), ManualClock()
    e = open_engine(fs, clock=clock)
    e.put_topic("a", TopicConfig(durability=Durability.FSYNC))
    e.put_topic("b", TopicConfig(durability=Durability.FSYNC, cap_records=2))
    e.put_router(RouterSpec("ab", "a", "b"))
    e.snapshot()
    e.write("a", [RecordIn.of({"x": i}) for i in range(4)])
    e.forwarder.forward_all()
    assert e.get_topic("b", touch=False).earliest_seq == 3
    e.put_topic("b", TopicConfig(durability=Durability.FSYNC))
    before = _datas(e, "b")
    assert sorted(before) == [3, 4]
    img = image(fs, kind)
    abandon(e, fs)
    e2 = open_engine(img, clock=clock)
    try:
        assert _datas(e2, "b") == before
        assert e2.get_topic("b", touch=False).earliest_seq == 3
    finally:
        abandon(e2, img)


@pytest.mark.parametrize("kind", ["process", "power"])
def test_record_cap_evictions_of_router_copies_stay_after_a_dest_delete_and_a_crash(
    kind: ImageKind,
) -> None:
    """Same invariants as above (SEMANTICS §1.1, §4.1, §4.2 step 2: the cap counts *live*
    records), reached without any config change.

    Router a→b between `fsync` topics; b has `cap_records: 2`. Four copies land in b
    (1..4); the cap evicts 1..2. Then a delete in b kills copy 3 (tag t1): b holds only
    seq 4. Recovery used to re-derive all four copies, apply b's logged delete after them
    and only then run the cap: with 3 dead, the live count was 3, so the cap evicted only
    seq 1 and the evicted copy at seq 2 came back. The delete (durable, `fsync`) now
    settles the router first, so it replays against the copies as they were."""
    fs, clock = FaultFs(), ManualClock()
    e = open_engine(fs, clock=clock)
    e.put_topic("a", TopicConfig(durability=Durability.FSYNC))
    e.put_topic("b", TopicConfig(durability=Durability.FSYNC, cap_records=2))
    e.put_router(RouterSpec("ab", "a", "b"))
    e.write("a", [RecordIn.of({"k": i}, tag=t) for i, t in enumerate(["x", "x", "t1", "x"], 1)])
    e.forwarder.forward_all()
    assert sorted(_datas(e, "b")) == [3, 4]
    assert e.delete_records("b", match=Selector("Eq", "t1")).deleted == 1
    before = _datas(e, "b")
    assert sorted(before) == [4]
    img = image(fs, kind)
    abandon(e, fs)
    e2 = open_engine(img, clock=clock)
    try:
        assert _datas(e2, "b") == before
    finally:
        abandon(e2, img)


def test_source_trim_holes_do_not_go_round_a_router_cycle_forever() -> None:
    """SEMANTICS §12 invariant 11 ("routers never loop forever"), §8.2 (a cycle is bounded by
    the hop count), §8.5 (drain "until no progress"), and clean-restart equivalence.

    Two routers a→b and b→a (`allow_cycle`), `a` capped at 1 record. Three writes into `a`
    make router a→b trim two holes into `b`; those raise b's `source_trim_floor`, so b→a
    trims holes into `a`, which raises a's floor, so a→b trims again, and so on: holes
    carry no hop count, so the cycle never settles. Without any further write, every
    drain grows both heads (by 66 each here) and a clean restart moves them by hundreds.
    Note: the literal text of §8.3 step 2 (trim whenever `E_inv > cursor + 1`, and E_inv
    includes `source_trim_floor`) produces this loop; the spec should say how holes stop
    in a cycle. The test asserts the invariant: with no writes, forwarding reaches a
    fixed point and a clean restart changes nothing."""
    fs, clock = FaultFs(), ManualClock()
    e = open_engine(fs, clock=clock)
    try:
        e.put_topic("a", TopicConfig(cap_records=1))
        e.put_topic("b", TopicConfig())
        e.put_router(RouterSpec("ab", "a", "b"))
        e.put_router(RouterSpec("ba", "b", "a", allow_cycle=True))
        e.write("a", [RecordIn.of({"x": i}) for i in range(3)])
        e.forwarder.forward_all()
        heads = (e.head_of("a"), e.head_of("b"))
        e.forwarder.forward_all()
        assert (e.head_of("a"), e.head_of("b")) == heads
        e.close()
        e = open_engine(fs, clock=clock)
        assert (e.head_of("a"), e.head_of("b")) == heads
    finally:
        if e.wal is not None:
            e.close(snapshot=False)
