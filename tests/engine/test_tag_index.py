"""The tag index (`TopicState.tags`) is built on the first tag query and maintained from
then on. Whenever it is built — before any write, mid-history or only at the end — tag
queries answer exactly the live seqs whose tag matches, as a scan of the slot columns
would: through writes, explicit and tag deletes, floors and the front pop's compaction."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from seglog.engine.topic import TopicState
from seglog.model import RecordBatch, RecordIn, Selector, TopicConfig

TAGS = [None, "a", "ab", "b"]
SELECTORS = [Selector("Eq", "a"), Selector("Eq", "b"), Selector("Glob", "a"), Selector("Glob", "")]
OPS = st.lists(
    st.one_of(
        st.tuples(st.just("write"), st.lists(st.sampled_from(TAGS), min_size=1, max_size=8)),
        st.tuples(st.just("bulk"), st.tuples(st.integers(1, 5_000), st.sampled_from(TAGS))),
        st.tuples(st.just("kill"), st.lists(st.integers(0, 12_000), max_size=6)),
        st.tuples(
            st.just("delete_tag"), st.tuples(st.sampled_from(SELECTORS), st.integers(0, 12_000))
        ),
        st.tuples(st.just("floor"), st.integers(0, 12_000)),
        st.tuples(st.just("query"), st.sampled_from(SELECTORS)),
    ),
    max_size=16,
)


def scan(t: TopicState, sel: Selector, below: int) -> list[int]:
    first = t.earliest()
    return [
        t.origin + i
        for i in range(t.front, t.slot_count)
        if first <= t.origin + i < below and not t.dead[i] and sel.matches(t.slot(t.origin + i)[4])
    ]


def apply(t: TopicState, op: str, arg: object) -> None:
    if op in ("write", "bulk"):
        tags = arg if op == "write" else [arg[1]] * arg[0]  # type: ignore[index]
        records = [RecordIn.of(k, tag=g) for k, g in enumerate(tags)]  # type: ignore[union-attr]
        t.publish_batch(t.head + 1, 1_000 + t.head, RecordBatch.of(records))
    elif op == "kill":
        t.apply_delete(None, None, 0, [s for s in arg if s <= t.head])  # type: ignore[union-attr]
    elif op == "delete_tag":
        sel, bound = arg  # type: ignore[misc]
        t.apply_delete(None, sel, bound)
    elif op == "floor":
        t.evict_floor = max(t.evict_floor, min(int(arg), t.head))  # type: ignore[call-overload]
        t.pop_front()
    elif op == "query":
        t.tag_matches(arg, t.head + 1)  # type: ignore[arg-type]


@settings(max_examples=150, deadline=None)
@given(ops=OPS, build_at=st.integers(0, 16))
def test_the_index_answers_like_a_scan_whenever_it_is_built(
    ops: list[tuple[str, object]], build_at: int
) -> None:
    eager = TopicState("e", 1, TopicConfig())
    lazy = TopicState("l", 2, TopicConfig())
    assert eager.tags == {}  # built (empty) before anything is written
    for k, (op, arg) in enumerate(ops):
        for t in (eager, lazy):
            apply(t, op, arg)
        checked = [eager] if k < build_at else [eager, lazy]  # the lazy one is built at `build_at`
        for t in checked:
            for sel in SELECTORS:
                below = t.head + 1
                assert t.tag_matches(sel, below) == scan(t, sel, below), (t.name, sel)
    for sel in SELECTORS:
        assert lazy.tag_matches(sel, lazy.head + 1) == scan(lazy, sel, lazy.head + 1)
    assert eager.tags == lazy.tags
