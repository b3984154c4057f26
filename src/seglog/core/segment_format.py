"""Sealed-segment byte formats (STORAGE §4.2, §4.3): pure encode/decode, no I/O.

`.data` — one frame per seq, contiguous from the segment's first seq (little-endian):

    off  size  field
      0    4   frame_len  u32   bytes after this field, INCLUDING the trailing del_flag
      4    1   flags      u8    bit0 has_tag, bit1 has_node
      5    8   seq        u64
     13    8   ts         u64
     21    2   node_len   u16
     23    2   tag_len    u16
     25    4   data_len   u32
     29    N   node       UTF-8
      .    M   tag        UTF-8
      .    P   data       record payload blob
      .    8   xxh3       u64   XXH3-64 (seed 0) over bytes [4, start of this field)
      .    1   del_flag   u8    0xD5 = deleted, anything else = live (written 0x00)

The checksum deliberately excludes `del_flag` so a delete is an in-place write of that byte
(with its neighbours' unchanged bytes when several flags go out in one run) that can never
make a frame fail verification. A frame that fails verification is corruption:
it raises `SegmentCorruption` and is never reported as deleted (or as absent).

`.idx` — fixed 20-byte entries, entry `i` ↔ seq `first_seq + i`:

    off size field
      0   4  offset  u32   frame offset in .data
      4   4  len     u32   framed length (4 + frame_len)
      8   8  ts      u64
     16   1  flags   u8
     17   3  pad     zero
"""

from __future__ import annotations

import struct
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from mmap import mmap

import numpy as np
import numpy.typing as npt
import xxhash

from seglog.core.native import speedups
from seglog.core.payload_blob import encode_blob

DEL_FLAG = 0xD5
LIVE_FLAG = 0x00
FLAG_TAG = 0x01
FLAG_NODE = 0x02
IDX_ENTRY_SIZE = 20
HEADER_SIZE = 29  # frame_len prefix + fixed header
# frame_len of an empty-sectioned frame: 25-byte header + 8-byte checksum + del_flag.
MIN_FRAME_LEN = 34
U64_MAX = 2**64 - 1

_LEN = struct.Struct("<I")
_HDR = struct.Struct("<BQQHHI")  # the header after frame_len (frame offsets 4..29)
_TRAILER = struct.Struct("<QB")  # checksum + del_flag
_CHK = struct.Struct("<Q")
_IDX = struct.Struct("<IIQB3x")

IDX_DTYPE = np.dtype(
    {
        "names": ["offset", "len", "ts", "flags"],
        "formats": ["<u4", "<u4", "<u8", "u1"],
        "offsets": [0, 4, 8, 16],
        "itemsize": IDX_ENTRY_SIZE,
    }
)

Buffer = bytes | bytearray | memoryview | mmap
IdxArray = npt.NDArray[np.void]

_xxh3 = xxhash.xxh3_64_intdigest


class SegmentCorruption(ValueError):
    """A sealed frame or index entry failed validation (checksum, lengths, seq)."""


# Not frozen: one is built per record on the hot path, and a frozen dataclass __init__
# costs ~4x more. Treat as immutable.
@dataclass(slots=True)
class SegmentRecord:
    seq: int
    ts: int
    node: str | None
    tag: str | None
    blob: bytes
    deleted: bool


def encode_segment(records: Sequence[SegmentRecord], first_seq: int) -> tuple[bytes, bytes]:
    """Both files of a segment, `(data, idx)`, in one pass. Records must be contiguous seqs
    from `first_seq`; raises `ValueError` otherwise or when a field does not fit its width."""
    for i, r in enumerate(records):
        if r.seq != first_seq + i:
            raise ValueError(f"segment records are not contiguous: seq {r.seq} != {first_seq + i}")
    return encode_columns(
        first_seq,
        [r.ts for r in records],
        [r.node for r in records],
        [r.tag for r in records],
        [r.blob for r in records],
        [r.deleted for r in records],
    )


def encode_columns_py(
    first_seq: int,
    ts: Sequence[int],
    nodes: Sequence[str | None],
    tags: Sequence[str | None],
    blobs: Sequence[bytes],
    deleted: Sequence[int | bool],
) -> tuple[bytes, bytes]:
    """`encode_segment` for records given as equal-length columns (seq `first_seq + i` is
    row `i`): the sealing path builds no per-record objects. The definition of
    `speedups.encode_segment`, which does the same in C (`encode_columns` is whichever
    serves)."""
    n = len(ts)
    if n == 0:
        raise ValueError("a segment needs at least one record")
    if not len(nodes) == len(tags) == len(blobs) == len(deleted) == n:
        raise ValueError("segment columns differ in length")
    parts: list[bytes] = []
    entries: list[bytes] = []
    add, add_entry = parts.append, entries.append
    hdr_pack, len_pack, trailer_pack, idx_pack = _HDR.pack, _LEN.pack, _TRAILER.pack, _IDX.pack
    xxh3 = _xxh3
    offset = 0
    seq = first_seq
    try:
        for node, tag, blob, t, dead in zip(nodes, tags, blobs, ts, deleted, strict=True):
            if node is None and tag is None:
                flags = 0
                body = hdr_pack(0, seq, t, 0, 0, len(blob)) + blob
            else:
                nb = b"" if node is None else node.encode()
                tb = b"" if tag is None else tag.encode()
                flags = (0 if tag is None else FLAG_TAG) | (0 if node is None else FLAG_NODE)
                body = hdr_pack(flags, seq, t, len(nb), len(tb), len(blob)) + nb + tb + blob
            frame_len = len(body) + 9
            add(len_pack(frame_len))
            add(body)
            add(trailer_pack(xxh3(body), DEL_FLAG if dead else LIVE_FLAG))
            add_entry(idx_pack(offset, frame_len + 4, t, flags))
            offset += frame_len + 4
            seq += 1
    except struct.error as e:
        raise ValueError(f"segment field out of range near seq {seq}: {e}") from None
    return b"".join(parts), b"".join(entries)


# `speedups.encode_segment` takes the twin's arguments and returns what it returns.
encode_columns = encode_columns_py if speedups is None else speedups.encode_segment

HOLE_BLOB = b'{"d":null}'  # the payload of a deleted row or a hole


def encode_payload_columns_py(
    first_seq: int,
    ts: Sequence[int],
    nodes: Sequence[str | None],
    tags: Sequence[str | None],
    datas: Sequence[bytes | None],
    metas: Sequence[bytes | None],
    deleted: Sequence[int | bool],
) -> tuple[bytes, bytes]:
    """`encode_columns` with each payload blob built from compact JSON columns
    (`payload_blob.encode_blob`): a deleted row, or one without data, is a hole
    (`HOLE_BLOB`), and a deleted row keeps no node or tag. The definition of
    `speedups.encode_segment_rows` (`encode_payload_columns` is whichever serves)."""
    blobs = [
        HOLE_BLOB if gone or d is None else encode_blob(d, m)
        for d, m, gone in zip(datas, metas, deleted, strict=True)
    ]
    node = [None if gone else x for x, gone in zip(nodes, deleted, strict=True)]
    tag = [None if gone else x for x, gone in zip(tags, deleted, strict=True)]
    return encode_columns_py(first_seq, ts, node, tag, blobs, deleted)


# `speedups.encode_segment_rows` takes the twin's arguments and returns what it returns.
encode_payload_columns = (
    encode_payload_columns_py if speedups is None else speedups.encode_segment_rows
)


def _corrupt(what: str, offset: int, seq: int | None = None) -> SegmentCorruption:
    where = f"frame at offset {offset}" if seq is None else f"seq {seq} (frame at offset {offset})"
    return SegmentCorruption(f"segment corruption: {where}: {what}")


def decode_frame(
    buf: Buffer, offset: int, expect_seq: int | None = None
) -> tuple[SegmentRecord, int]:
    """Decode and verify the frame at `offset`; returns the record and the next frame's
    offset. With `expect_seq`, a frame holding another seq is corruption too."""
    if offset < 0 or offset + 4 > len(buf):
        raise _corrupt("truncated length prefix", offset, expect_seq)
    (frame_len,) = _LEN.unpack_from(buf, offset)
    end = offset + 4 + frame_len
    if frame_len < MIN_FRAME_LEN or end > len(buf):
        raise _corrupt(f"bad frame_len {frame_len}", offset, expect_seq)
    # One copy of the frame (the blob needs its own bytes anyway; mmap slices copy).
    frame = bytes(buf[offset + 4 : end])
    flags, seq, ts, node_len, tag_len, data_len = _HDR.unpack_from(frame, 0)
    body_end = frame_len - 9
    if 25 + node_len + tag_len + data_len != body_end:
        raise _corrupt("section lengths disagree with frame_len", offset, expect_seq)
    # Slicing copies the body, but for frames this size that beats a memoryview's setup.
    if _xxh3(frame[:body_end]) != _CHK.unpack_from(frame, body_end)[0]:
        raise _corrupt("checksum mismatch", offset, expect_seq if expect_seq is not None else seq)
    if expect_seq is not None and seq != expect_seq:
        raise _corrupt(f"holds seq {seq}", offset, expect_seq)
    if flags & ~(FLAG_TAG | FLAG_NODE) or (
        (not flags & FLAG_NODE and node_len) or (not flags & FLAG_TAG and tag_len)
    ):
        raise _corrupt(f"bad flags {flags:#04x}", offset, seq)
    try:
        node = frame[25 : 25 + node_len].decode() if flags & FLAG_NODE else None
        tag_end = 25 + node_len + tag_len
        tag = frame[25 + node_len : tag_end].decode() if flags & FLAG_TAG else None
    except UnicodeDecodeError:
        raise _corrupt("node/tag is not UTF-8", offset, seq) from None
    blob = frame[tag_end:body_end]
    return SegmentRecord(seq, ts, node, tag, blob, frame[-1] == DEL_FLAG), end


def run_blobs(
    chunk: bytes, first_seq: int, offsets: Sequence[int], lengths: Sequence[int]
) -> list[bytes]:
    """The payload blobs of consecutive frames `first_seq, first_seq+1, ...` found at
    `offsets` (relative to `chunk`) with the index's framed `lengths`. Each frame's length
    prefix, section lengths, seq and checksum are verified as in `decode_frame`; node and
    tag are not decoded (the caller has them), so a sequential read pays one slice per
    record instead of a copy, a header parse and a record object."""
    out: list[bytes] = []
    add = out.append
    len_at, hdr_at, chk_at, xxh3 = _LEN.unpack_from, _HDR.unpack_from, _CHK.unpack_from, _xxh3
    size = len(chunk)
    seq = first_seq
    for off, length in zip(offsets, lengths, strict=True):
        end = off + length
        if off < 0 or end > size or length < MIN_FRAME_LEN + 4:
            raise _corrupt(f"index entry ({off}, {length}) is out of range", off, seq)
        if len_at(chunk, off)[0] + 4 != length:
            raise _corrupt(f"index length {length} != framed length", off, seq)
        _flags, got, _ts, node_len, tag_len, data_len = hdr_at(chunk, off + 4)
        body_end = end - 9
        if off + HEADER_SIZE + node_len + tag_len + data_len != body_end:
            raise _corrupt("section lengths disagree with frame_len", off, seq)
        if xxh3(chunk[off + 4 : body_end]) != chk_at(chunk, body_end)[0]:
            raise _corrupt("checksum mismatch", off, seq)
        if got != seq:
            raise _corrupt(f"holds seq {got}", off, seq)
        add(chunk[body_end - data_len : body_end])
        seq += 1
    return out


def decode_frame_at(buf: Buffer, offset: int, expect_seq: int | None = None) -> SegmentRecord:
    """The verified record at `offset` (see `decode_frame`)."""
    return decode_frame(buf, offset, expect_seq)[0]


def iter_frames(buf: Buffer, first_seq: int) -> Iterator[SegmentRecord]:
    """Every frame of a whole `.data` buffer, verified, seqs contiguous from `first_seq`;
    trailing bytes that are not a whole valid frame are corruption."""
    offset, seq, size = 0, first_seq, len(buf)
    while offset < size:
        rec, offset = decode_frame(buf, offset, seq)
        seq += 1
        yield rec


def scan_del_flags(buf: Buffer, first_seq: int) -> tuple[list[int], int]:
    """Verify every frame of a whole `.data` buffer (lengths, checksum, contiguous seqs)
    without decoding payloads; returns (seqs whose del_flag is set, frame count). Three times
    faster than `iter_frames`, which matters at recovery (§6 step 8 reads every segment)."""
    deleted: list[int] = []
    offset, seq, size = 0, first_seq, len(buf)
    len_unpack, hdr_unpack, chk_unpack, xxh3 = (
        _LEN.unpack_from, _HDR.unpack_from, _CHK.unpack_from, _xxh3,
    )  # fmt: skip
    with memoryview(buf) as mv:
        while offset < size:
            if offset + 4 > size:
                raise _corrupt("truncated length prefix", offset, seq)
            (frame_len,) = len_unpack(buf, offset)
            end = offset + 4 + frame_len
            if frame_len < MIN_FRAME_LEN or end > size:
                raise _corrupt(f"bad frame_len {frame_len}", offset, seq)
            _, got, _, node_len, tag_len, data_len = hdr_unpack(buf, offset + 4)
            body_end = end - 9
            if 34 + node_len + tag_len + data_len != frame_len:
                raise _corrupt("section lengths disagree with frame_len", offset, seq)
            if xxh3(mv[offset + 4 : body_end]) != chk_unpack(buf, body_end)[0]:
                raise _corrupt("checksum mismatch", offset, seq)
            if got != seq:
                raise _corrupt(f"holds seq {got}", offset, seq)
            if buf[end - 1] == DEL_FLAG:
                deleted.append(seq)
            seq += 1
            offset = end
    return deleted, seq - first_seq


def flag_runs(positions: Sequence[int], page: int) -> list[tuple[int, int]]:
    """Group ascending del_flag byte `positions` into `(first, last)` runs, one write each.
    A run only spans pages that hold one of its flags (consecutive flags at most one page
    apart), so writing a run's bytes back dirties exactly the pages that one-byte writes
    would: flipping ten adjacent flags costs one `pwrite`, not ten."""
    runs: list[tuple[int, int]] = []
    for pos in positions:
        if runs and pos // page - runs[-1][1] // page <= 1 and pos > runs[-1][1]:
            runs[-1] = (runs[-1][0], pos)
        else:
            runs.append((pos, pos))
    return runs


def idx_view(idx_bytes: Buffer) -> IdxArray:
    """Zero-copy structured view (fields offset, len, ts, flags) over `.idx` bytes."""
    if len(idx_bytes) % IDX_ENTRY_SIZE:
        raise SegmentCorruption(
            f"segment corruption: index length {len(idx_bytes)} is not a multiple of 20"
        )
    return np.frombuffer(idx_bytes, dtype=IDX_DTYPE)


def idx_lookup(idx: IdxArray, first_seq: int, seq: int) -> tuple[int, int]:
    """`(offset, len)` of `seq`'s frame; `IndexError` when the segment does not hold it."""
    i = seq - first_seq
    if i < 0 or i >= len(idx):
        raise IndexError(f"seq {seq} is outside the segment starting at {first_seq}")
    entry = idx[i]
    return int(entry["offset"]), int(entry["len"])


def ts_search(idx: IdxArray, ts: int) -> int:
    """First entry index whose ts is >= `ts` (`len(idx)` if none).

    Commit timestamps come from a wall clock that may step back and holes may carry older
    timestamps, so the inline ts column is not guaranteed sorted. The binary search runs on
    its running maximum, for which "first index with max >= ts" is exactly "first index with
    ts >= ts" in any order."""
    if ts <= 0 or len(idx) == 0:
        return 0
    if ts > U64_MAX:
        return len(idx)
    running_max = np.maximum.accumulate(idx["ts"])
    return int(np.searchsorted(running_max, np.uint64(ts), side="left"))
