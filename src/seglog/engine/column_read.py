"""Columnar reads (the server side of API §13.1): the records of a read as parallel columns,
sliced from the topic's slot columns and the sealed segments' runs without building a
`Record` per record.

`select_slots` is `TopicState.read` over whole windows (numpy over the dead flags and the
sizes) for the common read: no TTL and no node filter. A read it does not cover returns
None and the caller converts an ordinary read (`columns_of_records`), so both forms answer
the same records, cursor and tombstone by construction of the fallback and by the property
test of the Arrow diff for the fast path.

`select_columns` plans the read once (`_plan`); for the Arrow form of the bulk read, when
every row it takes is sealed, `select_sealed` answers it as arrays: the frozen slots' `ts`
and label codes, and the texts as spans of the segments' verified bytes (`fill_sealed`) —
no Python object per record. A page with a record that carries meta is read as lists.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from seglog.core.payload_blob import decode_blob
from seglog.core.segment_run import Ints, blobs_sliceable
from seglog.core.watermarks import tombstone_for
from seglog.engine.payloads import runs_by_segment
from seglog.engine.segments import TopicSegments
from seglog.engine.topic import MAX_SLOTS_EXAMINED, TopicState
from seglog.model import DataRun, PackedColumns, Record, RecordColumns, Tombstone
from seglog.storage.segment import PinnedSegment, SegmentStore


@dataclass(slots=True)
class SlotSelection:
    """What `select_slots` took under the topic lock. `data[i] is None` where the payload
    lives only in a sealed segment (`missing` lists those row positions)."""

    columns: RecordColumns
    missing: list[int]
    next_from_seq: int
    tombstone: Tombstone | None
    scanned: int

    def missing_span(self) -> tuple[int, int]:
        """The first and last seq whose payload is to be read from segments (0, 0: none)."""
        if not self.missing:
            return 0, 0
        seqs = self.columns.seq
        return seqs[self.missing[0]], seqs[self.missing[-1]]


@dataclass(slots=True)
class _Plan:
    """The rows a columnar read takes (the `TopicState.read` rules over whole windows):
    window row k is slot `first + k` and seq `base + k`."""

    tombstone: Tombstone | None
    pos: int
    first: int
    base: int
    rows: npt.NDArray[np.intp]
    scanned: int

    @property
    def next_from_seq(self) -> int:
        return self.pos + self.scanned


def _plan(t: TopicState, cursor: int, limit: int, max_bytes: int) -> _Plan:
    tomb, pos = tombstone_for(cursor, t.floors(), t.base_seq, t.head)
    width = min(t.head - pos, MAX_SLOTS_EXAMINED)
    if width <= 0 or limit <= 0:
        return _Plan(tomb, pos, 0, 0, np.empty(0, np.intp), 0)
    lo = pos + 1 - t.origin  # slot of the first examined seq
    below = min(max(t.front - lo, 0), width)  # examined slots already popped: dead
    first = lo + below
    window = np.frombuffer(bytes(t.dead[first : lo + width]), np.uint8)
    live = np.flatnonzero(window == 0)
    full = len(live) >= limit
    rows = live[:limit]
    broke_at: int | None = None
    if len(rows) > 1:
        sizes = t.sizes_at(first + rows)
        fits = int(np.searchsorted(np.cumsum(sizes, dtype=np.int64), max_bytes, side="right"))
        if max(fits, 1) < len(rows):
            take = max(fits, 1)
            broke_at = int(rows[take])
            rows = rows[:take]
    if broke_at is not None:  # the record that did not fit was examined, not consumed
        scanned = below + broke_at
    elif full and len(rows):
        scanned = below + int(rows[-1]) + 1
    else:
        scanned = width
    return _Plan(tomb, pos, first, t.origin + first, rows, scanned)


def select_slots(
    t: TopicState, cursor: int, limit: int, max_bytes: int, now: int, filtered: bool
) -> SlotSelection | None:
    """`t.read(cursor, limit, nodes, max_bytes, now)` as columns, or None when the read needs
    the per-slot path (a TTL or a node filter). The caller holds `t.lock`."""
    sel = select_columns(t, cursor, limit, max_bytes, now, filtered, packed=False)
    assert not isinstance(sel, SealedSelection)
    return sel


def select_columns(
    t: TopicState,
    cursor: int,
    limit: int,
    max_bytes: int,
    now: int,
    filtered: bool,
    packed: bool,
) -> SlotSelection | SealedSelection | None:
    """`select_slots`, or with `packed` the same read as a `SealedSelection` when every row
    it takes is sealed (`select_sealed`); the page is planned once either way. The caller
    holds `t.lock`."""
    if filtered or t.config.ttl_ms > 0:
        return None
    del now  # only TTL reads need it, and those take the per-slot path
    plan = _plan(t, cursor, limit, max_bytes)
    if packed:
        sealed = select_sealed(t, plan)
        if sealed is not None:
            return sealed
    return _slot_selection(t, plan)


def _slot_selection(t: TopicState, plan: _Plan) -> SlotSelection:
    rows: list[int] = plan.rows.tolist()
    if not rows:
        return SlotSelection(
            RecordColumns.empty(), [], plan.next_from_seq, plan.tombstone, plan.scanned
        )
    first, base = plan.first, plan.base
    contiguous = rows[-1] - rows[0] + 1 == len(rows)
    # The columns of exactly the picked rows (row k of each is `rows[k]`).
    if contiguous:
        picked = t.columns(first + rows[0], first + rows[-1] + 1)
    else:
        picked = t.pick_columns([first + r for r in rows])
    ts_col, node_col, tag_col, data, meta_col, _ = picked
    cols = RecordColumns(
        list(range(base + rows[0], base + rows[-1] + 1))
        if contiguous
        else [base + r for r in rows],
        ts_col,
        node_col,
        tag_col,
        data,  # type: ignore[arg-type]  # the Nones are filled by `fill_columns`
        meta_col,
    )
    absent = data.count(None)
    if absent == len(data):  # a page of sealed records only
        missing = list(range(absent))
    else:
        missing = [i for i, d in enumerate(data) if d is None] if absent else []
    return SlotSelection(cols, missing, plan.next_from_seq, plan.tombstone, plan.scanned)


@dataclass(slots=True)
class SealedSelection:
    """What `select_sealed` took under the topic lock: the page's rows as arrays, their
    texts still in the sealed segments (`fill_sealed`)."""

    seq: npt.NDArray[np.int64]
    ts: npt.NDArray[np.int64]
    labels: list[str | None]
    node: npt.NDArray[Any]
    tag: npt.NDArray[Any]
    next_from_seq: int
    tombstone: Tombstone | None
    scanned: int


def select_sealed(t: TopicState, plan: _Plan) -> SealedSelection | None:
    """The planned read as arrays when every row it takes is sealed (payload out of
    memory) and no segment it reads is known to hold meta; else None."""
    segs = t.segments
    rows = plan.rows
    if segs is None or not len(rows) or plan.first + int(rows[-1]) >= t.frozen.n:
        return None
    first, last = plan.base + int(rows[0]), plan.base + int(rows[-1])
    if segs.unsliced and any(s.first_seq in segs.unsliced for s in segs.overlapping(first, last)):
        return None
    ts, labels, node, tag = t.frozen.packed(plan.first + rows)
    seq = (plan.base + rows).astype(np.int64)
    return SealedSelection(
        seq, ts, labels, node, tag, plan.next_from_seq, plan.tombstone, plan.scanned
    )


def fill_sealed(
    sel: SealedSelection, segs: TopicSegments, pins: list[PinnedSegment]
) -> tuple[PackedColumns, int] | None:
    """The packed columns of `sel`, their texts sliced from the pinned segments (verified a
    run at a time, exactly as `fill_columns` reads them), and how many rows came from the
    cold tier; None when a row's record carries meta (the caller then reads the page as
    lists, and later packed reads skip that segment: `TopicSegments.unsliced`)."""
    seqs = sel.seq
    runs: list[DataRun] = []
    cold = 0
    for pin, start, end in runs_by_segment(seqs, pins):
        spans = segs.store.read_run_blob_spans(pin, int(seqs[start]), int(seqs[end - 1]))
        assert spans is not None  # the run holds seqs[start]
        chunk, run_first, all_starts, all_ends = spans
        at = seqs[start:end] - run_first
        starts, ends = all_starts[at], all_ends[at]
        if not _texts_sliced(chunk, starts, ends):
            segs.unsliced.add(pin.info.first_seq)
            return None
        runs.append(DataRun(chunk, starts + 5, ends - 1))
        if pin.info.tier == "cold":
            cold += end - start
    cols = PackedColumns(seqs, sel.ts, sel.labels, sel.node, sel.tag, runs)
    return cols, cold


def _texts_sliced(chunk: bytes, starts: Ints, ends: Ints) -> bool:
    """Whether every blob `chunk[starts[k]:ends[k]]` is `{"d":` data `}` (no meta), so its
    data text is `chunk[starts[k]+5 : ends[k]-1]`. `blobs_sliceable` vouches for most in
    one pass; the few it cannot (a `"m"` inside the data) are decoded to be sure."""
    sliceable = blobs_sliceable(chunk, starts, ends)
    for k in np.flatnonzero(~sliceable).tolist():
        a, b = int(starts[k]), int(ends[k])
        data, meta = decode_blob(chunk[a:b])
        if meta is not None or data != chunk[a + 5 : b - 1]:
            return False
    return True


def fill_columns(
    cols: RecordColumns, missing: list[int], store: SegmentStore, pins: list[PinnedSegment]
) -> int:
    """Put the payloads of the rows `missing` lists (ascending) in place from their sealed
    segments, one verified run per segment. Returns how many came from the cold tier."""
    data, meta = cols.data, cols.meta
    # (`missing` is every row of a page of sealed records, ascending from 0)
    seqs = cols.seq if len(missing) == len(cols.seq) else [cols.seq[row] for row in missing]
    cold = 0
    for pin, start, end in runs_by_segment(seqs, pins):
        lo = seqs[start]
        run_data, run_meta = store.read_run_payloads(pin, lo, seqs[end - 1])
        if end - start == len(run_data):  # the whole run is missing: the usual sealed page
            data[missing[start] : missing[end - 1] + 1] = run_data
            meta[missing[start] : missing[end - 1] + 1] = run_meta
        else:
            for row, seq in zip(missing[start:end], seqs[start:end], strict=True):
                data[row] = run_data[seq - lo]
                meta[row] = run_meta[seq - lo]
        if pin.info.tier == "cold":
            cold += end - start
    return cold


def columns_of_records(records: list[Record]) -> RecordColumns:
    """The columns of an ordinary read (the path for TTL and node-filtered reads)."""
    return RecordColumns(
        [r.seq for r in records],
        [r.ts for r in records],
        [r.node for r in records],
        [r.tag for r in records],
        [r.data_json for r in records],
        [r.meta_json for r in records],
    )
