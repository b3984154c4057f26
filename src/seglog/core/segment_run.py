"""Runs of consecutive sealed frames verified and sliced a run at a time (numpy over the
headers), for sequential reads: pure, no I/O.

`segment_format.run_blobs` is the reference, one frame at a time. Here every check it
makes (index entry in range, length prefix, section lengths, seq, checksum) is made over
whole columns; the checksums are one C call per run (`native.xxh3_slices`; a C call per
frame without the speedups). A run that fails any check is handed to `run_blobs`, which
raises the precise error for its first bad frame.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from seglog.core.native import byte_slices, gather_rows, speedups, xxh3_slices
from seglog.core.payload_blob import decode_blob
from seglog.core.segment_format import (
    _CHK,
    DEL_FLAG,
    FLAG_NODE,
    FLAG_TAG,
    HEADER_SIZE,
    MIN_FRAME_LEN,
    SegmentCorruption,
    iter_frames,
    run_blobs,
    scan_del_flags,
)

# The frame header (`frame_len` through `data_len`), unaligned as on disk.
FRAME_HEADER_DTYPE = np.dtype(
    {
        "names": ["frame_len", "flags", "seq", "ts", "node_len", "tag_len", "data_len"],
        "formats": ["<u4", "u1", "<u8", "<u8", "<u2", "<u2", "<u4"],
        "offsets": [0, 4, 5, 13, 21, 23, 25],
        "itemsize": HEADER_SIZE,
    }
)
_BLOB_OPEN = np.frombuffer(b'{"d":', np.uint8)
_CLOSE = ord("}")

Ints = npt.NDArray[np.int64]
_U64 = 2**64 - 1


def verify_run(chunk: bytes, first_seq: int, offsets: Ints, lengths: Ints) -> tuple[Ints, Ints]:
    """Verify the frames `first_seq, first_seq+1, ...` at `offsets` (relative to `chunk`)
    with the index's framed `lengths`, exactly as `run_blobs` does; returns each frame's
    payload blob bounds `(start, end)` in `chunk`."""
    _, starts, ends = verify_headers(chunk, first_seq, offsets, lengths)
    return starts, ends


def verify_headers(
    chunk: bytes, first_seq: int, offsets: Ints, lengths: Ints, checksums: bool = True
) -> tuple[npt.NDArray[np.void], Ints, Ints]:
    """`verify_run`, also returning the frame headers (`FRAME_HEADER_DTYPE`). Without
    `checksums`, every check but the checksum (for a caller whose readers verify every
    frame they read)."""
    n = len(offsets)
    offsets = offsets.astype(np.int64, copy=False)
    lengths = lengths.astype(np.int64, copy=False)
    ends = offsets + lengths
    size = len(chunk)
    if n == 0:
        return np.zeros(0, FRAME_HEADER_DTYPE), offsets, ends
    if (offsets < 0).any() or (ends > size).any() or (lengths < MIN_FRAME_LEN + 4).any():
        _raise_first(chunk, first_seq, offsets, lengths)
    hdr = np.frombuffer(gather_rows(chunk, offsets, HEADER_SIZE), FRAME_HEADER_DTYPE)
    body_ends = ends - 9
    sections = (
        hdr["node_len"].astype(np.int64)
        + hdr["tag_len"].astype(np.int64)
        + hdr["data_len"].astype(np.int64)
    )
    expected_seqs = np.arange(first_seq, first_seq + n, dtype=np.uint64)
    bad_sum = False
    if checksums:
        stored = np.frombuffer(gather_rows(chunk, body_ends, _CHK.size), "<u8")
        sums = xxh3_slices(chunk, offsets + 4, body_ends)
        bad_sum = bool((sums != stored).any())
    if (
        (hdr["frame_len"].astype(np.int64) + 4 != lengths).any()
        or (offsets + HEADER_SIZE + sections != body_ends).any()
        or bad_sum
        or (hdr["seq"] != expected_seqs).any()
    ):
        _raise_first(chunk, first_seq, offsets, lengths)
    return hdr, body_ends - hdr["data_len"].astype(np.int64), body_ends


def _raise_first(chunk: bytes, first_seq: int, offsets: Ints, lengths: Ints) -> None:
    run_blobs(chunk, first_seq, offsets.tolist(), lengths.tolist())  # raises the precise error
    raise SegmentCorruption(f"segment corruption: run from seq {first_seq} failed verification")


# Below this many frames the per-frame loop of `run_blobs` beats the vectorized checks'
# fixed cost (~16 µs: 10 frames 5.8 µs against 16.3 µs, 30 frames even; BENCHMARKS.md,
# "Queues: the request path"). A queue claim reads runs of about its `max`.
SMALL_RUN = 24


def run_blobs_of(chunk: bytes, first_seq: int, offsets: Ints, lengths: Ints) -> list[bytes]:
    """`run_blobs`, verified a run at a time."""
    if len(offsets) < SMALL_RUN:
        return run_blobs(chunk, first_seq, offsets.tolist(), lengths.tolist())
    starts, ends = verify_run(chunk, first_seq, offsets, lengths)
    return byte_slices(chunk, starts, ends)


def run_payloads(
    chunk: bytes, first_seq: int, offsets: Ints, lengths: Ints
) -> tuple[list[bytes], list[bytes | None]]:
    """The compact JSON of each frame's data and meta (`decode_blob` of each blob), verified
    a run at a time. A blob written without meta is sliced; the rest are decoded exactly."""
    starts, ends = verify_run(chunk, first_seq, offsets, lengths)
    return split_blobs(chunk, starts, ends)


def split_blobs(chunk: bytes, starts: Ints, ends: Ints) -> tuple[list[bytes], list[bytes | None]]:
    """`decode_blob` of the (verified) blobs `chunk[starts[i]:ends[i]]`."""
    n = len(starts)
    if n == 0:
        return [], []
    sliceable = blobs_sliceable(chunk, starts, ends)
    # The rest are decoded below; their placeholder slices are empty (a blob too short to
    # be ours would give reversed bounds).
    data = byte_slices(
        chunk, np.where(sliceable, starts + 5, starts), np.where(sliceable, ends - 1, starts)
    )
    meta: list[bytes | None] = [None] * n
    if not sliceable.all():
        a_list, e_list = starts.tolist(), ends.tolist()
        for i in np.flatnonzero(~sliceable).tolist():
            data[i], meta[i] = decode_blob(chunk[a_list[i] : e_list[i]])
    return data, meta


def blobs_sliceable(chunk: bytes, starts: Ints, ends: Ints) -> npt.NDArray[np.bool_]:
    """Which blobs `chunk[starts[i]:ends[i]]` (ascending, disjoint) `decode_blob` slices
    (`{"d":<data>}`, no `"m"` after the opening): their data is
    `chunk[starts[i]+5 : ends[i]-1]`, no meta. In one C call when the speedups are built."""
    if speedups is None:
        return blobs_sliceable_py(chunk, starts, ends)
    out = np.empty(len(starts), np.bool_)
    speedups.blobs_sliceable(
        chunk, np.ascontiguousarray(starts, np.int64), np.ascontiguousarray(ends, np.int64), out
    )
    return out


def blobs_sliceable_py(chunk: bytes, starts: Ints, ends: Ints) -> npt.NDArray[np.bool_]:
    """`blobs_sliceable`'s twin (ValueError if a blob is outside `chunk` or reversed)."""
    n = len(starts)
    if n and ((starts < 0).any() or (starts > ends).any() or (ends > len(chunk)).any()):
        raise ValueError("a blob is outside the buffer")
    if n == 0:
        return np.zeros(0, np.bool_)
    if len(chunk) < 6:  # no blob of 6 bytes fits: none is sliceable
        return np.zeros(n, np.bool_)
    buf = np.frombuffer(chunk, np.uint8)
    sliceable: npt.NDArray[np.bool_] = (ends - starts >= 6) & (buf[ends - 1] == _CLOSE)
    # The opening, a byte at a time (a blob starting in the last 5 bytes is too short for
    # the check above, so clamping its start only keeps the reads in bounds).
    at = np.minimum(starts, len(chunk) - 5)
    for k in range(5):
        sliceable &= buf[at + k] == _BLOB_OPEN[k]
    # Find every `"m"` in the chunk (from its `m`s: one pass over the bytes, cheaper than
    # a substring search where quotes abound) and mark the blobs holding one after their
    # opening.
    m_at = np.flatnonzero(buf[1:-1] == 109) + 1
    quote_m = m_at[(buf[m_at - 1] == 34) & (buf[m_at + 1] == 34)] - 1
    if len(quote_m):
        frame = np.searchsorted(starts, quote_m, side="right") - 1
        inside = (frame >= 0) & (quote_m >= starts[frame] + 5) & (quote_m + 3 <= ends[frame])
        sliceable[frame[inside]] = False
    return sliceable


@dataclass(slots=True)
class SegmentColumns:
    """Every frame of a whole segment as columns (row `i` is seq `first_seq + i`)."""

    seq: Ints
    ts: npt.NDArray[np.uint64]
    deleted: npt.NDArray[np.bool_]
    node: list[str | None]
    tag: list[str | None]
    data: list[bytes]
    meta: list[bytes | None]


def _chained(data: bytes, offsets: Ints, lengths: Ints) -> bool:
    """Whether the index's entries chain from offset 0 to the end of the data file, so that
    every byte of it lies in a frame the index points at."""
    n = len(offsets)
    return bool(
        n > 0
        and offsets[0] == 0
        and (offsets[1:] == offsets[:-1] + lengths[:-1]).all()
        and int(offsets[-1] + lengths[-1]) == len(data)
    )


def segment_del_flags(
    data: bytes, first_seq: int, offsets: Ints, lengths: Ints, verify: bool = True
) -> tuple[list[int], int]:
    """`scan_del_flags` (every frame verified; seqs whose del_flag is set, frame count),
    verified a run at a time through the index. An index that does not chain over the whole
    file leaves the scan to `scan_del_flags`, which reads the frames alone. `verify=False`
    reads the flags of a chained index without checking the frames: for a caller that
    verifies every frame it later reads, and the rest with `verify=True`."""
    offsets = offsets.astype(np.int64, copy=False)
    lengths = lengths.astype(np.int64, copy=False)
    if not _chained(data, offsets, lengths):
        return scan_del_flags(data, first_seq)
    if verify:
        verify_headers(data, first_seq, offsets, lengths)
    flags = np.frombuffer(data, np.uint8)[offsets + lengths - 1]
    return (np.flatnonzero(flags == DEL_FLAG) + first_seq).tolist(), len(offsets)


@dataclass(slots=True)
class SegmentLayout:
    """Where the fields of every frame of a whole, verified segment lie in its `.data`
    bytes (row `i` is seq `first_seq + i`): node `[node_at, node_at + node_len)` when
    `has_node`, tag likewise, payload blob `[blob_start, blob_end)`. The frames' bytes
    passed every check `iter_frames` makes except that node and tag are valid UTF-8,
    which is for the reader that decodes them."""

    first_seq: int
    ts: npt.NDArray[np.uint64]
    deleted: npt.NDArray[np.bool_]
    has_node: npt.NDArray[np.bool_]
    has_tag: npt.NDArray[np.bool_]
    node_at: Ints
    node_len: Ints
    tag_at: Ints
    tag_len: Ints
    blob_start: Ints
    blob_end: Ints

    def __len__(self) -> int:
        return len(self.ts)

    @property
    def seq(self) -> Ints:
        return np.arange(self.first_seq, self.first_seq + len(self.ts), dtype=np.int64)


def segment_layout(
    data: bytes, first_seq: int, offsets: Ints, lengths: Ints, checksums: bool = True
) -> SegmentLayout:
    """A whole `.data` file's frames located and verified as `iter_frames` verifies them
    (but for UTF-8, see `SegmentLayout`): the index's entries must chain from offset 0 to
    the end of the file (so every byte of it is in a verified frame), and each frame
    passes `verify_run`'s checks (without `checksums`: all but the checksum). One C pass
    when the speedups are built; a segment it refuses takes the path below, which names
    the first bad frame."""
    offsets = np.ascontiguousarray(offsets, np.int64)
    lengths = np.ascontiguousarray(lengths, np.int64)
    n = len(offsets)
    if speedups is not None and isinstance(first_seq, int) and 0 <= first_seq <= _U64 - n:
        cols = np.empty((6, n), np.int64)
        bits = np.empty(n, np.uint8)
        if speedups.segment_layout(data, first_seq, offsets, lengths, checksums, cols, bits):
            ts, node_at, node_len, tag_len, blob_start, blob_end = cols
            return SegmentLayout(
                first_seq,
                ts.view(np.uint64),
                (bits & 4) != 0,
                (bits & FLAG_NODE) != 0,
                (bits & FLAG_TAG) != 0,
                node_at,
                node_len,
                node_at + node_len,
                tag_len,
                blob_start,
                blob_end,
            )
    return segment_layout_py(data, first_seq, offsets, lengths, checksums)


def segment_layout_py(
    data: bytes, first_seq: int, offsets: Ints, lengths: Ints, checksums: bool = True
) -> SegmentLayout:
    """`segment_layout` over numpy columns (its twin; raises the precise error)."""
    offsets = offsets.astype(np.int64, copy=False)
    lengths = lengths.astype(np.int64, copy=False)
    if not _chained(data, offsets, lengths):
        list(iter_frames(data, first_seq))  # raises the precise error of the first bad frame
        raise SegmentCorruption(
            f"segment corruption: index of the segment from seq {first_seq} does not match "
            f"its {len(data)}-byte data file"
        )
    hdr, starts, ends = verify_headers(data, first_seq, offsets, lengths, checksums)
    flags = hdr["flags"]
    if (
        (flags & ~np.uint8(FLAG_TAG | FLAG_NODE)).any()
        or (((flags & FLAG_NODE) == 0) & (hdr["node_len"] != 0)).any()
        or (((flags & FLAG_TAG) == 0) & (hdr["tag_len"] != 0)).any()
    ):
        list(iter_frames(data, first_seq))
        raise SegmentCorruption(f"segment corruption: bad flags from seq {first_seq}")
    node_at = offsets + HEADER_SIZE
    node_len = hdr["node_len"].astype(np.int64)
    return SegmentLayout(
        first_seq,
        hdr["ts"].copy(),
        np.frombuffer(data, np.uint8)[offsets + lengths - 1] == DEL_FLAG,
        (flags & FLAG_NODE) != 0,
        (flags & FLAG_TAG) != 0,
        node_at,
        node_len,
        node_at + node_len,
        hdr["tag_len"].astype(np.int64),
        starts,
        ends,
    )


def segment_columns(data: bytes, first_seq: int, offsets: Ints, lengths: Ints) -> SegmentColumns:
    """A whole `.data` file's frames as columns, verified as `iter_frames` verifies them
    (`segment_layout`, and node and tag decoded as UTF-8)."""
    return segment_columns_of(data, segment_layout(data, first_seq, offsets, lengths))


def segment_columns_of(data: bytes, lay: SegmentLayout) -> SegmentColumns:
    """`segment_columns` of a segment already located (`segment_layout` of `data`): node
    and tag decoded as UTF-8 (`SegmentCorruption` if one is not), every payload decoded
    (`FrameError` if one is not a payload blob)."""
    node, tag = layout_labels(data, lay)
    payload, meta = split_blobs(data, lay.blob_start, lay.blob_end)
    return SegmentColumns(lay.seq, lay.ts, lay.deleted, node, tag, payload, meta)


def layout_labels(data: bytes, lay: SegmentLayout) -> tuple[list[str | None], list[str | None]]:
    """Every frame's node and tag (None where absent), decoded as UTF-8;
    `SegmentCorruption` if one is not. Equal labels are one `str` object: a segment holds
    a few distinct labels many times over, and decoding each once is both faster and a
    few dozen bytes per record less in the in-memory index."""
    node, tag = layout_coded_labels(data, lay)
    return decoded_labels(node), decoded_labels(tag)


def decoded_labels(coded: tuple[list[str], npt.NDArray[np.uint32]]) -> list[str | None]:
    """A coded label column (`layout_coded_labels`) as a list, each label one object."""
    table = np.empty(len(coded[0]) + 1, object)
    table[1:] = coded[0]
    return table[coded[1]].tolist()  # type: ignore[no-any-return]


_SHORT_LABEL = 64  # longest label whose bytes are compared as one numpy row


def layout_coded_labels(
    data: bytes, lay: SegmentLayout
) -> tuple[tuple[list[str], npt.NDArray[np.uint32]], tuple[list[str], npt.NDArray[np.uint32]]]:
    """`layout_labels` as a table of the distinct labels and a code per frame (0: none,
    k: the table's k-th label, from 1): no Python object per frame."""
    try:
        return (
            _coded(data, lay.has_node, lay.node_at, lay.node_len),
            _coded(data, lay.has_tag, lay.tag_at, lay.tag_len),
        )
    except UnicodeDecodeError:
        list(iter_frames(data, lay.first_seq))
        raise SegmentCorruption(
            f"segment corruption: node/tag not UTF-8 from seq {lay.first_seq}"
        ) from None


def _coded(
    data: bytes, present: npt.NDArray[np.bool_], at: Ints, width: Ints
) -> tuple[list[str], npt.NDArray[np.uint32]]:
    n = len(present)
    rows = np.flatnonzero(present)
    if len(rows) == n:  # every frame has one (the common case): no gathers
        return label_codes(data, at, width)
    codes = np.zeros(n, np.uint32)
    if not len(rows):
        return [], codes
    texts, row_codes = label_codes(data, at[rows], width[rows])
    codes[rows] = row_codes
    return texts, codes


def label_codes_py(
    data: bytes, starts: Ints, widths: Ints
) -> tuple[list[str], npt.NDArray[np.uint32]]:
    """The distinct labels among the spans `data[starts[i] : starts[i] + widths[i]]`, each
    decoded once as UTF-8 (`UnicodeDecodeError` if one is not; ValueError if a span is
    outside `data`), and each span's code: 1 + its label's index. (The order of the table is not part of the contract: this one sorts
    short labels by their bytes, `speedups.label_codes` keeps first appearances.)"""
    n = len(starts)
    if not n:
        return [], np.zeros(0, np.uint32)
    if (starts < 0).any() or (widths < 0).any() or (starts + widths > len(data)).any():
        raise ValueError("a label span is outside the buffer")
    if not len(data):  # every span is empty
        return [""], np.ones(n, np.uint32)
    if int(widths.max()) > _SHORT_LABEL:  # rare: decode one by one
        codes = np.zeros(n, np.uint32)
        table: dict[str, int] = {}
        for i, a, w in zip(range(n), starts.tolist(), widths.tolist(), strict=True):
            label = data[a : a + w].decode()
            codes[i] = table.get(label) or table.setdefault(label, len(table) + 1)
        return list(table), codes
    texts, inverse = _distinct(data, starts, widths)
    return texts.tolist(), (inverse + 1).astype(np.uint32)


def _label_codes_c(
    data: bytes, starts: Ints, widths: Ints
) -> tuple[list[str], npt.NDArray[np.uint32]]:
    assert speedups is not None
    codes = np.empty(len(starts), np.uint32)
    texts: list[str] = speedups.label_codes(
        data, np.ascontiguousarray(starts, np.int64), np.ascontiguousarray(widths, np.int64), codes
    )
    return texts, codes


label_codes = label_codes_py if speedups is None else _label_codes_c


def _distinct(
    data: bytes, starts: Ints, widths: Ints
) -> tuple[npt.NDArray[np.object_], npt.NDArray[np.intp]]:
    """The distinct labels of the spans `(starts, widths)` (each decoded once) and each
    span's index among them."""
    longest = int(widths.max())
    # Each label's bytes, zero-padded, then its width: equal rows are equal labels.
    # (Padded to 8-byte words: labels of up to 7 bytes, the usual, are one u64 each,
    # which sorts far faster than raw bytes.)
    size = (longest + 1 + 7) // 8 * 8
    buf = np.frombuffer(data, np.uint8)
    span = np.arange(size)
    keys = buf[np.minimum(starts[:, None] + span, len(buf) - 1)]
    keys[span >= widths[:, None]] = 0
    keys[:, size - 1] = widths
    keys = np.ascontiguousarray(keys)
    packed = keys.view("<u8").ravel() if size == 8 else keys.view(np.dtype((np.void, size))).ravel()
    unique, first, inverse = np.unique(packed, return_index=True, return_inverse=True)
    texts = np.empty(len(unique), object)
    for k, row in enumerate(first.tolist()):
        texts[k] = bytes(keys[row, : keys[row, size - 1]]).decode()
    return texts, inverse.ravel()


def layout_sizes(data: bytes, lay: SegmentLayout) -> list[int]:
    """Every frame's record size as the engine counts it (compact data plus meta text, a
    null meta counting as none): sliced blobs from their lengths, the others decoded
    (`FrameError` if one is not a payload blob)."""
    return layout_size_array(data, lay).tolist()  # type: ignore[no-any-return]


def layout_size_array(data: bytes, lay: SegmentLayout) -> npt.NDArray[np.int64]:
    """`layout_sizes` as an array."""
    sizes = (lay.blob_end - lay.blob_start - 6).astype(np.int64)  # `{"d":` and `}`
    odd = np.flatnonzero(~blobs_sliceable(data, lay.blob_start, lay.blob_end)).tolist()
    starts, ends = lay.blob_start, lay.blob_end
    for i in odd:
        d, m = decode_blob(data[int(starts[i]) : int(ends[i])])
        sizes[i] = len(d) + (0 if m is None or m == b"null" else len(m))
    return sizes


def shared_ints(values: npt.NDArray[Any]) -> list[int]:
    """`values.tolist()` with each run of equal adjacent values one `int` object: a
    segment's `ts` column repeats each write batch's timestamp, and a Python int per record
    (32 bytes) is most of what an in-memory index row costs."""
    n = len(values)
    if n == 0:
        return []
    starts = np.flatnonzero(np.concatenate(([True], values[1:] != values[:-1])))
    firsts = np.empty(len(starts), object)
    firsts[:] = values[starts].tolist()
    return np.repeat(firsts, np.diff(np.append(starts, n))).tolist()  # type: ignore[no-any-return]
