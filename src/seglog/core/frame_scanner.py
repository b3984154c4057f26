"""Reading WAL frames back (STORAGE §3.1): validity, the logical end, the scanners. Pure.

A frame is valid only if every check of §3.1 passes; the first invalid frame is the
logical end of a WAL file (torn tail, preallocated zeros, garbage).

Validity is decided in exactly one place, `_scan_chunk`, which every reader shares
(`iter_raw` for recovery's hot loop, `FrameScanner`/`scan_frames` for `WalFrame`s), so
the writer-side tests and recovery can never disagree about where a log ends. It runs in C
when the speedups are built; `_scan_chunk_py` is its definition, and
`tests/core/test_native.py` holds the two equal.

Section bytes whose flag is clear (e.g. `node_len > 0` without has_node) are covered by
the checksum and the length sum, so the frame is valid per §3.1; the section is ignored
and reads as absent. Our encoders never produce that shape.
"""

from __future__ import annotations

import mmap
import struct
from collections.abc import Callable, Generator, Iterator

import xxhash

from seglog.core.frame_bodies import CONTROL_BODIES
from seglog.core.frames import (
    FLAG_NODE,
    FLAG_TAG,
    HEADER,
    HEADER_SIZE,
    MIN_FRAME_LEN,
    FrameError,
    FrameType,
    WalFrame,
)
from seglog.core.native import speedups

_MIN_FRAMED = 4 + MIN_FRAME_LEN  # the smallest valid frame, length field included
_U64 = struct.Struct("<Q")
_xxh = xxhash.xxh3_64_intdigest
_FRAME_TYPES = {int(t): t for t in FrameType}

Buffer = bytes | bytearray | memoryview | mmap.mmap
_Sliceable = bytes | mmap.mmap  # slicing either yields `bytes`

# `(end, type, flags, topic_id, seq, ts, node, tag, data)`: one valid frame as a plain
# tuple, the shape recovery's replay loop consumes without building objects.
RawFrame = tuple[int, int, int, int, int, int, str | None, str | None, bytes]

# Frames validated per `_scan_chunk` call by the iterators: big enough that the per-chunk
# overhead vanishes, small enough that a 64 MiB file is never materialized at once.
_CHUNK = 4096


def _frame_maker() -> Callable[
    [FrameType, int, int, int, int, str | None, str | None, bytes], WalFrame
]:
    """A `WalFrame` constructor for scanners at half the cost of the frozen dataclass
    `__init__` (which routes each field through `object.__setattr__`): set the slots
    through their member descriptors directly. Same fields, same resulting object."""
    new = object.__new__
    s0, s1, s2, s3, s4, s5, s6, s7 = (
        getattr(WalFrame, f).__set__
        for f in ("type", "flags", "topic_id", "seq", "ts", "node", "tag", "data")
    )

    def make(
        t: FrameType, fl: int, tid: int, seq: int, ts: int, n: str | None, g: str | None, d: bytes
    ) -> WalFrame:
        o: WalFrame = new(WalFrame)
        s0(o, t)
        s1(o, fl)
        s2(o, tid)
        s3(o, seq)
        s4(o, ts)
        s5(o, n)
        s6(o, g)
        s7(o, d)
        return o

    return make


_make_frame = _frame_maker()


def _body_ok(ftype: int, data: bytes) -> bool:
    try:
        CONTROL_BODIES[_FRAME_TYPES[ftype]].decode(data)
    except FrameError:
        return False
    return True


def _scan_chunk_py(
    src: _Sliceable, mv: memoryview, off: int, limit: int, collect: bool = True
) -> tuple[list[RawFrame], int, bool]:
    """Up to `limit` valid frames from `off`: `(frames, next offset, hit the logical end)`;
    with `collect=False` only validates (the list stays empty). The definition of
    `speedups.scan_wal_chunk`, which does the same in C.

    `src` and `mv` view the same bytes: slicing `src` (bytes or mmap) yields the `bytes`
    we keep in one allocation, while hashing through `mv` avoids copying the frame.
    Hot loop: every constant and callable is a local (no global lookups per frame)."""
    size = len(mv)
    out: list[RawFrame] = []
    append = out.append
    unpack_hdr = HEADER.unpack_from
    unpack_u64 = _U64.unpack_from
    xxh = _xxh
    types = _FRAME_TYPES
    min_framed, min_len, hdr_size, sections = _MIN_FRAMED, MIN_FRAME_LEN, HEADER_SIZE, 3
    flag_node, flag_tag = FLAG_NODE, FLAG_TAG
    append_type = int(FrameType.APPEND)
    for _ in range(limit):
        if size - off < min_framed:
            return out, off, True
        frame_len, ftype, flags, topic_id, seq, ts, nl, tl, dl = unpack_hdr(mv, off)
        end = off + 4 + frame_len
        chk_at = end - 8
        if (
            frame_len < min_len
            or end > size
            or nl + tl + dl != frame_len - min_len
            or ftype not in types
            or xxh(mv[off + 4 : chk_at]) != unpack_u64(mv, chk_at)[0]
        ):
            return out, off, True
        if flags & sections:  # has_node | has_tag (decoded inline: the hot loop)
            p = off + hdr_size
            try:
                node = src[p : p + nl].decode() if flags & flag_node else None
                tag = src[p + nl : p + nl + tl].decode() if flags & flag_tag else None
            except UnicodeDecodeError:
                return out, off, True
        else:
            node = tag = None
        if ftype != append_type:
            data = src[chk_at - dl : chk_at]
            if not _body_ok(ftype, data):  # control bodies are validated even when skipped
                return out, off, True
        elif collect:
            data = src[chk_at - dl : chk_at]
        if collect:
            append((end, ftype, flags, topic_id, seq, ts, node, tag, data))
        off = end
    return out, off, False


_KNOWN_TYPES = bytes(1 if i in _FRAME_TYPES else 0 for i in range(256))


def _scan_chunk_c(
    src: _Sliceable, _mv: memoryview, off: int, limit: int, collect: bool = True
) -> tuple[list[RawFrame], int, bool]:
    assert speedups is not None
    frames: list[RawFrame]
    frames, end, stopped = speedups.scan_wal_chunk(
        src, off, limit, collect, _KNOWN_TYPES, int(FrameType.APPEND), _body_ok
    )
    return frames, end, stopped


_scan_chunk = _scan_chunk_py if speedups is None else _scan_chunk_c


def _as_sliceable(buf: Buffer) -> _Sliceable:
    # bytes and mmap slice to bytes; anything else is copied once so slices are bytes too.
    if isinstance(buf, bytes | mmap.mmap):
        return buf
    return bytes(buf)


def iter_raw(buf: Buffer, start: int = 0) -> Iterator[RawFrame]:
    """Recovery's fast path: valid frames from `start` as `RawFrame` tuples, stopping at
    the logical end (use `RawScanner` to learn where that is)."""
    return iter(RawScanner(buf, start))


class RawScanner:
    """Iterate `RawFrame`s from `start`; once exhausted, `.end` is the logical end. Streams
    in chunks, so a big mmap'd file is never materialized; the buffer view is released when
    iteration ends or the iterator is closed."""

    def __init__(self, buf: Buffer, start: int = 0) -> None:
        self.buf = buf
        self.end = start

    def __iter__(self) -> Generator[RawFrame, None, None]:
        for frames in self.chunks():
            yield from frames

    def chunks(self) -> Generator[list[RawFrame], None, None]:
        """The same frames, a list at a time (recovery's hot loop skips a generator
        step per frame)."""
        src = _as_sliceable(self.buf)
        with memoryview(src) as mv:
            while True:
                frames, off, stopped = _scan_chunk(src, mv, self.end, _CHUNK)
                self.end = off
                if frames:
                    yield frames
                if stopped:
                    return


class FrameScanner:
    """Iterate `(offset, end, WalFrame)` for each valid frame from `start`; after exhaustion
    `.end` is the logical end (the offset of the first invalid frame)."""

    def __init__(self, buf: Buffer, start: int = 0) -> None:
        self.buf = buf
        self.end = start

    def __iter__(self) -> Generator[tuple[int, int, WalFrame], None, None]:
        src = _as_sliceable(self.buf)
        types = _FRAME_TYPES
        make = _make_frame
        with memoryview(src) as mv:
            while True:
                frames, off, stopped = _scan_chunk(src, mv, self.end, _CHUNK)
                for end, ftype, flags, tid, seq, ts, node, tag, data in frames:
                    at = self.end
                    self.end = end
                    yield at, end, make(types[ftype], flags, tid, seq, ts, node, tag, data)
                self.end = off
                if stopped:
                    return


def iter_frames(buf: Buffer, start: int = 0) -> FrameScanner:
    """`for off, end, frame in (sc := iter_frames(buf)): ...` then `sc.end`."""
    return FrameScanner(buf, start)


def scan_frames(buf: Buffer, start: int = 0) -> tuple[list[tuple[int, int, WalFrame]], int]:
    """Every valid frame from `start` and the logical end."""
    sc = FrameScanner(buf, start)
    frames = list(sc)
    return frames, sc.end


def valid_end(buf: Buffer, start: int = 0) -> int:
    """The logical end of `buf` scanning from `start`, without building any frame object."""
    src = _as_sliceable(buf)
    with memoryview(src) as mv:
        off = start
        while True:
            _none, off, stopped = _scan_chunk(src, mv, off, _CHUNK, collect=False)
            if stopped:
                return off
