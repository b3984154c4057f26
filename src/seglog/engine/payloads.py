"""Payloads that left memory, read back from sealed segments after the topic lock is
released: a read pins the segments it needs under the lock, and sealed payloads never
change (only delete flags, outside the checksum), so no lock is needed to read them."""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Iterator, Sequence

import numpy as np
import numpy.typing as npt

from seglog.core.payload_blob import decode_blob
from seglog.engine.topic import Missing
from seglog.model import Record
from seglog.storage.segment import PinnedSegment, SegmentStore


def runs_by_segment(
    seqs: Sequence[int] | npt.NDArray[np.int64], pins: list[PinnedSegment]
) -> Iterator[tuple[PinnedSegment, int, int]]:
    """`(pin, start, end)` for each pinned segment holding `seqs[start:end]` (ascending
    seqs, pins in seq order). Raises `LookupError` for a seq no pinned segment holds."""
    j = 0
    n = len(seqs)
    for pin in pins:
        start = j
        j = bisect_right(seqs, pin.info.last_seq, j)
        if j == start:
            continue
        if seqs[start] < pin.info.first_seq:
            j = start
            break  # a missing payload that no pinned segment holds
        yield pin, start, j
    if j != n:
        raise LookupError(f"seq {seqs[j]} has no payload in memory and no sealed segment")


def fill(
    records: list[Record], missing: list[Missing], store: SegmentStore, pins: list[PinnedSegment]
) -> int:
    """Build each record `missing` describes (ascending seqs) from its sealed segment, a
    segment run at a time, into its place in `records`. Returns how many came from the cold
    tier."""
    cold = 0
    seqs = [m[1] for m in missing]
    for pin, start, end in runs_by_segment(seqs, pins):
        lo = seqs[start]
        blobs = store.read_run(pin, lo, seqs[end - 1])
        for k, seq, ts, node, tag in missing[start:end]:
            data, meta = decode_blob(blobs[seq - lo])
            records[k] = Record(seq, ts, data, meta, node, tag)
        if pin.info.tier == "cold":
            cold += end - start
    return cold
