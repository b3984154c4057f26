"""The banded weighted-fair queue (SEMANTICS §11): coalescing, band weights, aging, bounded
deferral, and that nothing queued is ever lost or served twice."""

from __future__ import annotations

from collections import Counter

from hypothesis import given, settings
from hypothesis import strategies as st

from seglog.core.scheduler import (
    BAND_WEIGHTS,
    DEFER_LIMIT_MS,
    BandedQueue,
    aged,
    band_of,
)


def test_band_boundaries() -> None:
    assert [band_of(p) for p in (-1000, -1, 0, 249, 250, 499, 500, 749, 750, 1000, 2000)] == [
        0, 0, 1, 1, 2, 2, 3, 3, 4, 4, 4,
    ]  # fmt: skip


def test_aging_is_100_per_second_capped_at_1000() -> None:
    assert aged(0, 0) == 0
    assert aged(0, 1000) == 100
    assert aged(-500, 2500) == -250
    assert aged(0, 60_000) == 1000


def test_push_coalesces_until_popped() -> None:
    q = BandedQueue()
    assert q.push("a", 0, 0)
    assert not q.push("a", 900, 0)  # already queued: one entry, whatever its priority now
    assert len(q) == 1
    assert q.pop(0) == "a"
    assert q.pop(0) is None
    assert q.push("a", 0, 1)


def test_weighted_round_robin_shares() -> None:
    """With every band backlogged, one full round serves 8/4/2/1/1 from bands 4..0."""
    q = BandedQueue()
    prio = {4: 800, 3: 600, 2: 300, 1: 100, 0: -100}
    for band, p in prio.items():
        for i in range(40):
            q.push(f"b{band}-{i}", p, 0)
    served = Counter(int(q.pop(0).split("-")[0][1:]) for _ in range(16 * 2))  # type: ignore[union-attr]
    assert served == {b: 2 * w for b, w in enumerate(BAND_WEIGHTS)}


def test_low_band_is_never_starved_by_a_stream_of_high_priority_work() -> None:
    q = BandedQueue()
    q.push("low", -1000, 0)
    for i in range(100):
        q.push(f"hi-{i}", 1000, 0)
    popped = [q.pop(0) for _ in range(sum(BAND_WEIGHTS))]
    assert "low" in popped


def test_aging_promotes_the_oldest_entry() -> None:
    q = BandedQueue()
    q.push("old", 100, 0)  # band 1
    assert q.depths() == (0, 1, 0, 0, 0)
    q.push("fresh", 300, 3000)  # band 2
    # After 3 s the old entry is worth 100 + 300 = 400: band 2, queued behind "fresh".
    assert q.pop(3000) == "fresh"
    assert q.depths() == (0, 0, 1, 0, 0)
    assert q.pop(3000) == "old"


def test_deferral_below_min_band_is_bounded() -> None:
    q = BandedQueue()
    q.push("low", 0, 0)
    q.push("high", 800, 0)
    assert q.pop(10, min_band=2) == "high"
    assert q.pop(10, min_band=2) is None  # deferred
    assert "low" in q
    assert q.pop(DEFER_LIMIT_MS, min_band=2) == "low"  # waited long enough: served anyway


def test_discard() -> None:
    q = BandedQueue()
    q.push("a", 0, 0)
    q.push("b", 0, 0)
    q.discard("a")
    q.discard("zzz")
    assert q.pop(0) == "b"
    assert q.pop(0) is None


ops = st.lists(
    st.one_of(
        st.tuples(st.just("push"), st.sampled_from("abcdefgh"), st.integers(-1500, 1500)),
        st.tuples(st.just("pop"), st.integers(0, 4), st.just(0)),
        st.tuples(st.just("tick"), st.integers(0, 3000), st.just(0)),
    ),
    max_size=200,
)


@settings(max_examples=300)
@given(ops)
def test_every_queued_key_is_served_exactly_once(script: list[tuple[str, object, int]]) -> None:
    q = BandedQueue()
    now = 0
    queued: set[str] = set()
    for op, arg, prio in script:
        if op == "push":
            assert isinstance(arg, str)
            assert q.push(arg, prio, now) == (arg not in queued)
            queued.add(arg)
        elif op == "pop":
            assert isinstance(arg, int)
            key = q.pop(now, min_band=arg)
            if key is not None:
                assert key in queued
                queued.remove(key)
        else:
            assert isinstance(arg, int)
            now += arg
        assert len(q) == len(queued) == sum(q.depths())
    # Draining with time passing serves everything left, each once, whatever min_band.
    now += DEFER_LIMIT_MS
    rest = []
    while (key := q.pop(now, min_band=4)) is not None:
        rest.append(key)
    assert sorted(rest) == sorted(queued)
