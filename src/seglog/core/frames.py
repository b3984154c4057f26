"""WAL frames (STORAGE §3.1): the byte layout, the frame types and the encoders. Pure.

```
off  size  field
  0    4   frame_len  u32   bytes after this field (header + sections + checksum)
  4    1   type       u8
  5    1   flags      u8    bit0 has_tag, bit1 has_node, bit2 durable, bit3 more
  6    8   topic_id   u64
 14    8   seq        u64
 22    8   ts         u64
 30    2   node_len   u16
 32    2   tag_len    u16
 34    4   data_len   u32
 38    N   node, M tag, P data
  .    8   xxh3       u64   XXH3-64 (seed 0) over bytes [4, start of this field)
```
All integers little-endian. `more` (a seglog extension of STORAGE §3.1, ignored by readers
that predate it) marks every frame of a multi-frame submission but its last: a submission is
atomic, so replay applies its frames only once the frame without `more` is read, and drops
an unfinished one at the logical end of a file (a crash cut the batch's write short).
A frame is valid only if every check of §3.1 passes; deciding
that, and reading frames back, is `seglog.core.frame_scanner`'s job. The `data` section
holds an Append's payload blob (`seglog.core.payload_blob`) or a control body
(`seglog.core.frame_bodies`).
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from enum import IntEnum

import xxhash


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
FLAG_MORE = 8  # further frames of the same atomic submission follow this one

HEADER = struct.Struct("<IBBQQQHHI")  # frame_len .. data_len: 38 bytes
HEADER_SIZE = HEADER.size
CHECKSUM_SIZE = 8
MIN_FRAME_LEN = HEADER_SIZE - 4 + CHECKSUM_SIZE  # 42
_xxh = xxhash.xxh3_64_intdigest


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


def encode_append(
    topic_id: int,
    seq: int,
    ts: int,
    node: str | None,
    tag: str | None,
    blob: bytes,
    durable: bool,
    more: bool = False,
) -> bytes:
    """One Append frame: the engine's hot path (one pack, one concatenation, one hash)."""
    flags = (FLAG_DURABLE if durable else 0) | (FLAG_MORE if more else 0)
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
    ftype: FrameType,
    topic_id: int,
    body: bytes,
    ts: int,
    durable: bool,
    seq: int = 0,
    more: bool = False,
) -> bytes:
    """A control frame (no node/tag sections); `seq` is the job seq for Lease frames."""
    dl = len(body)
    flags = (FLAG_DURABLE if durable else 0) | (FLAG_MORE if more else 0)
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
