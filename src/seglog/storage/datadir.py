"""Data-directory layout and its exclusive locks (STORAGE §2).

    <root>/.seglog.lock   flock'd for the process lifetime, content "pid=<pid>\\n"
    <root>/meta/          snapshots
    <root>/wal/           WAL files (or wal/shard-NN/)
    <root>/topics/<ID>/   segments, one dir per topic instance (8 uppercase hex digits)
    <cold>/.seglog.lock   the cold tier is locked the same way: recovery deletes topic dirs
                          it does not know there, so a cold dir serves exactly one data dir
    <cold>/topics/<ID>/   optional cold tier, same naming

Owner: one `DataDir` per engine, opened once at startup and closed at shutdown. Every
directory it creates is made durable (parent fsync) before anything is written inside it.
"""

from __future__ import annotations

import os
import re
import threading
from pathlib import Path

from seglog.storage.fs import Fs

LOCK_NAME = ".seglog.lock"
_TOPIC_DIR = re.compile(r"[0-9A-F]{8}")


class DataDirInUse(RuntimeError):
    """Another process (or another open `DataDir`) holds the data-directory lock."""


class ColdDirInUse(DataDirInUse):
    """Another process (or another open `DataDir`) holds the cold-directory lock, or the
    cold directory is the data directory itself."""


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


class DirLocks:
    """The exclusive locks on a data directory and on its optional cold directory, one
    `.seglog.lock` in each root, taken together and all-or-nothing.

    Owner: whoever called `acquire` — normally the `DataDir` it opens. The server takes
    them itself before it listens and gives them to the engine's `DataDir`, which then
    owns and releases them. `release` is idempotent and thread-safe."""

    def __init__(self, fs: Fs, handles: dict[Path, object]) -> None:
        self._fs = fs
        self._handles = handles
        self._mutex = threading.Lock()

    @classmethod
    def acquire(cls, fs: Fs, root: Path, cold_root: Path | None = None) -> DirLocks:
        """Create the roots durably and lock the data dir, then the cold dir. Raises
        `DataDirInUse` / `ColdDirInUse` (holding nothing) if either lock is held."""
        if cold_root is not None and _same_path(root, cold_root):
            raise ColdDirInUse(f"cold directory {cold_root} is the data directory")
        content = f"pid={os.getpid()}\n".encode()
        wanted: list[tuple[str, Path, type[DataDirInUse]]] = [("data", root, DataDirInUse)]
        if cold_root is not None:
            wanted.append(("cold", cold_root, ColdDirInUse))
        handles: dict[Path, object] = {}
        try:
            for kind, d, in_use in wanted:
                make_dirs_durably(fs, d)
                try:
                    handles[d / LOCK_NAME] = fs.lock(d / LOCK_NAME, content)
                except BlockingIOError:
                    raise in_use(f"{kind} directory {d} is already in use") from None
        except BaseException:
            for handle in handles.values():
                fs.unlock(handle)
            raise
        return cls(fs, handles)

    @property
    def held(self) -> bool:
        """Whether any lock is still held."""
        with self._mutex:
            return bool(self._handles)

    def release(self) -> None:
        """Unlock every lock still held (idempotent)."""
        with self._mutex:
            handles, self._handles = list(self._handles.values()), {}
        for handle in handles:
            self._fs.unlock(handle)


def _same_path(a: Path, b: Path) -> bool:
    return os.path.normpath(os.path.abspath(a)) == os.path.normpath(os.path.abspath(b))


class DataDir:
    """An opened, locked data directory. Paths are fixed for its lifetime."""

    def __init__(self, fs: Fs, root: Path, cold_root: Path | None, locks: DirLocks) -> None:
        self.fs = fs
        self.root = root
        self.meta_dir = root / "meta"
        self.wal_dir = root / "wal"
        self.topics_dir = root / "topics"
        self.cold_root = cold_root
        self.cold_topics_dir = None if cold_root is None else cold_root / "topics"
        self._locks: DirLocks | None = locks

    @classmethod
    def open(
        cls, fs: Fs, root: Path, cold_root: Path | None = None, locks: DirLocks | None = None
    ) -> DataDir:
        """Take the data-dir (and cold-dir) locks — or adopt `locks`, taken earlier for
        these roots — then create the layout durably; `DataDirInUse` / `ColdDirInUse` if a
        lock is held. The DataDir owns the locks from here on (`close` releases them)."""
        # Lock before touching anything inside: a second process must not mutate the layout.
        if locks is None:
            locks = DirLocks.acquire(fs, root, cold_root)
        dd = cls(fs, root, cold_root, locks)
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
        return self._locks is not None

    def close(self) -> None:
        """Release the locks (idempotent)."""
        locks, self._locks = self._locks, None
        if locks is not None:
            locks.release()
