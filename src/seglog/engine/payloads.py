"""Payloads that left memory, read back from sealed segments after the topic lock is
released: a read pins the segments it needs under the lock, and sealed payloads never
change (only delete flags, outside the checksum), so no lock is needed to read them."""

from __future__ import annotations

from seglog.core.payload_blob import decode_blob
from seglog.engine.topic import Missing
from seglog.model import Record
from seglog.storage.segment import PinnedSegment, SegmentStore


def fill(
    records: list[Record], missing: list[Missing], store: SegmentStore, pins: list[PinnedSegment]
) -> int:
    """Build each record `missing` describes (ascending seqs) from its sealed segment, a
    segment run at a time, into its place in `records`. Returns how many came from the cold
    tier."""
    cold = filled = j = 0
    n = len(missing)
    for pin in pins:
        start = j
        last = pin.info.last_seq
        while j < n and missing[j][1] <= last:
            j += 1
        if j == start:
            continue
        lo = missing[start][1]
        if lo < pin.info.first_seq:
            break  # a missing payload that no pinned segment holds
        blobs = store.read_run(pin, lo, missing[j - 1][1])
        for k, seq, ts, node, tag in missing[start:j]:
            data, meta = decode_blob(blobs[seq - lo])
            records[k] = Record(seq, ts, data, meta, node, tag)
        filled = j
        if pin.info.tier == "cold":
            cold += j - start
    if filled != n:
        raise LookupError(
            f"seq {missing[filled][1]} has no payload in memory and no sealed segment"
        )
    return cold
