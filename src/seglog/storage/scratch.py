"""Scratch memory on disk: large index columns the kernel may keep out of the process.

A topic's index holds ~10 bytes per sealed record in numpy columns (`engine.frozen_slots`).
As ordinary heap memory that is the whole of a server's memory growth at tens of millions
of records, and none of it can leave RAM. An array from `ScratchSpace.empty` is an
ordinary numpy array over a shared mapping of a file without a name, in the data
directory's `scratch/`: the kernel keeps its pages in the page cache, writes them back to
the file as it does any dirty file page, may drop them under memory pressure, and reads
them back on the next touch — the memory-mapped index of the segmented-log seeds (Kafka's
and mlog's sparse mmap indexes).
`release_resident` drops every page from the process's own mappings (`MADV_DONTNEED`;
for a shared file mapping the contents stay in the page cache), so the process holds only
the pages touched since the last call: the maintenance pass calls it periodically. A
column that grows (`grown`) maps its file anew at the larger size instead of copying it,
so growth touches no old page either.

Nothing here is ever read back after a restart: a file lives as long as its mapping (the
array's last reference) or the process. Its blocks are reserved before it is mapped (a
page of a sparse file gets its block when first written, and on a full disk that write
is a SIGBUS, not an error). Small arrays stay on the heap (a mapping per small column
would cost more than it saves), and so does whatever cannot be mapped: no file (no
`scratch/`, no space, no descriptor), or `max_maps` arrays mapped already (each holds two
file descriptors, which the WAL, segments and sockets must never run short of). The index
works the same, only in heap memory.

Thread-safe: any thread may allocate; `release_resident` may run beside readers and
writers of the arrays (a page dropped from the mapping is mapped back on its next touch).
"""

from __future__ import annotations

import logging
import mmap
import os
import resource
import shutil
import tempfile
import threading
import weakref
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

log = logging.getLogger("seglog.storage")

SCRATCH_DIR = "scratch"
MIN_BYTES = 64 << 10  # smaller arrays stay on the heap
MAX_MAPS = 16_384  # well under Linux's default vm.max_map_count (65,530)


def default_max_maps() -> int:
    """How many scratch arrays may be mapped at once: each holds two file descriptors
    (the mapping's own and the one kept to grow it), and the server's WAL, segments and
    sockets must never run out of them, so at most a quarter of the soft limit."""
    soft, _hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    budget = MAX_MAPS if soft == resource.RLIM_INFINITY else soft // 8
    return max(0, min(budget, MAX_MAPS))


class ScratchSpace:
    def __init__(
        self, directory: Path, min_bytes: int = MIN_BYTES, max_maps: int | None = None
    ) -> None:
        self.directory = directory
        self.min_bytes = min_bytes
        self.max_maps = default_max_maps() if max_maps is None else max_maps
        self._maps: weakref.WeakSet[mmap.mmap] = weakref.WeakSet()
        # the file of each scratch array, by the address of its first byte (closed when
        # that mapping goes)
        self._files: dict[int, int] = {}
        self._lock = threading.Lock()
        self._failed = False  # warned once that an array could not be mapped

    @classmethod
    def create(
        cls, root: Path, min_bytes: int = MIN_BYTES, max_maps: int | None = None
    ) -> ScratchSpace:
        """The scratch space of the data directory `root` (locked by the caller), emptied of
        whatever an earlier process left there (a file named only for a moment)."""
        directory = root / SCRATCH_DIR
        shutil.rmtree(directory, ignore_errors=True)
        directory.mkdir(parents=True, exist_ok=True)
        return cls(directory, min_bytes, max_maps)

    def empty(self, n: int, dtype: npt.DTypeLike) -> npt.NDArray[Any]:
        """An uninitialized array of `n` values, in scratch memory when it is large."""
        dt = np.dtype(dtype)
        nbytes = n * dt.itemsize
        if nbytes < max(self.min_bytes, 1) or self._full():  # nothing maps an empty file
            return np.empty(n, dt)
        try:
            # `TemporaryFile` makes a file without a name (O_TMPFILE) where the file
            # system allows it, else names it and unlinks it at once.
            with tempfile.TemporaryFile(dir=self.directory) as f:
                fd = os.dup(f.fileno())
        except OSError as e:
            self._warn(e)
            return np.empty(n, dt)
        out = self._mapped(fd, n, dt)
        if out is None:
            os.close(fd)
            return np.empty(n, dt)
        return out

    def grown(self, old: npt.NDArray[Any], used: int, n: int) -> npt.NDArray[Any]:
        """`old` (its first `used` values kept) with room for `n` values: a scratch
        array's file mapped anew at the larger size (nothing copied), else a copy."""
        with self._lock:
            fd = self._files.get(old.ctypes.data) if old.size else None
        if fd is not None and not self._full():
            try:
                kept = os.dup(fd)  # the new mapping's: the old one closes `fd` when it goes
            except OSError as e:
                self._warn(e)
            else:
                out = self._mapped(kept, n, old.dtype)
                if out is not None:
                    return out
                os.close(kept)
        out = self.empty(n, old.dtype)
        out[:used] = old[:used]
        return out

    def _mapped(self, fd: int, n: int, dt: np.dtype[Any]) -> npt.NDArray[Any] | None:
        """An array of `n` values over the file `fd` (which it then owns), or None."""
        nbytes = n * dt.itemsize
        try:
            # The blocks are reserved now: a page of a sparse file that gets its block only
            # when first written would raise SIGBUS in whichever thread touches it on a
            # full disk, instead of this OSError (then the heap serves).
            os.posix_fallocate(fd, 0, nbytes)
            m = mmap.mmap(fd, nbytes, mmap.MAP_SHARED)
        except OSError as e:
            self._warn(e)
            return None
        out: npt.NDArray[Any] = np.frombuffer(m, dt, n)
        addr = out.ctypes.data
        with self._lock:
            self._maps.add(m)
            self._files[addr] = fd
        # The array keeps `m` alive (its buffer's owner); the mapping goes when the array
        # and its views do, and then the file is closed (and, when no mapping of it is
        # left, freed).
        weakref.finalize(m, self._forget, addr, fd)
        return out

    def _full(self) -> bool:
        with self._lock:
            full = len(self._maps) >= self.max_maps
        if full:
            self._warn(OSError(f"{self.max_maps} scratch arrays mapped already"))
        return full

    def _forget(self, addr: int, fd: int) -> None:
        with self._lock:
            if self._files.get(addr) == fd:
                del self._files[addr]
        os.close(fd)

    def _warn(self, e: OSError) -> None:
        if not self._failed:
            self._failed = True
            # once: a full disk or descriptor budget would otherwise log at every seal
            log.warning("index columns stay in heap memory (%s); not logged again", e)

    def release_resident(self) -> int:
        """Drop the pages of every scratch array from this process's memory (they stay in
        the page cache). Returns the bytes of the mappings advised."""
        with self._lock:
            maps = list(self._maps)
        total = 0
        for m in maps:
            try:
                m.madvise(mmap.MADV_DONTNEED)
            except (ValueError, OSError):  # closed meanwhile
                continue
            total += len(m)
        return total

    @property
    def mapped_bytes(self) -> int:
        """The bytes of the scratch arrays alive now (their capacity, not what is used)."""
        with self._lock:
            return sum(len(m) for m in self._maps)
