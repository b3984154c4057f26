"""The frozen columns (`FrozenSlots`) are a storage form of the slot index, not a behaviour:
a topic whose oldest payload-less slots moved into them answers every question exactly as
the same topic whose slots all stayed in the list columns — reads (TTL, node filter, byte
budget), retention cuts, pops and compaction, deletes, the tag index, columns, sizes and
`ts` searches — through any interleaving of writes, holes, deletes, payload drops and
floors."""

from __future__ import annotations

import tracemalloc
from bisect import bisect_left, bisect_right
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from seglog.engine.column_read import select_slots
from seglog.engine.frozen_slots import HEAP, FrozenSlots, TsColumn
from seglog.engine.topic import TopicState, first_payload
from seglog.model import RecordBatch, RecordIn, Selector, TopicConfig
from seglog.storage.scratch import ScratchSpace

TAGS = [None, "a", "ab", "b"]
NODES = [None, "n1", "n2"]
SELECTORS = [Selector("Eq", "a"), Selector("Glob", "a"), Selector("Eq", "b")]
CONFIGS = [
    TopicConfig(),
    TopicConfig(cap_records=40),
    TopicConfig(cap_bytes=600),
    TopicConfig(ttl_ms=50),
    TopicConfig(cap_records=25, cap_bytes=900, ttl_ms=80),
]

RECORD = st.tuples(st.sampled_from(TAGS), st.sampled_from(NODES), st.integers(0, 40), st.booleans())
OPS = st.lists(
    st.one_of(
        st.tuples(
            st.just("write"),
            st.tuples(st.integers(0, 5), st.lists(RECORD, min_size=1, max_size=12)),
        ),
        st.tuples(
            st.just("write"), st.tuples(st.just(1), st.lists(RECORD, min_size=20, max_size=40))
        ),
        st.tuples(st.just("holes"), st.integers(1, 6)),
        st.tuples(st.just("kill"), st.lists(st.integers(0, 200), max_size=5)),
        st.tuples(
            st.just("delete_tag"), st.tuples(st.sampled_from(SELECTORS), st.integers(0, 200))
        ),
        st.tuples(st.just("delete_below"), st.integers(0, 200)),
        st.tuples(st.just("drop"), st.integers(0, 100)),
        st.tuples(st.just("drop"), st.just(100)),
        st.tuples(st.just("retain"), st.integers(0, 120)),
        st.tuples(st.just("compact"), st.just(0)),
        st.tuples(st.just("query"), st.sampled_from(SELECTORS)),
    ),
    max_size=40,
)


class _NeverFrozen(TopicState):
    """Every slot stays in the list columns: the reference."""

    def _freeze(self, known: int = 0) -> None:
        return None


class _Clock:
    now = 1_000


def apply(t: TopicState, op: str, arg: Any, clock: _Clock) -> None:
    if op == "write":
        step, recs = arg
        clock.now += step
        records = [
            RecordIn.of({"v": "x" * n}, tag=tag, node=node, meta={"m": 1} if m else None)
            for tag, node, n, m in recs
        ]
        t.publish_batch(t.head + 1, clock.now, RecordBatch.of(records))
    elif op == "holes":
        t.append_holes(t.head + arg, clock.now)
    elif op == "kill":
        t.apply_delete(None, None, 0, [s for s in arg if 0 < s <= t.head])
    elif op == "delete_tag":
        sel, bound = arg
        t.apply_delete(None, sel, bound)
    elif op == "delete_below":
        t.apply_delete(arg, None, t.head + 1)
    elif op == "drop":  # the payloads of the oldest `arg` % of the slots leave memory
        t.drop_payloads(0, t.slot_count * arg // 100)
    elif op == "retain":
        clock.now += arg
        cut = t.retention_cut(clock.now)
        if cut is not None:
            t.apply_cut(cut)
    elif op == "compact":
        if t.front:
            t._compact()
    elif op == "query":
        t.tag_matches(arg, t.head + 1)


def observe(t: TopicState, clock: _Clock) -> dict[str, Any]:
    n = t.slot_count
    reads = []
    for cursor in sorted({0, t.base_seq - 1, (t.base_seq + t.head) // 2, max(t.head - 3, 0)}):
        for limit, nodes, budget in ((1, frozenset(), 1 << 20), (7, frozenset({"n1"}), 90)):
            recs, missing, pos, tomb, scanned = t.read(cursor, limit, nodes, budget, clock.now)
            reads.append(([(r.seq, r.data_json) for r in recs], missing, pos, tomb, scanned))
        sel = select_slots(t, cursor, 5, 120, clock.now, False)
        if sel is not None:
            c = sel.columns
            reads.append((c.seq, c.ts, c.node, c.tag, c.data, c.meta, sel.missing))
            reads.append((sel.next_from_seq, sel.tombstone, sel.scanned))
    return {
        "state": (t.origin, t.front, t.head, t.count, t.bytes, t.floors(), bytes(t.dead)),
        "columns": t.columns(0, n),
        "picked": t.pick_columns(list(range(t.front, n, 3))),
        "reads": reads,
        "tags": {k: list(v) for k, v in t.tags.items()},
        "matches": [t.tag_matches(s, t.head + 1) for s in SELECTORS],
        "live": t.live_runs(),
        "sizes": [t.size_sum(a, n) for a in range(0, n, 7)],
        "bisect": [
            (t.ts_bisect(v), t.ts_bisect(v, right=True))
            for v in (0, clock.now - 30, clock.now, clock.now + 1)
        ]
        if t.front < n
        else [],
        "cut": t.retention_cut(clock.now + 60),
        # the two cut walks at every boundary: each ts (and one past it), sizes by steps
        "ttl": [
            t._ttl_cut(t.front, n, ts + 10 + d, 10)
            for ts in set(t.columns(0, n)[0])
            for d in (0, 1)
        ],
        "bytes": [t._byte_cap_cut(t.front, n, e) for e in range(0, t.size_sum(0, n) + 20, 9)],
        "last_ts": t.last_ts(),
        "slots": [t.slot(s) for s in range(t.base_seq, t.head + 1)],
    }


@pytest.fixture(scope="module")
def scratch(tmp_path_factory: pytest.TempPathFactory) -> ScratchSpace:
    """Scratch memory for every column, however small (`storage.scratch`)."""
    return ScratchSpace.create(tmp_path_factory.mktemp("data"), min_bytes=0)


@settings(
    max_examples=250, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    ops=OPS,
    config=st.sampled_from(CONFIGS),
    ts_block_bits=st.sampled_from([1, 3, 12]),
    in_scratch=st.booleans(),
)
def test_frozen_slots_answer_like_list_slots(
    scratch: ScratchSpace,
    ops: list[tuple[str, Any]],
    config: TopicConfig,
    ts_block_bits: int,
    in_scratch: bool,
) -> None:
    frozen, listed = TopicState("t", 1, config), _NeverFrozen("t", 1, config)
    # small blocks: many per test; the columns in heap or in scratch memory
    frozen.frozen = FrozenSlots(ts_block_bits, scratch if in_scratch else HEAP)
    clocks = _Clock(), _Clock()
    for op, arg in ops:
        for t, clock in zip((frozen, listed), clocks, strict=True):
            apply(t, op, arg, clock)
        assert observe(frozen, clocks[0]) == observe(listed, clocks[1]), op
    assert listed.frozen.n == 0


def test_payload_drops_move_the_prefix_and_only_it() -> None:
    t = TopicState("t", 1, TopicConfig())
    t.publish_batch(1, 5, RecordBatch.of([RecordIn.of(i, tag="k") for i in range(10)]))
    t.drop_payloads(3, 6)  # not a prefix: nothing moves
    assert t.frozen.n == 0 and not t.has_payload(4) and t.has_payload(1)
    t.drop_payloads(0, 3)
    assert t.frozen.n == 6 and [t.has_payload(s) for s in (6, 7)] == [False, True]
    assert t.slot(2) == (5, None, None, None, "k") and t.slot(7)[1] == b"6"
    t.kill(2)
    assert t.count == 9 and t.size_sum(0, 10) == 9


def test_the_label_table_forgets_labels_no_slot_uses() -> None:
    """Unique tags (an order id per record) on a capped topic: the table follows the
    slots, not every tag ever frozen, and codes narrow again."""
    t = TopicState("t", 1, TopicConfig(cap_records=1_000))
    seq = 0
    for ts in range(200):
        batch = RecordBatch.of([RecordIn.of(1, tag=f"o{seq + k}") for k in range(1_000)])
        t.publish_batch(t.head + 1, ts, batch)
        seq += 1_000
        t.apply_record_cap()
        t.drop_payloads(0, t.slot_count)
    assert t.count == 1_000 and t.frozen.n < 10_000
    assert len(t.frozen._labels) <= t.frozen.n + 1
    assert t.tag_matches(Selector("Eq", f"o{seq - 1}"), t.head + 1) == [t.head]
    assert [t.slot(s)[4] for s in (t.head - 1, t.head)] == [f"o{seq - 2}", f"o{seq - 1}"]


def test_a_wide_ts_column_narrows_once_its_wide_block_is_dropped() -> None:
    col = TsColumn(2)
    col.extend(np.array([0, 0, 1 << 40, 1 << 40, (1 << 40) + 5], np.int64))  # block 0 spans 2**40
    assert col.wide
    col.drop_prefix(2)
    assert col.values(0, 3).tolist() == [1 << 40, 1 << 40, (1 << 40) + 5]
    assert not col.wide and col.search(1 << 40, 0, 3, right=True) == 2


def test_label_codes_widen_as_the_table_grows() -> None:
    fr = FrozenSlots()
    fr.extend_lists([1] * 200, [2] * 200, [f"l{i}" for i in range(200)], ["t"] * 200)
    assert fr.nbytes == 1024 * (4 + 4 + 1 + 1) + 8  # one-byte codes, room for 1,024 slots
    labels = [f"l{i}" for i in range(70_000)]
    fr.extend_lists([1] * len(labels), [2] * len(labels), labels, [None] * len(labels))
    assert fr.tag_list(199, 201) == ["t", None]
    assert fr.node_list(0, 3) == ["l0", "l1", "l2"] and fr.node_at(70_199) == "l69999"
    coded = (["l5", "new"], np.array([2, 0, 1], np.uint32))
    assert fr.recode(coded).tolist() == [70_002, 0, 6]


@pytest.mark.parametrize("wide", [False, True])
def test_reserving_room_sizes_every_column_once_and_changes_no_value(wide: bool) -> None:
    step = 1 << 40 if wide else 1  # a block spanning more than 32 bits: plain 8-byte values
    ts = np.arange(3000, dtype=np.int64) * step
    sizes, labels = list(range(3000)), [None, "a", "b"] * 1000
    plain, sized = FrozenSlots(ts_block_bits=6), FrozenSlots(ts_block_bits=6)
    sized.reserve(3000)
    before = sized.nbytes
    for fr in (plain, sized):
        for a in range(0, 3000, 700):
            fr.extend_lists(ts[a : a + 700].tolist(), sizes[a : a + 700], labels[a : a + 700],
                            labels[a : a + 700][::-1])  # fmt: skip
    assert before == 3000 * (4 + 4 + 1 + 1)
    # bases of 47 blocks as they fill; or, once wide, 8-byte values in the room reserved
    assert sized.nbytes == (3000 * (8 + 4 + 1 + 1) if wide else before + 8 * 47)
    assert plain.nbytes > sized.nbytes  # grown by doubling
    for attr in ("ts_list", "size_list", "node_list", "tag_list"):
        assert getattr(sized, attr)(0, 3000) == getattr(plain, attr)(0, 3000), attr


def test_a_column_that_turns_wide_lets_go_of_its_narrow_buffer() -> None:
    col = TsColumn(2)
    col.reserve(1_000)
    col.extend(np.array([0, 1 << 40], np.int64))  # one block spans 2**40: plain values
    assert col.wide
    # all that is held: the wide values in the room reserved, and no narrow buffer
    assert col.nbytes == 1_000 * 8
    assert col._off.base is None and col._off.nbytes == 0


TS_RUNS = st.lists(
    st.tuples(st.sampled_from([0, 1, 7, 1 << 31, 1 << 32, 1 << 40]), st.integers(1, 9)),
    max_size=12,
)


@settings(max_examples=300, deadline=None)
@given(
    runs=TS_RUNS,
    start=st.integers(-(1 << 40), 1 << 40),
    bits=st.integers(0, 4),
    cut=st.integers(0, 80),
    probes=st.lists(st.integers(-5, 5), max_size=6),
    chunk=st.integers(1, 40),
)
def test_ts_column_holds_and_searches_like_a_list(
    runs: list[tuple[int, int]], start: int, bits: int, cut: int, probes: list[int], chunk: int
) -> None:
    """Offsets within blocks, and the switch to plain values when a block spans more
    than 32 bits (also midway through a prefix drop's re-encoding): every value, slice
    and search as a list and `bisect` give them."""
    want: list[int] = []
    col = TsColumn(bits)
    at = start
    for step, k in runs:  # appended a run at a time, each run `k` values `step` apart
        values = [at + step * j for j in range(k)]
        at = values[-1]
        want += values
        col.extend(np.array(values, np.int64))
    k = min(cut, len(want))
    col.drop_prefix(k, chunk)  # re-encoded `chunk` values at a time
    want = want[k:]
    assert col.n == len(want) and col.values(0, col.n).tolist() == want
    assert [col.at(i) for i in range(col.n)] == want
    for a in range(0, len(want) + 1, 3):
        for b in {a, (a + len(want)) // 2, len(want)}:
            for v in [want[min(a, len(want) - 1)] + p for p in probes] if want else probes:
                for right, bisect in ((False, bisect_left), (True, bisect_right)):
                    got = col.search(v, a, b, right)
                    assert got == bisect(want, v, a, b), (v, a, b, right)


@pytest.mark.parametrize("excess", [0, 1, 3, 4, 6, 100])
def test_byte_cut_matches_the_walk(excess: int) -> None:
    fr = FrozenSlots()
    fr.extend_lists([1] * 4, [3, 0, 3, 2], [None] * 4, [None] * 4)
    walked, i = excess, 0
    while walked > 0 and i < 4:
        walked -= fr.size_at(i)
        i += 1
    assert fr.byte_cut(0, 4, excess) == i


def test_a_prefix_drop_reencodes_without_a_heap_spike() -> None:
    """A capped topic's compaction drops the front half of millions of frozen slots; the
    rest must not be decoded into one int64 temporary (and three more while encoding)."""
    n = 4_000_000
    col = TsColumn()
    col.extend(np.arange(n, dtype=np.int64) * 3)
    tracemalloc.start()
    try:
        col.drop_prefix(1_000_000)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert col.n == 3_000_000 and col.values(0, 3).tolist() == [3_000_000, 3_000_003, 3_000_006]
    assert col.at(col.n - 1) == 3 * (n - 1)
    # the new 4-byte column itself is 12 MB; one int64 copy of the rest alone would be 24
    assert peak < 24_000_000, f"{peak / 1e6:.0f} MB of temporaries"


@pytest.mark.parametrize("distinct", [3, 5000])
def test_packed_labels_decode_to_the_listed_labels(distinct: int) -> None:
    """`packed` codes (into its own table, the used labels' alone when the table is large)
    name the labels `pick` lists, with code 0 for none."""
    fr = FrozenSlots()
    n = 6000
    tags = [None if i % 7 == 0 else f"t{i % distinct}" for i in range(n)]
    nodes = [None if i % 3 else f"n{i % 5}" for i in range(n)]
    fr.extend_lists(list(range(n)), [1] * n, nodes, tags)
    at = np.array([0, 1, 2, 7, 100, 4999, 5998], np.intp)
    ts, labels, node, tag = fr.packed(at)
    want_ts, want_node, want_tag, _ = fr.pick(at)
    assert ts.tolist() == want_ts and labels[0] is None
    assert [labels[k] for k in node.tolist()] == want_node
    assert [labels[k] for k in tag.tolist()] == want_tag
    assert len(labels) <= 4096 or distinct < 4096


@given(
    st.lists(st.tuples(st.integers(0, 5_000), st.sampled_from([b"x", b""])), max_size=4),
    st.integers(0, 12_000),
)
def test_first_payload_is_the_first_non_none_at_or_after_start(
    runs: list[tuple[int, bytes]], start: int
) -> None:
    """Runs of None across the 4,096-slot chunks, each followed by one payload (an empty
    one too: the search is by identity, not truth)."""
    data: list[bytes | None] = [x for k, p in runs for x in [None] * k + [p]]
    want = next((i for i in range(start, len(data)) if data[i] is not None), len(data))
    assert first_payload(data, start) == want
