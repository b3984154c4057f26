"""Data-directory layout and its exclusive lock (STORAGE §2).

    <root>/.seglog.lock   flock'd for the process lifetime, content "pid=<pid>\\n"
    <root>/meta/          snapshots
    <root>/wal/           WAL files (or wal/shard-NN/)
    <root>/topics/<ID>/   segments, one dir per topic instance (8 uppercase hex digits)
    <cold>/topics/<ID>/   optional cold tier, same naming

Owner: one `DataDir` per engine, opened once at startup and closed at shutdown. Every
directory it creates is made durable (parent fsync) before anything is written inside it.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from seglog.storage.fs import Fs

LOCK_NAME = ".seglog.lock"
_TOPIC_DIR = re.compile(r"[0-9A-F]{8}")


class DataDirInUse(RuntimeError):
    """Another process (or another open `DataDir`) holds the data-directory lock."""


def make_dirs_durably(fs: Fs, path: Path) -> None:
    """`mkdir -p` that fsyncs the parent of every directory it creates, top-down, so a
    crash cannot lose a directory whose contents were already made durable."""
    missing: list[Path] = []
    p = path
    while not fs.is_dir(p):
        missing.append(p)
        if p.parent == p:
            break
        p = p.parent
    if not missing:
        return
    fs.mkdir(path)
    for created in reversed(missing):
        if created.parent != created:
            fs.fsync_dir(created.parent)


def list_topic_ids(fs: Fs, topics_dir: Path) -> list[int]:
    """Topic ids with a segment directory under `topics_dir`, ascending; other names ignored."""
    return sorted(int(name, 16) for name in fs.listdir(topics_dir) if _TOPIC_DIR.fullmatch(name))


class DataDir:
    """An opened, locked data directory. Paths are fixed for its lifetime."""

    def __init__(self, fs: Fs, root: Path, cold_root: Path | None, lock_handle: object) -> None:
        self.fs = fs
        self.root = root
        self.meta_dir = root / "meta"
        self.wal_dir = root / "wal"
        self.topics_dir = root / "topics"
        self.cold_root = cold_root
        self.cold_topics_dir = None if cold_root is None else cold_root / "topics"
        self._lock_handle: object | None = lock_handle

    @classmethod
    def open(cls, fs: Fs, root: Path, cold_root: Path | None = None) -> DataDir:
        """Create the layout durably and take the lock; `DataDirInUse` if it is held."""
        make_dirs_durably(fs, root)
        # Lock before touching anything inside: a second process must not mutate the layout.
        try:
            handle = fs.lock(root / LOCK_NAME, f"pid={os.getpid()}\n".encode())
        except BlockingIOError:
            raise DataDirInUse(f"data directory {root} is already in use") from None
        dd = cls(fs, root, cold_root, handle)
        try:
            for d in (dd.meta_dir, dd.wal_dir, dd.topics_dir, dd.cold_topics_dir):
                if d is not None:
                    make_dirs_durably(fs, d)
        except BaseException:
            dd.close()
            raise
        return dd

    @property
    def locked(self) -> bool:
        return self._lock_handle is not None

    def close(self) -> None:
        """Release the lock (idempotent)."""
        handle, self._lock_handle = self._lock_handle, None
        if handle is not None:
            self.fs.unlock(handle)
