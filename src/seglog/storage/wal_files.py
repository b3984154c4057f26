"""WAL files on disk (STORAGE §2, §6): naming, groups, reading them back, sealing tails.

A *group* is one WAL directory: `wal/` itself (one shard) or `wal/shard-NN/`, holding
`wal-<16-digit idx>.log` files numbered from 1; a `Position` is `(file idx, byte offset)`
in a group. A file's logical end is its first invalid frame (`seglog.core.frame_scanner`).

Reading (`discover_groups`, `read_group`, `file_valid_end`) never writes; `seal_tail`
rewrites a file's tail durably, and only when called. It trusts the first invalid frame to
be the end: recovery classifies tails first (`walscan`: torn tail or corruption) and seals
only torn ones; `seal_tail` serves a writer opened without a known tail. All file access
goes through the `Fs` seam.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from seglog.core.frame_scanner import FrameScanner, valid_end
from seglog.core.frames import WalFrame
from seglog.storage.fs import Fs, mapped_file

FILE_SIZE = 64 << 20  # a new file's preallocated size (a big submission gets more)
_WAL_NAME = re.compile(r"wal-(\d{16})\.log")
_SHARD_DIR = re.compile(r"shard-(\d{2})")

Position = tuple[int, int]  # (file idx, byte offset)


def wal_file_name(idx: int) -> str:
    return f"wal-{idx:016d}.log"


def group_key(shard: int, shards: int) -> str:
    return "" if shards == 1 else f"shard-{shard:02d}"


def list_files(fs: Fs, d: Path) -> list[tuple[int, Path]]:
    """`(idx, path)` of the `wal-*.log` files in `d`, ascending."""
    out = []
    for name in fs.listdir(d):
        m = _WAL_NAME.fullmatch(name)
        if m:
            out.append((int(m.group(1)), d / name))
    return sorted(out)


def shard_dir(wal_dir: Path, shard: int, shards: int) -> Path:
    """The group directory of `shard` out of `shards`: `wal_dir` itself for a single shard."""
    key = group_key(shard, shards)
    return wal_dir / key if key else wal_dir


@dataclass(frozen=True, slots=True)
class WalGroup:
    """One WAL directory: `key` "" for `wal/`, "shard-NN" for `wal/shard-NN/`; `files` is
    `(idx, path)` ascending."""

    key: str
    shard_no: int | None
    dir: Path
    files: list[tuple[int, Path]]


def discover_groups(fs: Fs, wal_dir: Path) -> list[WalGroup]:
    """`wal/` if it holds `wal-*.log`, then every `wal/shard-NN/` (even empty ones)."""
    groups: list[WalGroup] = []
    flat = list_files(fs, wal_dir)
    if flat:
        groups.append(WalGroup("", None, wal_dir, flat))
    for name in sorted(fs.listdir(wal_dir)):
        m = _SHARD_DIR.fullmatch(name)
        if m and fs.is_dir(wal_dir / name):
            d = wal_dir / name
            groups.append(WalGroup(name, int(m.group(1)), d, list_files(fs, d)))
    return groups


def replay_order(groups: list[WalGroup], current_shards: int) -> list[WalGroup]:
    """§6 step 3: groups the current layout does not use first, then current ones; each
    part by shard number (the flat group first)."""
    current = {group_key(i, max(1, current_shards)) for i in range(max(1, current_shards))}

    def by_shard(g: WalGroup) -> int:
        return -1 if g.shard_no is None else g.shard_no

    stale = sorted((g for g in groups if g.key not in current), key=by_shard)
    live = sorted((g for g in groups if g.key in current), key=by_shard)
    return stale + live


def _group_files(group: WalGroup, start: Position) -> Iterator[tuple[int, Path, int]]:
    """`(idx, path, scan offset)` of the files at or after `start`. The start offset is a
    frame end recorded by a checkpoint, so scanning from it equals scanning from 0 and
    skipping frames that end at or before it, without reading the absorbed prefix."""
    start_idx, start_off = start
    for idx, path in group.files:
        if idx >= start_idx:
            yield idx, path, start_off if idx == start_idx else 0


def read_group(
    fs: Fs, group: WalGroup, start: Position = (1, 0)
) -> Iterator[tuple[int, int, WalFrame]]:
    """`(file idx, frame end, frame)` after `start`, each file up to its first invalid
    frame. Streams: one mapped file and one chunk of frames at a time."""
    for idx, path, off in _group_files(group, start):
        with mapped_file(fs, path) as buf:
            it = FrameScanner(buf, off).__iter__()
            try:
                for _o, end, frame in it:
                    yield idx, end, frame
            finally:
                it.close()  # releases the view before unmapping


def file_valid_end(fs: Fs, path: Path) -> int:
    """The logical end of the WAL file at `path`: the offset of its first invalid frame."""
    with mapped_file(fs, path) as buf:
        return valid_end(buf)


def seal_tail(fs: Fs, idx: int, path: Path, file_size: int, end: int | None) -> Position:
    """Cut `path` at its logical end and re-extend it to its preallocated size: the
    re-extended bytes read as zeros, so garbage past the end (a torn frame, stale frames of
    a failed batch) can never parse later. Cheaper than writing zeros over up to 64 MiB,
    and fdatasync covers the size/extent change. `end`, when known from replay, saves a scan."""
    if end is None:
        end = file_valid_end(fs, path)
    f = fs.open(path)
    try:
        size = f.size()
        if size > end:
            f.truncate(end)
        f.truncate(max(file_size, end))
        f.sync()
    finally:
        f.close()
    return idx, end
