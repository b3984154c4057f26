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
  .    8   xxh3       u64   XXH3-64 over bytes [4, start of this field)
```
All integers little-endian. A frame is valid only if every check passes; the first
invalid frame is the logical end of a WAL file (torn tail, preallocated zeros, garbage).
"""

from __future__ import annotations

import mmap
import struct
from collections.abc import Iterator
from dataclasses import dataclass
from enum import IntEnum
from typing import Self

import orjson
import xxhash

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
_U64 = struct.Struct("<Q")
_U32 = struct.Struct("<I")
_xxh = xxhash.xxh3_64_intdigest
_TYPES = frozenset(int(t) for t in FrameType)
_FRAME_TYPES = {int(t): t for t in FrameType}


Buffer = bytes | bytearray | memoryview | mmap.mmap


class FrameError(ValueError):
    """A frame or control body that does not parse exactly."""


@dataclass(frozen=True, slots=True)
class WalFrame:
    type: FrameType
    flags: int
    topic_id: int
    seq: int
    ts: int
    node: str | None
    tag: str | None
    data: bytes

    @property
    def durable(self) -> bool:
        return bool(self.flags & FLAG_DURABLE)


def _frame(
    ftype: int, flags: int, topic_id: int, seq: int, ts: int, node: bytes, tag: bytes, data: bytes
) -> bytes:
    body = (
        HEADER.pack(
            HEADER_SIZE - 4 + len(node) + len(tag) + len(data) + CHECKSUM_SIZE,
            ftype,
            flags,
            topic_id,
            seq,
            ts,
            len(node),
            len(tag),
            len(data),
        )
        + node
        + tag
        + data
    )
    return body + _U64.pack(_xxh(memoryview(body)[4:]))


def encode_frame(frame: WalFrame) -> bytes:
    node = frame.node.encode() if frame.node is not None else b""
    tag = frame.tag.encode() if frame.tag is not None else b""
    flags = frame.flags & FLAG_DURABLE
    if frame.node is not None:
        flags |= FLAG_NODE
    if frame.tag is not None:
        flags |= FLAG_TAG
    return _frame(
        int(frame.type), flags, frame.topic_id, frame.seq, frame.ts, node, tag, frame.data
    )


def encode_append(
    topic_id: int, seq: int, ts: int, node: str | None, tag: str | None, blob: bytes, durable: bool
) -> bytes:
    """The hot path: one Append frame."""
    flags = FLAG_DURABLE if durable else 0
    if node is None:
        nb = b""
    else:
        nb = node.encode()
        flags |= FLAG_NODE
    if tag is None:
        tb = b""
    else:
        tb = tag.encode()
        flags |= FLAG_TAG
    return _frame(1, flags, topic_id, seq, ts, nb, tb, blob)


def encode_control(
    ftype: FrameType, topic_id: int, body: bytes, ts: int, durable: bool, seq: int = 0
) -> bytes:
    return _frame(int(ftype), FLAG_DURABLE if durable else 0, topic_id, seq, ts, b"", b"", body)


def _decode_at(buf: Buffer, off: int, size: int) -> tuple[WalFrame, int] | None:
    """The frame at `off` and its end offset, or None if it is not valid."""
    if size - off < 4:
        return None
    (frame_len,) = _U32.unpack_from(buf, off)
    end = off + 4 + frame_len
    if frame_len < MIN_FRAME_LEN or end > size:
        return None
    _, ftype, flags, topic_id, seq, ts, nl, tl, dl = HEADER.unpack_from(buf, off)
    if nl + tl + dl != frame_len - MIN_FRAME_LEN or ftype not in _TYPES:
        return None
    chk_at = end - CHECKSUM_SIZE
    if _xxh(memoryview(buf)[off + 4 : chk_at]) != _U64.unpack_from(buf, chk_at)[0]:
        return None
    p = off + HEADER_SIZE
    try:
        node = bytes(buf[p : p + nl]).decode() if flags & FLAG_NODE else None
        p += nl
        tag = bytes(buf[p : p + tl]).decode() if flags & FLAG_TAG else None
    except UnicodeDecodeError:
        return None
    p += tl
    if (node is None and nl) or (tag is None and tl):
        return None
    frame = WalFrame(
        _FRAME_TYPES[ftype], flags, topic_id, seq, ts, node, tag, bytes(buf[p : p + dl])
    )
    if frame.type is not FrameType.APPEND:
        try:
            decode_body(frame)
        except FrameError:
            return None
    return frame, end


RawFrame = tuple[int, int, int, int, int, int, str | None, str | None, bytes]


def iter_raw(buf: Buffer, start: int = 0) -> Iterator[RawFrame]:
    """Recovery's fast path: the same validity rules as `FrameScanner`, yielding plain
    tuples `(end, type, flags, topic_id, seq, ts, node, tag, data)`. Stops silently at the
    logical end; callers that need the end use `FrameScanner`."""
    mv = memoryview(buf)
    size = len(mv)
    off = start
    unpack_len = _U32.unpack_from
    unpack_hdr = HEADER.unpack_from
    unpack_u64 = _U64.unpack_from
    xxh = _xxh
    while size - off >= 4:
        (frame_len,) = unpack_len(mv, off)
        end = off + 4 + frame_len
        if frame_len < MIN_FRAME_LEN or end > size:
            return
        _, ftype, flags, topic_id, seq, ts, nl, tl, dl = unpack_hdr(mv, off)
        chk_at = end - 8
        if (
            nl + tl + dl != frame_len - MIN_FRAME_LEN
            or ftype not in _TYPES
            or xxh(mv[off + 4 : chk_at]) != unpack_u64(mv, chk_at)[0]
        ):
            return
        p = off + HEADER_SIZE
        try:
            node = str(mv[p : p + nl], "utf-8") if flags & FLAG_NODE else None
            p += nl
            tag = str(mv[p : p + tl], "utf-8") if flags & FLAG_TAG else None
        except UnicodeDecodeError:
            return
        p += tl
        if (node is None and nl) or (tag is None and tl):
            return
        data = bytes(mv[p : p + dl])
        if ftype != 1:
            try:
                _BODIES[_FRAME_TYPES[ftype]].decode(data)
            except (FrameError, KeyError):
                return
        yield end, ftype, flags, topic_id, seq, ts, node, tag, data
        off = end


class FrameScanner:
    """Iterate valid frames from `start`; after exhaustion `.end` is the logical end."""

    def __init__(self, buf: Buffer, start: int = 0) -> None:
        self.buf = buf
        self.end = start

    def __iter__(self) -> Iterator[tuple[int, int, WalFrame]]:
        buf = self.buf
        size = len(buf)
        off = self.end
        while True:
            got = _decode_at(buf, off, size)
            if got is None:
                self.end = off
                return
            frame, end = got
            yield off, end, frame
            off = end
            self.end = off


def iter_frames(buf: Buffer, start: int = 0) -> FrameScanner:
    return FrameScanner(buf, start)


def scan_frames(
    buf: Buffer, start: int = 0
) -> tuple[list[tuple[int, int, WalFrame]], int]:
    sc = FrameScanner(buf, start)
    frames = list(sc)
    return frames, sc.end


# ---- payload blobs ---------------------------------------------------------------------


def encode_blob(data_json: bytes, meta_json: bytes | None) -> bytes:
    if meta_json is None:
        return b'{"d":' + data_json + b"}"
    return b'{"d":' + data_json + b',"m":' + meta_json + b"}"


def decode_blob(blob: bytes) -> tuple[bytes, bytes | None]:
    """Compact JSON of data and meta. Blobs we wrote without meta are sliced, not parsed."""
    if blob.startswith(b'{"d":') and blob.endswith(b"}"):
        inner = blob[5:-1]
        if b'"m":' not in inner:
            return inner, None
    try:
        obj = orjson.loads(blob)
    except orjson.JSONDecodeError as e:
        raise FrameError(f"payload blob is not JSON: {e}") from None
    if not isinstance(obj, dict) or "d" not in obj:
        raise FrameError("payload blob lacks its data")
    meta = obj.get("m")
    return orjson.dumps(obj["d"]), (None if "m" not in obj else orjson.dumps(meta))


# ---- control bodies --------------------------------------------------------------------


class _Reader:
    __slots__ = ("buf", "pos")

    def __init__(self, buf: bytes) -> None:
        self.buf = buf
        self.pos = 0

    def take(self, n: int) -> bytes:
        if n < 0 or self.pos + n > len(self.buf):
            raise FrameError("control body is truncated")
        out = self.buf[self.pos : self.pos + n]
        self.pos += n
        return out

    def u8(self) -> int:
        return self.take(1)[0]

    def u32(self) -> int:
        return int(_U32.unpack(self.take(4))[0])

    def u64(self) -> int:
        return int(_U64.unpack(self.take(8))[0])

    def lp_bytes(self) -> bytes:
        return self.take(self.u32())

    def lp_str(self) -> str:
        try:
            return self.lp_bytes().decode()
        except UnicodeDecodeError:
            raise FrameError("invalid UTF-8 in a control body") from None

    def selector(self) -> Selector | None:
        if self.u8() == 0:
            return None
        op = self.u8()
        if op not in (0, 1):
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
    if sel is None:
        return b"\x00"
    return b"\x01" + (b"\x00" if sel.op == "Eq" else b"\x01") + _lp_str(sel.value)


@dataclass(frozen=True, slots=True)
class TopicCreateBody:
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
    name: str

    def encode(self) -> bytes:
        return _lp_str(self.name) + _lp(b"")

    @classmethod
    def decode(cls, body: bytes) -> Self:
        r = _Reader(body)
        out = cls(r.lp_str())
        r.lp_bytes()
        r.done()
        return out


@dataclass(frozen=True, slots=True)
class RouterCreateBody:
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
    before_seq: int | None
    match: Selector | None
    seqs: tuple[int, ...]
    bound_head: int | None

    def encode(self) -> bytes:
        out = b"\x00" if self.before_seq is None else b"\x01" + _U64.pack(self.before_seq)
        out += _selector(self.match) + _U32.pack(len(self.seqs))
        out += b"".join(_U64.pack(s) for s in self.seqs)
        out += b"\x00" if self.bound_head is None else b"\x01" + _U64.pack(self.bound_head)
        return out

    @classmethod
    def decode(cls, body: bytes) -> Self:
        r = _Reader(body)
        before = r.u64() if r.u8() else None
        sel = r.selector()
        n = r.u32()
        if n * 8 > len(body):
            raise FrameError("delete seq count exceeds the body")
        seqs = tuple(r.u64() for _ in range(n))
        bound = r.u64() if r.u8() else None
        r.done()
        return cls(before, sel, seqs, bound)


@dataclass(frozen=True, slots=True)
class EvictWatermarkBody:
    evict_floor: int
    earliest_seq: int
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
    last_checkpoint_seq: int = 0

    def encode(self) -> bytes:
        return _U64.pack(self.last_checkpoint_seq)

    @classmethod
    def decode(cls, body: bytes) -> Self:
        r = _Reader(body)
        out = cls(r.u64())
        r.done()
        return out


@dataclass(frozen=True, slots=True)
class LeaseBody:
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
        if event > 3:
            raise FrameError(f"unknown lease event {event}")
        out = cls(event, r.u64(), r.u64(), r.u64(), r.lp_str())
        r.done()
        return out


@dataclass(frozen=True, slots=True)
class HeadWatermarkBody:
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
    cls = _BODIES.get(frame.type)
    if cls is None:
        raise FrameError(f"frame type {frame.type.name} has no control body")
    return cls.decode(frame.data)
