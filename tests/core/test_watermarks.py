from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from seglog.core.watermarks import (
    Floors,
    byte_cap_cut,
    earliest_above,
    earliest_seq,
    involuntary_floor,
    record_cap_cut,
    tombstone_for,
    ttl_cut,
)
from seglog.model import TombstoneReason


def test_fresh_topic_has_no_tombstone() -> None:
    t, pos = tombstone_for(0, Floors(), 1, 0)
    assert t is None and pos == 0


def test_cap_gap_yields_one_tombstone_with_authoritative_range() -> None:
    f = Floors(evict_floor=3)
    t, pos = tombstone_for(0, f, 4, 6)
    assert t is not None
    assert (t.gap_from, t.gap_to, t.reason, t.missed_estimate) == (1, 3, TombstoneReason.CAP, 3)
    assert (t.earliest_seq, t.head_seq) == (4, 6)
    assert pos == 3


def test_deleted_gap_is_silent_but_moves_walk_start_only_through_floor() -> None:
    f = Floors(delete_floor=10)
    t, pos = tombstone_for(2, f, 1, 20)
    assert t is None and pos == 2
    assert earliest_seq(f, 1, 20) == 11


def test_future_cursor_is_recreated() -> None:
    t, pos = tombstone_for(50, Floors(), 1, 0)
    assert t is not None and t.reason is TombstoneReason.RECREATED
    assert (t.gap_from, t.gap_to, t.missed_estimate) == (1, 0, 1)
    assert pos == 0


def test_reason_mixed_ttl_and_source_trim() -> None:
    assert (
        tombstone_for(0, Floors(evict_floor=5, expiry_floor=3), 1, 9)[0].reason
        is TombstoneReason.MIXED
    )  # type: ignore[union-attr]
    assert tombstone_for(0, Floors(expiry_floor=3), 1, 9)[0].reason is TombstoneReason.TTL  # type: ignore[union-attr]
    assert (
        tombstone_for(4, Floors(evict_floor=3, expiry_floor=6), 1, 9)[0].reason
        is TombstoneReason.TTL
    )  # type: ignore[union-attr]
    assert (
        tombstone_for(0, Floors(source_trim_floor=2), 1, 9)[0].reason is TombstoneReason.SOURCE_TRIM
    )  # type: ignore[union-attr]


@given(
    st.integers(0, 50),
    st.integers(0, 50),
    st.integers(0, 50),
    st.integers(0, 50),
    st.integers(1, 60),
    st.integers(0, 60),
)
def test_involuntary_floor_never_exceeds_earliest(
    ev: int, ex: int, tr: int, de: int, base: int, head: int
) -> None:
    f = Floors(ev, ex, tr, de)
    base = min(base, head + 1)
    assert involuntary_floor(f, head) <= earliest_seq(f, base, head) <= head + 1


@given(st.integers(0, 60), st.integers(0, 60), st.integers(0, 30), st.integers(0, 30))
def test_tombstone_iff_cursor_below_involuntary_floor(
    cursor: int, head: int, ev: int, de: int
) -> None:
    f = Floors(evict_floor=min(ev, head), delete_floor=min(de, head))
    t, pos = tombstone_for(cursor, f, 1, head)
    e_inv = involuntary_floor(f, head)
    if cursor > head:
        assert t is not None and t.reason is TombstoneReason.RECREATED
    elif cursor + 1 < e_inv:
        assert t is not None and t.gap_from == cursor + 1 and t.gap_to == e_inv - 1
        assert pos >= t.gap_to
    else:
        assert t is None and pos == cursor


def test_retention_cut_helpers() -> None:
    ts = [10, 10, 20, 30, 40]
    assert ttl_cut(ts, 0, 5, now=45, ttl_ms=20) == 3  # 10, 10, 20 are older than 25
    assert ttl_cut(ts, 0, 5, now=45, ttl_ms=100) == 0
    assert byte_cap_cut([5, 5, 5, 5], 0, 4, excess=7) == 2
    assert byte_cap_cut([5, 5, 5, 5], 0, 4, excess=7) == 2
    assert byte_cap_cut([5, 5], 0, 2, excess=0) == 0


def test_record_cap_counts_live_slots_not_seq_distance() -> None:
    dead = bytearray([1, 0, 1, 1, 0, 0, 1, 0])  # live at 1, 4, 5, 7
    assert record_cap_cut(dead, 0, 8, excess=0) == -1
    assert record_cap_cut(dead, 0, 8, excess=1) == 1
    assert record_cap_cut(dead, 0, 8, excess=2) == 4  # the holes at 2, 3 cost nothing
    assert record_cap_cut(dead, 0, 8, excess=3) == 5
    assert record_cap_cut(dead, 2, 8, excess=1) == 4
    # a run of 256 padding holes at the head never evicts the live records below it
    padded = bytearray([0] * 100 + [1] * 256)
    assert record_cap_cut(padded, 0, len(padded), excess=0) == -1


@given(st.lists(st.booleans(), max_size=60), st.integers(0, 70))
def test_record_cap_cut_keeps_exactly_the_newest_live(dead_flags: list[bool], cap: int) -> None:
    dead = bytearray(int(d) for d in dead_flags)
    live = [i for i, d in enumerate(dead_flags) if not d]
    cut = record_cap_cut(dead, 0, len(dead), len(live) - cap)
    kept = [i for i in live if i > cut]
    assert kept == live[-cap:] if cap else kept == []


@given(
    st.integers(0, 50),
    st.integers(0, 50),
    st.integers(0, 50),
    st.integers(0, 50),
    st.integers(1, 60),
    st.integers(0, 60),
)
def test_earliest_seq_is_the_documented_formula(
    ev: int, ex: int, tr: int, de: int, base: int, head: int
) -> None:
    """`earliest_seq = min(H + 1, max(base_seq, clamp(max(floors) + 1, 1, H + 1)))`, the
    same whether asked with the floors or with their highest (`earliest_above`)."""
    clamp = min(max(max(ev, ex, tr, de) + 1, 1), head + 1)
    expected = min(head + 1, max(base, clamp))
    assert earliest_seq(Floors(ev, ex, tr, de), base, head) == expected
    assert earliest_above(max(ev, ex, tr, de), base, head) == expected
