"""Runs of consecutive sealed frames verified and sliced a run at a time (numpy over the
headers), for sequential reads: pure, no I/O.

`segment_format.run_blobs` is the reference, one frame at a time. Here every check it
makes (index entry in range, length prefix, section lengths, seq, checksum) is made over
whole columns; only the checksum itself and the payload slices are per frame, and those
are C calls in a list comprehension. A run that fails any check is handed to `run_blobs`,
which raises the precise error for its first bad frame.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from seglog.core.payload_blob import decode_blob
from seglog.core.segment_format import (
    _CHK,
    HEADER_SIZE,
    MIN_FRAME_LEN,
    SegmentCorruption,
    _xxh3,
    run_blobs,
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
_HEADER_SPAN = np.arange(HEADER_SIZE, dtype=np.int64)
_CHK_SPAN = np.arange(_CHK.size, dtype=np.int64)
_BLOB_OPEN = np.frombuffer(b'{"d":', np.uint8)
_CLOSE = ord("}")

Ints = npt.NDArray[np.int64]


def verify_run(chunk: bytes, first_seq: int, offsets: Ints, lengths: Ints) -> tuple[Ints, Ints]:
    """Verify the frames `first_seq, first_seq+1, ...` at `offsets` (relative to `chunk`)
    with the index's framed `lengths`, exactly as `run_blobs` does; returns each frame's
    payload blob bounds `(start, end)` in `chunk`."""
    n = len(offsets)
    offsets = offsets.astype(np.int64, copy=False)
    lengths = lengths.astype(np.int64, copy=False)
    ends = offsets + lengths
    size = len(chunk)
    if n == 0:
        return offsets, ends
    if (offsets < 0).any() or (ends > size).any() or (lengths < MIN_FRAME_LEN + 4).any():
        _raise_first(chunk, first_seq, offsets, lengths)
    buf = np.frombuffer(chunk, np.uint8)
    hdr = buf[offsets[:, None] + _HEADER_SPAN].view(FRAME_HEADER_DTYPE).reshape(n)
    body_ends = ends - 9
    sections = (
        hdr["node_len"].astype(np.int64)
        + hdr["tag_len"].astype(np.int64)
        + hdr["data_len"].astype(np.int64)
    )
    stored = buf[body_ends[:, None] + _CHK_SPAN].view("<u8").reshape(n)
    expected_seqs = np.arange(first_seq, first_seq + n, dtype=np.uint64)
    starts = (offsets + 4).tolist()
    stops = body_ends.tolist()
    with memoryview(chunk) as mv:
        sums = np.array([_xxh3(mv[a:b]) for a, b in zip(starts, stops, strict=True)], np.uint64)
    if (
        (hdr["frame_len"].astype(np.int64) + 4 != lengths).any()
        or (offsets + HEADER_SIZE + sections != body_ends).any()
        or (sums != stored).any()
        or (hdr["seq"] != expected_seqs).any()
    ):
        _raise_first(chunk, first_seq, offsets, lengths)
    return body_ends - hdr["data_len"].astype(np.int64), body_ends


def _raise_first(chunk: bytes, first_seq: int, offsets: Ints, lengths: Ints) -> None:
    run_blobs(chunk, first_seq, offsets.tolist(), lengths.tolist())  # raises the precise error
    raise SegmentCorruption(f"segment corruption: run from seq {first_seq} failed verification")


def run_blobs_of(chunk: bytes, first_seq: int, offsets: Ints, lengths: Ints) -> list[bytes]:
    """`run_blobs`, verified a run at a time."""
    starts, ends = verify_run(chunk, first_seq, offsets, lengths)
    return [chunk[a:b] for a, b in zip(starts.tolist(), ends.tolist(), strict=True)]


def run_payloads(
    chunk: bytes, first_seq: int, offsets: Ints, lengths: Ints
) -> tuple[list[bytes], list[bytes | None]]:
    """The compact JSON of each frame's data and meta (`decode_blob` of each blob), verified
    a run at a time. A blob written without meta is sliced; the rest are decoded exactly."""
    starts, ends = verify_run(chunk, first_seq, offsets, lengths)
    n = len(starts)
    if n == 0:
        return [], []
    buf = np.frombuffer(chunk, np.uint8)
    sliceable = (ends - starts >= 6) & (buf[ends - 1] == _CLOSE)
    sliceable &= (
        buf[np.minimum(starts[:, None] + np.arange(5), len(chunk) - 1)] == _BLOB_OPEN
    ).all(axis=1)
    # `decode_blob` slices only a blob with no `"m"` after its opening: find every `"m"`
    # in the chunk and send the frames holding one to the exact path.
    quote_m = np.flatnonzero((buf[:-2] == 34) & (buf[1:-1] == 109) & (buf[2:] == 34))
    if len(quote_m):
        frame = np.searchsorted(starts, quote_m, side="right") - 1
        inside = (frame >= 0) & (quote_m >= starts[frame] + 5) & (quote_m + 3 <= ends[frame])
        sliceable[frame[inside]] = False
    data_starts = (starts + 5).tolist()
    data_ends = (ends - 1).tolist()
    data = [chunk[a:b] for a, b in zip(data_starts, data_ends, strict=True)]
    meta: list[bytes | None] = [None] * n
    if not sliceable.all():
        a_list, e_list = starts.tolist(), ends.tolist()
        for i in np.flatnonzero(~sliceable).tolist():
            data[i], meta[i] = decode_blob(chunk[a_list[i] : e_list[i]])
    return data, meta
