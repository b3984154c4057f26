"""WAL frames (STORAGE §3.1–§3.2): byte layout, checksums, control bodies. Pure.

```
off  size  field
  0    4   frame_len  u32   bytes after this field (header + sections + checksum)
  4    1   type       u8
  5    1   flags      u8    bit0 has_tag, bit1 has_node, bit2 durable
  6    8   topic_id   u64
 14    8   seq        u64
 22    8   ts         u64
 30    2   node_len   u16
 32    2   tag_len    u16
 34    4   data_len   u32
 38    N   node, M tag, P data
  .    8   xxh3       u64   XXH3-64 (seed 0) over bytes [4, start of this field)
```
All integers little-endian. A frame is valid only if every check of §3.1 passes; the first
invalid frame is the logical end of a WAL file (torn tail, preallocated zeros, garbage).

Validity is decided in exactly one place, `_scan_chunk`, which every reader shares
(`iter_raw` for recovery's hot loop, `FrameScanner`/`scan_frames` for `WalFrame`s), so
the writer-side tests and recovery can never disagree about where a log ends.

Section bytes whose flag is clear (e.g. `node_len > 0` without has_node) are covered by
the checksum and the length sum, so the frame is valid per §3.1; the section is ignored
and reads as absent. Our encoders never produce that shape.

Control bodies decode only on an exact, canonical parse (booleans 0/1, no reserved bits,
no trailing bytes), so `decode(body).encode() == body` whenever decoding succeeds.
"""

from __future__ import annotations

import mmap
import struct
from collections.abc import Callable, Generator, Iterator
from dataclasses import dataclass
from enum import IntEnum
from typing import Self

import orjson
import xxhash

from seglog.core.jsonbytes import json_bytes
from seglog.model import Selector


class FrameType(IntEnum):
    APPEND = 1
    TOPIC_CREATE = 2
    TOPIC_DELETE = 3
    ROUTER_CREATE = 4
    ROUTER_DELETE = 5
    DELETE = 6
    EVICT_WATERMARK = 7
    CHECKPOINT_MARK = 8
    CONFIG_UPDATE = 9
    LEASE = 10
    HEAD_WATERMARK = 11


FLAG_TAG = 1
FLAG_NODE = 2
FLAG_DURABLE = 4

HEADER = struct.Struct("<IBBQQQHHI")  # frame_len .. data_len: 38 bytes
HEADER_SIZE = HEADER.size
CHECKSUM_SIZE = 8
MIN_FRAME_LEN = HEADER_SIZE - 4 + CHECKSUM_SIZE  # 42
_MIN_FRAMED = 4 + MIN_FRAME_LEN  # the smallest valid frame, length field included
_U64 = struct.Struct("<Q")
_U32 = struct.Struct("<I")
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


class FrameError(ValueError):
    """A frame, payload blob or control body that does not parse exactly."""


@dataclass(frozen=True, slots=True)
class WalFrame:
    type: FrameType
    flags: int
    topic_id: int
    seq: int
    ts: int
    node: str | None
    tag: str | None
    data: bytes  # the payload blob (Append) or the control body (every other type)

    @property
    def durable(self) -> bool:
        return bool(self.flags & FLAG_DURABLE)


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


# ---- encoding --------------------------------------------------------------------------


def encode_append(
    topic_id: int, seq: int, ts: int, node: str | None, tag: str | None, blob: bytes, durable: bool
) -> bytes:
    """One Append frame: the engine's hot path (one pack, one concatenation, one hash)."""
    flags = FLAG_DURABLE if durable else 0
    if node is None and tag is None:
        dl = len(blob)
        head = HEADER.pack(MIN_FRAME_LEN + dl, 1, flags, topic_id, seq, ts, 0, 0, dl) + blob
    else:
        nb = b"" if node is None else node.encode()
        tb = b"" if tag is None else tag.encode()
        if node is not None:
            flags |= FLAG_NODE
        if tag is not None:
            flags |= FLAG_TAG
        nl, tl, dl = len(nb), len(tb), len(blob)
        head = (
            HEADER.pack(MIN_FRAME_LEN + nl + tl + dl, 1, flags, topic_id, seq, ts, nl, tl, dl)
            + nb
            + tb
            + blob
        )
    # For small frames hashing a 4-byte-shorter copy beats creating a memoryview slice;
    # big blobs are hashed in place rather than copied once more.
    covered = head[4:] if dl < 4096 else memoryview(head)[4:]
    return head + _xxh(covered).to_bytes(8, "little")


def encode_control(
    ftype: FrameType, topic_id: int, body: bytes, ts: int, durable: bool, seq: int = 0
) -> bytes:
    """A control frame (no node/tag sections); `seq` is the job seq for Lease frames."""
    dl = len(body)
    flags = FLAG_DURABLE if durable else 0
    head = HEADER.pack(MIN_FRAME_LEN + dl, int(ftype), flags, topic_id, seq, ts, 0, 0, dl) + body
    return head + _xxh(head[4:]).to_bytes(8, "little")


def encode_frame(frame: WalFrame) -> bytes:
    """Any frame. has_node/has_tag are derived from `node`/`tag` being present; the other
    flag bits are kept as given."""
    nb = b"" if frame.node is None else frame.node.encode()
    tb = b"" if frame.tag is None else frame.tag.encode()
    flags = frame.flags & ~(FLAG_NODE | FLAG_TAG)
    if frame.node is not None:
        flags |= FLAG_NODE
    if frame.tag is not None:
        flags |= FLAG_TAG
    nl, tl, dl = len(nb), len(tb), len(frame.data)
    head = (
        HEADER.pack(
            MIN_FRAME_LEN + nl + tl + dl,
            int(frame.type),
            flags,
            frame.topic_id,
            frame.seq,
            frame.ts,
            nl,
            tl,
            dl,
        )
        + nb
        + tb
        + frame.data
    )
    return head + _xxh(head[4:]).to_bytes(8, "little")


# ---- scanning --------------------------------------------------------------------------


def _sections(
    src: _Sliceable, p: int, flags: int, nl: int, tl: int
) -> tuple[str | None, str | None]:
    """node and tag of a frame whose sections start at `p`; raises UnicodeDecodeError."""
    node = src[p : p + nl].decode() if flags & FLAG_NODE else None
    tag = src[p + nl : p + nl + tl].decode() if flags & FLAG_TAG else None
    return node, tag


def _body_ok(ftype: int, data: bytes) -> bool:
    try:
        _BODIES[_FRAME_TYPES[ftype]].decode(data)
    except FrameError:
        return False
    return True


def _scan_chunk(
    src: _Sliceable, mv: memoryview, off: int, limit: int, collect: bool = True
) -> tuple[list[RawFrame], int, bool]:
    """Up to `limit` valid frames from `off`: `(frames, next offset, hit the logical end)`;
    with `collect=False` only validates (the list stays empty).

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
        if flags & sections:  # has_node | has_tag
            try:
                node, tag = _sections(src, off + hdr_size, flags, nl, tl)
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
        src = _as_sliceable(self.buf)
        with memoryview(src) as mv:
            while True:
                frames, off, stopped = _scan_chunk(src, mv, self.end, _CHUNK)
                yield from frames
                self.end = off
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


# ---- payload blobs ---------------------------------------------------------------------


def encode_blob(data_json: bytes, meta_json: bytes | None) -> bytes:
    """`{"d":<data>}` or `{"d":<data>,"m":<meta>}` from compact JSON parts."""
    if meta_json is None:
        return b'{"d":' + data_json + b"}"
    return b'{"d":' + data_json + b',"m":' + meta_json + b"}"


def decode_blob(blob: bytes) -> tuple[bytes, bytes | None]:
    """Compact JSON of data and meta. A blob we wrote without meta is sliced, not parsed:
    any `"m"` anywhere sends it to the exact (parsing) path, so a data value that merely
    contains that text is still decoded correctly."""
    if blob.startswith(b'{"d":') and blob.endswith(b"}") and blob.find(b'"m"', 5) < 0:
        return blob[5:-1], None
    try:
        obj = orjson.loads(blob)
    except orjson.JSONDecodeError as e:
        raise FrameError(f"payload blob is not JSON: {e}") from None
    if not isinstance(obj, dict) or "d" not in obj or not obj.keys() <= {"d", "m"}:
        raise FrameError("payload blob is not {'d': ...[, 'm': ...]}")
    return json_bytes(obj["d"]), (json_bytes(obj["m"]) if "m" in obj else None)


# ---- control bodies --------------------------------------------------------------------


class _Reader:
    __slots__ = ("buf", "pos")

    def __init__(self, buf: bytes) -> None:
        self.buf = buf
        self.pos = 0

    def take(self, n: int) -> bytes:
        if self.pos + n > len(self.buf):
            raise FrameError("control body is truncated")
        out = self.buf[self.pos : self.pos + n]
        self.pos += n
        return out

    def u8(self) -> int:
        return self.take(1)[0]

    def flag(self) -> bool:
        b = self.u8()
        if b > 1:
            raise FrameError(f"expected 0 or 1, got {b}")
        return b == 1

    def u32(self) -> int:
        return int(_U32.unpack(self.take(4))[0])

    def u64(self) -> int:
        return int(_U64.unpack(self.take(8))[0])

    def u64s(self, n: int) -> tuple[int, ...]:
        return struct.unpack(f"<{n}Q", self.take(8 * n))

    def lp_bytes(self) -> bytes:
        return self.take(self.u32())

    def lp_str(self) -> str:
        try:
            return self.lp_bytes().decode()
        except UnicodeDecodeError:
            raise FrameError("invalid UTF-8 in a control body") from None

    def selector(self) -> Selector | None:
        if not self.flag():
            return None
        op = self.u8()
        if op > 1:
            raise FrameError(f"unknown selector op {op}")
        return Selector("Eq" if op == 0 else "Glob", self.lp_str())

    def done(self) -> None:
        if self.pos != len(self.buf):
            raise FrameError("trailing bytes after a control body")


def _lp(b: bytes) -> bytes:
    return _U32.pack(len(b)) + b


def _lp_str(s: str) -> bytes:
    return _lp(s.encode())


def _selector(sel: Selector | None) -> bytes:
    # STORAGE §1: u8 present, u8 op (0 Eq, 1 Glob), lp-str value (a Glob's prefix, no `*`).
    if sel is None:
        return b"\x00"
    return b"\x01" + (b"\x00" if sel.op == "Eq" else b"\x01") + _lp_str(sel.value)


def _opt_u64(v: int | None) -> bytes:
    return b"\x00" if v is None else b"\x01" + _U64.pack(v)


@dataclass(frozen=True, slots=True)
class TopicCreateBody:
    """Types 2 and 9: `lp-str name`, `lp-bytes config JSON`."""

    name: str
    config_json: bytes

    def encode(self) -> bytes:
        return _lp_str(self.name) + _lp(self.config_json)

    @classmethod
    def decode(cls, body: bytes) -> Self:
        r = _Reader(body)
        out = cls(r.lp_str(), r.lp_bytes())
        r.done()
        return out


@dataclass(frozen=True, slots=True)
class TopicDeleteBody:
    """Type 3: `lp-str name`, then an empty `lp-bytes`."""

    name: str

    def encode(self) -> bytes:
        return _lp_str(self.name) + _lp(b"")

    @classmethod
    def decode(cls, body: bytes) -> Self:
        r = _Reader(body)
        out = cls(r.lp_str())
        if r.lp_bytes():
            raise FrameError("TopicDelete carries a non-empty trailer")
        r.done()
        return out


@dataclass(frozen=True, slots=True)
class RouterCreateBody:
    """Type 4: three lp-strs, u8 bits, filter selector, u64 cursor, u64 dest base."""

    name: str
    source: str
    dest: str
    preserve_node: bool
    preserve_tag: bool
    create_dest: bool
    allow_cycle: bool
    exactly_once: bool
    filter: Selector | None
    initial_cursor: int
    initial_dest_base: int

    def encode(self) -> bytes:
        bits = (
            self.preserve_node
            | self.preserve_tag << 1
            | self.create_dest << 2
            | self.allow_cycle << 3
            | self.exactly_once << 4
        )
        return (
            _lp_str(self.name)
            + _lp_str(self.source)
            + _lp_str(self.dest)
            + bytes([bits])
            + _selector(self.filter)
            + _U64.pack(self.initial_cursor)
            + _U64.pack(self.initial_dest_base)
        )

    @classmethod
    def decode(cls, body: bytes) -> Self:
        r = _Reader(body)
        name, source, dest = r.lp_str(), r.lp_str(), r.lp_str()
        bits = r.u8()
        if bits >= 32:
            raise FrameError(f"reserved router bits set: {bits:#x}")
        sel = r.selector()
        out = cls(
            name,
            source,
            dest,
            bool(bits & 1),
            bool(bits & 2),
            bool(bits & 4),
            bool(bits & 8),
            bool(bits & 16),
            sel,
            r.u64(),
            r.u64(),
        )
        r.done()
        return out


@dataclass(frozen=True, slots=True)
class RouterDeleteBody:
    """Type 5: `lp-str name`."""

    name: str

    def encode(self) -> bytes:
        return _lp_str(self.name)

    @classmethod
    def decode(cls, body: bytes) -> Self:
        r = _Reader(body)
        out = cls(r.lp_str())
        r.done()
        return out


@dataclass(frozen=True, slots=True)
class DeleteBody:
    """Type 6: `u8 has_before [u64]`, selector, `u32 n` + n×u64, `u8 has_bound [u64]`."""

    before_seq: int | None
    match: Selector | None
    seqs: tuple[int, ...]
    bound_head: int | None

    def encode(self) -> bytes:
        return (
            _opt_u64(self.before_seq)
            + _selector(self.match)
            + _U32.pack(len(self.seqs))
            + struct.pack(f"<{len(self.seqs)}Q", *self.seqs)
            + _opt_u64(self.bound_head)
        )

    @classmethod
    def decode(cls, body: bytes) -> Self:
        r = _Reader(body)
        before = r.u64() if r.flag() else None
        sel = r.selector()
        seqs = r.u64s(r.u32())  # a bogus count fails the length check before allocating
        bound = r.u64() if r.flag() else None
        r.done()
        return cls(before, sel, seqs, bound)


@dataclass(frozen=True, slots=True)
class EvictWatermarkBody:
    """Type 7: three u64s."""

    evict_floor: int
    earliest_seq: int  # = max floor + 1; informational
    expiry_floor: int

    def encode(self) -> bytes:
        return (
            _U64.pack(self.evict_floor)
            + _U64.pack(self.earliest_seq)
            + _U64.pack(self.expiry_floor)
        )

    @classmethod
    def decode(cls, body: bytes) -> Self:
        r = _Reader(body)
        out = cls(r.u64(), r.u64(), r.u64())
        r.done()
        return out


@dataclass(frozen=True, slots=True)
class CheckpointMarkBody:
    """Type 8: `u64 last_checkpoint_seq` (written as 0)."""

    last_checkpoint_seq: int = 0

    def encode(self) -> bytes:
        return _U64.pack(self.last_checkpoint_seq)

    @classmethod
    def decode(cls, body: bytes) -> Self:
        r = _Reader(body)
        out = cls(r.u64())
        r.done()
        return out


LEASE_CLAIMED, LEASE_RELEASED, LEASE_EXTENDED, LEASE_ACKED = 0, 1, 2, 3


@dataclass(frozen=True, slots=True)
class LeaseBody:
    """Type 10 (header seq = job seq): u8 event, u64 lease_id, deadline, deliveries, lp-str node."""

    event: int
    lease_id: int
    deadline: int
    deliveries: int
    node: str

    def encode(self) -> bytes:
        return (
            bytes([self.event])
            + _U64.pack(self.lease_id)
            + _U64.pack(self.deadline)
            + _U64.pack(self.deliveries)
            + _lp_str(self.node)
        )

    @classmethod
    def decode(cls, body: bytes) -> Self:
        r = _Reader(body)
        event = r.u8()
        if event > LEASE_ACKED:
            raise FrameError(f"unknown lease event {event}")
        out = cls(event, r.u64(), r.u64(), r.u64(), r.lp_str())
        r.done()
        return out


@dataclass(frozen=True, slots=True)
class HeadWatermarkBody:
    """Type 11: `u64 reserved_head`."""

    reserved_head: int

    def encode(self) -> bytes:
        return _U64.pack(self.reserved_head)

    @classmethod
    def decode(cls, body: bytes) -> Self:
        r = _Reader(body)
        out = cls(r.u64())
        r.done()
        return out


ControlBody = (
    TopicCreateBody
    | TopicDeleteBody
    | RouterCreateBody
    | RouterDeleteBody
    | DeleteBody
    | EvictWatermarkBody
    | CheckpointMarkBody
    | LeaseBody
    | HeadWatermarkBody
)

_BODIES: dict[FrameType, type[ControlBody]] = {
    FrameType.TOPIC_CREATE: TopicCreateBody,
    FrameType.CONFIG_UPDATE: TopicCreateBody,
    FrameType.TOPIC_DELETE: TopicDeleteBody,
    FrameType.ROUTER_CREATE: RouterCreateBody,
    FrameType.ROUTER_DELETE: RouterDeleteBody,
    FrameType.DELETE: DeleteBody,
    FrameType.EVICT_WATERMARK: EvictWatermarkBody,
    FrameType.CHECKPOINT_MARK: CheckpointMarkBody,
    FrameType.LEASE: LeaseBody,
    FrameType.HEAD_WATERMARK: HeadWatermarkBody,
}


def decode_body(frame: WalFrame) -> ControlBody:
    """The control body of any non-Append frame; raises `FrameError` for Append."""
    cls = _BODIES.get(frame.type)
    if cls is None:
        raise FrameError(f"frame type {frame.type.name} has no control body")
    return cls.decode(frame.data)
