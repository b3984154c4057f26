"""A write's Append frames (STORAGE §3.1) from its records, in one call. Pure.

The write path's per-record loop, over a `RecordBatch`'s columns: the payload blob and the
frame of each record, each but the last flagged `more` (one atomic submission).
`encode_appends_py` defines it; `speedups.encode_appends` does the same in C, and
`encode_appends` is whichever serves (`tests/core/test_native.py` holds the two equal).
"""

from __future__ import annotations

import struct

from seglog.core.frames import encode_append
from seglog.core.native import speedups
from seglog.core.payload_blob import encode_blob


def encode_appends_py(
    topic_id: int,
    first_seq: int,
    ts: int,
    data: list[bytes],
    meta: list[bytes | None],
    node: list[str | None],
    tag: list[str | None],
    durable: bool,
    out: list[bytes],
) -> None:
    """Append to `out` one frame per record, seq `first_seq + i`; the records are the four
    columns of a `seglog.model.RecordBatch`. Raises ValueError (and leaves `out` as it was)
    when a field does not fit its width or the columns differ in length. Data and meta are
    `bytes` (the C version refuses other buffers)."""
    if not len(data) == len(meta) == len(node) == len(tag):
        raise ValueError("a record batch's columns differ in length")
    frames: list[bytes] = []
    last = first_seq + len(data) - 1
    seq = first_seq
    try:
        for d, m, n, t in zip(data, meta, node, tag, strict=True):
            blob = encode_blob(d, m)
            frames.append(encode_append(topic_id, seq, ts, n, t, blob, durable, seq != last))
            seq += 1
    except struct.error as e:
        raise ValueError(f"append frame field out of range near seq {seq}: {e}") from None
    out.extend(frames)


# `speedups.encode_appends` takes the twin's arguments and does what it does.
encode_appends = encode_appends_py if speedups is None else speedups.encode_appends
