"""Arrow columns gathered from segment bytes (`segment_arrow.segment_table`) against the
same columns decoded record by record (`segment_columns`): equal for any segment and any
rows whenever the gather answers, and it declines exactly where it cannot vouch."""

from __future__ import annotations

import struct
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest
import xxhash
from hypothesis import given, settings
from hypothesis import strategies as st

from seglog.arrow_spans import texts_array
from seglog.core.frames import FrameError
from seglog.core.payload_blob import encode_blob
from seglog.core.segment_format import SegmentCorruption, SegmentRecord, encode_segment, idx_view
from seglog.core.segment_run import (
    blobs_sliceable,
    segment_columns,
    segment_columns_of,
    segment_layout,
)
from seglog.spark.errors import SeglogCorruptionError
from seglog.spark.files import SegmentPartition, SegmentSlice, _table_of_columns, read_segment
from seglog.spark.options import parse_files_options
from seglog.spark.schema import arrow_schema
from seglog.spark.segment_arrow import SegmentRows, joined_table, segment_table
from seglog.storage.segment import list_topic_segments
from tests.core.test_segment_run import whole_segments
from tests.spark.test_files_units import write_segment
from tests.spark.test_logic import SPARK_SCHEMA


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
    if not blobs_sliceable(data, lay.blob_start, lay.blob_end).all():
        assert table is None  # a payload with meta or in a foreign shape, returned or not
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


@settings(max_examples=200, deadline=None)
@given(st.lists(st.text("abcé", max_size=20), min_size=1, max_size=40), st.integers(0, 80))
def test_pieces_cut_the_texts_below_the_limit_in_order(words: list[str], limit: int) -> None:
    texts = [w.encode() for w in words]
    data = b"".join(texts)
    ends = np.cumsum([len(t) for t in texts]).astype(np.int64)
    starts = ends - np.array([len(t) for t in texts], np.int64)
    n = len(texts)
    rows = SegmentRows(
        data, np.arange(1, n + 1, dtype=np.int64), np.arange(n, dtype=np.int64), starts, ends,
        pa.nulls(n, pa.string()), pa.array([str(i) for i in range(n)]),
    )  # fmt: skip
    pieces = rows.pieces(limit)
    assert all(p.text_bytes <= limit or len(p) == 1 for p in pieces)
    assert all(len(p) for p in pieces)
    table = joined_table(pieces)
    assert table.column("data").to_pylist() == words
    assert table.column("seq").to_pylist() == list(range(1, n + 1))
    assert table.column("tag").to_pylist() == [str(i) for i in range(n)]
    if rows.text_bytes <= limit:
        assert pieces == [rows]


def test_texts_array_gathers_the_spans_of_each_run_in_order() -> None:
    a, b = b"abcdefghij", b"xyz"
    got = texts_array(
        [
            (a, np.array([0, 3, 3, 7], np.int64), np.array([2, 3, 6, 10], np.int64)),
            (b, np.array([], np.int64), np.array([], np.int64)),
            (b, np.array([1], np.int64), np.array([3], np.int64)),
        ]
    )
    assert got.type == pa.string()
    assert got.to_pylist() == ["ab", "", "def", "hij", "yz"]
    assert texts_array([]).to_pylist() == []


@pytest.mark.parametrize("live", [((1, 1),), ((2, 2),)])  # one row returned, or none
def test_a_bad_payload_fails_the_read_even_in_a_frame_not_returned(
    tmp_path: Path, live: tuple[tuple[int, int], ...]
) -> None:
    recs = [
        SegmentRecord(1, 10, None, None, encode_blob(b"1", None), False),
        SegmentRecord(2, 11, None, None, b"not json", True),  # deleted: never returned
    ]
    data, idx = layout_of(recs, 1)
    lay = segment_layout(data, 1, idx["offset"], idx["len"])  # checksums hold
    assert segment_table(data, lay, np.array([0])) is None
    with pytest.raises(FrameError):
        segment_columns_of(data, lay)
    write_segment(tmp_path, 7, recs)
    (seg,) = list_topic_segments(tmp_path, 7, None)
    part = SegmentPartition("t", 7, (SegmentSlice(1, 2, seg, live),))
    opts = parse_files_options({"path": str(tmp_path), "topics": "t"})
    with pytest.raises(SeglogCorruptionError, match="corrupt segment"):
        list(read_segment(opts, arrow_schema(SPARK_SCHEMA), part))
