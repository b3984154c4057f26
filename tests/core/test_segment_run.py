"""Runs verified a run at a time (`segment_run`) against the frame-at-a-time reference
(`run_blobs` + `decode_blob`): same payloads for any run, and the same error for any
corruption of the bytes the checksum or the index covers."""

from __future__ import annotations

import itertools

import numpy as np
import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from seglog.core.payload_blob import decode_blob, encode_blob
from seglog.core.segment_format import (
    SegmentCorruption,
    SegmentRecord,
    encode_segment,
    idx_view,
    iter_frames,
    run_blobs,
    scan_del_flags,
)
from seglog.core.segment_run import (
    SMALL_RUN,
    run_blobs_of,
    run_payloads,
    segment_columns,
    segment_del_flags,
    shared_ints,
    verify_run,
)

JSON = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**63), 2**63 - 1) | st.text(max_size=6),
    lambda inner: (
        st.lists(inner, max_size=3)
        | st.dictionaries(st.sampled_from(["m", "d", "x"]), inner, max_size=2)
    ),
    max_leaves=6,
)
BLOB = st.one_of(
    st.builds(
        lambda d, m: encode_blob(orjson.dumps(d), None if m is None else orjson.dumps(m)),
        JSON,
        st.none() | JSON,
    ),
    st.just(b'{"m":1,"d":2}'),  # a blob not written by `encode_blob`: decoded exactly
    st.just(b'{"d":"\\"m\\""}'),  # `"m"` inside the data text
)


@st.composite
def whole_segments(draw: st.DrawFn) -> tuple[bytes, np.ndarray, int, list[SegmentRecord]]:
    """A whole segment's `.data` bytes and index over 1..10 random records."""
    n = draw(st.integers(1, 10))
    first = draw(st.integers(1, 2**40))
    names = st.none() | st.text(max_size=5)
    recs = [
        SegmentRecord(
            first + i,
            draw(st.integers(0, 2**40)),
            draw(names),
            draw(names),
            draw(BLOB),
            draw(st.booleans()),
        )
        for i in range(n)
    ]
    data, idx_bytes = encode_segment(recs, first)
    return data, idx_view(idx_bytes), first, recs


@st.composite
def runs(draw: st.DrawFn) -> tuple[bytes, int, np.ndarray, np.ndarray, list[SegmentRecord]]:
    """A run of consecutive frames cut out of a random segment, offsets relative to it."""
    data, idx, first, recs = draw(whole_segments())
    n = len(recs)
    lo = draw(st.integers(0, n - 1))
    hi = draw(st.integers(lo + 1, n))
    offsets = idx["offset"][lo:hi].astype(np.int64)
    lengths = idx["len"][lo:hi].astype(np.int64)
    base = int(offsets[0])
    chunk = data[base : int(offsets[-1] + lengths[-1])]
    return chunk, first + lo, offsets - base, lengths, recs[lo:hi]


@settings(max_examples=300, derandomize=True, database=None)
@given(runs())
def test_payloads_are_what_decode_blob_gives(run: tuple) -> None:
    chunk, first, offsets, lengths, recs = run
    assert run_blobs_of(chunk, first, offsets, lengths) == [r.blob for r in recs]
    data, meta = run_payloads(chunk, first, offsets, lengths)
    assert list(zip(data, meta, strict=True)) == [decode_blob(r.blob) for r in recs]


@settings(max_examples=300, derandomize=True, database=None)
@given(runs(), st.data())
def test_any_corruption_raises_what_run_blobs_raises(run: tuple, draw: st.DataObject) -> None:
    chunk, first, offsets, lengths, _ = run
    pos = draw.draw(st.integers(0, len(chunk) - 1))
    ends = (offsets + lengths - 1).tolist()
    if pos in ends:  # a del_flag: outside the checksum by design (STORAGE §4.2)
        return
    bad = bytearray(chunk)
    bad[pos] ^= 1 << draw.draw(st.integers(0, 7))
    with pytest.raises(SegmentCorruption) as want:
        run_blobs(bytes(bad), first, offsets.tolist(), lengths.tolist())
    with pytest.raises(SegmentCorruption) as got:
        verify_run(bytes(bad), first, offsets, lengths)
    assert str(got.value) == str(want.value)


@pytest.mark.parametrize("n", [1, SMALL_RUN - 1, SMALL_RUN, 3 * SMALL_RUN])
def test_small_and_vectorized_runs_read_the_same(n: int) -> None:
    """Runs shorter than `SMALL_RUN` take the per-frame loop, longer ones the vectorized
    checks: both give the blobs, and both refuse a damaged checksum with the same error."""
    recs = [
        SegmentRecord(9 + i, i, None, "t" if i % 3 else None, encode_blob(b"%d" % i, None), False)
        for i in range(n)
    ]
    data, idx_bytes = encode_segment(recs, 9)
    idx = idx_view(idx_bytes)
    offsets, lengths = idx["offset"].astype(np.int64), idx["len"].astype(np.int64)
    assert run_blobs_of(data, 9, offsets, lengths) == [r.blob for r in recs]
    bad = bytearray(data)
    bad[int(offsets[-1] + lengths[-1]) - 3] ^= 0x10  # last frame's checksum
    with pytest.raises(SegmentCorruption, match=f"seq {8 + n}.*checksum"):
        run_blobs_of(bytes(bad), 9, offsets, lengths)


def test_wrong_seq_and_bad_index_entries_are_corruption() -> None:
    recs = [SegmentRecord(5 + i, i, None, None, encode_blob(b"1", None), False) for i in range(3)]
    data, idx_bytes = encode_segment(recs, 5)
    idx = idx_view(idx_bytes)
    offsets, lengths = idx["offset"].astype(np.int64), idx["len"].astype(np.int64)
    assert run_payloads(data, 5, offsets, lengths) == ([b"1"] * 3, [None] * 3)
    with pytest.raises(SegmentCorruption, match="holds seq 5"):
        verify_run(data, 6, offsets, lengths)
    with pytest.raises(SegmentCorruption, match="out of range"):
        verify_run(data[:-1], 5, offsets, lengths)
    with pytest.raises(SegmentCorruption, match="index length"):
        verify_run(data, 5, offsets, lengths + np.array([0, 1, -1]))


@settings(max_examples=200, derandomize=True, database=None)
@given(whole_segments())
def test_segment_columns_are_the_frames_iter_frames_decodes(seg: tuple) -> None:
    data, idx, first, recs = seg
    cols = segment_columns(data, first, idx["offset"], idx["len"])
    assert cols.seq.tolist() == [r.seq for r in recs]
    assert cols.ts.tolist() == [r.ts for r in recs]
    assert cols.deleted.tolist() == [r.deleted for r in recs]
    assert cols.node == [r.node for r in recs] and cols.tag == [r.tag for r in recs]
    assert list(zip(cols.data, cols.meta, strict=True)) == [decode_blob(r.blob) for r in recs]


@settings(max_examples=200, derandomize=True, database=None)
@given(whole_segments(), st.data())
def test_segment_columns_fail_on_any_corruption_iter_frames_fails_on(
    seg: tuple, draw: st.DataObject
) -> None:
    data, idx, first, _ = seg
    bad = bytearray(data)
    pos = draw.draw(st.integers(0, len(data) - 1))
    bad[pos] ^= 1 << draw.draw(st.integers(0, 7))
    try:
        list(iter_frames(bytes(bad), first))
    except SegmentCorruption:
        with pytest.raises(SegmentCorruption):
            segment_columns(bytes(bad), first, idx["offset"], idx["len"])
    else:  # a del_flag flip: a delete, not corruption
        cols = segment_columns(bytes(bad), first, idx["offset"], idx["len"])
        assert cols.seq.tolist() == list(range(first, first + len(idx)))


def test_segment_columns_refuse_an_index_that_does_not_cover_the_file() -> None:
    recs = [SegmentRecord(1 + i, i, "n", None, encode_blob(b"1", None), False) for i in range(3)]
    data, idx_bytes = encode_segment(recs, 1)
    idx = idx_view(idx_bytes)
    with pytest.raises(SegmentCorruption):
        segment_columns(data + b"\0", 1, idx["offset"], idx["len"])
    with pytest.raises(SegmentCorruption):
        segment_columns(data, 1, idx["offset"][:2], idx["len"][:2])
    with pytest.raises(SegmentCorruption):
        segment_columns(data, 1, idx["offset"][::-1].copy(), idx["len"])


@settings(max_examples=200, derandomize=True, database=None)
@given(whole_segments(), st.data())
def test_del_flags_are_what_scan_del_flags_finds(seg: tuple, draw: st.DataObject) -> None:
    data, idx, first, _ = seg
    offsets, lengths = idx["offset"], idx["len"]
    assert segment_del_flags(data, first, offsets, lengths) == scan_del_flags(data, first)
    bad = bytearray(data)
    bad[draw.draw(st.integers(0, len(data) - 1))] ^= 1 << draw.draw(st.integers(0, 7))
    try:
        want = scan_del_flags(bytes(bad), first)
    except SegmentCorruption:
        with pytest.raises(SegmentCorruption):
            segment_del_flags(bytes(bad), first, offsets, lengths)
    else:
        assert segment_del_flags(bytes(bad), first, offsets, lengths) == want


@given(st.lists(st.integers(0, 2**64 - 1), max_size=40).map(sorted))
def test_shared_ints_are_the_values_with_equal_neighbours_one_object(values: list[int]) -> None:
    got = shared_ints(np.array(values, np.uint64))
    assert got == values and all(type(v) is int for v in got)
    for a, b in itertools.pairwise(range(len(got))):
        assert (got[a] is got[b]) == (values[a] == values[b])
