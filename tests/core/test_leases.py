"""The lease state machine against a reference model (SEMANTICS §10), driven by random
operation sequences with an explicit clock."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from seglog.core.frame_bodies import LEASE_CLAIMED
from seglog.core.leases import COMPACT_MIN, Claimer, CountLive, LeaseBook, LeaseEvent, Live

NODES = ("a", "b", "c")
Op = tuple[Any, ...]


@dataclass
class World:
    """The jobs log the book sees, plus what the test itself remembers."""

    head: int = 0
    dead: set[int] = field(default_factory=set)
    events: list[LeaseEvent] = field(default_factory=list)
    # seq → (node, lease_id, deadline) as the test tracked it from grants and settlements
    holder: dict[int, tuple[str, int, int]] = field(default_factory=dict)
    acked: set[int] = field(default_factory=set)
    deliveries: dict[int, int] = field(default_factory=dict)
    dead_lettered: set[int] = field(default_factory=set)

    def live(self, seq: int) -> bool:
        return 1 <= seq <= self.head and seq not in self.dead


op = st.one_of(
    st.tuples(st.just("append"), st.integers(1, 5)),
    st.tuples(
        st.just("claim"),
        st.lists(st.tuples(st.sampled_from(NODES), st.integers(1, 4)), min_size=1, max_size=3),
    ),
    st.tuples(
        st.just("ack"),
        st.sampled_from(NODES),
        st.lists(st.integers(1, 30), max_size=4),
        st.booleans(),
    ),
    st.tuples(
        st.just("nack"),
        st.sampled_from(NODES),
        st.lists(st.integers(1, 30), max_size=4),
        st.integers(0, 3),
    ),
    st.tuples(
        st.just("extend"),
        st.sampled_from(NODES),
        st.lists(st.integers(1, 30), max_size=4),
        st.integers(1, 3),
    ),
    st.tuples(st.just("advance"), st.integers(0, 4)),
    st.tuples(st.just("evict"), st.integers(1, 30)),
)


def count_live(live: Live) -> CountLive:
    return lambda seqs: sum(1 for s in seqs if live(s))


def _expire(w: World, now: int) -> None:
    for seq, (_n, _l, deadline) in list(w.holder.items()):
        if now > deadline:
            del w.holder[seq]


def run(
    ops: list[Op], max_deliveries: int = 0, compact_min: int = COMPACT_MIN
) -> tuple[LeaseBook, World, int]:
    """`compact_min` 0: the deadline heap is compacted as soon as stale entries outnumber
    the leases, so short runs go through the compaction too."""
    book = LeaseBook(compact_min)
    w = World()
    now = 1_000
    lease_ms = 2
    for o in ops:
        kind = o[0]
        pushed = False  # this op pushed a deadline (a grant or an extend)
        _expire(w, now)
        if kind == "append":
            w.head += o[1]
        elif kind == "advance":
            now += o[1]
        elif kind == "evict":
            if o[1] <= w.head:
                w.dead.add(o[1])
        elif kind == "claim":
            cohort = [Claimer(n, m) for n, m in o[1]]
            out = book.claim(cohort, now, lease_ms, w.head, w.live, max_deliveries, True)
            w.events += out.events
            pushed = bool(out.grants)
            granted = [0] * len(cohort)
            for g in out.grants:
                # exactly one holder at any time, and never an acked or dead job
                assert g.seq not in w.holder, (g.seq, w.holder[g.seq])
                assert g.seq not in w.acked and g.seq not in w.dead_lettered
                assert w.live(g.seq)
                assert g.deliveries == w.deliveries.get(g.seq, 0) + 1
                assert g.deadline == now + lease_ms
                w.deliveries[g.seq] = g.deliveries
                w.holder[g.seq] = (cohort[g.claimer].node, g.lease_id, g.deadline)
                granted[g.claimer] += 1
            for seq in out.dead:
                assert w.deliveries.get(seq, 0) == max_deliveries
                w.dead_lettered.add(seq)
                w.dead.add(seq)  # the engine deletes it from the jobs log
                w.deliveries.pop(seq, None)
            assert all(g <= c.max for g, c in zip(granted, cohort, strict=True))
            # round-robin: a claimer short of its max got at most one less than anyone
            for i, c in enumerate(cohort):
                if granted[i] < c.max:
                    assert all(granted[j] <= granted[i] + 1 for j in range(len(cohort)))
        else:
            node, seqs = o[1], o[2]
            fences = [0] * len(seqs)
            if kind == "ack" and o[3]:
                fences = [w.holder[s][1] if s in w.holder else 7_777 for s in seqs]
            if kind == "ack":
                res = book.ack(node, seqs, fences, now)
            elif kind == "nack":
                res = book.nack(node, seqs, fences, now, o[3])
            else:
                res = book.extend(node, seqs, fences, now, o[3])
                pushed = bool(res.done)
            w.events += res.events
            seen: set[int] = set()
            for s in seqs:
                qualifies = (
                    s in w.holder and w.holder[s][0] == node and (kind == "extend" or s not in seen)
                )
                if qualifies:
                    seen.add(s)
                assert s in res.done or not qualifies, s
            assert len(res.done) + len(res.skipped) == len(seqs)
            if kind == "extend":  # the lease stays, so a repeated seq is extended again
                assert res.done == [s for s in seqs if s in seen]
            else:
                assert res.done == list(dict.fromkeys(s for s in seqs if s in seen))
            for s in res.done:
                if kind == "ack":
                    del w.holder[s]
                    w.acked.add(s)
                    w.dead.add(s)
                    w.deliveries.pop(s, None)
                elif kind == "nack":
                    del w.holder[s]
                else:
                    n, lid, _ = w.holder[s]
                    w.holder[s] = (n, lid, now + o[3])
                    assert res.deadlines[s] == now + o[3]
        _expire(w, now)
        # expiry is lazy: a lease past its deadline may linger until the next transition
        assert {s for s, x in book.leases.items() if now <= x.deadline} == set(w.holder)
        for s, (n, lid, dl) in w.holder.items():
            lease = book.leases[s]
            assert (lease.node, lease.lease_id, lease.deadline) == (n, lid, dl)
        if pushed:  # right after a push (an ack drops leases, not their heap entries)
            assert book.deadline_entries() <= max(compact_min, 2 * len(book.leases)) + 1
    return book, w, now


compaction = st.sampled_from([0, COMPACT_MIN])


@given(st.lists(op, max_size=40), st.integers(0, 3), compaction)
def test_one_holder_per_job_and_acked_jobs_never_return(
    ops: list[Op], md: int, compact_min: int
) -> None:
    run(ops, md, compact_min)


@given(st.lists(op, max_size=40), compaction)
def test_after_every_lease_and_delay_ran_out_every_live_unacked_job_is_claimable(
    ops: list[Op], compact_min: int
) -> None:
    book, w, now = run(ops, compact_min=compact_min)
    now += 10  # past every deadline (lease 2..5 ms) and nack delay (≤ 3 ms)
    c = book.counts(now, sum(1 for s in range(1, w.head + 1) if w.live(s)), count_live(w.live))
    assert c.in_flight == 0
    out = book.claim([Claimer("z", 1000)], now, 100, w.head, w.live)
    got = [g.seq for g in out.grants]
    assert sorted(got) == [s for s in range(1, w.head + 1) if w.live(s)]
    assert c.ready == len(got)
    assert len(set(got)) == len(got)


@given(st.lists(op, max_size=40))
def test_counts_partition_the_live_jobs(ops: list[Op]) -> None:
    book, w, now = run(ops)
    live = [s for s in range(1, w.head + 1) if w.live(s)]
    c = book.counts(now, len(live), count_live(w.live))
    delayed = {s for s, at in book.delayed().items() if s not in book.leases and w.live(s)}
    assert c.in_flight == sum(1 for s in book.leases if w.live(s))
    assert c.ready + c.in_flight + len(delayed) == len(live)


@given(st.lists(op, max_size=40), compaction)
def test_replaying_the_leases_log_rebuilds_the_leases(ops: list[Op], compact_min: int) -> None:
    book, w, now = run(ops, compact_min=compact_min)
    fresh = LeaseBook()
    for ev in w.events:
        fresh.replay(ev)
    book.sweep(now)
    fresh.sweep(now)
    assert {s: (x.node, x.lease_id, x.deadline) for s, x in fresh.leases.items()} == {
        s: (x.node, x.lease_id, x.deadline) for s, x in book.leases.items()
    }
    for s in book.leases:
        assert fresh.deliveries[s] == book.deliveries[s]
    assert fresh.next_lease_id == max(
        [e.lease_id + 1 for e in w.events if e.event == LEASE_CLAIMED], default=1
    )
    assert fresh.delayed() == book.delayed()


def test_settled_leases_do_not_pile_up_in_the_deadline_heap() -> None:
    """A busy queue settles a lease window of claims (here 50,000 within one 30-s lease):
    their heap entries go once they outnumber the leases, and expiry still works."""
    book = LeaseBook()
    now, head = 1_000, 50_000
    for _ in range(head // 10):
        now += 1
        out = book.claim([Claimer("w", 10)], now, 30_000, head, lambda s: True)
        assert len(out.grants) == 10
        book.ack("w", [g.seq for g in out.grants], [g.lease_id for g in out.grants], now)
        assert book.deadline_entries() <= COMPACT_MIN + 1
    held = book.claim([Claimer("w", 3)], now, 5, head + 3, lambda s: True)
    assert [g.seq for g in held.grants] == [head + 1, head + 2, head + 3]
    assert book.sweep(now + 6) == [head + 1, head + 2, head + 3]  # expired, reclaimable
    assert book.reclaimable() == [head + 1, head + 2, head + 3]


def test_a_compacted_heap_keeps_every_live_lease_due() -> None:
    book = LeaseBook(compact_min=0)
    out = book.claim([Claimer("w", 10)], 1_000, 5, 11, lambda s: True)
    acked = [g for g in out.grants if g.seq > 2]
    book.ack("w", [g.seq for g in acked], [g.lease_id for g in acked], 1_000)
    assert book.deadline_entries() == 10  # eight of them stale
    book.claim([Claimer("w", 1)], 1_001, 5, 11, lambda s: True)  # seq 11: compacts first
    assert book.deadline_entries() == 3
    assert sorted(book.sweep(1_007)) == [1, 2, 11]


def test_reclaimed_work_comes_before_fresh_work() -> None:
    book = LeaseBook()
    live = lambda s: True  # noqa: E731
    first = book.claim([Claimer("a", 3)], 0, 100, 10, live)
    assert [g.seq for g in first.grants] == [1, 2, 3]
    book.nack("a", [3, 2], [], 0, 0)
    again = book.claim([Claimer("b", 4)], 0, 100, 10, live)
    assert [(g.seq, g.deliveries) for g in again.grants] == [(2, 2), (3, 2), (4, 1), (5, 1)]


def test_expiry_is_the_visibility_timeout() -> None:
    book = LeaseBook()
    live = lambda s: True  # noqa: E731
    book.claim([Claimer("a", 1)], 0, 100, 1, live)
    assert book.claim([Claimer("b", 1)], 100, 100, 1, live).grants == []  # now == deadline: held
    again = book.claim([Claimer("b", 1)], 101, 100, 1, live)
    assert [(g.seq, g.deliveries) for g in again.grants] == [(1, 2)]
    assert book.ack("a", [1], [], 101).skipped == [1]  # the late worker lost it


def test_nack_delay_holds_the_job_back_until_due() -> None:
    book = LeaseBook()
    live = lambda s: True  # noqa: E731
    book.claim([Claimer("a", 1)], 0, 1000, 1, live)
    book.nack("a", [1], [], 0, 50)
    assert book.claim([Claimer("a", 1)], 49, 1000, 1, live).grants == []
    assert book.counts(49, 1, count_live(live)).ready == 0
    assert [g.seq for g in book.claim([Claimer("a", 1)], 50, 1000, 1, live).grants] == [1]


def test_max_deliveries_diverts_instead_of_leasing() -> None:
    book = LeaseBook()
    live = lambda s: True  # noqa: E731
    for t in range(2):
        assert [g.seq for g in book.claim([Claimer("a", 1)], t * 10, 5, 1, live).grants] == [1]
        book.nack("a", [1], [], t * 10, 0)
    out = book.claim([Claimer("a", 1)], 20, 5, 1, live, max_deliveries=2, dead_letter=True)
    assert out.grants == [] and out.dead == [1] and book.dead_lettered == 1
    book.undo_dead_letter([1])
    assert book.dead_lettered == 0 and book.reclaimable() == [1]
    # the failed divert keeps the count (SEMANTICS §10.1): the job is diverted again, never
    # leased once more as if it had been delivered fewer times
    for t in (30, 40):
        out = book.claim([Claimer("a", 1)], t, 5, 1, live, max_deliveries=2, dead_letter=True)
        assert out.grants == [] and out.dead == [1], out
        book.undo_dead_letter([1])
    out = book.claim([Claimer("a", 1)], 50, 5, 1, live, max_deliveries=2, dead_letter=True)
    assert out.dead == [1]
    book.diverted([1])
    assert 1 not in book.deliveries


def test_cohort_shares_jobs_evenly() -> None:
    book = LeaseBook()
    out = book.claim([Claimer(f"n{i}", 10) for i in range(10)], 0, 100, 50, lambda s: True)
    per = [sum(1 for g in out.grants if g.claimer == i) for i in range(10)]
    assert per == [5] * 10


def test_fence_mismatch_is_skipped() -> None:
    book = LeaseBook()
    g = book.claim([Claimer("a", 1)], 0, 100, 1, lambda s: True).grants[0]
    assert book.ack("a", [1], [g.lease_id + 1], 0).skipped == [1]
    assert book.ack("b", [1], [0], 0).skipped == [1]
    assert book.ack("a", [1], [g.lease_id], 0).done == [1]
    assert book.ack("a", [1], [0], 0).skipped == [1]  # re-acking is harmless


def test_disconnect_releases_only_that_connections_leases() -> None:
    book = LeaseBook()
    live = lambda s: True  # noqa: E731
    book.claim([Claimer("a", 2, conn=7), Claimer("a", 1)], 0, 100, 3, live)
    assert book.held_by_conn(7) == 2
    events = book.release_conn(7)
    assert [e.seq for e in events] == [1, 3]
    assert set(book.leases) == {2} and book.reclaimable() == [1, 3]
    assert book.held_by_conn(7) == 0


def test_a_settle_names_the_work_connections_whose_leases_it_settled() -> None:
    book = LeaseBook()
    live = lambda s: True  # noqa: E731
    # round robin: seqs 1, 4 to the stream on conn 7, 2 to a polling claim, 3 to conn 9
    book.claim([Claimer("a", 2, conn=7), Claimer("a", 1), Claimer("a", 1, conn=9)], 0, 100, 4, live)
    assert book.ack("a", [2], [0], 0).conns == set()  # a polling claim's job
    assert book.ack("a", [1, 4, 99], [0, 0, 0], 0).conns == {7}  # 99: skipped, no lease
    assert book.nack("a", [3], [0], 0, 0).conns == {9}
