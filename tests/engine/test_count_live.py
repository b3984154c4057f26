"""`TopicState.count_live` (how many of a collection of seqs are live, with numpy over the
dead flags for big collections) answers what `is_live` of each answers, through writes,
deletes, floors and the front pop's compaction."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from seglog.engine.topic import TopicState
from seglog.model import TopicConfig
from tests.engine.test_tag_index import OPS, apply


@settings(max_examples=150, deadline=None)
@given(
    ops=OPS,
    probes=st.lists(st.sets(st.integers(-5, 13_000), max_size=120), max_size=4),
    raised=st.lists(st.integers(0, 13_000), max_size=4),
)
def test_count_live_is_is_live_of_each(
    ops: list[tuple[str, object]], probes: list[set[int]], raised: list[int]
) -> None:
    t = TopicState("t", 1, TopicConfig())
    for k, (op, arg) in enumerate(ops):
        apply(t, op, arg)
        if k < len(raised):  # a floor raised, its front pop not run yet
            t.expiry_floor = max(t.expiry_floor, min(raised[k], t.head))
        for seqs in probes[k % max(len(probes), 1) :][:1]:
            assert t.count_live(seqs) == sum(1 for s in seqs if t.is_live(s))
    every = set(range(max(t.origin - 3, 0), t.head + 4))
    assert t.count_live(every) == sum(1 for s in every if t.is_live(s))
