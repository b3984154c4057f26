"""Columnar reads (the server side of API §13.1): the records of a read as parallel columns,
sliced from the topic's slot columns and the sealed segments' runs without building a
`Record` per record.

`select_slots` is `TopicState.read` over whole windows (numpy over the dead flags and the
sizes) for the common read: no TTL and no node filter. A read it does not cover returns
None and the caller converts an ordinary read (`columns_of_records`), so both forms answer
the same records, cursor and tombstone by construction of the fallback and by the property
test of the Arrow diff for the fast path.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from seglog.core.watermarks import tombstone_for
from seglog.engine.payloads import runs_by_segment
from seglog.engine.topic import MAX_SLOTS_EXAMINED, TopicState
from seglog.model import Record, RecordColumns, Tombstone
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


def select_slots(
    t: TopicState, cursor: int, limit: int, max_bytes: int, now: int, filtered: bool
) -> SlotSelection | None:
    """`t.read(cursor, limit, nodes, max_bytes, now)` as columns, or None when the read needs
    the per-slot path (a TTL or a node filter). The caller holds `t.lock`."""
    if filtered or t.config.ttl_ms > 0:
        return None
    del now  # only TTL reads need it, and those take the per-slot path
    tomb, pos = tombstone_for(cursor, t.floors(), t.base_seq, t.head)
    width = min(t.head - pos, MAX_SLOTS_EXAMINED)
    if width <= 0 or limit <= 0:
        return SlotSelection(RecordColumns.empty(), [], pos, tomb, 0)
    lo = pos + 1 - t.origin  # slot of the first examined seq
    below = min(max(t.front - lo, 0), width)  # examined slots already popped: dead
    first = lo + below
    window = np.frombuffer(bytes(t.dead[first : lo + width]), np.uint8)
    live = np.flatnonzero(window == 0)
    full = len(live) >= limit
    rows: list[int] = live[:limit].tolist()
    contiguous = bool(rows) and rows[-1] - rows[0] + 1 == len(rows)
    # The columns of exactly the picked rows (row k of each is `rows[k]`).
    if contiguous:
        picked = t.columns(first + rows[0], first + rows[-1] + 1)
    else:
        picked = t.pick_columns([first + r for r in rows])
    ts_col, node_col, tag_col, data, meta_col, sizes = picked
    take = len(rows)
    broke_at: int | None = None
    if take > 1:
        fits = int(np.searchsorted(np.cumsum(sizes, dtype=np.int64), max_bytes, side="right"))
        if max(fits, 1) < take:
            take = max(fits, 1)
            broke_at = rows[take]
            rows = rows[:take]
            ts_col, node_col, tag_col = ts_col[:take], node_col[:take], tag_col[:take]
            data, meta_col = data[:take], meta_col[:take]
    if broke_at is not None:  # the record that did not fit was examined, not consumed
        scanned = below + broke_at
    elif full and rows:
        scanned = below + rows[-1] + 1
    else:
        scanned = width
    nxt = pos + scanned
    base = t.origin + first
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
    return SlotSelection(cols, missing, nxt, tomb, scanned)


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
