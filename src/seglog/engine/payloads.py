"""Payloads that left memory, read back from sealed segments after the topic lock is
released: a read pins the segments it needs under the lock, and sealed payloads never
change (only delete flags, outside the checksum), so no lock is needed to read them."""

from __future__ import annotations

from dataclasses import replace

from seglog.core.payload_blob import decode_blob
from seglog.model import Record
from seglog.storage.segment import PinnedSegment, SegmentStore


def fill(
    records: list[Record], missing: list[int], store: SegmentStore, pins: list[PinnedSegment]
) -> int:
    """Put the payload of `records[k]` for every `k` in `missing` (ascending seqs), a segment
    run at a time. Returns how many came from the cold tier."""
    cold = filled = j = 0
    for pin in pins:
        start = j
        while j < len(missing) and records[missing[j]].seq <= pin.info.last_seq:
            j += 1
        run = missing[start:j]
        if not run:
            continue
        lo = records[run[0]].seq
        if lo < pin.info.first_seq:
            break  # a missing payload that no pinned segment holds
        blobs = store.read_run(pin, lo, records[run[-1]].seq)
        for k in run:
            data, meta = decode_blob(blobs[records[k].seq - lo])
            records[k] = replace(records[k], data_json=data, meta_json=meta)
        filled += len(run)
        if pin.info.tier == "cold":
            cold += len(run)
    if filled != len(missing):
        seq = records[missing[filled]].seq
        raise LookupError(f"seq {seq} has no payload in memory and no sealed segment")
    return cold
