"""An in-memory, fault-injecting twin of `seglog.storage.fs.Fs` for crash tests.

It models what survives a power cut, inode-style:
- a file's *content* is durable as of its last `sync()`; the writes and truncates since
  then are kept in order, so a crash image may replay some prefix of them (the kernel wrote
  some pages back), the last one possibly torn;
- a directory *entry* (a file or subdirectory created, renamed or unlinked in it) is durable
  only after `fsync_dir` of that directory. A directory removed or created without its
  parent being fsynced comes back (or vanishes) with its own durable entries.

Faults: fail the N-th write, sync, file creation or directory fsync with EIO (optionally
losing the unsynced changes, as Linux does after failed writeback); tear the N-th write
(write a prefix, then return the short count or raise EIO); hold writes at a gate (to
line up a group commit deterministically); `crash_after(n)`: the n-th mutating call takes
effect and then raises `Crash` — a `BaseException`, so engine code cannot swallow it — and
every later call raises `Crash` too (the world stopped).
`crash_image()` builds a fresh FaultFs holding only what the disk would hold;
`process_crash_image()` what a killed process leaves (the page cache survives: every write
and every directory entry, synced or not).

Additive hooks for stress/regression tests (all default off): `before_write` runs outside
the lock before a write (it may block: gate one particular write by path or content);
`write_fault` / `sync_fault` run inside the lock and may fail that call (any errno, a torn
or short write); `enospc_writes` fails the N-th write with ENOSPC; `RandomFaults` injects
seeded random EIO / ENOSPC / short / torn writes and failed syncs on chosen paths.

Mutating calls (counted in `mutations`, 1-based, whether or not they changed anything):
`write_at`, `sync`, `truncate`, `rename`, `unlink`, `mkdir`, `fsync_dir`, `rmtree` and
`open(create=True)`. A call that fails with an injected EIO before touching anything is
not counted. Every call is serialized by one lock, so WAL writer threads interleave with
the test thread at call granularity.
"""

from __future__ import annotations

import errno
import random
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

KeepUnsynced = Literal["none", "all", "random"]


class Crash(BaseException):
    """The simulated machine stopped."""


@dataclass(frozen=True)
class WriteFault:
    """What an injected write fault does: write the first `keep` bytes, then either return
    that short count (`short`, no error: the caller must loop) or raise `OSError(errno)`.
    `keep=0` without `short` fails before touching anything."""

    keep: int = 0
    errno: int = errno.EIO
    short: bool = False


@dataclass
class RandomFaults:
    """Seeded random faults for `write_at` and `sync` calls on paths containing one of
    `paths` (all paths when empty). Decisions are taken under the FaultFs lock, so the
    sequence is deterministic for a given order of calls. Counters say what was injected."""

    rng: random.Random
    p_write_eio: float = 0.0
    p_sync_eio: float = 0.0
    p_enospc: float = 0.0
    p_short: float = 0.0
    p_torn_eio: float = 0.0
    paths: tuple[str, ...] = ()
    enabled: bool = True
    injected: dict[str, int] = field(default_factory=dict)

    def _hit(self, path: Path) -> bool:
        if not self.enabled:
            return False
        p = str(path)
        return not self.paths or any(x in p for x in self.paths)

    def _count(self, kind: str) -> None:
        self.injected[kind] = self.injected.get(kind, 0) + 1

    def write_fault(self, path: Path, offset: int, data: bytes) -> WriteFault | None:
        if not self._hit(path):
            return None
        r = self.rng.random()
        n = len(data)
        edge = self.p_write_eio
        if r < edge:
            self._count("write_eio")
            return WriteFault()
        edge += self.p_enospc
        if r < edge:
            self._count("enospc")
            return WriteFault(keep=self.rng.randint(0, max(n - 1, 0)), errno=errno.ENOSPC)
        edge += self.p_torn_eio
        if r < edge and n > 1:
            self._count("torn_eio")
            return WriteFault(keep=self.rng.randint(1, n - 1))
        edge += self.p_short
        if r < edge and n > 1:
            self._count("short")
            return WriteFault(keep=self.rng.randint(1, n - 1), short=True)
        return None

    def sync_fault(self, path: Path) -> int | None:
        if self._hit(path) and self.rng.random() < self.p_sync_eio:
            self._count("sync_eio")
            return errno.EIO
        return None


@dataclass(eq=False)
class _File:
    data: bytearray = field(default_factory=bytearray)
    durable: bytes = b""
    # ("w", offset, bytes) or ("t", size, b""): changes since the last sync, in order.
    pending: list[tuple[str, int, bytes]] = field(default_factory=list)


@dataclass(eq=False)
class _Dir:
    entries: dict[str, _File | _Dir] = field(default_factory=dict)
    durable: dict[str, _File | _Dir] = field(default_factory=dict)


def _norm(path: Path) -> Path:
    # Every path lives under the twin's root; relative ones are taken from "/".
    return Path("/") / path


def _apply(buf: bytearray, op: tuple[str, int, bytes]) -> None:
    kind, at, chunk = op
    if kind == "t":
        if at < len(buf):
            del buf[at:]
        else:
            buf.extend(bytes(at - len(buf)))
        return
    if len(buf) < at:
        buf.extend(bytes(at - len(buf)))
    buf[at : at + len(chunk)] = chunk


class _MemFile:
    """An open handle: keeps writing to its inode even after unlink, like a real fd."""

    def __init__(self, fs: FaultFs, path: Path, node: _File) -> None:
        self.fs = fs
        self.path = path
        self.node = node

    def write_at(self, data: bytes | memoryview, offset: int) -> int:
        gate = self.fs.write_gate
        if gate is not None:
            gate.wait()  # outside the lock: other threads keep going while this one is held
        before = self.fs.before_write
        if before is not None:
            before(self.path, offset, bytes(data))  # outside the lock: may block
        with self.fs._lock:
            self.fs._check()
            self.fs.writes += 1
            fault = self.fs._write_fault(self.path, offset, data)
            if fault is not None:
                return self._faulty_write(data, offset, fault)
            n = self.fs._write_len(self.path, len(data))
            chunk = bytes(data[:n])
            op = ("w", offset, chunk)
            _apply(self.node.data, op)
            self.node.pending.append(op)
            self.fs._after_mutation()
            if n < len(data) and self.fs.tear_mode == "raise":
                raise OSError(errno.EIO, f"injected torn write on {self.path}")
            return n

    def _faulty_write(self, data: bytes | memoryview, offset: int, fault: WriteFault) -> int:
        """Under the lock: apply an injected write fault (see `WriteFault`)."""
        keep = max(0, min(fault.keep, len(data)))
        if keep == 0 and not fault.short:
            raise OSError(
                fault.errno, f"injected {errno.errorcode.get(fault.errno)} on {self.path}"
            )
        op = ("w", offset, bytes(data[:keep]))
        _apply(self.node.data, op)
        self.node.pending.append(op)
        self.fs._after_mutation()
        if fault.short and keep > 0:
            return keep
        raise OSError(fault.errno, f"injected torn write ({keep} bytes) on {self.path}")

    def read_at(self, size: int, offset: int) -> bytes:
        with self.fs._lock:
            self.fs._check()
            return bytes(self.node.data[offset : offset + size])

    def sync(self) -> None:
        with self.fs._lock:
            self.fs._check()
            self.fs.syncs += 1
            code = self.fs._sync_fault(self.path)
            if code is not None:
                if self.fs.lose_on_failed_sync:
                    self.node.pending.clear()
                raise OSError(code, f"injected fsync failure on {self.path}")
            if self.fs.syncs in self.fs.fail_syncs:
                if self.fs.lose_on_failed_sync:
                    # Linux marks the pages clean after failed writeback: reads still see
                    # the data, the disk never will, and the next fsync does not retry it.
                    self.node.pending.clear()
                raise OSError(errno.EIO, f"injected fsync failure on {self.path}")
            buf = bytearray(self.node.durable)
            for op in self.node.pending:
                _apply(buf, op)
            self.node.durable = bytes(buf)
            self.node.pending.clear()
            self.fs._after_mutation()

    def truncate(self, size: int) -> None:
        with self.fs._lock:
            self.fs._check()
            op = ("t", size, b"")
            _apply(self.node.data, op)
            self.node.pending.append(op)
            self.fs._after_mutation()

    def size(self) -> int:
        with self.fs._lock:
            self.fs._check()
            return len(self.node.data)

    def close(self) -> None:
        pass


class FaultFs:
    def __init__(self) -> None:
        self._lock = threading.RLock()
        self.root = _Dir()
        self.mutations = 0
        self.writes = 0  # write_at calls, 1-based numbering for fail_writes/tear_writes
        self.syncs = 0  # File.sync calls
        self.creates = 0  # open(create=True) calls that made a new file
        self.dir_syncs = 0  # fsync_dir calls
        self.crash_at: int | None = None
        self.crashed = False
        self.fail_writes: set[int] = set()
        self.fail_syncs: set[int] = set()
        self.fail_creates: set[int] = set()
        self.fail_dir_syncs: set[int] = set()
        self.tear_writes: set[int] = set()
        self.tear_mode: Literal["short", "raise"] = "short"
        self.tear_keep: int | None = None  # bytes a torn write keeps (None: half)
        self.lose_on_failed_sync = False  # a failed sync drops the unsynced changes
        self.write_gate: threading.Event | None = None  # write_at waits until it is set
        self.locks: set[Path] = set()
        # Additive hooks (see the module docstring); None = off.
        self.before_write: Callable[[Path, int, bytes], None] | None = None
        self.write_fault: Callable[[Path, int, bytes], WriteFault | None] | None = None
        self.sync_fault: Callable[[Path], int | None] | None = None
        self.enospc_writes: set[int] = set()  # 1-based write_at numbers failing with ENOSPC
        self.random_faults: RandomFaults | None = None

    # ---- fault control ----
    def crash_after(self, n: int) -> None:
        """Stop the world right after the n-th mutating call (counting from 1)."""
        self.crash_at = n

    def _check(self) -> None:
        if self.crashed:
            raise Crash("the world stopped")

    def _after_mutation(self) -> None:
        self.mutations += 1
        if self.crash_at is not None and self.mutations >= self.crash_at:
            self.crashed = True
            raise Crash(f"stopped after mutating call {self.mutations}")

    def _write_fault(self, path: Path, offset: int, data: bytes | memoryview) -> WriteFault | None:
        if self.writes in self.enospc_writes:
            return WriteFault(errno=errno.ENOSPC)
        if self.write_fault is not None:
            fault = self.write_fault(path, offset, bytes(data))
            if fault is not None:
                return fault
        if self.random_faults is not None:
            return self.random_faults.write_fault(path, offset, bytes(data))
        return None

    def _sync_fault(self, path: Path) -> int | None:
        if self.sync_fault is not None:
            code = self.sync_fault(path)
            if code is not None:
                return code
        if self.random_faults is not None:
            return self.random_faults.sync_fault(path)
        return None

    def _write_len(self, path: Path, size: int) -> int:
        if self.writes in self.fail_writes:
            raise OSError(errno.EIO, f"injected write failure on {path}")
        if self.writes in self.tear_writes and size > 1:
            keep = size // 2 if self.tear_keep is None else self.tear_keep
            return max(0, min(keep, size - 1))
        return size

    # ---- namespace ----
    def _dir(self, path: Path) -> _Dir | None:
        node: _File | _Dir = self.root
        for part in _norm(path).parts[1:]:
            if not isinstance(node, _Dir) or part not in node.entries:
                return None
            node = node.entries[part]
        return node if isinstance(node, _Dir) else None

    def _lookup(self, path: Path) -> _File | _Dir | None:
        p = _norm(path)
        if p == Path("/"):
            return self.root
        parent = self._dir(p.parent)
        return None if parent is None else parent.entries.get(p.name)

    def _parent(self, path: Path) -> _Dir:
        parent = self._dir(_norm(path).parent)
        if parent is None:
            raise FileNotFoundError(errno.ENOENT, "no such directory", str(_norm(path).parent))
        return parent

    # ---- Fs protocol ----
    def open(self, path: Path, *, create: bool = False) -> _MemFile:
        with self._lock:
            self._check()
            p = _norm(path)
            node = self._lookup(p)
            if isinstance(node, _Dir):
                raise IsADirectoryError(errno.EISDIR, "is a directory", str(p))
            if node is None and not create:
                raise FileNotFoundError(errno.ENOENT, "no such file", str(p))
            if node is None:
                parent = self._parent(p)
                self.creates += 1
                if self.creates in self.fail_creates:
                    raise OSError(errno.EIO, f"injected create failure on {p}")
                node = _File()
                parent.entries[p.name] = node
            handle = _MemFile(self, p, node)
            if create:
                self._after_mutation()
            return handle

    def exists(self, path: Path) -> bool:
        with self._lock:
            self._check()
            return self._lookup(path) is not None

    def is_dir(self, path: Path) -> bool:
        with self._lock:
            self._check()
            return isinstance(self._lookup(path), _Dir)

    def listdir(self, path: Path) -> list[str]:
        with self._lock:
            self._check()
            d = self._dir(path)
            return [] if d is None else sorted(d.entries)

    def mkdir(self, path: Path) -> None:
        with self._lock:
            self._check()
            node = self.root
            for part in _norm(path).parts[1:]:
                nxt = node.entries.get(part)
                if nxt is None:
                    nxt = node.entries[part] = _Dir()
                if not isinstance(nxt, _Dir):
                    raise FileExistsError(errno.EEXIST, "a file is in the way", str(path))
                node = nxt
            self._after_mutation()

    def rename(self, src: Path, dst: Path) -> None:
        with self._lock:
            self._check()
            sp, dp = _norm(src), _norm(dst)
            src_dir = self._parent(sp)
            if sp.name not in src_dir.entries:
                raise FileNotFoundError(errno.ENOENT, "no such file", str(sp))
            dst_dir = self._parent(dp)
            dst_dir.entries[dp.name] = src_dir.entries.pop(sp.name)
            self._after_mutation()

    def unlink(self, path: Path) -> None:
        with self._lock:
            self._check()
            p = _norm(path)
            parent = self._dir(p.parent)
            if parent is not None and isinstance(parent.entries.get(p.name), _File):
                del parent.entries[p.name]
            self._after_mutation()

    def rmtree(self, path: Path) -> None:
        with self._lock:
            self._check()
            p = _norm(path)
            parent = self._dir(p.parent)
            if parent is not None:
                parent.entries.pop(p.name, None)
            self._after_mutation()

    def fsync_dir(self, path: Path) -> None:
        with self._lock:
            self._check()
            d = self._dir(path)
            if d is None:
                raise FileNotFoundError(errno.ENOENT, "no such directory", str(path))
            self.dir_syncs += 1
            if self.dir_syncs in self.fail_dir_syncs:
                raise OSError(errno.EIO, f"injected directory fsync failure on {path}")
            d.durable = dict(d.entries)
            self._after_mutation()

    def read_file(self, path: Path) -> bytes:
        with self._lock:
            self._check()
            node = self._lookup(path)
            if not isinstance(node, _File):
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
        with self._lock:
            self.locks.discard(Path(str(handle)))

    def lock_held(self, path: Path) -> bool:
        with self._lock:
            return Path(path) in self.locks

    # ---- inspection for tests ----
    def durable_bytes(self, path: Path) -> bytes:
        """The synced content of a file (regardless of its entry's durability)."""
        with self._lock:
            node = self._lookup(path)
            if not isinstance(node, _File):
                raise FileNotFoundError(errno.ENOENT, "no such file", str(path))
            return node.durable

    # ---- power cut ----
    def crash_image(
        self, keep_unsynced: KeepUnsynced = "none", rng: random.Random | None = None
    ) -> FaultFs:
        """A fresh FaultFs holding what a power cut right now would leave on disk: the
        durable directory entries from the root down, each file at its synced content plus
        (`all`) every later change, or (`random`) a prefix of them, the last possibly torn."""
        rng = rng or random.Random(0)
        with self._lock:
            img = FaultFs()
            img.root = self._image_dir(self.root, keep_unsynced, rng, {})
            return img

    def process_crash_image(self) -> FaultFs:
        """A fresh FaultFs holding what a killed process leaves behind (the machine keeps
        running): every directory entry and every write, synced or not."""
        with self._lock:
            img = FaultFs()
            img.root = self._live_dir(self.root, {})
            return img

    def _live_dir(self, d: _Dir, seen: dict[int, _File]) -> _Dir:
        out = _Dir()
        for name, node in sorted(d.entries.items()):
            if isinstance(node, _Dir):
                out.entries[name] = self._live_dir(node, seen)
            else:
                if id(node) not in seen:
                    data = bytes(node.data)
                    seen[id(node)] = _File(bytearray(data), data)
                out.entries[name] = seen[id(node)]
        out.durable = dict(out.entries)
        return out

    def _image_dir(
        self, d: _Dir, keep: KeepUnsynced, rng: random.Random, seen: dict[int, _File]
    ) -> _Dir:
        out = _Dir()
        for name, node in sorted(d.durable.items()):
            if isinstance(node, _Dir):
                out.entries[name] = self._image_dir(node, keep, rng, seen)
            else:
                # A file reachable under two durable names (an unsynced rename) is one inode.
                if id(node) not in seen:
                    seen[id(node)] = _File(bytearray(self._image_content(node, keep, rng)))
                out.entries[name] = seen[id(node)]
        for node in out.entries.values():
            if isinstance(node, _File):
                node.durable = bytes(node.data)
        out.durable = dict(out.entries)
        return out

    @staticmethod
    def _image_content(node: _File, keep: KeepUnsynced, rng: random.Random) -> bytes:
        if keep == "none":
            return node.durable
        if keep == "all":
            return bytes(node.data)
        buf = bytearray(node.durable)
        k = rng.randint(0, len(node.pending))
        for i, op in enumerate(node.pending[:k]):
            kind, at, chunk = op
            if i == k - 1 and kind == "w" and len(chunk) > 1 and rng.random() < 0.5:
                op = (kind, at, chunk[: rng.randint(1, len(chunk) - 1)])  # torn writeback
            _apply(buf, op)
        return bytes(buf)
