"""Arrow columns straight from a sealed segment's bytes (issue: offline reads at Arrow
speed): no Python object per record.

The payloads (and nodes, tags) of a segment's frames are ascending, disjoint spans of its
`.data` bytes. Offsets `[s0, e0, s1, e1, …]` over those bytes make a binary array, with no
copy, whose even elements are the spans (the odd ones are the bytes between them); one
Arrow `take` of the wanted even elements gathers them into a compact column, in C++. The
only per-record Python left is the checksum of each frame (`segment_layout`).
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt
import pyarrow as pa

from seglog.arrow_spans import spans_array
from seglog.core.segment_run import Ints, SegmentLayout, blobs_sliceable


def names_array(
    buf: pa.Buffer, present: npt.NDArray[np.bool_], at: Ints, width: Ints, rows: Ints
) -> pa.Array | None:
    """The nullable string column of a node or tag field for `rows` (null where the frame
    has none), or None when one of them — in any frame, returned or not — is not UTF-8."""
    if not present.any():
        return pa.nulls(len(rows), pa.string())
    every = spans_array(buf, at, at + width, np.arange(len(at), dtype=np.int64))
    validity = pa.py_buffer(np.packbits(present, bitorder="little"))
    _, offsets, values = every.buffers()
    names = pa.Array.from_buffers(pa.string(), len(at), [validity, offsets, values])
    try:
        names.validate(full=True)
    except pa.ArrowInvalid:
        return None
    return names.take(pa.array(rows.astype(np.int64)))


def segment_table(data: bytes, lay: SegmentLayout, rows: Ints) -> pa.Table | None:
    """Columns `seq`, `ts` (ms), `node`, `tag`, `data` (JSON text) of the frames `rows` of
    a verified segment, or None when this path cannot vouch for the exact result: a
    payload of the segment — returned or not, as the record-by-record path checks every
    frame — carries meta or is not in the sliced form, or a node or tag is not UTF-8 (the
    caller then decodes the segment record by record, which raises the precise error)."""
    starts, ends = lay.blob_start, lay.blob_end
    sliceable = blobs_sliceable(data, starts, ends)
    if not sliceable.all():
        return None
    buf = pa.py_buffer(data)
    node = names_array(buf, lay.has_node, lay.node_at, lay.node_len, rows)
    tag = names_array(buf, lay.has_tag, lay.tag_at, lay.tag_len, rows)
    if node is None or tag is None:
        return None
    payload = spans_array(buf, starts + 5, ends - 1, rows).view(pa.string())
    return pa.table(
        {
            "seq": pa.array(lay.seq[rows]),
            "ts": pa.array(lay.ts[rows].astype(np.int64)),
            "node": node,
            "tag": tag,
            "data": payload,
        }
    )
