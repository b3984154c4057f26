"""Torn tail vs corruption (STORAGE §3.1) over FaultFs and real files: clean ends, torn
tails at every byte of the last frame, a flipped bit mid-file, damage followed by frames
in a later file, garbage before zeros, checksummed frames of unknown type, the start
position, the vectorized frame search against brute force, and durable quarantine repair."""

from __future__ import annotations

import random
import struct
import time
from pathlib import Path

import pytest
import xxhash
from hypothesis import given, settings
from hypothesis import strategies as st

from seglog.core.frame_bodies import TopicCreateBody
from seglog.core.frame_scanner import RawScanner, iter_raw
from seglog.core.frames import FrameType, encode_append, encode_control
from seglog.storage.datadir import make_dirs_durably
from seglog.storage.fs import Fs, RealFs
from seglog.storage.wal import Wal
from seglog.storage.wal_files import WalGroup, discover_groups, read_group, wal_file_name
from seglog.storage.walscan import (
    GroupScanner,
    WalCorruptionError,
    check_groups,
    find_frame,
    repair_group,
    scan_group,
    seal_torn_tails,
)
from tests.support.faultfs import FaultFs

WAL = Path("/data/wal")
PREALLOC = 16 << 10


def frame(seq: int, size: int = 30) -> bytes:
    return encode_append(7, seq, 1000 + seq, "n1", f"t{seq}", b'{"d":"%s"}' % (b"x" * size), True)


def frames(n: int, first: int = 1) -> list[bytes]:
    return [frame(s, 20 + s % 7) for s in range(first, first + n)]


def offsets(fs: list[bytes]) -> list[int]:
    out, off = [], 0
    for f in fs:
        out.append(off)
        off += len(f)
    return out


def put(fs: Fs, path: Path, content: bytes, size: int = PREALLOC) -> None:
    """A preallocated WAL file: `content`, then zeros up to `size`."""
    make_dirs_durably(fs, path.parent)
    f = fs.open(path, create=True)
    f.truncate(0)
    f.write_at(content, 0)
    f.truncate(max(size, len(content)))
    f.sync()
    f.close()
    fs.fsync_dir(path.parent)


def group(fs: Fs, wal_dir: Path = WAL) -> WalGroup:
    (g,) = [g for g in discover_groups(fs, wal_dir) if g.files]
    return g


def unknown_type_frame(seq: int) -> bytes:
    """Checksum-valid, every length right, but type 12 (no such frame type)."""
    raw = bytearray(frame(seq))
    raw[4] = 12
    raw[-8:] = xxhash.xxh3_64_intdigest(bytes(raw[4:-8])).to_bytes(8, "little")
    return bytes(raw)


@pytest.fixture(params=["faultfs", "realfs"])
def env(request: pytest.FixtureRequest, tmp_path: Path) -> tuple[Fs, Path]:
    if request.param == "faultfs":
        return FaultFs(), WAL
    return RealFs(), tmp_path / "wal"


# ---- classification --------------------------------------------------------------------


def test_clean_file(env: tuple[Fs, Path]) -> None:
    fs, wal = env
    fr = frames(21)
    put(fs, wal / wal_file_name(1), b"".join(fr))
    s = scan_group(fs, group(fs, wal))
    assert (s.torn_tails, s.corruption, s.valid_frames) == ([], None, 21)
    (f,) = s.files
    assert (f.tail, f.end, f.garbage, f.size) == ("clean", len(b"".join(fr)), False, PREALLOC)
    assert s.tail == (1, len(b"".join(fr)))
    s.check()


def test_torn_tail_at_every_byte_of_the_last_frame() -> None:
    fr = frames(21)
    body = b"".join(fr[:-1])
    last = fr[-1]
    for cut in range(1, len(last)):
        fs = FaultFs()
        put(fs, WAL / wal_file_name(1), body + last[:cut])
        s = scan_group(fs, group(fs))
        assert s.corruption is None, cut
        assert s.valid_frames == 20
        if any(last[:cut]):
            assert s.torn_tails == [(WAL / wal_file_name(1), len(body))], cut
        else:  # a prefix of zero bytes is indistinguishable from preallocation
            assert s.torn_tails == [], cut


def test_garbled_last_frame_is_torn(env: tuple[Fs, Path]) -> None:
    fs, wal = env
    fr = frames(21)
    buf = bytearray(b"".join(fr))
    buf[offsets(fr)[-1] + 40] ^= 0x10
    put(fs, wal / wal_file_name(1), bytes(buf))
    s = scan_group(fs, group(fs, wal))
    assert s.corruption is None
    assert s.torn_tails == [(wal / wal_file_name(1), offsets(fr)[-1])]
    assert s.files[0].tail == "torn"


@pytest.mark.parametrize("where", [0, 3, 4, 20, 40, -1])
def test_bit_flip_in_frame_5_of_21_is_corruption(env: tuple[Fs, Path], where: int) -> None:
    fs, wal = env
    fr = frames(21)
    at = offsets(fr)[4]  # frame 5 (1-based)
    buf = bytearray(b"".join(fr))
    buf[at + (where % len(fr[4]))] ^= 0x04
    put(fs, wal / wal_file_name(1), bytes(buf))
    s = scan_group(fs, group(fs, wal))
    assert s.corruption is not None
    c = s.corruption
    assert (c.path, c.offset, c.valid_frames_after, c.idx) == (wal / wal_file_name(1), at, 16, 1)
    assert s.valid_frames == 4
    assert s.torn_tails == []
    assert s.files[0].tail == "corrupt" and s.files[0].frames_after_end == 16
    with pytest.raises(WalCorruptionError) as ei:
        check_groups([s])
    assert ei.value.corruption == c
    msg = str(ei.value)
    assert str(c.path) in msg and f"offset {at}" in msg and "16 valid frame" in msg
    assert "seglog repair DATA_DIR" in msg


def test_corruption_in_file_1_with_valid_frames_in_file_2(env: tuple[Fs, Path]) -> None:
    fs, wal = env
    rng = random.Random(5)
    first = b"".join(frames(10))
    put(fs, wal / wal_file_name(1), first + rng.randbytes(300))
    put(fs, wal / wal_file_name(2), b"".join(frames(5, first=11)))
    s = scan_group(fs, group(fs, wal))
    assert s.corruption is not None
    assert (s.corruption.path, s.corruption.offset) == (wal / wal_file_name(1), len(first))
    assert (s.corruption.valid_frames_after, s.corruption.idx) == (5, 1)
    assert [f.tail for f in s.files] == ["corrupt", "clean"]
    assert s.valid_frames == 15  # what replay would apply, file by file


def test_garbage_in_file_1_and_nothing_valid_later_is_torn() -> None:
    fs = FaultFs()
    rng = random.Random(6)
    first = b"".join(frames(10))
    put(fs, WAL / wal_file_name(1), first + rng.randbytes(300))
    put(fs, WAL / wal_file_name(2), b"")  # rotated, never written
    put(fs, WAL / wal_file_name(3), rng.randbytes(100))  # garbage only
    s = scan_group(fs, group(fs))
    assert s.corruption is None
    assert s.torn_tails == [(WAL / wal_file_name(1), len(first)), (WAL / wal_file_name(3), 0)]
    assert [f.tail for f in s.files] == ["torn", "clean", "torn"]


def test_garbage_only_tail_then_zeros(env: tuple[Fs, Path]) -> None:
    fs, wal = env
    body = b"".join(frames(10))
    put(fs, wal / wal_file_name(1), body + random.Random(7).randbytes(200))
    s = scan_group(fs, group(fs, wal))
    assert s.corruption is None
    assert s.torn_tails == [(wal / wal_file_name(1), len(body))]


def test_zero_hole_then_a_valid_frame_is_corruption() -> None:
    """A hole (pages a failed writeback dropped) before acked frames: nonzero bytes follow
    the logical end and they parse, so this is corruption, not preallocation."""
    fs = FaultFs()
    fr = frames(12)
    hole = b"".join(fr[:5]) + bytes(len(fr[5])) + b"".join(fr[6:])
    put(fs, WAL / wal_file_name(1), hole)
    s = scan_group(fs, group(fs))
    assert s.corruption is not None
    assert (s.corruption.offset, s.corruption.valid_frames_after) == (offsets(fr)[5], 6)


def test_unknown_frame_type_is_invalid(env: tuple[Fs, Path]) -> None:
    fs, wal = env
    fr = frames(6)
    odd = unknown_type_frame(99)
    assert list(iter_raw(odd)) == []  # the scanner itself rejects it
    put(fs, wal / wal_file_name(1), b"".join(fr) + odd)
    s = scan_group(fs, group(fs, wal))
    assert (s.corruption, s.torn_tails) == (None, [(wal / wal_file_name(1), len(b"".join(fr)))])
    put(fs, wal / wal_file_name(1), b"".join(fr[:3]) + odd + b"".join(fr[3:]))
    s = scan_group(fs, group(fs, wal))
    assert s.corruption is not None
    assert (s.corruption.offset, s.corruption.valid_frames_after) == (offsets(fr)[3], 3)


def test_control_frame_with_bad_body_is_invalid() -> None:
    fs = FaultFs()
    fr = frames(3)
    bad = encode_control(FrameType.TOPIC_CREATE, 7, b"\x05\x00\x00\x00ab", 1, True)
    good = encode_control(FrameType.TOPIC_CREATE, 7, TopicCreateBody("t", b"{}").encode(), 1, True)
    put(fs, WAL / wal_file_name(1), fr[0] + bad + good + fr[1])
    s = scan_group(fs, group(fs))
    assert s.corruption is not None
    assert (s.corruption.offset, s.corruption.valid_frames_after) == (len(fr[0]), 2)


def test_damage_before_the_start_position_is_ignored() -> None:
    fs = FaultFs()
    fr = frames(21)
    buf = bytearray(b"".join(fr))
    buf[offsets(fr)[4] + 30] ^= 0xFF
    put(fs, WAL / wal_file_name(1), bytes(buf))
    start = (1, offsets(fr)[10])
    s = scan_group(fs, group(fs), start)
    assert (s.corruption, s.torn_tails, s.valid_frames, s.start) == (None, [], 11, start)
    assert scan_group(fs, group(fs), (2, 0)).files == []  # every file is before the start


def test_group_scanner_yields_what_replay_reads() -> None:
    fs = FaultFs()
    fr = frames(8)
    put(fs, WAL / wal_file_name(1), b"".join(fr[:5]) + b"\x01garbage")
    put(fs, WAL / wal_file_name(2), b"".join(fr[5:]))
    g = group(fs)
    sc = GroupScanner(fs, g, (1, offsets(fr)[1]))
    with pytest.raises(RuntimeError):
        _ = sc.result
    got = list(sc)
    replayed = read_group(fs, g, (1, offsets(fr)[1]))
    assert [(i, raw[0], raw[4]) for i, raw in got] == [(i, e, f.seq) for i, e, f in replayed]
    assert [raw[4] for _i, raw in got] == [2, 3, 4, 5, 6, 7, 8]
    assert sc.result.corruption is not None and sc.result.corruption.valid_frames_after == 3


# ---- the vectorized search -------------------------------------------------------------


def brute_force(buf: bytes, lo: int) -> int | None:
    for p in range(lo, len(buf)):
        if next(iter(RawScanner(buf, p)), None) is not None:
            return p
    return None


@settings(max_examples=150, deadline=None)
@given(
    seed=st.integers(0, 2**32),
    pieces=st.lists(
        st.one_of(
            st.integers(1, 400).map(lambda n: ("garbage", n)),
            st.integers(1, 300).map(lambda n: ("zeros", n)),
            st.integers(1, 40).map(lambda s: ("frame", s)),
            st.integers(1, 40).map(lambda s: ("cut", s)),
        ),
        max_size=8,
    ),
    lo=st.integers(0, 64),
)
def test_find_frame_matches_brute_force(seed: int, pieces: list[tuple[str, int]], lo: int) -> None:
    rng = random.Random(seed)
    buf = b""
    for kind, n in pieces:
        if kind == "garbage":
            buf += rng.randbytes(n)
        elif kind == "zeros":
            buf += bytes(n)
        elif kind == "frame":
            buf += frame(n, n)
        else:
            f = frame(n, n)
            buf += f[: rng.randrange(1, len(f))]
    assert find_frame(buf, lo) == brute_force(buf, lo)


def test_find_frame_at_unaligned_offsets_in_garbage() -> None:
    rng = random.Random(3)
    f = frame(1)
    for at in (0, 1, 3, 4095, 4 << 20, (4 << 20) - 2, (8 << 20) + 7):
        buf = bytearray(rng.randbytes(at + len(f) + 1000))
        buf[at : at + len(f)] = f
        assert find_frame(bytes(buf), 0) == at
        assert find_frame(bytes(buf), at + 1) is None


def test_64_mib_of_garbage_is_scanned_fast(tmp_path: Path) -> None:
    """A byte-by-byte Python search over 64 MiB takes minutes; the vectorized one about
    0.1-0.2 s (the bound is loose for a shared machine)."""
    body = b"".join(frames(1000))
    size = 64 << 20
    buf = bytearray(random.Random(11).randbytes(size))
    buf[: len(body)] = body
    path = tmp_path / "wal" / wal_file_name(1)
    path.parent.mkdir()
    path.write_bytes(buf)
    t = time.perf_counter()
    s = scan_group(RealFs(), group(RealFs(), path.parent))
    elapsed = time.perf_counter() - t
    assert s.torn_tails == [(path, len(body))] and s.corruption is None
    assert elapsed < 10, elapsed
    # the same garbage with one frame near the end: corruption
    last = frame(5000)
    buf[size - 3000 : size - 3000 + len(last)] = last
    path.write_bytes(buf)
    s = scan_group(RealFs(), group(RealFs(), path.parent))
    assert s.corruption is not None and s.corruption.valid_frames_after == 1


# ---- with the real writer --------------------------------------------------------------


def test_real_writer_files_rotated_then_damaged(tmp_path: Path) -> None:
    wal_dir = tmp_path / "wal"
    w = Wal(RealFs(), wal_dir, 1, file_size=8 << 10, idle_sync=False)
    w.open()
    try:
        for seq in range(1, 201):
            w.submit(0, [frame(seq)], durable=seq % 10 == 0).wait()
    finally:
        w.close()
    g = group(RealFs(), wal_dir)
    assert len(g.files) >= 3
    clean = scan_group(RealFs(), g)
    assert (clean.valid_frames, clean.corruption, clean.torn_tails) == (200, None, [])
    first = g.files[0][1]
    raw = bytearray(first.read_bytes())
    ends = [r[0] for r in iter_raw(bytes(raw))]
    raw[ends[2] + 12] ^= 0x80  # inside the 4th frame of the first file
    first.write_bytes(bytes(raw))
    s = scan_group(RealFs(), g)
    assert s.corruption is not None
    assert (s.corruption.path, s.corruption.offset) == (first, ends[2])
    assert s.corruption.valid_frames_after == 200 - 4
    # the writer seals a torn tail of its own active file as recovery does
    last = g.files[-1][1]
    with last.open("r+b") as fh:
        fh.seek(scan_group(RealFs(), WalGroup("", None, wal_dir, [g.files[-1]])).files[0].end)
        fh.write(b"\x07torn")
    s2 = scan_group(RealFs(), WalGroup("", None, wal_dir, [g.files[-1]]))
    assert len(s2.torn_tails) == 1
    assert seal_torn_tails(RealFs(), s2) == s2.torn_tails
    after = scan_group(RealFs(), WalGroup("", None, wal_dir, [g.files[-1]]))
    assert after.torn_tails == [] and after.files[0].size == s2.files[0].size


# ---- sealing and repair ----------------------------------------------------------------


def test_seal_torn_tails_refuses_a_corrupt_group() -> None:
    fs = FaultFs()
    fr = frames(6)
    buf = bytearray(b"".join(fr))
    buf[offsets(fr)[2] + 20] ^= 1
    put(fs, WAL / wal_file_name(1), bytes(buf))
    with pytest.raises(WalCorruptionError):
        seal_torn_tails(fs, scan_group(fs, group(fs)))
    assert fs.read_file(WAL / wal_file_name(1))[: len(buf)] == bytes(buf)


def test_repair_quarantines_truncates_and_moves_later_files_durably() -> None:
    fs = FaultFs()
    fr = frames(20)
    buf = bytearray(b"".join(fr[:12]))
    bad_at = offsets(fr)[7]
    buf[bad_at + 25] ^= 0x40
    damaged = WAL / wal_file_name(1)
    put(fs, damaged, bytes(buf))
    put(fs, WAL / wal_file_name(2), b"".join(fr[12:16]))
    put(fs, WAL / wal_file_name(3), b"".join(fr[16:]))
    original = {p: fs.read_file(p) for p in fs_files(fs, WAL)}
    s = scan_group(fs, group(fs))
    assert s.corruption is not None and s.corruption.valid_frames_after == 4 + 4 + 4
    q = WAL / "quarantine"
    done = repair_group(fs, group(fs), s.corruption, q)
    assert done.copied == (damaged, q / damaged.name)
    assert done.moved == [(WAL / wal_file_name(i), q / wal_file_name(i)) for i in (2, 3)]
    assert done.truncated == (damaged, bad_at)
    image = fs.crash_image()  # only what is durable
    for view in (fs, image):
        assert view.read_file(q / damaged.name) == original[damaged]
        for i in (2, 3):
            assert view.read_file(q / wal_file_name(i)) == original[WAL / wal_file_name(i)]
            assert not view.exists(WAL / wal_file_name(i))
        cut = view.read_file(damaged)
        assert cut[:bad_at] == bytes(buf[:bad_at])
        assert not any(cut[bad_at:]) and len(cut) == PREALLOC
        after = scan_group(view, group(view, WAL))
        assert (after.corruption, after.torn_tails, after.valid_frames) == (None, [], 7)
        assert [g.key for g in discover_groups(view, WAL)] == [""]  # quarantine is no group


def test_repair_of_a_shard_group_and_a_name_collision() -> None:
    fs = FaultFs()
    fr = frames(8)
    shard = WAL / "shard-01"
    put(fs, shard / wal_file_name(4), b"".join(fr[:3]) + b"\xff" * 10 + b"".join(fr[3:]))
    q = WAL / "quarantine"
    put(fs, q / "shard-01" / wal_file_name(4), b"an earlier repair", size=0)
    (g,) = discover_groups(fs, WAL)
    s = scan_group(fs, g, (4, 0))
    assert s.corruption is not None and s.corruption.valid_frames_after == 5
    done = repair_group(fs, g, s.corruption, q)
    assert done.copied[1] == q / "shard-01" / f"{wal_file_name(4)}.1"
    assert fs.read_file(q / "shard-01" / wal_file_name(4)) == b"an earlier repair"
    assert scan_group(fs, g, (4, 0)).corruption is None


def fs_files(fs: Fs, d: Path) -> list[Path]:
    return sorted(d / n for n in fs.listdir(d) if not fs.is_dir(d / n))


def test_header_constants_match_the_spec() -> None:
    # walscan reads frame_len/type/section lengths at fixed offsets (STORAGE §3.1)
    f = frame(3, 10)
    flen, ftype = struct.unpack_from("<IB", f, 0)
    nl, tl, dl = struct.unpack_from("<HHI", f, 30)
    assert (flen, ftype) == (len(f) - 4, 1) and nl + tl + dl == flen - 42
