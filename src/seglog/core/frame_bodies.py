"""Control-frame bodies (STORAGE §3.2): the `data` section of every non-Append frame. Pure.

Control bodies decode only on an exact, canonical parse (booleans 0/1, no reserved bits,
no trailing bytes), so `decode(body).encode() == body` whenever decoding succeeds; the
frame scanner rejects a frame whose body does not decode.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import Self

from seglog.core.frames import FrameError, FrameType, WalFrame
from seglog.model import Selector

_U64 = struct.Struct("<Q")
_U32 = struct.Struct("<I")


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

# The body of each control frame type: `decode_body` and the frame scanner's validity check.
CONTROL_BODIES: dict[FrameType, type[ControlBody]] = {
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
    cls = CONTROL_BODIES.get(frame.type)
    if cls is None:
        raise FrameError(f"frame type {frame.type.name} has no control body")
    return cls.decode(frame.data)
