"""Where a WAL group ends, and whether that end is a torn tail or corruption (STORAGE §3.1).

The first invalid frame of a file is its *logical end*. What follows it decides:

- only zero bytes (preallocation, a sealed tail): the file ends **cleanly**;
- nonzero bytes, and no valid frame anywhere after them in the group (later in that file
  or in any later file of the group): a **torn tail** — an interrupted write; recovery
  truncates it, warns and counts it;
- nonzero bytes with a valid frame somewhere after them: **corruption**. Those later frames
  may hold acknowledged records, so nothing may drop them silently: the server refuses to
  start (`WalCorruptionError`) and `repair_group` lets the operator choose the loss.

Only frames after the scan's start position (a snapshot checkpoint, `(file idx, offset)`)
matter; bytes before it are never read.

Finding "a valid frame after offset X" must stay fast over a 64 MiB preallocated file full
of garbage, so no offset is tried in a Python loop: trailing zeros are skipped with a
vectorized nonzero search, every offset's type byte is matched against the known frame
types and the survivors' `frame_len`/section lengths are checked in numpy, and only the few
remaining candidates are validated with the real scanner (`seglog.core.frame_scanner`, the
one place validity is decided), checksum included.

Pure over the `Fs` seam: `GroupScanner`/`scan_group` only read; `seal_torn_tails` and
`repair_group` write, durably, and only when called.
"""

from __future__ import annotations

from collections.abc import Generator, Iterable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Literal, TypeVar

import numpy as np
import numpy.typing as npt

from seglog.core.frame_scanner import Buffer, RawFrame, RawScanner
from seglog.core.frames import MIN_FRAME_LEN, FrameType
from seglog.storage.datadir import make_dirs_durably
from seglog.storage.fs import Fs, mapped_file, write_file_durably
from seglog.storage.wal_files import WalGroup, wal_file_name

Position = tuple[int, int]  # (file idx, byte offset)
_Int = TypeVar("_Int", np.uint16, np.uint32)
TailKind = Literal["clean", "torn", "corrupt"]

QUARANTINE_DIR = "quarantine"  # under wal/: never a WAL group (not wal-*.log, not shard-NN)

_CHUNK = 4 << 20  # bytes per vectorized step: bounded temporaries, negligible overhead
_U32_MAX = 2**32 - 1
_MIN_FRAMED = 4 + MIN_FRAME_LEN
# A superset filter for the type byte (uint8 wrap-around makes it one comparison); the
# exact set is enforced by the scanner.
_TYPE_LO = min(int(t) for t in FrameType)
_TYPE_SPAN = max(int(t) for t in FrameType) - _TYPE_LO
# Header field offsets within a frame (STORAGE §3.1).
_OFF_TYPE, _OFF_NODE_LEN, _OFF_TAG_LEN, _OFF_DATA_LEN = 4, 30, 32, 34


@dataclass(frozen=True, slots=True)
class Corruption:
    """An invalid frame at `offset` of `path` (file number `idx`) with `valid_frames_after`
    valid frames after it in the group."""

    path: Path
    offset: int
    valid_frames_after: int
    idx: int


class WalCorruptionError(Exception):
    """Recovery found corruption: it must refuse to start and change nothing on disk."""

    def __init__(self, corruption: Corruption) -> None:
        c = corruption
        super().__init__(
            f"WAL corruption in {c.path} at offset {c.offset}: {c.valid_frames_after} valid "
            "frame(s) follow the damaged bytes and may hold acknowledged records, so they are "
            "not dropped silently. Nothing was changed on disk. Inspect with "
            "`seglog verify DATA_DIR`; `seglog repair DATA_DIR --yes` quarantines the file "
            "under wal/quarantine/ and truncates it at that offset (losing those frames)."
        )
        self.corruption = corruption


class WalFilesMissingError(Exception):
    """A WAL group lacks a file that replay needs (the snapshot's start file, or one inside
    the numbered sequence): recovery must refuse to start and change nothing on disk."""


def check_files_present(group: WalGroup, start: Position, listed: bool) -> None:
    """Raise `WalFilesMissingError` unless the group's files from `start` on are all there:
    the start file itself (the checkpoint mark that `start` follows was written into it),
    then consecutive numbers. `listed`: whether a snapshot recorded `start` (else replay
    starts at file 1, which must then exist if any file does)."""
    start_idx = start[0]
    later = [idx for idx, _ in group.files if idx >= start_idx]
    if not group.files or not (later or listed):
        return
    present = set(later)
    gone = next(
        (i for i in range(start_idx, max(later, default=start_idx) + 1) if i not in present), None
    )
    if gone is not None:
        have = ", ".join(wal_file_name(i) for i in later) or "none"
        raise WalFilesMissingError(
            f"WAL group {group.dir}: {wal_file_name(gone)} is missing; replay needs "
            f"{wal_file_name(start_idx)} and every file numbered after it (the group holds "
            f"{have}), so acknowledged records may be lost. Nothing was changed on disk; "
            "restore the file, or inspect with `seglog verify DATA_DIR`."
        )


@dataclass(frozen=True, slots=True)
class FileScan:
    """One file of a scanned group. `frames` are the valid frames in `[start, end)` (what
    replay applies); `garbage` says whether any nonzero byte follows `end`; `frames_after_end`
    counts valid frames found in those bytes."""

    idx: int
    path: Path
    start: int
    end: int
    size: int
    frames: int
    garbage: bool
    frames_after_end: int
    tail: TailKind


@dataclass(frozen=True, slots=True)
class GroupScan:
    """A group's ends after `start`: `corruption` is the first corrupt file end (the one
    recovery refuses on and repair cuts at); `other_damage` lists later corrupt file ends."""

    key: str
    start: Position
    files: list[FileScan]
    torn_tails: list[tuple[Path, int]]
    corruption: Corruption | None
    valid_frames: int  # frames before each file's logical end, i.e. what replay applies
    other_damage: list[tuple[Path, int]] = field(default_factory=list)

    @property
    def tail(self) -> Position | None:
        """The newest file's `(idx, logical end)`: where the writer continues."""
        return (self.files[-1].idx, self.files[-1].end) if self.files else None

    def check(self) -> None:
        """Raise `WalCorruptionError` if the group is corrupt."""
        if self.corruption is not None:
            raise WalCorruptionError(self.corruption)


# ---- the fast search -------------------------------------------------------------------


def _u8(buf: Buffer) -> npt.NDArray[np.uint8]:
    return np.frombuffer(buf, dtype=np.uint8)


def _last_nonzero(a: npt.NDArray[np.uint8], lo: int) -> int:
    """Offset of the last nonzero byte at or after `lo`, or -1; scans backwards so a long
    zero-filled preallocation costs one vectorized pass and nothing else."""
    hi = len(a)
    while hi > lo:
        s = max(lo, hi - _CHUNK)
        chunk = a[s:hi]
        if chunk.any():
            return s + int(np.flatnonzero(chunk)[-1])
        hi = s
    return -1


def _every_offset(buf: Buffer, dtype: type[_Int], width: int) -> npt.NDArray[_Int]:
    """A zero-copy view holding the little-endian integer at *every* byte offset (stride 1)."""
    n = max(len(buf) - width + 1, 0)
    view: npt.NDArray[_Int] = np.ndarray(
        (n,), dtype=np.dtype(dtype).newbyteorder("<"), buffer=buf, strides=(1,)
    )  # type: ignore[call-overload]
    return view


def find_frame(buf: Buffer, lo: int) -> int | None:
    """The first offset at or after `lo` where a valid frame starts, or None.

    Vectorized per 4 MiB chunk: a candidate needs its type byte within the known types'
    range and `MIN_FRAME_LEN <= frame_len <= bytes left`; that leaves ~1 offset in 3000 of
    random garbage, whose section lengths are then checked in numpy; the few survivors are
    validated by the real scanner (checksum, exact type, bodies)."""
    size = len(buf)
    a = _u8(buf)
    last = _last_nonzero(a, lo)
    # A frame's type byte is nonzero, so it starts at most 4 bytes before the last nonzero.
    stop = min(last - _OFF_TYPE + 1, size - _MIN_FRAMED + 1)
    if last < 0 or stop <= lo:
        return None
    u32 = _every_offset(buf, np.uint32, 4)
    u16 = _every_offset(buf, np.uint16, 2)
    for s in range(lo, stop, _CHUNK):
        e = min(s + _CHUNK, stop)
        flen = u32[s:e]
        maybe = (a[s + _OFF_TYPE : e + _OFF_TYPE] - np.uint8(_TYPE_LO)) <= np.uint8(_TYPE_SPAN)
        maybe &= flen >= MIN_FRAME_LEN
        maybe &= flen <= np.uint32(min(size - 4 - s, _U32_MAX))  # exact fit: below
        p = np.flatnonzero(maybe) + s
        if not len(p):
            continue
        fl = u32[p].astype(np.int64)
        sections = (
            u16[p + _OFF_NODE_LEN].astype(np.int64)
            + u16[p + _OFF_TAG_LEN].astype(np.int64)
            + u32[p + _OFF_DATA_LEN].astype(np.int64)
        )
        ok = (p + 4 + fl <= size) & (sections == fl - MIN_FRAME_LEN)
        for q in p[ok].tolist():
            if _valid_at(buf, q):
                return int(q)
    return None


def _valid_at(buf: Buffer, off: int) -> bool:
    it = RawScanner(buf, off).__iter__()
    try:
        return next(it, None) is not None
    finally:
        it.close()


def _chain(buf: Buffer, off: int) -> tuple[int, int]:
    """`(valid frames, logical end)` scanning from `off`."""
    sc = RawScanner(buf, off)
    n = sum(1 for _ in sc)
    return n, sc.end


def _after_end(buf: Buffer, end: int) -> tuple[bool, int]:
    """`(garbage, valid frames)` in the bytes after a logical end: every run of valid frames
    found past the damage is counted, then the search resumes after that run's end."""
    if _last_nonzero(_u8(buf), end) < 0:
        return False, 0
    frames, pos = 0, end + 1
    while (p := find_frame(buf, pos)) is not None:
        n, chain_end = _chain(buf, p)
        frames += n
        pos = chain_end + 1
    return True, frames


# ---- scanning a group ------------------------------------------------------------------


class GroupScanner:
    """Iterate `(file idx, RawFrame)` over the frames replay applies (each file from the
    start up to its logical end, like `wal_files.read_group`); once exhausted, `.result` is the
    `GroupScan`. Lets recovery replay and classify the tails in one pass. Maps one file at a
    time; closing the iterator early releases it (and leaves `.result` unset)."""

    def __init__(self, fs: Fs, group: WalGroup, start: Position = (1, 0)) -> None:
        self.fs = fs
        self.group = group
        self.start = start
        self._result: GroupScan | None = None

    @property
    def result(self) -> GroupScan:
        if self._result is None:
            raise RuntimeError("GroupScanner.result read before the scan finished")
        return self._result

    def __iter__(self) -> Generator[tuple[int, RawFrame], None, None]:
        for idx, frames in self.chunks():
            for raw in frames:
                yield idx, raw

    def chunks(self) -> Generator[tuple[int, list[RawFrame]], None, None]:
        """The same frames as `(file idx, frames)`, a list at a time."""
        start_idx, start_off = self.start
        files: list[FileScan] = []
        for idx, path in self.group.files:
            if idx < start_idx:
                continue
            off = start_off if idx == start_idx else 0
            with mapped_file(self.fs, path) as buf:
                scanner = RawScanner(buf, off)
                it = scanner.chunks()
                n = 0
                try:
                    for frames in it:
                        n += len(frames)
                        yield idx, frames
                finally:
                    it.close()  # releases the view before unmapping
                garbage, after = _after_end(buf, scanner.end)
                files.append(
                    FileScan(idx, path, off, scanner.end, len(buf), n, garbage, after, "clean")
                )
        self._result = _classify(self.group.key, self.start, files)


def _classify(key: str, start: Position, files: list[FileScan]) -> GroupScan:
    # valid frames strictly after file i's logical end, anywhere in the group
    after = [0] * len(files)
    later = 0
    for i in range(len(files) - 1, -1, -1):
        after[i] = files[i].frames_after_end + later
        later += files[i].frames + files[i].frames_after_end
    corruption: Corruption | None = None
    torn: list[tuple[Path, int]] = []
    other: list[tuple[Path, int]] = []
    out: list[FileScan] = []
    for f, n_after in zip(files, after, strict=True):
        kind: TailKind = "clean"
        # A start file shorter than where the snapshot saw its frames go on lost them.
        cut_short = f.start > f.size
        if (f.garbage or cut_short) and n_after:
            kind = "corrupt"
            if corruption is None:
                corruption = Corruption(f.path, f.end, n_after, f.idx)
            else:
                other.append((f.path, f.end))
        elif f.garbage:
            kind = "torn"
            torn.append((f.path, f.end))
        out.append(replace(f, tail=kind))
    return GroupScan(key, start, out, torn, corruption, sum(f.frames for f in files), other)


def scan_group(fs: Fs, group: WalGroup, start: Position = (1, 0)) -> GroupScan:
    """Classify every file end of `group` after `start` (read-only)."""
    sc = GroupScanner(fs, group, start)
    for _ in sc:
        pass
    return sc.result


def check_groups(scans: Iterable[GroupScan]) -> None:
    """Raise `WalCorruptionError` for the first corrupt group (recovery's refusal)."""
    for s in scans:
        s.check()


# ---- writing: torn tails and repair ----------------------------------------------------


def seal_at(fs: Fs, path: Path, offset: int) -> None:
    """Cut `path` at `offset` and re-extend it to its size, so the bytes past `offset` read
    as zeros and never parse (the preallocation is kept), then fdatasync."""
    f = fs.open(path)
    try:
        size = f.size()
        f.truncate(offset)
        f.truncate(max(size, offset))
        f.sync()
    finally:
        f.close()


def seal_torn_tails(fs: Fs, scan: GroupScan) -> list[tuple[Path, int]]:
    """Seal every torn tail of the group (not only the newest file's: garbage left in an
    older file would turn into 'corruption' once new frames are written after it). Refuses
    a corrupt group. Returns what was sealed."""
    scan.check()
    for path, offset in scan.torn_tails:
        seal_at(fs, path, offset)
    return list(scan.torn_tails)


@dataclass(frozen=True, slots=True)
class WalRepair:
    """What `repair_group` does: copy the damaged file to quarantine, move every later file
    of the group there, then truncate the damaged file at the corruption."""

    copied: tuple[Path, Path]
    moved: list[tuple[Path, Path]]
    truncated: tuple[Path, int]
    frames_lost: int


def _free_name(fs: Fs, d: Path, name: str, taken: set[Path]) -> Path:
    dst = d / name
    n = 1
    while dst in taken or fs.exists(dst) or fs.exists(dst.with_name(dst.name + ".tmp")):
        dst = d / f"{name}.{n}"
        n += 1
    taken.add(dst)
    return dst


def plan_repair(fs: Fs, group: WalGroup, corruption: Corruption, quarantine_dir: Path) -> WalRepair:
    """The repair of one corrupt group, without doing it. Quarantined files keep their
    names under `quarantine_dir` (in a `shard-NN/` subdirectory for sharded groups);
    an existing name gets a `.1`, `.2`… suffix."""
    qdir = quarantine_dir / group.key if group.key else quarantine_dir
    taken: set[Path] = set()
    copied = (corruption.path, _free_name(fs, qdir, corruption.path.name, taken))
    moved = [
        (path, _free_name(fs, qdir, path.name, taken))
        for idx, path in group.files
        if idx > corruption.idx
    ]
    return WalRepair(
        copied, moved, (corruption.path, corruption.offset), corruption.valid_frames_after
    )


def _copy_durably(fs: Fs, src: Path, dst: Path) -> None:
    with mapped_file(fs, src) as buf, memoryview(buf) as mv:
        write_file_durably(fs, dst, mv)


def repair_group(
    fs: Fs, group: WalGroup, corruption: Corruption, quarantine_dir: Path
) -> WalRepair:
    """Quarantine and truncate one corrupt group (offline, with the data-dir lock held);
    see `execute_repair`."""
    plan = plan_repair(fs, group, corruption, quarantine_dir)
    execute_repair(fs, group, plan)
    return plan


def execute_repair(fs: Fs, group: WalGroup, plan: WalRepair) -> None:
    """Carry out `plan`, each step durable before the next:
    1. copy the damaged file to quarantine (tmp, fsync, rename, fsync the dir);
    2. move the group's later files there (fsync both dirs): they continue a history whose
       middle is dropped, and replaying them after the cut would apply frames whose
       predecessors are gone, so the log stays a prefix (as Kafka's log recovery and
       redis-check-aof do); they stay in quarantine for inspection;
    3. truncate the damaged file at the corruption, re-extend it with zeros, fsync.
    A crash in between leaves a directory that `scan_group` reports and a rerun finishes
    (the copy is then taken again under a `.1` name)."""
    qdir = plan.copied[1].parent
    make_dirs_durably(fs, qdir)
    _copy_durably(fs, *plan.copied)
    if plan.moved:
        for src, dst in plan.moved:
            fs.rename(src, dst)
        fs.fsync_dir(qdir)
        fs.fsync_dir(group.dir)
    seal_at(fs, *plan.truncated)
