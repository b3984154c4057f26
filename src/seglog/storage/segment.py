"""Per-topic sealed segment files (STORAGE §4): seal, list, read, flag deletes, drop.

Layout: `<root>/topics/<ID:08X>/seg-<first_seq:016d>.{data,idx}` in the hot tier and, when
configured, the same names under the cold root. Byte formats live in
`seglog.core.segment_format`.

Crash safety:
- Seal writes both files as `.tmp`, fsyncs them, renames them in place and fsyncs the dir.
  When a pair of that name already exists it is unlinked (and the dir fsynced) first, so no
  crash can pair a new `.data` with an old `.idx`.
- `list()` is the reconciliation point: `.tmp` leftovers and half pairs (a `.data` without its
  `.idx`, an `.idx` of a bad length, or an `.idx` alone) are deleted — the WAL and snapshot
  still hold that data. When both tiers hold a segment (interrupted move) hot wins.
- A delete flag is a byte outside the checksum, set in place (flags close together are
  written back as one run of the file's own, unchanged bytes), so a torn flip reads live
  or deleted, never corrupt. Flags are written after the delete, by the maintenance pass
  (`engine.segments.TopicSegments.flush_flags`): the WAL and snapshots hold the delete.

Concurrency: a `SegmentStore` is shared by the topic's writer path, readers and the
relocation task. Reads take only the short map-cache lock. `flag_lock` serializes del_flag
writes, drops and the final phase of a relocation (`seglog.storage.tiers`), so a flag set
while a segment moves lands in whichever copy survives.
"""

from __future__ import annotations

import builtins
import re
import struct
import threading
from collections import OrderedDict
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from mmap import PAGESIZE, mmap
from pathlib import Path
from typing import Literal, TypeVar

import numpy as np
import numpy.typing as npt

from seglog.core.segment_format import (
    DEL_FLAG,
    IDX_ENTRY_SIZE,
    MIN_FRAME_LEN,
    IdxArray,
    SegmentCorruption,
    SegmentRecord,
    decode_frame,
    encode_segment,
    flag_runs,
    idx_lookup,
    idx_view,
    iter_frames,
)
from seglog.core.segment_run import (
    Ints,
    SegmentLayout,
    run_blobs_of,
    run_payloads,
    segment_del_flags,
    segment_layout,
    verify_run,
)
from seglog.storage.datadir import make_dirs_durably
from seglog.storage.fs import Fs, RealFs, write_all_at, write_synced

Tier = Literal["hot", "cold"]

MAP_CACHE_SEGMENTS = 64
_SEG_NAME = re.compile(r"seg-(\d{16})\.(data|idx)")
_U32 = struct.Struct("<I")
R = TypeVar("R")


@dataclass(frozen=True, slots=True)
class _Run:
    """A copied run of consecutive frames, with index entries relative to `chunk`."""

    segment: SegmentInfo
    chunk: bytes
    base: int  # offset of `chunk` in the data file
    first_seq: int
    offsets: Ints
    lengths: Ints


def topic_dir_name(topic_id: int) -> str:
    return f"{topic_id:08X}"


def segment_base(first_seq: int) -> str:
    return f"seg-{first_seq:016d}"


@dataclass(frozen=True, slots=True)
class SegmentInfo:
    topic_id: int
    first_seq: int
    last_seq: int
    count: int
    data_bytes: int
    tier: Tier
    data_path: Path
    idx_path: Path


@dataclass(frozen=True, slots=True)
class _Mapped:
    data: bytes | mmap
    idx: IdxArray


@dataclass(frozen=True, slots=True)
class PinnedSegment:
    """A sealed segment with its mapping held (see `SegmentStore.pin`)."""

    info: SegmentInfo
    mapped: _Mapped


def flag_positions(idx: IdxArray) -> npt.NDArray[np.int64]:
    """File offsets of every frame's del_flag byte (its last byte)."""
    return idx["offset"].astype(np.int64) + idx["len"].astype(np.int64) - 1


def _scan_tier(
    fs: Fs, topic_dir: Path, topic_id: int, tier: Tier, cleanup: frozenset[Path] | None
) -> dict[int, SegmentInfo]:
    """Complete segments in one tier's topic dir. With `cleanup` (paths in flight that must
    be spared), leftovers are deleted; without it the scan is read-only."""
    datas: set[int] = set()
    idxs: set[int] = set()
    removed = False
    for name in fs.listdir(topic_dir):
        if name.endswith(".tmp"):
            if cleanup is not None and topic_dir / name not in cleanup:
                fs.unlink(topic_dir / name)
                removed = True
            continue
        m = _SEG_NAME.fullmatch(name)
        if m:
            (datas if m.group(2) == "data" else idxs).add(int(m.group(1)))
    found: dict[int, SegmentInfo] = {}
    for first in sorted(datas | idxs):
        base = segment_base(first)
        data_path, idx_path = topic_dir / f"{base}.data", topic_dir / f"{base}.idx"
        idx_size = fs.file_size(idx_path) if first in idxs else 0
        if first in datas and idx_size > 0 and idx_size % IDX_ENTRY_SIZE == 0:
            count = idx_size // IDX_ENTRY_SIZE
            found[first] = SegmentInfo(
                topic_id, first, first + count - 1, count, fs.file_size(data_path),
                tier, data_path, idx_path,
            )  # fmt: skip
        elif cleanup is not None and not {data_path, idx_path} & cleanup:
            fs.unlink(data_path)
            fs.unlink(idx_path)
            removed = True
    if removed:
        fs.fsync_dir(topic_dir)
    return found


def _list(
    fs: Fs, hot_dir: Path, cold_dir: Path | None, topic_id: int, cleanup: frozenset[Path] | None
) -> list[SegmentInfo]:
    found: dict[int, SegmentInfo] = {}
    if cold_dir is not None:
        found.update(_scan_tier(fs, cold_dir, topic_id, "cold", cleanup))
    found.update(_scan_tier(fs, hot_dir, topic_id, "hot", cleanup))  # hot wins
    return [found[k] for k in sorted(found)]


def _scan_verified(buf: bytes | mmap, info: SegmentInfo) -> Iterator[SegmentRecord]:
    n = 0
    for rec in iter_frames(buf, info.first_seq):
        n += 1
        yield rec
    _check_count(n, info)


def _check_count(frames: int, info: SegmentInfo) -> None:
    if frames != info.count:
        raise SegmentCorruption(
            f"segment corruption: {info.data_path} holds {frames} frames, its index {info.count}"
        )


class SegmentStore:
    """The sealed segments of one topic instance, in both tiers."""

    def __init__(self, fs: Fs, hot_root: Path, cold_root: Path | None, topic_id: int) -> None:
        self.fs = fs
        self.hot_root = hot_root
        self.cold_root = cold_root
        self.topic_id = topic_id
        self.hot_dir = hot_root / topic_dir_name(topic_id)
        self.cold_dir = None if cold_root is None else cold_root / topic_dir_name(topic_id)
        self.flag_lock = threading.Lock()
        self._cache_lock = threading.Lock()
        self._maps: OrderedDict[Path, _Mapped] = OrderedDict()
        self._inflight: set[Path] = set()

    # ---- paths -------------------------------------------------------------------------
    def tier_dir(self, tier: Tier) -> Path:
        if tier == "hot":
            return self.hot_dir
        if self.cold_dir is None:
            raise ValueError("no cold tier is configured")
        return self.cold_dir

    def _tier_dirs(self) -> list[Path]:
        return [self.hot_dir] if self.cold_dir is None else [self.cold_dir, self.hot_dir]

    def resolve(self, info: SegmentInfo) -> tuple[Path, Path]:
        """Where the segment's files are now: its recorded tier, else the other one (a
        relocation finished after `info` was taken)."""
        if self.fs.exists(info.data_path):
            return info.data_path, info.idx_path
        base = segment_base(info.first_seq)
        for d in self._tier_dirs():
            if self.fs.exists(d / f"{base}.data"):
                return d / f"{base}.data", d / f"{base}.idx"
        return info.data_path, info.idx_path

    # ---- writing -----------------------------------------------------------------------
    def seal(self, records: Sequence[SegmentRecord], first_seq: int) -> SegmentInfo:
        """Write a new hot segment durably and return it."""
        data, idx = encode_segment(records, first_seq)
        return self.install("hot", first_seq, data, idx)

    def install(self, tier: Tier, first_seq: int, data: bytes, idx: bytes) -> SegmentInfo:
        """Make the `(data, idx)` pair durable as `seg-<first_seq>` in `tier`."""
        d = self.tier_dir(tier)
        make_dirs_durably(self.fs, d)
        base = segment_base(first_seq)
        data_path, idx_path = d / f"{base}.data", d / f"{base}.idx"
        tmp_data, tmp_idx = d / f"{base}.data.tmp", d / f"{base}.idx.tmp"
        # A concurrent list() must not take the pair for a leftover while it is being built.
        inflight = (tmp_data, tmp_idx, data_path, idx_path)
        with self._cache_lock:
            self._inflight.update(inflight)
        try:
            write_synced(self.fs, tmp_data, data)
            write_synced(self.fs, tmp_idx, idx)
            if self.fs.exists(data_path) or self.fs.exists(idx_path):
                self._forget(data_path)
                self.fs.unlink(idx_path)
                self.fs.unlink(data_path)
                self.fs.fsync_dir(d)
            self.fs.rename(tmp_data, data_path)
            self.fs.rename(tmp_idx, idx_path)
            self.fs.fsync_dir(d)
        finally:
            with self._cache_lock:
                self._inflight.difference_update(inflight)
        count = len(idx) // IDX_ENTRY_SIZE
        return SegmentInfo(
            self.topic_id, first_seq, first_seq + count - 1, count, len(data), tier,
            data_path, idx_path,
        )  # fmt: skip

    def mark_deleted(self, info: SegmentInfo, seqs: Sequence[int]) -> None:
        """Set the del_flag of each seq (not fsynced: a flag only repeats a delete that the
        WAL, then every later snapshot, already holds, so after a crash it may be lost or
        kept and either way the record stays deleted — STORAGE §6 step 8 only adds flagged
        deletes, never removes one). Flags close together are set as one run
        (`flag_runs`): the run's bytes are read from the open file itself, the flags set,
        and written back — one `pread` and one `pwrite` for ten adjacent flags."""
        if not seqs:
            return
        with self.flag_lock:
            data_path, idx_path = self.resolve(info)
            m = self._mapped(data_path, idx_path)
            wanted = sorted(set(seqs))
            if wanted[0] < info.first_seq or wanted[-1] - info.first_seq >= len(m.idx):
                raise IndexError(
                    f"seqs {wanted[0]}..{wanted[-1]} are not all in the segment starting at "
                    f"{info.first_seq}"
                )
            entries = m.idx[np.asarray(wanted, np.int64) - info.first_seq]
            positions: list[int] = []
            for seq, offset, length in zip(
                wanted, entries["offset"].tolist(), entries["len"].tolist(), strict=True
            ):
                # Never write through a bad index entry: that would corrupt another frame.
                if (
                    length < 4 + MIN_FRAME_LEN
                    or offset + length > len(m.data)
                    or _U32.unpack_from(m.data, offset)[0] != length - 4
                    or (positions and offset + length - 1 <= positions[-1])
                ):
                    raise SegmentCorruption(
                        f"segment corruption: seq {seq} (frame at offset {offset}): "
                        f"index entry does not match {data_path}"
                    )
                positions.append(offset + length - 1)
            f = self.fs.open(data_path)
            try:
                i = 0
                for first, last in flag_runs(positions, PAGESIZE):
                    run = bytearray(f.read_at(last + 1 - first, first))
                    if len(run) != last + 1 - first:
                        raise SegmentCorruption(
                            f"segment corruption: {data_path} ends before offset {last}"
                        )
                    while i < len(positions) and positions[i] <= last:
                        run[positions[i] - first] = DEL_FLAG
                        i += 1
                    write_all_at(f, memoryview(run), first)
            finally:
                f.close()
            if isinstance(m.data, bytes):
                self._forget(data_path)  # a copied (non-mmap) view would go stale

    def drop(self, info: SegmentInfo) -> None:
        """Unlink the segment's files in every tier (cold first: a crash never leaves a stale
        cold copy to win over a dropped hot one). Idempotent."""
        base = segment_base(info.first_seq)
        with self.flag_lock:
            for d in self._tier_dirs():
                self._forget(d / f"{base}.data")
                removed = False
                for path in (d / f"{base}.data", d / f"{base}.idx"):
                    if self.fs.exists(path):
                        self.fs.unlink(path)
                        removed = True
                if removed:
                    self.fs.fsync_dir(d)

    def drop_all(self) -> None:
        """Remove the topic's directory in both tiers."""
        with self._cache_lock:
            # Not closed: a reader of the deleted topic may still be using a map.
            self._maps.clear()
        with self.flag_lock:
            for d in self._tier_dirs():
                if self.fs.is_dir(d):
                    self.fs.rmtree(d)
                    self.fs.fsync_dir(d.parent)

    def unlink_relocated(self, info: SegmentInfo) -> None:
        """Remove a hot copy after its cold copy is durable. Caller holds `flag_lock`."""
        d = info.data_path.parent
        self._forget(info.data_path)
        self.fs.unlink(info.data_path)
        self.fs.unlink(info.idx_path)
        self.fs.fsync_dir(d)

    # ---- reading -----------------------------------------------------------------------
    def list(self) -> list[SegmentInfo]:
        """Complete segments of both tiers by first_seq, deleting leftovers (see module doc)."""
        with self._cache_lock:
            spare = frozenset(self._inflight)
        return _list(self.fs, self.hot_dir, self.cold_dir, self.topic_id, spare)

    def read(self, info: SegmentInfo, seq: int) -> SegmentRecord:
        """The verified record `seq`; `IndexError` if outside `info`, `SegmentCorruption` if
        its frame or index entry fails validation."""
        if not info.first_seq <= seq <= info.last_seq:
            raise IndexError(f"seq {seq} is outside segment {info.first_seq}..{info.last_seq}")
        m = self._map_segment(info)
        try:
            offset, length = idx_lookup(m.idx, info.first_seq, seq)
        except IndexError:
            raise SegmentCorruption(
                f"segment corruption: seq {seq}: index of {info.data_path} is too short"
            ) from None
        rec, end = decode_frame(m.data, offset, seq)
        if end - offset != length:
            raise SegmentCorruption(
                f"segment corruption: seq {seq} (frame at offset {offset}): "
                f"index length {length} != framed length {end - offset}"
            )
        return rec

    def pin(self, info: SegmentInfo) -> PinnedSegment:
        """The segment's mapping, kept valid for as long as the caller holds it (even if the
        files are dropped or relocated meanwhile): read it later with `read_run`."""
        m = self._map_segment(info)
        return PinnedSegment(info, m)

    def read_run(
        self, info: SegmentInfo | PinnedSegment, first: int, last: int, max_bytes: int = 0
    ) -> builtins.list[bytes]:
        """The verified payload blobs of `first..last` (clamped to the segment and, when
        `max_bytes` > 0, cut after the frame that reaches that many framed bytes), for
        sequential reads: one map lookup, one index slice and one copy for the whole run."""
        run = self._run(info, first, last, max_bytes)
        return [] if run is None else self._verified(run, run_blobs_of)

    def read_run_payloads(
        self, info: SegmentInfo | PinnedSegment, first: int, last: int
    ) -> tuple[builtins.list[bytes], builtins.list[bytes | None]]:
        """`read_run`'s blobs as the compact JSON of each record's data and meta."""
        run = self._run(info, first, last, 0)
        return ([], []) if run is None else self._verified(run, run_payloads)

    def read_run_blob_spans(
        self, info: SegmentInfo | PinnedSegment, first: int, last: int
    ) -> tuple[bytes, int, Ints, Ints] | None:
        """`read_run_payloads` of `first..last` (clamped to the segment) as spans: one
        verified copy of the run's bytes, the seq of its first frame, and where each frame's
        payload blob starts and ends in it (frame k is seq `first + k`); None for an empty
        run. The checks are `read_run_payloads`' own, so are its errors."""
        run = self._run(info, first, last, 0)
        if run is None:
            return None
        starts, ends = self._verified(run, verify_run)
        return run.chunk, run.first_seq, starts, ends

    def _run(
        self, info: SegmentInfo | PinnedSegment, first: int, last: int, max_bytes: int
    ) -> _Run | None:
        pinned = info if isinstance(info, PinnedSegment) else self.pin(info)
        seg, m = pinned.info, pinned.mapped
        first, last = max(first, seg.first_seq), min(last, seg.last_seq)
        if first > last:
            return None
        lo, hi = first - seg.first_seq, last - seg.first_seq + 1
        if hi > len(m.idx):
            raise SegmentCorruption(
                f"segment corruption: seq {last}: index of {seg.data_path} is too short"
            )
        entries = m.idx[lo:hi]
        if max_bytes > 0 and len(entries) > 1:
            framed = np.cumsum(entries["len"], dtype=np.int64)
            entries = entries[: int(np.searchsorted(framed, max_bytes)) + 1]
            last = first + len(entries) - 1
        offsets = entries["offset"].astype(np.int64)
        lengths = entries["len"].astype(np.int64)
        base = int(offsets[0])
        stop = int(offsets[-1] + lengths[-1])
        if base < 0 or stop > len(m.data) or stop < base:
            raise SegmentCorruption(
                f"segment corruption: seqs {first}..{last}: index of {seg.data_path} points "
                f"outside the data file"
            )
        return _Run(seg, bytes(m.data[base:stop]), base, first, offsets - base, lengths)

    @staticmethod
    def _verified(run: _Run, read: Callable[[bytes, int, Ints, Ints], R]) -> R:
        try:
            return read(run.chunk, run.first_seq, run.offsets, run.lengths)
        except SegmentCorruption as e:
            raise SegmentCorruption(
                f"{e} in {run.segment.data_path} (run from offset {run.base})"
            ) from None

    def warm_run(self, info: SegmentInfo, first: int, last: int, max_bytes: int) -> int:
        """Map `info` and touch one byte per page of the frames `first..last` (clamped, and
        at most about `max_bytes`) so that a following `read_run` finds them in the page
        cache; returns the bytes covered. Nothing is verified or copied here: callers use
        it outside their locks and read properly afterwards."""
        first, last = max(first, info.first_seq), min(last, info.last_seq)
        if first > last:
            return 0
        m = self._map_segment(info)
        lo, hi = first - info.first_seq, min(last - info.first_seq + 1, len(m.idx))
        if lo >= hi:
            return 0
        base = int(m.idx[lo]["offset"])
        stop = int(m.idx[hi - 1]["offset"]) + int(m.idx[hi - 1]["len"])
        stop = min(stop, base + max(max_bytes, 1), len(m.data))
        data = m.data
        for off in range(base, stop, PAGESIZE):
            data[off]  # the read is the point: it faults the page in
        return max(stop - base, 0)

    def iter_records(self, info: SegmentInfo) -> Iterator[SegmentRecord]:
        """Every record of the segment in seq order, checksums verified."""
        m = self._map_segment(info)
        yield from _scan_verified(m.data, info)

    def read_del_flags(self, info: SegmentInfo, verify: bool = True) -> builtins.list[int]:
        """Seqs whose del_flag is set (every frame verified: corrupt is never 'deleted';
        `verify=False`: see `segment_del_flags`)."""
        m = self._map_segment(info)
        data = bytes(m.data)  # numpy must not hold a view of the mapping (it may be closed)
        offsets, lengths = m.idx["offset"], m.idx["len"]
        deleted, n = segment_del_flags(data, info.first_seq, offsets, lengths, verify)
        _check_count(n, info)
        return deleted

    # ---- map cache ---------------------------------------------------------------------
    def _cached(self, data_path: Path) -> _Mapped | None:
        with self._cache_lock:
            m = self._maps.get(data_path)
            if m is not None:
                self._maps.move_to_end(data_path)
            return m

    def _map_segment(self, info: SegmentInfo) -> _Mapped:
        """The segment's mapping, from whichever tier holds it now. A relocation makes the
        new copy before it unlinks the old one, so a copy that vanished between finding
        and opening it (no lock orders a reader with a relocation) is in the other tier
        on a second look."""
        m = self._cached(info.data_path)
        if m is not None:
            return m
        try:
            return self._mapped(*self.resolve(info))
        except FileNotFoundError:
            return self._mapped(*self.resolve(info))

    def _mapped(self, data_path: Path, idx_path: Path) -> _Mapped:
        m = self._cached(data_path)
        if m is not None:
            return m
        # Map outside the lock: readers of other segments must not wait on this I/O.
        m = _Mapped(self.fs.map_file(data_path), idx_view(self.fs.read_file(idx_path)))
        with self._cache_lock:
            self._maps[data_path] = m
            while len(self._maps) > MAP_CACHE_SEGMENTS:
                # Evicted maps are not closed: a concurrent reader may still hold one; the
                # mapping is released when the last reference goes.
                self._maps.popitem(last=False)
        return m

    def _forget(self, data_path: Path) -> None:
        with self._cache_lock:
            self._maps.pop(data_path, None)

    def _release_maps(self) -> None:
        with self._cache_lock:
            maps = list(self._maps.values())
            self._maps.clear()
        for m in maps:
            if not isinstance(m.data, bytes):
                m.data.close()

    def close(self) -> None:
        """Release every cached map (no reads may be in flight)."""
        self._release_maps()


# ---- offline, read-only API (Spark connector; no server needed) -------------------------
def list_topic_segments(
    data_dir: Path, topic_id: int, cold_dir: Path | None = None, fs: Fs | None = None
) -> list[SegmentInfo]:
    """Complete segments of a topic in both tiers (hot preferred); never deletes anything."""
    fs = fs or RealFs()
    name = topic_dir_name(topic_id)
    hot = data_dir / "topics" / name
    cold = None if cold_dir is None else cold_dir / "topics" / name
    return _list(fs, hot, cold, topic_id, None)


def iter_segment(info: SegmentInfo, fs: Fs | None = None) -> Iterator[SegmentRecord]:
    """Every record of one segment, checksums verified; raises `SegmentCorruption`."""
    fs = fs or RealFs()
    yield from _scan_verified(fs.read_file(info.data_path), info)


def read_segment_layout(
    info: SegmentInfo, fs: Fs | None = None, checksums: bool = True
) -> tuple[bytes, SegmentLayout]:
    """One segment's `.data` bytes and where every frame's fields lie in them, every
    checksum verified unless not `checksums` (node and tag not yet decoded: see
    `SegmentLayout`); raises `SegmentCorruption`."""
    fs = fs or RealFs()
    data = fs.read_file(info.data_path)
    idx = idx_view(fs.read_file(info.idx_path))
    _check_count(len(idx), info)
    return data, segment_layout(data, info.first_seq, idx["offset"], idx["len"], checksums)
