"""A write's Append frames (STORAGE §3.1) from its records, in one call. Pure.

The write path's per-record loop: the payload blob and the frame of each record, each but
the last flagged `more` (one atomic submission). `encode_appends_py` defines it;
`speedups.encode_appends` does the same in C, and `encode_appends` is whichever serves
(`tests/core/test_native.py` holds the two equal).
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from typing import Protocol

from seglog.core.frames import encode_append
from seglog.core.native import speedups
from seglog.core.payload_blob import encode_blob


class AppendSource(Protocol):
    """What a record to append exposes (`seglog.model.RecordIn`)."""

    @property
    def data_json(self) -> bytes: ...
    @property
    def meta_json(self) -> bytes | None: ...
    @property
    def node(self) -> str | None: ...
    @property
    def tag(self) -> str | None: ...


def encode_appends_py(
    topic_id: int,
    first_seq: int,
    ts: int,
    records: Sequence[AppendSource],
    durable: bool,
    out: list[bytes],
) -> None:
    """Append to `out` one frame per record, seq `first_seq + i`. Raises ValueError (and
    leaves `out` as it was) when a field does not fit its width. Data and meta are `bytes`
    (the C version refuses other buffers)."""
    frames: list[bytes] = []
    last = first_seq + len(records) - 1
    seq = first_seq
    try:
        for r in records:
            blob = encode_blob(r.data_json, r.meta_json)
            frames.append(
                encode_append(topic_id, seq, ts, r.node, r.tag, blob, durable, seq != last)
            )
            seq += 1
    except struct.error as e:
        raise ValueError(f"append frame field out of range near seq {seq}: {e}") from None
    out.extend(frames)


# `speedups.encode_appends` takes the twin's arguments and does what it does.
encode_appends = encode_appends_py if speedups is None else speedups.encode_appends
