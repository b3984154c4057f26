"""Segment `.data`/`.idx` formats (STORAGE §4.2, §4.3): round trip, exact bytes, corruption."""

from __future__ import annotations

import itertools
import struct

import numpy as np
import pytest
import xxhash
from hypothesis import given, settings
from hypothesis import strategies as st

from seglog.core.segment_format import (
    DEL_FLAG,
    IDX_ENTRY_SIZE,
    SegmentCorruption,
    SegmentRecord,
    decode_frame,
    decode_frame_at,
    encode_segment,
    flag_runs,
    idx_lookup,
    idx_view,
    iter_frames,
    run_blobs,
    scan_del_flags,
    ts_search,
)

U64 = 2**64 - 1

names = st.none() | st.text(max_size=12)


@st.composite
def segments(draw: st.DrawFn) -> tuple[list[SegmentRecord], int]:
    n = draw(st.integers(1, 12))
    first = draw(st.integers(0, U64 - n))
    recs = [
        SegmentRecord(
            first + i,
            draw(st.integers(0, U64)),
            draw(names),
            draw(names),
            draw(st.binary(max_size=64)),
            draw(st.booleans()),
        )
        for i in range(n)
    ]
    return recs, first


@settings(max_examples=200, derandomize=True, database=None)
@given(segments())
def test_round_trip(seg: tuple[list[SegmentRecord], int]) -> None:
    recs, first = seg
    data, idx_bytes = encode_segment(recs, first)
    assert len(idx_bytes) == IDX_ENTRY_SIZE * len(recs)
    assert list(iter_frames(data, first)) == recs
    idx = idx_view(idx_bytes)
    assert scan_del_flags(data, first) == ([r.seq for r in recs if r.deleted], len(recs))
    end = 0
    for i, r in enumerate(recs):
        offset, length = idx_lookup(idx, first, r.seq)
        assert offset == end
        rec, end = decode_frame(data, offset, r.seq)
        assert rec == r == decode_frame_at(memoryview(data), offset)
        assert end - offset == length
        assert int(idx[i]["ts"]) == r.ts
        assert int(idx[i]["flags"]) == (r.tag is not None) | (r.node is not None) << 1
    assert end == len(data)
    offsets, lengths = idx["offset"].tolist(), idx["len"].tolist()
    for lo in range(len(recs)):
        sub_off, sub_len = offsets[lo:], lengths[lo:]
        chunk = data[sub_off[0] :]
        rel = [o - sub_off[0] for o in sub_off]
        assert run_blobs(chunk, first + lo, rel, sub_len) == [r.blob for r in recs[lo:]]


def test_hand_computed_frame_and_index_entry() -> None:
    rec = SegmentRecord(7, 0x0102030405060708, "n", "tg", b'{"d":1}', False)
    data, idx = encode_segment([rec], 7)
    body = bytes.fromhex(
        "03"  # flags: has_tag | has_node
        "0700000000000000"  # seq
        "0807060504030201"  # ts
        "0100" "0200" "07000000"  # node_len, tag_len, data_len
        "6e" "7467" "7b2264223a317d"  # "n", "tg", {"d":1}
    )  # fmt: skip
    checksum = xxhash.xxh3_64_intdigest(body)
    assert data == bytes.fromhex("2c000000") + body + struct.pack("<Q", checksum) + b"\x00"
    assert len(data) == 4 + 0x2C
    # offset, len = 4 + frame_len, ts, flags, pad
    assert idx == bytes.fromhex(
        "00000000" "30000000" "0807060504030201" "03" "000000"
    )  # fmt: skip


def test_deleted_hole_without_node_or_tag() -> None:
    data, idx = encode_segment([SegmentRecord(1, 5, None, None, b'{"d":null}', True)], 1)
    assert data[4] == 0 and data[-1] == DEL_FLAG
    assert data[21:25] == b"\x00\x00\x00\x00"  # node_len, tag_len
    assert idx[16] == 0
    assert decode_frame_at(data, 0).deleted


def _two_frames() -> tuple[bytes, int]:
    recs = [
        SegmentRecord(41, 1000, "node-a", "t", b'{"d":{"x":1},"m":{"k":"v"}}', False),
        SegmentRecord(42, 1001, None, None, b'{"d":2}', False),
    ]
    data, _ = encode_segment(recs, 41)
    return data, 4 + struct.unpack_from("<I", data)[0]


@pytest.mark.parametrize("mask", [0x01, 0x80, 0xFF])
def test_every_byte_but_del_flag_is_covered(mask: int) -> None:
    data, first_len = _two_frames()
    for pos in range(first_len - 1):
        bad = bytearray(data)
        bad[pos] ^= mask
        with pytest.raises(SegmentCorruption):
            decode_frame_at(bytes(bad), 0, 41)
        with pytest.raises(SegmentCorruption):
            list(iter_frames(bytes(bad), 41))
        with pytest.raises(SegmentCorruption):
            scan_del_flags(bytes(bad), 41)


@pytest.mark.parametrize("flag", [0x00, 0x01, 0x7F, 0xD4, 0xD5, 0xFF])
def test_del_flag_never_breaks_the_checksum(flag: int) -> None:
    data, first_len = _two_frames()
    bad = bytearray(data)
    bad[first_len - 1] = flag
    rec = decode_frame_at(bytes(bad), 0, 41)
    assert rec.deleted is (flag == DEL_FLAG)
    assert scan_del_flags(bytes(bad), 41) == ([41] if flag == DEL_FLAG else [], 2)


def test_corruption_message_names_seq_and_offset() -> None:
    data, first_len = _two_frames()
    bad = bytearray(data)
    bad[first_len + 30] ^= 1  # inside the second frame's node/tag/data
    with pytest.raises(SegmentCorruption, match=rf"seq 42 .*offset {first_len}"):
        list(iter_frames(bytes(bad), 41))


def test_truncated_and_misplaced_frames_are_corruption() -> None:
    data, first_len = _two_frames()
    for cut in (1, 3, 4, 20, first_len - 1, first_len + 2, len(data) - 1):
        with pytest.raises(SegmentCorruption):
            list(iter_frames(data[:cut], 41))
    with pytest.raises(SegmentCorruption, match="holds seq 41"):
        decode_frame_at(data, 0, 40)
    with pytest.raises(SegmentCorruption):
        decode_frame_at(data, 7)
    with pytest.raises(SegmentCorruption):
        decode_frame_at(data, len(data))


def test_encode_rejects_bad_input() -> None:
    with pytest.raises(ValueError, match="at least one"):
        encode_segment([], 1)
    with pytest.raises(ValueError, match="contiguous"):
        encode_segment([SegmentRecord(2, 0, None, None, b"{}", False)], 1)
    with pytest.raises(ValueError, match="out of range"):
        encode_segment([SegmentRecord(1, 0, "x" * 70_000, None, b"{}", False)], 1)
    with pytest.raises(ValueError, match="out of range"):
        encode_segment([SegmentRecord(1, -1, None, None, b"{}", False)], 1)


def test_idx_lookup_and_view_bounds() -> None:
    recs = [SegmentRecord(10 + i, i, None, None, b"{}", False) for i in range(3)]
    _, idx_bytes = encode_segment(recs, 10)
    idx = idx_view(idx_bytes)
    assert idx.dtype.itemsize == IDX_ENTRY_SIZE
    assert idx_lookup(idx, 10, 12) == (2 * 40, 40)  # 4 + (34 + len(b"{}"))
    for seq in (9, 13):
        with pytest.raises(IndexError):
            idx_lookup(idx, 10, seq)
    with pytest.raises(SegmentCorruption, match="multiple of 20"):
        idx_view(idx_bytes[:-1])


def _idx_with_ts(ts: list[int]) -> np.ndarray:
    recs = [SegmentRecord(1 + i, t, None, None, b"{}", False) for i, t in enumerate(ts)]
    return idx_view(encode_segment(recs, 1)[1])


@pytest.mark.parametrize(
    ("ts", "target", "expected"),
    [
        ([10, 20, 20, 30], 0, 0),
        ([10, 20, 20, 30], 10, 0),
        ([10, 20, 20, 30], 11, 1),
        ([10, 20, 20, 30], 20, 1),
        ([10, 20, 20, 30], 30, 3),
        ([10, 20, 20, 30], 31, 4),
        ([10, 20, 20, 30], U64 + 5, 4),
        ([10, 0, 5, 30, 25, 40], 20, 3),  # a hole with ts 0 / a clock step back
        ([10, 0, 5, 30, 25, 40], 26, 3),
        ([10, 0, 5, 30, 25, 40], 31, 5),
        ([U64], U64, 0),
    ],
)
def test_ts_search_first_entry_at_or_after(ts: list[int], target: int, expected: int) -> None:
    assert ts_search(_idx_with_ts(ts), target) == expected
    assert expected == next((i for i, t in enumerate(ts) if t >= target), len(ts))


def test_run_blobs_verifies_every_frame_like_decode_frame() -> None:
    data, first_len = _two_frames()
    offsets, lengths = [0, first_len], [first_len, len(data) - first_len]
    assert run_blobs(data, 41, offsets, lengths) == [
        b'{"d":{"x":1},"m":{"k":"v"}}',
        b'{"d":2}',
    ]
    for pos in range(len(data)):
        if pos in (first_len - 1, len(data) - 1):
            continue  # del_flag bytes are outside the checksum by design
        bad = bytearray(data)
        bad[pos] ^= 0x01
        with pytest.raises(SegmentCorruption):
            run_blobs(bytes(bad), 41, offsets, lengths)
    with pytest.raises(SegmentCorruption, match="holds seq 41"):
        run_blobs(data, 40, offsets, lengths)
    with pytest.raises(SegmentCorruption, match="out of range"):
        run_blobs(data[:-1], 41, offsets, lengths)
    with pytest.raises(SegmentCorruption):
        run_blobs(data, 41, [0, first_len - 1], lengths)
    with pytest.raises(SegmentCorruption, match="index length"):
        run_blobs(data, 41, offsets, [first_len + 1, len(data) - first_len])


@given(st.sets(st.integers(0, 40_000), max_size=60), st.sampled_from([1, 64, 4096]))
def test_flag_runs_cover_each_position_once_and_only_pages_with_flags(
    chosen: set[int], page: int
) -> None:
    positions = sorted(chosen)
    runs = flag_runs(positions, page)
    # every position in exactly one run, runs ascending and disjoint, ends are flags
    assert [p for p in positions if any(a <= p <= b for a, b in runs)] == positions
    assert all(b1 < a2 for (_, b1), (a2, _) in itertools.pairwise(runs))
    assert {a for a, _ in runs} | {b for _, b in runs} <= set(positions)
    flagged_pages = {p // page for p in positions}
    for a, b in runs:
        assert set(range(a // page, b // page + 1)) <= flagged_pages  # no flag-free page
    # maximal: the next run starts more than one page after the previous one ended
    assert all(a2 // page - b1 // page > 1 for (_, b1), (a2, _) in itertools.pairwise(runs))


def test_flag_runs_examples() -> None:
    assert flag_runs([], 4096) == []
    assert flag_runs([5, 90, 4000, 8191], 4096) == [(5, 8191)]
    assert flag_runs([5, 12_288], 4096) == [(5, 5), (12_288, 12_288)]
