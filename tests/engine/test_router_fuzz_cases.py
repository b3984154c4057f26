"""Router copies across a crash, shrunk from a differential fuzzer of routers and queues:
re-derived copies may land at other seqs (a filtered source that expired, a source
delete while the router was held back, a middle topic taking direct writes), and no
delete or ack may then meet another record (SEMANTICS §7.1, §8.4, §10.4, §12 invariant 7).
Such deletes, being durable, settle the routers in a snapshot first."""

from __future__ import annotations

import pytest

from seglog.clock import ManualClock
from seglog.core.leases import Claimer
from seglog.model import Discard, Durability, RecordIn, Selector, TopicConfig, TopicType
from seglog.router_model import RouterSpec
from tests.engine.oracle import IMAGES, ImageKind, abandon, image, open_engine, read_all
from tests.support.faultfs import FaultFs


@pytest.mark.parametrize("kind", IMAGES)
def test_an_ack_never_kills_another_job_when_a_filtered_source_expired_before_a_crash(
    kind: ImageKind,
) -> None:
    """SEMANTICS §10.4 (an ack deletes exactly the acked seq), §12 invariants 3 and 7, §8.4
    (the k-th copy lands at `dest_base + k` again); docs/storage.md: deletes of copies past
    the replayed head apply "only where the copies land at their seqs again". s (TTL 4 s)
    → q through a `tag = t` filter, q an `fsync` queue fed only by the router. x (t) is
    forwarded to q@1, y (u) is filtered out (no dest seq); x and y expire in s; z, z2 are
    forwarded to q@2, q@3; z2 is acked (fsynced). After a crash, re-derivation starts at the
    snapshot's cursor and turns the two expired source seqs into two `source_trim` holes
    (q@1, q@2) — one more dest seq than the live path used — so z lands at q@3, z2 at q@4;
    the recovery's check before re-applying deletes by seq (since removed) still sees head == dest_base + forwarded_total and the ack of
    q@3 is applied to z: the unacked job z is deleted, the acked job z2 is claimable again
    (and the live job x is gone)."""
    clock, fs = ManualClock(), FaultFs()
    e = open_engine(fs, clock=clock)
    e.put_topic("s", TopicConfig(durability=Durability.FSYNC, ttl_ms=4000))
    e.put_topic("q", TopicConfig(type=TopicType.QUEUE, durability=Durability.FSYNC))
    e.put_router(RouterSpec("r", "s", "q", filter=Selector.parse(["tag", "Eq", "t"])))
    e.snapshot()
    e.write("s", [RecordIn.of("x", tag="t"), RecordIn.of("y", tag="u")])
    e.forwarder.forward_all()
    clock.advance(5000)
    e.write("s", [RecordIn.of("z", tag="t"), RecordIn.of("z2", tag="t")])
    e.forwarder.forward_all()
    jobs = e.queues.claim("q", [Claimer("w", 5)], None).jobs[0]
    assert [(j.record.seq, j.record.data) for j in jobs] == [(1, "x"), (2, "z"), (3, "z2")]
    assert e.queues.ack("q", "w", [3], []).done == [3]
    assert {s: r.data for s, r in read_all(e, "q").items()} == {1: "x", 2: "z"}
    img = image(fs, kind)
    abandon(e, fs)
    e2 = open_engine(img, clock=clock)
    try:
        again = [j.record.data for j in e2.queues.claim("q", [Claimer("w", 5)], None).jobs[0]]
        assert "z" in again, f"unacked job z deleted by the ack of another job; claimable: {again}"
    finally:
        e2.close(snapshot=False)


@pytest.mark.parametrize("kind", IMAGES)
def test_a_delete_down_a_chain_never_kills_another_copy_when_the_middle_topic_takes_writes(
    kind: ImageKind,
) -> None:
    """SEMANTICS §7.1 / §12 invariant 7 (a delete removes what it named), §8.2 (a dest may
    take direct writes), §8.4; docs/storage.md ("deletes of copies past the replayed head
    apply ... only where the copies land at their seqs again ... a delete by seq would
    otherwise kill another record"). s → b → c, all `fsync`; b also takes a direct write.
    Live: a is forwarded to b@1, then x is written to b@2, and bc copies both: c@1 = a,
    c@2 = x. The client deletes c@1 (the copy of a; fsynced). After a crash b replays x at
    b@2 and re-derives a at b@3, so bc re-derives x into c@1 and a into c@2 — c's own router
    still "lands where it ends" (the recovery's check before re-applying deletes by seq (since removed) looks at c only), the delete
    of c@1 is applied to x's copy, and a comes back: c holds {2: a} instead of {2: x}."""
    clock, fs = ManualClock(), FaultFs()
    e = open_engine(fs, clock=clock)
    for t in ("s", "b", "c"):
        e.put_topic(t, TopicConfig(durability=Durability.FSYNC))
    e.put_router(RouterSpec("sb", "s", "b"))
    e.put_router(RouterSpec("bc", "b", "c"))
    e.snapshot()
    e.write("s", [RecordIn.of("a")])
    e.forwarder.forward_all()
    e.write("b", [RecordIn.of("x")])
    e.forwarder.forward_all()
    assert {s: r.data for s, r in read_all(e, "c").items()} == {1: "a", 2: "x"}
    e.delete_records("c", seqs=[1])
    assert {s: r.data for s, r in read_all(e, "c").items()} == {2: "x"}
    img = image(fs, kind)
    abandon(e, fs)
    e2 = open_engine(img, clock=clock)
    try:
        e2.forwarder.forward_all()
        got = sorted(r.data for r in read_all(e2, "c").values())
        # x's copy must survive (its source b@2 is recovered); a may come back (at least once)
        assert "x" in got, f"the delete of c@1 (a's copy) killed x's copy after a crash: c = {got}"
    finally:
        e2.close(snapshot=False)


@pytest.mark.parametrize("kind", IMAGES)
def test_a_dest_delete_never_kills_another_copy_after_a_held_back_source_delete_and_eviction(
    kind: ImageKind,
) -> None:
    """SEMANTICS §7.1 / §12 invariant 7, §8.3 step 3 (a deleted source record is consumed
    without a dest seq), §8.4 (the k-th copy lands at `dest_base + k` again); docs/storage.md
    ("a delete on a topic a router reads settles the router first"). s → d, d reject-capped
    at 1, so after a → d@1 the router is held back. b is deleted in s while the router
    cannot move (the settle forwards nothing, takes no snapshot); the cap is lifted and c is
    forwarded to d@2 (b consumed without a dest seq); s is capped at 2 and x, y land at d@3,
    d@4, evicting b and c from s. The client deletes d@4 (y). After a crash the snapshot's
    cursor is before b, and the eviction floor turns b *and* c into two trim holes — one
    more dest seq than the live path used — so x re-derives at d@4, where the delete of y
    is applied (head == dest_base + forwarded_total still holds): x is killed, y is back."""
    clock, fs = ManualClock(), FaultFs()
    e = open_engine(fs, clock=clock)
    e.put_topic("s", TopicConfig(durability=Durability.FSYNC))
    e.put_topic(
        "d", TopicConfig(durability=Durability.FSYNC, cap_records=1, discard=Discard.REJECT)
    )
    e.put_router(RouterSpec("r", "s", "d"))
    e.write("s", [RecordIn.of("a")])
    e.forwarder.forward_all()  # d@1 = a; d is full
    e.snapshot()
    e.write("s", [RecordIn.of("b"), RecordIn.of("c")])
    e.forwarder.forward_all()  # held back by d's cap
    e.delete_records("s", seqs=[2])  # b, never forwarded
    e.put_topic("d", TopicConfig(durability=Durability.FSYNC))
    e.put_topic("s", TopicConfig(durability=Durability.FSYNC, cap_records=2))
    e.forwarder.forward_all()  # b skipped, c → d@2
    e.write("s", [RecordIn.of("x"), RecordIn.of("y")])  # evicts b and c from s
    e.forwarder.forward_all()  # x → d@3, y → d@4
    assert {s: r.data for s, r in read_all(e, "d").items()} == {1: "a", 2: "c", 3: "x", 4: "y"}
    e.delete_records("d", seqs=[4])  # y
    img = image(fs, kind)
    abandon(e, fs)
    e2 = open_engine(img, clock=clock)
    try:
        e2.forwarder.forward_all()
        got = sorted(r.data for r in read_all(e2, "d").values())
        assert "x" in got, f"the delete of d@4 (y) killed x after a {kind} crash: d = {got}"
    finally:
        e2.close(snapshot=False)
