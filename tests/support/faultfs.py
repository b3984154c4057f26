"""An in-memory, fault-injecting twin of `seglog.storage.fs.Fs` for crash tests.

It models what survives a power cut:
- a file's *content* is durable up to its last `sync()` (unsynced writes may vanish or,
  with `keep_unsynced`, partly survive);
- a directory *entry* (creation, rename, unlink) is durable only after `fsync_dir` of that
  directory. Directories themselves are treated as durable once created.

Faults: fail the N-th write or sync with EIO, tear a write (write only a prefix), or
`crash_after(n)`: after the n-th mutating call completes, every later call raises `Crash`
(a BaseException, so engine code cannot swallow it) — the world stopped there. Then
`crash_image()` builds a fresh FaultFs holding only what was durable.
"""

from __future__ import annotations

import errno
import random
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal


class Crash(BaseException):
    """The simulated machine stopped."""


@dataclass(eq=False)
class _Node:
    data: bytearray = field(default_factory=bytearray)
    durable: bytes = b""


class _MemFile:
    def __init__(self, fs: FaultFs, path: Path, node: _Node) -> None:
        self.fs = fs
        self.path = path
        self.node = node

    def write_at(self, data: bytes | memoryview, offset: int) -> int:
        n = self.fs._before_write(self.path, len(data))
        buf = self.node.data
        chunk = bytes(data[:n])
        if len(buf) < offset:
            buf.extend(b"\0" * (offset - len(buf)))
        buf[offset : offset + len(chunk)] = chunk
        self.fs._after_mutation()
        return n

    def read_at(self, size: int, offset: int) -> bytes:
        self.fs._check()
        return bytes(self.node.data[offset : offset + size])

    def sync(self) -> None:
        self.fs._before_sync(self.path)
        self.node.durable = bytes(self.node.data)
        self.fs._after_mutation()

    def truncate(self, size: int) -> None:
        self.fs._check()
        buf = self.node.data
        if size < len(buf):
            del buf[size:]
        else:
            buf.extend(b"\0" * (size - len(buf)))
        self.fs._after_mutation()

    def size(self) -> int:
        self.fs._check()
        return len(self.node.data)

    def close(self) -> None:
        pass


class FaultFs:
    def __init__(self) -> None:
        self._lock = threading.RLock()
        self.dirs: set[Path] = {Path("/")}
        self.entries: dict[Path, _Node] = {}  # current namespace
        self.durable_entries: dict[Path, dict[str, _Node]] = {}  # per directory
        self.mutations = 0
        self.writes = 0
        self.syncs = 0
        self.crash_at: int | None = None
        self.crashed = False
        self.fail_writes: set[int] = set()
        self.fail_syncs: set[int] = set()
        self.tear_writes: set[int] = set()
        self.locks: set[Path] = set()

    # ---- fault control ----
    def crash_after(self, n: int) -> None:
        self.crash_at = n

    def _check(self) -> None:
        if self.crashed:
            raise Crash("the world stopped")

    def _after_mutation(self) -> None:
        self.mutations += 1
        if self.crash_at is not None and self.mutations >= self.crash_at:
            self.crashed = True
            raise Crash(f"stopped after mutating call {self.mutations}")

    def _before_write(self, path: Path, size: int) -> int:
        self._check()
        self.writes += 1
        if self.writes in self.fail_writes:
            raise OSError(errno.EIO, f"injected write failure on {path}")
        if self.writes in self.tear_writes and size > 1:
            return size // 2
        return size

    def _before_sync(self, path: Path) -> None:
        self._check()
        self.syncs += 1
        if self.syncs in self.fail_syncs:
            raise OSError(errno.EIO, f"injected fsync failure on {path}")

    # ---- Fs protocol ----
    def open(self, path: Path, *, create: bool = False) -> _MemFile:
        with self._lock:
            self._check()
            path = Path(path)
            node = self.entries.get(path)
            if node is None:
                if not create:
                    raise FileNotFoundError(errno.ENOENT, "no such file", str(path))
                if path.parent not in self.dirs:
                    raise FileNotFoundError(errno.ENOENT, "no such directory", str(path.parent))
                node = _Node()
                self.entries[path] = node
                self._after_mutation()
            return _MemFile(self, path, node)

    def exists(self, path: Path) -> bool:
        self._check()
        return Path(path) in self.entries or Path(path) in self.dirs

    def is_dir(self, path: Path) -> bool:
        self._check()
        return Path(path) in self.dirs

    def listdir(self, path: Path) -> list[str]:
        self._check()
        p = Path(path)
        names = {q.name for q in self.entries if q.parent == p}
        names |= {d.name for d in self.dirs if d.parent == p and d != p}
        return sorted(names)

    def mkdir(self, path: Path) -> None:
        with self._lock:
            self._check()
            p = Path(path)
            created = False
            for q in [*reversed(p.parents), p]:
                if q not in self.dirs:
                    self.dirs.add(q)
                    created = True
            if created:
                self._after_mutation()

    def rename(self, src: Path, dst: Path) -> None:
        with self._lock:
            self._check()
            node = self.entries.pop(Path(src))
            self.entries[Path(dst)] = node
            self._after_mutation()

    def unlink(self, path: Path) -> None:
        with self._lock:
            self._check()
            if self.entries.pop(Path(path), None) is not None:
                self._after_mutation()

    def rmtree(self, path: Path) -> None:
        with self._lock:
            self._check()
            p = Path(path)
            for q in [q for q in self.entries if p == q or p in q.parents]:
                del self.entries[q]
            for d in [d for d in self.dirs if d == p or p in d.parents]:
                self.dirs.discard(d)
                self.durable_entries.pop(d, None)
            self._after_mutation()

    def fsync_dir(self, path: Path) -> None:
        with self._lock:
            self._check()
            p = Path(path)
            self.durable_entries[p] = {q.name: n for q, n in self.entries.items() if q.parent == p}
            self._after_mutation()

    def read_file(self, path: Path) -> bytes:
        self._check()
        node = self.entries.get(Path(path))
        if node is None:
            raise FileNotFoundError(errno.ENOENT, "no such file", str(path))
        return bytes(node.data)

    def map_file(self, path: Path) -> bytes:
        return self.read_file(path)

    def file_size(self, path: Path) -> int:
        return len(self.read_file(path))

    def lock(self, path: Path, content: bytes) -> object:
        with self._lock:
            self._check()
            p = Path(path)
            if p in self.locks:
                raise BlockingIOError(errno.EWOULDBLOCK, f"{p} is locked")
            self.locks.add(p)
            return p

    def unlock(self, handle: object) -> None:
        self.locks.discard(Path(str(handle)))

    # ---- power cut ----
    def crash_image(
        self, keep_unsynced: Literal["none", "all", "random"] = "none", rng: random.Random | None = None
    ) -> FaultFs:
        """A fresh FaultFs holding what a power cut right now would leave on disk."""
        rng = rng or random.Random(0)
        img = FaultFs()
        img.dirs = set(self.dirs)
        for d, names in self.durable_entries.items():
            if d not in self.dirs:
                continue
            for name, node in names.items():
                content = node.durable
                if keep_unsynced == "all":
                    content = bytes(node.data)
                elif keep_unsynced == "random" and len(node.data) > len(node.durable):
                    extra = rng.randint(0, len(node.data) - len(node.durable))
                    content = bytes(node.data[: len(node.durable) + extra])
                img.entries[d / name] = _Node(bytearray(content), content)
        for d in img.dirs:
            img.durable_entries[d] = {q.name: n for q, n in img.entries.items() if q.parent == d}
        return img
