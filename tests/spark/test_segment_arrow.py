"""Arrow columns gathered from segment bytes (`segment_arrow.segment_table`) against the
same columns decoded record by record (`segment_columns`): equal for any segment and any
rows whenever the gather answers, and it declines exactly where it cannot vouch."""

from __future__ import annotations

import struct

import numpy as np
import pyarrow as pa
import pytest
import xxhash
from hypothesis import given, settings
from hypothesis import strategies as st

from seglog.core.payload_blob import encode_blob
from seglog.core.segment_format import SegmentCorruption, SegmentRecord, encode_segment, idx_view
from seglog.core.segment_run import blobs_sliceable, segment_columns, segment_layout
from seglog.spark.files import _table_of_columns
from seglog.spark.segment_arrow import segment_table, spans_array
from tests.core.test_segment_run import whole_segments


def layout_of(recs: list[SegmentRecord], first: int) -> tuple[bytes, np.ndarray]:
    data, idx_bytes = encode_segment(recs, first)
    return data, idx_view(idx_bytes)


@settings(max_examples=300, derandomize=True, database=None)
@given(whole_segments(), st.data())
def test_gathered_columns_are_the_decoded_columns(seg: tuple, draw: st.DataObject) -> None:
    data, idx, first, recs = seg
    lay = segment_layout(data, first, idx["offset"], idx["len"])
    keep = draw.draw(st.lists(st.booleans(), min_size=len(recs), max_size=len(recs)))
    rows = np.flatnonzero(np.array(keep, np.bool_)).astype(np.int64)
    table = segment_table(data, lay, rows)
    cols = segment_columns(data, first, idx["offset"], idx["len"])
    expected = _table_of_columns(cols, rows, include_meta=True)
    sliced = blobs_sliceable(data, lay.blob_start, lay.blob_end)[rows]
    if not sliced.all():  # a returned payload with meta or in a foreign shape
        assert table is None
        return
    assert table is not None
    assert all(m is None for m in expected.column("meta").to_pylist())
    assert table.equals(expected.drop_columns(["meta"]))


def test_a_tag_that_is_not_utf8_declines_even_in_a_row_not_returned() -> None:
    recs = [
        SegmentRecord(1, 10, None, "ok", encode_blob(b"1", None), False),
        SegmentRecord(2, 11, None, "zz", encode_blob(b"2", None), True),
    ]
    data, idx = layout_of(recs, 1)
    bad = bytearray(data)
    off, end = int(idx["offset"][1]), int(idx["offset"][1] + idx["len"][1])
    bad[bad.index(b"zz", off)] = 0xFF  # not UTF-8; the frame's checksum re-made to match
    bad[end - 9 : end - 1] = struct.pack(
        "<Q", xxhash.xxh3_64_intdigest(bytes(bad[off + 4 : end - 9]))
    )
    lay = segment_layout(bytes(bad), 1, idx["offset"], idx["len"])  # passes: checksums hold
    good = segment_layout(data, 1, idx["offset"], idx["len"])
    assert segment_table(data, good, np.array([0])) is not None
    assert segment_table(bytes(bad), lay, np.array([0])) is None
    with pytest.raises(SegmentCorruption, match="not UTF-8"):
        segment_columns(bytes(bad), 1, idx["offset"], idx["len"])


def test_spans_array_gathers_ascending_spans() -> None:
    buf = pa.py_buffer(b"abcdefghij")
    starts = np.array([0, 3, 3, 7], np.int64)
    ends = np.array([2, 3, 6, 10], np.int64)
    got = spans_array(buf, starts, ends, np.array([3, 0, 1, 2], np.int64))
    assert got.to_pylist() == [b"hij", b"ab", b"", b"def"]
    assert spans_array(buf, starts, ends, np.array([], np.int64)).to_pylist() == []
