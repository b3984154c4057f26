"""Columnar reads (`Engine.read(columnar=True)`, the server side of API §13.1) answer
exactly what ordinary reads answer: same records in the same order, same cursor, head,
earliest, tombstone and scan count, for random histories over in-memory and sealed
payloads, deletes, caps, TTL and node filters, and any cursor, limit and byte budget."""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from seglog.clock import ManualClock
from seglog.engine import column_read
from seglog.engine.engine import Engine, EngineOptions
from seglog.engine.maintenance import seal_topic
from seglog.engine.topic import MAX_SLOTS_EXAMINED, TopicState
from seglog.model import (
    Durability,
    PackedColumns,
    ReadResult,
    RecordIn,
    Selector,
    TopicConfig,
)

RECORD = st.fixed_dictionaries(
    {"data": st.one_of(st.integers(-(2**63), 2**63 - 1), st.text(max_size=6), st.just({"m": 1}))},
    optional={
        "node": st.sampled_from(["n1", "n2"]),
        "tag": st.sampled_from(["a", "b"]),
        "meta": st.just({"k": 1}),
    },
)
OPS = st.lists(
    st.one_of(
        st.tuples(st.just("write"), st.lists(RECORD, min_size=1, max_size=9)),
        st.tuples(st.just("delete_before"), st.integers(0, 60)),
        st.tuples(st.just("delete_tag"), st.sampled_from(["a", "b"])),
        st.tuples(st.just("seal"), st.none()),
        st.tuples(st.just("advance"), st.integers(1, 400)),
    ),
    max_size=14,
)
CONFIGS = st.sampled_from(
    [
        TopicConfig(),
        TopicConfig(durability=Durability.FSYNC, cap_records=7),
        TopicConfig(durability=Durability.MEMORY, cap_bytes=90),
        TopicConfig(ttl_ms=500),
        TopicConfig(dedupe_node=False),
    ]
)
READS = st.lists(
    st.tuples(
        st.integers(0, 70),
        st.integers(1, 12),
        st.sampled_from([1, 20, 60, 1 << 20]),
        st.sampled_from([frozenset(), frozenset({"n1"})]),
    ),
    min_size=1,
    max_size=6,
)


def as_rows(res: ReadResult) -> list[tuple[Any, ...]]:
    if res.columns is None:
        return [(r.seq, r.ts, r.node, r.tag, r.data_json, r.meta_json) for r in res.records]
    c = res.columns
    if isinstance(c, PackedColumns):
        texts = [
            run.buf[a:b]
            for run in c.data
            for a, b in zip(run.starts.tolist(), run.ends.tolist(), strict=True)
        ]
        labels = c.labels
        return list(
            zip(
                c.seq.tolist(),
                c.ts.tolist(),
                [labels[k] for k in c.node.tolist()],
                [labels[k] for k in c.tag.tolist()],
                texts,
                [None] * len(c),
                strict=True,
            )
        )
    return list(zip(c.seq, c.ts, c.node, c.tag, c.data, c.meta, strict=True))


def scalars(res: ReadResult) -> tuple[Any, ...]:
    return (
        res.next_from_seq,
        res.head_seq,
        res.earliest_seq,
        res.tombstone,
        res.records_scanned,
        res.cold_segments_read,
    )


def apply(e: Engine, clock: ManualClock, op: str, arg: Any) -> None:
    if op == "write":
        recs = [RecordIn.of(r["data"], r.get("meta"), r.get("node"), r.get("tag")) for r in arg]
        e.write("p", recs)
    elif op == "delete_before" and arg > 0:
        e.delete_records("p", before_seq=arg)
    elif op == "delete_tag":
        e.delete_records("p", match=Selector("Eq", arg))
    elif op == "seal":
        seal_topic(e, e.topics["p"], force=True)
    elif op == "advance":
        clock.advance(arg)


# How many packed reads came packed (True) or as lists (False).
PACKED_READS = {True: 0, False: 0}


def check_reads(
    cfg: TopicConfig,
    ops: list[tuple[str, Any]],
    reads: list[tuple[int, int, int, frozenset[str]]],
    metas: bool,
    cache: int,
) -> None:
    """Ordinary, columnar and packed reads of one history answer the same."""
    clock = ManualClock()
    with tempfile.TemporaryDirectory() as d:
        e = Engine(
            EngineOptions(
                data_dir=Path(d), wal_shards=1, segment_max_events=4, segment_payload_cache=cache
            ),
            clock=clock,
        )
        e.open()
        try:
            e.put_topic("p", cfg)
            for op, arg in ops:
                if op == "write" and not metas:  # segments without meta: packed pages
                    arg = [{k: v for k, v in r.items() if k != "meta"} for r in arg]
                apply(e, clock, op, arg)
            if not metas:
                apply(e, clock, "seal", None)
            for cursor, limit, max_bytes, nodes in reads:
                want = e.read("p", cursor, limit, nodes, max_bytes)
                got = e.read("p", cursor, limit, nodes, max_bytes, columnar=True)
                assert got.records == [] and got.columns is not None
                assert as_rows(got) == as_rows(want)
                assert scalars(got) == scalars(want)
                packed = e.read("p", cursor, limit, nodes, max_bytes, columnar=True, packed=True)
                assert packed.records == [] and packed.columns is not None
                assert as_rows(packed) == as_rows(want)
                assert scalars(packed) == scalars(want)
                PACKED_READS[isinstance(packed.columns, PackedColumns)] += 1
        finally:
            e.close(snapshot=False)


@settings(
    max_examples=120,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.too_slow],
)
@given(cfg=CONFIGS, ops=OPS, reads=READS, metas=st.booleans(), cache=st.sampled_from([0, 2]))
def test_columnar_reads_answer_what_reads_answer(
    cfg: TopicConfig,
    ops: list[tuple[str, Any]],
    reads: list[tuple[int, int, int, frozenset[str]]],
    metas: bool,
    cache: int,
) -> None:
    check_reads(cfg, ops, reads, metas, cache)


@settings(
    max_examples=100,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.too_slow],
)
@given(
    cfg=st.sampled_from(
        [
            TopicConfig(),
            TopicConfig(durability=Durability.FSYNC, cap_records=7),
            TopicConfig(durability=Durability.MEMORY, cap_bytes=90),
        ]
    ),
    ops=OPS,
    reads=st.lists(
        st.tuples(
            st.integers(0, 15),
            st.integers(1, 12),
            st.sampled_from([1, 20, 60, 1 << 20]),
            st.just(frozenset()),
        ),
        min_size=1,
        max_size=6,
    ),
    cache=st.sampled_from([0, 2]),
)
def test_packed_reads_of_sealed_pages_answer_what_reads_answer(
    cfg: TopicConfig,
    ops: list[tuple[str, Any]],
    reads: list[tuple[int, int, int, frozenset[str]]],
    cache: int,
) -> None:
    """The reads packed pages serve (no TTL, no node filter, sealed histories without
    meta), with deletes, caps and byte budgets."""
    check_reads(cfg, ops, reads, False, cache)


def test_the_packed_property_sees_packed_pages_and_list_pages() -> None:
    """The property above is only worth its name if its reads take both forms (run here
    on its own: tests may be spread over processes)."""
    PACKED_READS.update({True: 0, False: 0})
    test_packed_reads_of_sealed_pages_answer_what_reads_answer()
    assert PACKED_READS[True] > 20 and PACKED_READS[False] > 20, PACKED_READS


def sealing_engine(data_dir: Path) -> Engine:
    """An open engine that seals every 100 records and keeps no sealed payload in memory
    (every sealed read goes to the segment files)."""
    e = Engine(
        EngineOptions(
            data_dir=data_dir, wal_shards=1, segment_max_events=100, segment_payload_cache=0
        ),
        clock=ManualClock(),
    )
    e.open()
    return e


def test_sealed_pages_come_from_segment_runs(tmp_path: Path) -> None:
    e = sealing_engine(tmp_path)
    try:
        e.put_topic("p", TopicConfig())
        for i in range(5):
            batch = [RecordIn.of({"i": i, "j": j}, node="n" if j % 3 else None) for j in range(100)]
            e.write("p", batch)
        seal_topic(e, e.topics["p"], force=True)
        t = e.topics["p"]
        with t.lock:
            sel = column_read.select_slots(t, 0, 1000, 1 << 30, 0, False)
        assert sel is not None and len(sel.missing) == 500  # every payload is on disk
        got = e.read("p", 0, 1000, max_bytes=1 << 30, columnar=True)
        want = e.read("p", 0, 1000, max_bytes=1 << 30)
        assert as_rows(got) == as_rows(want) and len(want.records) == 500
    finally:
        e.close(snapshot=False)


def test_a_window_of_dead_slots_advances_the_cursor_by_the_scan_cap(tmp_path: Path) -> None:
    e = Engine(EngineOptions(data_dir=tmp_path, wal_shards=1), clock=ManualClock())
    e.open()
    try:
        e.put_topic("p", TopicConfig(durability=Durability.MEMORY))
        for _ in range(MAX_SLOTS_EXAMINED // 1000 + 2):
            e.write("p", [RecordIn.of(0, tag="x")] * 1000)
        e.write("p", [RecordIn.of(1)])
        e.delete_records("p", match=Selector("Eq", "x"))
        want = e.read("p", 0, 10)
        got = e.read("p", 0, 10, columnar=True)
        assert want.records == [] and got.columns is not None and len(got.columns) == 0
        assert scalars(got) == scalars(want)
        assert got.next_from_seq == MAX_SLOTS_EXAMINED
    finally:
        e.close(snapshot=False)


@settings(max_examples=200, derandomize=True, database=None)
@given(st.lists(st.booleans(), max_size=40), st.integers(0, 45))
def test_live_runs_are_the_runs_of_live_records(dead: list[bool], delete_below: int) -> None:
    t = TopicState("t", 1, TopicConfig())
    for i, d in enumerate(dead, start=1):
        t.append_slot(i, 0, b"1", None, None, None, 1, dead=d)
    t.delete_floor = delete_below
    t.pop_front()
    want: list[tuple[int, int]] = []
    for s in t.live_records():
        if want and want[-1][1] == s - 1:
            want[-1] = (want[-1][0], s)
        else:
            want.append((s, s))
    assert t.live_runs() == want


def test_a_sealed_page_without_meta_comes_packed_and_one_with_meta_as_lists(
    tmp_path: Path,
) -> None:
    e = sealing_engine(tmp_path)
    try:
        e.put_topic("p", TopicConfig())
        e.write("p", [RecordIn.of({"j": j}, tag="t" if j % 2 else None) for j in range(100)])
        e.write(
            "p", [RecordIn.of({"j": j}, meta={"m": j} if j == 50 else None) for j in range(100)]
        )
        seal_topic(e, e.topics["p"], force=True)
        segs = e.topics["p"].segments
        assert segs is not None and len(segs.sealed) == 2 and not segs.unsliced
        plain = e.read("p", 0, 100, max_bytes=1 << 30, columnar=True, packed=True)
        assert isinstance(plain.columns, PackedColumns)
        assert as_rows(plain) == as_rows(e.read("p", 0, 100, max_bytes=1 << 30))
        with_meta = e.read("p", 100, 100, max_bytes=1 << 30, columnar=True, packed=True)
        assert not isinstance(with_meta.columns, PackedColumns)  # read again as lists
        assert as_rows(with_meta) == as_rows(e.read("p", 100, 100, max_bytes=1 << 30))
        assert segs.unsliced == {101}  # ... and the next read skips the attempt
        with_meta_again = e.read("p", 150, 10, max_bytes=1 << 30, columnar=True, packed=True)
        assert not isinstance(with_meta_again.columns, PackedColumns)
        both = e.read("p", 90, 20, max_bytes=1 << 30, columnar=True, packed=True)
        assert as_rows(both) == as_rows(e.read("p", 90, 20, max_bytes=1 << 30))
    finally:
        e.close(snapshot=False)


def test_a_quoted_m_in_data_or_meta_outside_the_page_keeps_pages_packed(tmp_path: Path) -> None:
    """Only a record of the page that carries meta sends it to lists: a data value with an
    `"m"` key is decoded to be sure, and a deleted record with meta elsewhere in the
    segment is not read."""
    e = sealing_engine(tmp_path)
    try:
        e.put_topic("p", TopicConfig())
        recs = [RecordIn.of({"m": j} if j % 10 == 0 else {"j": j}) for j in range(100)]
        recs[95] = RecordIn.of({"j": 95}, meta={"k": 1})
        e.write("p", recs)
        seal_topic(e, e.topics["p"], force=True)
        segs = e.topics["p"].segments
        assert segs is not None
        page = e.read("p", 0, 60, max_bytes=1 << 30, columnar=True, packed=True)
        assert isinstance(page.columns, PackedColumns) and not segs.unsliced
        assert as_rows(page) == as_rows(e.read("p", 0, 60, max_bytes=1 << 30))
        assert (
            page.columns.data[0].buf[page.columns.data[0].starts[0] : page.columns.data[0].ends[0]]
            == b'{"m":0}'
        )
        tail = e.read("p", 90, 10, max_bytes=1 << 30, columnar=True, packed=True)
        assert not isinstance(tail.columns, PackedColumns) and segs.unsliced == {1}
        assert as_rows(tail) == as_rows(e.read("p", 90, 10, max_bytes=1 << 30))
        e.delete_records("p", before_seq=97)  # the meta record (seq 96) is gone
        segs.unsliced.clear()
        later = e.read("p", 96, 4, max_bytes=1 << 30, columnar=True, packed=True)
        assert isinstance(later.columns, PackedColumns)
        assert as_rows(later) == as_rows(e.read("p", 96, 4, max_bytes=1 << 30))
    finally:
        e.close(snapshot=False)
