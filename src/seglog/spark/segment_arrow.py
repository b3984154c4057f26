"""Arrow columns straight from a sealed segment's bytes (issue: offline reads at Arrow
speed): no Python object per record.

The payloads (and nodes, tags) of a segment's frames are ascending, disjoint spans of its
`.data` bytes. A batch's payloads, from several segments, are copied once into the data
column's buffer (`arrow_spans.texts_array`); nodes and tags are coded against each
segment's table of distinct labels (`label_codes`, C, each label decoded once) and taken
from it by Arrow. No Python object per record.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt
import pyarrow as pa

from seglog.arrow_spans import texts_array
from seglog.core.segment_format import SegmentCorruption
from seglog.core.segment_run import Ints, SegmentLayout, blobs_sliceable, layout_coded_labels


def names_array(coded: tuple[list[str], npt.NDArray[np.uint32]], rows: Ints) -> pa.Array:
    """The nullable string column of a node or tag field for `rows`, from the segment's
    label table and codes (`layout_coded_labels`; code 0: the frame has none)."""
    texts, codes = coded
    if not texts:
        return pa.nulls(len(rows), pa.string())
    picked = codes if len(rows) == len(codes) else codes[rows]
    at = pa.array(picked.astype(np.int32) - 1, mask=picked == 0)
    return pa.array(texts, pa.string()).take(at)


@dataclass(frozen=True)
class SegmentRows:
    """The rows a read returns from one verified segment, located but not yet copied:
    batches of many segments are gathered in one pass (`joined_table`)."""

    data: bytes
    seq: Ints
    ts: Ints  # ms
    starts: Ints  # each row's JSON text is data[starts[k]:ends[k]]
    ends: Ints
    node: pa.Array
    tag: pa.Array

    def __len__(self) -> int:
        return len(self.seq)

    @property
    def nbytes(self) -> int:
        """The bytes these rows keep alive until they are gathered: their segment's (which
        hold every text they gather)."""
        return len(self.data)

    @property
    def text_bytes(self) -> int:
        return int((self.ends - self.starts).sum())

    def pieces(self, limit: int) -> list[SegmentRows]:
        """These rows in consecutive pieces of at most `limit` bytes of text each (a row
        larger than that alone): a batch's texts must fit 32-bit Arrow offsets."""
        if self.text_bytes <= limit:
            return [self]
        upto = np.cumsum(self.ends - self.starts)  # text bytes of rows 0..k
        cuts, at, base = [], 0, 0
        while at < len(self):
            # the first row past the limit starts the next piece (one row at least)
            nxt = max(int(np.searchsorted(upto, base + limit, side="right")), at + 1)
            cuts.append((at, nxt))
            base = int(upto[nxt - 1])
            at = nxt
        return [
            SegmentRows(
                self.data,
                self.seq[a:b],
                self.ts[a:b],
                self.starts[a:b],
                self.ends[a:b],
                self.node.slice(a, b - a),
                self.tag.slice(a, b - a),
            )
            for a, b in cuts
        ]


def segment_rows(data: bytes, lay: SegmentLayout, rows: Ints) -> SegmentRows | None:
    """The frames `rows` of a verified segment as `SegmentRows`, or None when this path
    cannot vouch for the exact result: a payload of the segment — returned or not, as the
    record-by-record path checks every frame — carries meta or is not in the sliced form,
    or a node or tag is not UTF-8 (the caller then decodes the segment record by record,
    which raises the precise error)."""
    starts, ends = lay.blob_start, lay.blob_end
    sliceable = blobs_sliceable(data, starts, ends)
    if not sliceable.all():
        return None
    try:
        node_codes, tag_codes = layout_coded_labels(data, lay)
    except SegmentCorruption:  # a node or tag that is not UTF-8
        return None
    node, tag = names_array(node_codes, rows), names_array(tag_codes, rows)
    every = len(rows) == len(starts)  # no deletes in the segment: no gathers
    return SegmentRows(
        data,
        lay.seq if every else lay.seq[rows],
        (lay.ts if every else lay.ts[rows]).astype(np.int64),
        (starts if every else starts[rows]) + 5,  # `{"d":`
        (ends if every else ends[rows]) - 1,  # `}`
        node,
        tag,
    )


def joined_table(parts: Sequence[SegmentRows]) -> pa.Table:
    """Columns `seq`, `ts` (ms), `node`, `tag`, `data` (JSON text) of `parts`' rows in
    order (at least one part), each text copied once, straight into the column's buffer."""
    return pa.table(
        {
            "seq": pa.array(np.concatenate([p.seq for p in parts]), pa.int64()),
            "ts": pa.array(np.concatenate([p.ts for p in parts]), pa.int64()),
            "node": pa.concat_arrays([p.node for p in parts]),
            "tag": pa.concat_arrays([p.tag for p in parts]),
            "data": texts_array([(p.data, p.starts, p.ends) for p in parts]),
        }
    )


def segment_table(data: bytes, lay: SegmentLayout, rows: Ints) -> pa.Table | None:
    """`segment_rows` gathered into a table (None where it declines)."""
    picked = segment_rows(data, lay, rows)
    return None if picked is None else joined_table([picked])
