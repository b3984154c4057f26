"""WAL framing (STORAGE §1, §3.1–§3.2): byte-exact layout, round trips for every frame type
and body, the validity rules, and torn/garbled tails at every byte offset."""

from __future__ import annotations

import struct

import orjson
import pytest
import xxhash
from hypothesis import given, settings
from hypothesis import strategies as st

from seglog.core.frame_bodies import (
    CheckpointMarkBody,
    ControlBody,
    DeleteBody,
    EvictWatermarkBody,
    HeadWatermarkBody,
    LeaseBody,
    RouterCreateBody,
    RouterDeleteBody,
    TopicCreateBody,
    TopicDeleteBody,
    decode_body,
)
from seglog.core.frame_scanner import (
    FrameScanner,
    RawScanner,
    iter_frames,
    iter_raw,
    scan_frames,
    valid_end,
)
from seglog.core.frames import (
    FLAG_DURABLE,
    FLAG_NODE,
    FLAG_TAG,
    FrameError,
    FrameType,
    WalFrame,
    encode_append,
    encode_control,
    encode_frame,
)
from seglog.core.payload_blob import decode_blob, encode_blob
from seglog.model import Selector

U64 = st.integers(0, 2**64 - 1)
TEXT = st.text(max_size=12)
SELECTOR = st.none() | st.builds(Selector, st.sampled_from(["Eq", "Glob"]), TEXT)

BODY_TYPES: dict[type[ControlBody], tuple[FrameType, ...]] = {
    TopicCreateBody: (FrameType.TOPIC_CREATE, FrameType.CONFIG_UPDATE),
    TopicDeleteBody: (FrameType.TOPIC_DELETE,),
    RouterCreateBody: (FrameType.ROUTER_CREATE,),
    RouterDeleteBody: (FrameType.ROUTER_DELETE,),
    DeleteBody: (FrameType.DELETE,),
    EvictWatermarkBody: (FrameType.EVICT_WATERMARK,),
    CheckpointMarkBody: (FrameType.CHECKPOINT_MARK,),
    LeaseBody: (FrameType.LEASE,),
    HeadWatermarkBody: (FrameType.HEAD_WATERMARK,),
}

BODIES: st.SearchStrategy[ControlBody] = st.one_of(
    st.builds(TopicCreateBody, TEXT, st.binary(max_size=40)),
    st.builds(TopicDeleteBody, TEXT),
    st.builds(
        RouterCreateBody,
        TEXT,
        TEXT,
        TEXT,
        st.booleans(),
        st.booleans(),
        st.booleans(),
        st.booleans(),
        st.booleans(),
        SELECTOR,
        U64,
        U64,
    ),
    st.builds(RouterDeleteBody, TEXT),
    st.builds(
        DeleteBody, st.none() | U64, SELECTOR, st.lists(U64, max_size=6).map(tuple), st.none() | U64
    ),
    st.builds(EvictWatermarkBody, U64, U64, U64),
    st.builds(CheckpointMarkBody, U64),
    st.builds(LeaseBody, st.integers(0, 3), U64, U64, U64, TEXT),
    st.builds(HeadWatermarkBody, U64),
)


@st.composite
def frames(draw: st.DrawFn) -> WalFrame:
    """Any frame an encoder produces: Appends with optional node/tag, control frames."""
    durable = FLAG_DURABLE if draw(st.booleans()) else 0
    if draw(st.booleans()):
        node = draw(st.none() | TEXT)
        tag = draw(st.none() | TEXT)
        flags = (
            durable | (FLAG_NODE if node is not None else 0) | (FLAG_TAG if tag is not None else 0)
        )
        blob = encode_blob(orjson.dumps(draw(st.integers(-(2**63), 2**63 - 1) | TEXT)), None)
        return WalFrame(FrameType.APPEND, flags, draw(U64), draw(U64), draw(U64), node, tag, blob)
    body = draw(BODIES)
    ftype = draw(st.sampled_from(BODY_TYPES[type(body)]))
    seq = draw(U64) if ftype is FrameType.LEASE else 0
    return WalFrame(ftype, durable, draw(U64), seq, draw(U64), None, None, body.encode())


def _frame_bytes(
    ftype: int,
    flags: int,
    sections: tuple[bytes, bytes, bytes],
    *,
    lens: tuple[int, int, int] | None = None,
) -> bytes:
    """A frame with a correct checksum but possibly inconsistent fields (for invalid cases)."""
    node, tag, data = sections
    nl, tl, dl = lens or (len(node), len(tag), len(data))
    frame_len = 34 + len(node) + len(tag) + len(data) + 8
    head = struct.pack("<IBBQQQHHI", frame_len, ftype, flags, 7, 1, 2, nl, tl, dl)
    head += node + tag + data
    return head + struct.pack("<Q", xxhash.xxh3_64_intdigest(head[4:]))


# ---- layout ----------------------------------------------------------------------------


def test_append_frame_is_byte_exact() -> None:
    blob = b'{"d":1}'
    got = encode_append(0x0A, 5, 1748450000000, "w1", "t", blob, durable=True)
    covered = (
        b"\x01"  # type: Append
        + bytes([FLAG_TAG | FLAG_NODE | FLAG_DURABLE])  # 0b111
        + (10).to_bytes(8, "little")  # topic_id
        + (5).to_bytes(8, "little")  # seq
        + (1748450000000).to_bytes(8, "little")  # ts
        + (2).to_bytes(2, "little")  # node_len
        + (1).to_bytes(2, "little")  # tag_len
        + (7).to_bytes(4, "little")  # data_len
        + b"w1"
        + b"t"
        + blob
    )
    frame_len = 34 + 2 + 1 + 7 + 8
    expected = (
        frame_len.to_bytes(4, "little")
        + covered
        + xxhash.xxh3_64_intdigest(covered).to_bytes(8, "little")
    )
    assert got == expected and len(got) == 4 + frame_len
    # golden bytes: pins the layout, the endianness and XXH3-64 with seed 0
    assert got.hex() == (
        "34000000" "01" "07" "0a00000000000000" "0500000000000000" "80bcbd1797010000"
        "0200" "0100" "07000000" "7731" "74" "7b2264223a317d" "94bc50950beb6a79"
    )  # fmt: skip


def test_append_without_node_or_tag_clears_their_flags() -> None:
    got = encode_append(1, 1, 0, None, None, b'{"d":0}', durable=False)
    assert got[5] == 0
    assert got[30:34] == bytes(4)  # node_len = tag_len = 0
    assert got[34:38] == (7).to_bytes(4, "little")  # data_len
    assert got[38:-8] == b'{"d":0}'


def test_control_frame_is_byte_exact() -> None:
    body = CheckpointMarkBody().encode()
    assert body == bytes(8)
    got = encode_control(FrameType.CHECKPOINT_MARK, 0, body, 9, durable=True)
    head = struct.pack("<BBQQQHHI", 8, FLAG_DURABLE, 0, 0, 9, 0, 0, 8) + body
    assert got == (42 + 8).to_bytes(4, "little") + head + struct.pack(
        "<Q", xxhash.xxh3_64_intdigest(head)
    )
    lease = encode_control(FrameType.LEASE, 3, LeaseBody(1, 2, 3, 4, "n").encode(), 9, False, 77)
    assert struct.unpack_from("<Q", lease, 14)[0] == 77  # header seq = job seq


def test_control_bodies_are_byte_exact() -> None:
    assert TopicCreateBody("ab", b"{}").encode() == b"\x02\0\0\0ab\x02\0\0\0{}"
    assert TopicDeleteBody("ab").encode() == b"\x02\0\0\0ab" + bytes(4)
    assert RouterDeleteBody("r").encode() == b"\x01\0\0\0r"
    assert HeadWatermarkBody(256).encode() == (256).to_bytes(8, "little")
    assert EvictWatermarkBody(1, 2, 3).encode() == struct.pack("<QQQ", 1, 2, 3)
    assert LeaseBody(3, 1, 2, 3, "w").encode() == b"\x03" + struct.pack("<QQQ", 1, 2, 3) + (
        b"\x01\0\0\0w"
    )
    # Delete: has_before + u64, selector (present, op 1 = Glob, value without `*`), seqs, bound
    d = DeleteBody(9, Selector("Glob", "p:"), (4, 5), 11).encode()
    assert d == (
        b"\x01" + struct.pack("<Q", 9) + b"\x01\x01" + b"\x02\0\0\0p:"
        + struct.pack("<IQQ", 2, 4, 5) + b"\x01" + struct.pack("<Q", 11)
    )  # fmt: skip
    assert DeleteBody(None, None, (), None).encode() == b"\x00\x00" + bytes(4) + b"\x00"
    r = RouterCreateBody("r", "a", "b", True, False, True, False, True, Selector("Eq", "x"), 7, 8)
    assert r.encode() == (
        b"\x01\0\0\0r\x01\0\0\0a\x01\0\0\0b" + bytes([0b10101]) + b"\x01\x00\x01\0\0\0x"
        + struct.pack("<QQ", 7, 8)
    )  # fmt: skip


# ---- round trips -----------------------------------------------------------------------


@settings(max_examples=300, deadline=None)
@given(frames())
def test_every_frame_round_trips(frame: WalFrame) -> None:
    buf = encode_frame(frame)
    got, end = scan_frames(buf)
    assert got == [(0, len(buf), frame)] and end == len(buf)
    if frame.type is FrameType.APPEND:
        assert buf == encode_append(
            frame.topic_id, frame.seq, frame.ts, frame.node, frame.tag, frame.data, frame.durable
        )
    else:
        assert buf == encode_control(
            frame.type, frame.topic_id, frame.data, frame.ts, frame.durable, frame.seq
        )
        body = decode_body(frame)
        assert body.encode() == frame.data
        assert type(body) in BODY_TYPES and frame.type in BODY_TYPES[type(body)]


@given(BODIES)
def test_every_body_round_trips(body: ControlBody) -> None:
    assert type(body).decode(body.encode()) == body


@given(st.lists(frames(), max_size=8))
def test_streams_agree(fs: list[WalFrame]) -> None:
    buf = b"".join(encode_frame(f) for f in fs) + bytes(64)
    frames_, end = scan_frames(buf)
    assert [f for _o, _e, f in frames_] == fs
    assert end == len(buf) - 64 == valid_end(buf)
    raws = list(iter_raw(buf))
    assert [(r[0], r[1], r[3], r[4], r[8]) for r in raws] == [
        (e, int(f.type), f.topic_id, f.seq, f.data) for _o, e, f in frames_
    ]


def test_decode_body_rejects_append() -> None:
    with pytest.raises(FrameError):
        decode_body(WalFrame(FrameType.APPEND, 0, 1, 1, 0, None, None, b'{"d":1}'))


# ---- strict bodies ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("cls", "body"),
    [
        (CheckpointMarkBody, bytes(7)),
        (CheckpointMarkBody, bytes(9)),  # trailing byte
        (TopicCreateBody, b"\x05\0\0\0ab"),  # lp-str longer than the body
        (TopicCreateBody, b"\x01\0\0\0\xff\0\0\0\0"),  # invalid UTF-8 name
        (TopicDeleteBody, b"\x01\0\0\0a\x01\0\0\0x"),  # trailer must be empty
        (RouterDeleteBody, b"\x01\0\0\0ab"),
        (DeleteBody, b"\x02" + bytes(8) + b"\x00" + bytes(4) + b"\x00"),  # has_before = 2
        (DeleteBody, b"\x00\x01\x02\x00\0\0\0" + bytes(4) + b"\x00"),  # selector op 2
        (DeleteBody, b"\x00\x00\xff\xff\xff\xff\x00"),  # seq count past the body
        (LeaseBody, b"\x04" + bytes(24) + bytes(4)),  # unknown lease event
        (
            RouterCreateBody,
            b"\x01\0\0\0r\x01\0\0\0a\x01\0\0\0b\x20\x00" + bytes(16),  # reserved bit 5
        ),
        (EvictWatermarkBody, bytes(16)),
    ],
)
def test_bodies_parse_only_exactly(cls: type[ControlBody], body: bytes) -> None:
    with pytest.raises(FrameError):
        cls.decode(body)


# ---- validity rules --------------------------------------------------------------------


GOOD = encode_append(1, 1, 0, "n", "t", b'{"d":1}', durable=True)


@pytest.mark.parametrize(
    "bad",
    [
        pytest.param(b"", id="empty"),
        pytest.param(b"\x2a\0\0", id="3 bytes left"),
        pytest.param(bytes(64), id="preallocated zeros"),
        pytest.param(struct.pack("<I", 41) + bytes(41), id="frame_len < 42"),
        pytest.param(GOOD[:-1], id="frame past the buffer"),
        pytest.param(GOOD[:-1] + bytes([GOOD[-1] ^ 1]), id="checksum mismatch"),
        pytest.param(_frame_bytes(12, 0, (b"", b"", b"{}")), id="unknown type 12"),
        pytest.param(_frame_bytes(0, 0, (b"", b"", b"{}")), id="type 0"),
        pytest.param(
            _frame_bytes(1, 0, (b"", b"", b'{"d":1}'), lens=(0, 0, 6)), id="section lengths"
        ),
        pytest.param(_frame_bytes(1, FLAG_NODE, (b"\xc3", b"", b"{}")), id="node not UTF-8"),
        pytest.param(_frame_bytes(1, FLAG_TAG, (b"", b"\xff", b"{}")), id="tag not UTF-8"),
        pytest.param(_frame_bytes(8, 0, (b"", b"", bytes(9))), id="body trailing byte"),
        pytest.param(_frame_bytes(11, 0, (b"", b"", bytes(4))), id="body truncated"),
    ],
)
def test_first_invalid_frame_is_the_logical_end(bad: bytes) -> None:
    # as the tail, and followed by a valid frame (nothing after an invalid frame is read)
    for buf in {GOOD + bad, GOOD + bad + GOOD} if bad else {GOOD}:
        frames_, end = scan_frames(buf)
        assert [e for _o, e, _f in frames_] == [len(GOOD)]
        assert end == len(GOOD) == valid_end(buf)
        sc = RawScanner(buf)
        assert len(list(sc)) == 1 and sc.end == len(GOOD)


def test_unflagged_section_bytes_are_valid_and_ignored() -> None:
    # §3.1 lists every validity rule; a clear flag only means the section is absent.
    buf = _frame_bytes(1, 0, (b"xy", b"z", b'{"d":1}'))
    [(_o, end, frame)] = scan_frames(buf)[0]
    assert end == len(buf)
    assert (frame.node, frame.tag, frame.data) == (None, None, b'{"d":1}')


def test_empty_flagged_node_and_tag_are_empty_strings() -> None:
    [(_o, _e, frame)] = scan_frames(encode_append(1, 1, 0, "", "", b"{}", False))[0]
    assert (frame.node, frame.tag) == ("", "")


def test_scanning_starts_at_an_offset_and_streams_in_chunks() -> None:
    fs = [encode_append(3, i, i, None, f"t{i % 7}", b'{"d":%d}' % i, False) for i in range(10_000)]
    buf = b"".join(fs) + bytes(100)
    total = len(buf) - 100
    sc = iter_frames(buf)
    got = [(o, e, f.seq, f.tag) for o, e, f in sc]
    assert len(got) == 10_000 and sc.end == total
    assert got[4096][2] == 4096 and got[-1] == (total - len(fs[-1]), total, 9999, "t3")
    start = len(fs[0]) + len(fs[1])
    assert [f.seq for _o, _e, f in FrameScanner(buf, start)][:2] == [2, 3]
    assert sum(1 for _ in iter_raw(memoryview(buf), start)) == 9_998
    assert valid_end(bytearray(buf), start) == total


# ---- torn and garbled tails ------------------------------------------------------------


def _log() -> tuple[bytes, list[int]]:
    """A small log mixing every shape, and each frame's end offset."""
    parts = [
        encode_append(1, 1, 10, "node-1", "tag", encode_blob(b'{"x":1}', b'{"m":2}'), True),
        encode_control(FrameType.TOPIC_CREATE, 1, TopicCreateBody("t", b"{}").encode(), 11, True),
        encode_append(1, 2, 12, None, None, b'{"d":"\xc3\xa9"}', False),
        encode_control(
            FrameType.DELETE, 1, DeleteBody(2, Selector("Glob", "a"), (1,), 3).encode(), 13, True
        ),
        encode_append(1, 3, 14, "n", None, b'{"d":[1,2,3]}', True),
    ]
    ends, at = [], 0
    for p in parts:
        at += len(p)
        ends.append(at)
    return b"".join(parts), ends


def test_torn_tail_at_every_byte_offset() -> None:
    buf, ends = _log()
    for cut in range(ends[-3], len(buf) + 1):
        frames_, end = scan_frames(buf[:cut])
        want = [e for e in ends if e <= cut]
        assert [e for _o, e, _f in frames_] == want, cut
        assert end == want[-1]
        # a torn tail followed by preallocated zeros ends at the same place
        assert valid_end(buf[:cut] + bytes(4096)) == want[-1]


def test_garbled_tail_at_every_byte_offset() -> None:
    buf, ends = _log()
    for at in range(ends[-3], len(buf)):
        frame_start = max(e for e in [0, *ends] if e <= at)
        for mask in (0x01, 0x80, 0xFF):
            bad = bytearray(buf)
            bad[at] ^= mask
            frames_, end = scan_frames(bytes(bad))
            assert [e for _o, e, _f in frames_] == [e for e in ends if e <= frame_start], at
            assert end == frame_start


# ---- payload blobs ---------------------------------------------------------------------

JSON = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**63), 2**63 - 1) | st.text(max_size=8),
    lambda kids: (
        st.lists(kids, max_size=3) | st.dictionaries(st.text(max_size=3), kids, max_size=3)
    ),
    max_leaves=8,
)


@given(JSON, st.none() | JSON)
def test_blob_round_trips(data: object, meta: object) -> None:
    d = orjson.dumps(data)
    m = None if meta is None else orjson.dumps(meta)
    blob = encode_blob(d, m)
    assert blob == orjson.dumps({"d": data} if m is None else {"d": data, "m": meta})
    assert decode_blob(blob) == (d, m)


def test_blob_fast_path_and_tricky_data() -> None:
    assert decode_blob(b'{"d":{"a":1}}') == (b'{"a":1}', None)
    # data that merely contains "m" text is decoded exactly, not mistaken for meta
    assert decode_blob(b'{"d":{"m":1}}') == (b'{"m":1}', None)
    assert decode_blob(b'{"d":"\\"m\\":"}') == (b'"\\"m\\":"', None)
    assert decode_blob(b'{"d":1,"m":{"k":"v"}}') == (b"1", b'{"k":"v"}')
    assert decode_blob(b'{"d": 1, "m": null}') == (b"1", b"null")
    # (the fast path trusts the shape encode_blob writes; foreign shapes are parsed)
    for bad in (b"", b"[1]", b'{"x":1}', b'{"m":1,"z":2}', b'{"d":', b'{"d":1,"m":2'):
        with pytest.raises(FrameError):
            decode_blob(bad)
