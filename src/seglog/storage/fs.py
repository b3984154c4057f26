"""The filesystem seam: every disk call the storage layer makes goes through `Fs`/`File`.

Why a seam: crash and fault tests swap `RealFs` for a twin (`tests/support/faultfs.py`)
that keeps an in-memory image with a *durable* copy per file and per directory, tears
writes, fails writes or fsyncs with EIO, and can "stop the world" after any single
mutating call. Nothing in `seglog.storage` may call `os`/`open`/`mmap` directly.

Durability model the seam promises (and the twin enforces):
- `File.write_at` data is durable only after `File.sync()` (fdatasync) on that file.
- A file's *existence* (creation, rename, unlink) is durable only after `Fs.fsync_dir()`
  of its parent directory.
- `File.write_at` may write fewer bytes than asked; callers loop (`write_all_at`).
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import mmap
import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Protocol


class File(Protocol):
    path: Path

    def write_at(self, data: bytes | memoryview, offset: int) -> int:
        """Write at `offset`; returns bytes written (may be short)."""
        ...

    def read_at(self, size: int, offset: int) -> bytes: ...

    def sync(self) -> None:
        """fdatasync: make written data durable."""
        ...

    def truncate(self, size: int) -> None: ...

    def size(self) -> int: ...

    def close(self) -> None: ...


class Fs(Protocol):
    def open(self, path: Path, *, create: bool = False) -> File:
        """Open read-write (create if asked and absent)."""
        ...

    def exists(self, path: Path) -> bool: ...

    def is_dir(self, path: Path) -> bool: ...

    def listdir(self, path: Path) -> list[str]:
        """Names in a directory (unsorted); [] if it does not exist."""
        ...

    def mkdir(self, path: Path) -> None:
        """Create a directory and missing parents (no-op if it exists)."""
        ...

    def rename(self, src: Path, dst: Path) -> None:
        """Atomic rename, replacing `dst`."""
        ...

    def unlink(self, path: Path) -> None:
        """Remove a file (no error if absent)."""
        ...

    def rmtree(self, path: Path) -> None:
        """Remove a directory tree (no error if absent)."""
        ...

    def fsync_dir(self, path: Path) -> None:
        """Make creations/renames/unlinks in `path` durable."""
        ...

    def read_file(self, path: Path) -> bytes:
        """Whole-file read."""
        ...

    def map_file(self, path: Path) -> bytes | mmap.mmap:
        """Read-only view of a whole (immutable) file; mmap on real disks."""
        ...

    def file_size(self, path: Path) -> int: ...

    def lock(self, path: Path, content: bytes) -> object:
        """Take an exclusive non-blocking lock on `path`; raises `BlockingIOError` if held.
        Returns a handle; pass it to `unlock`."""
        ...

    def unlock(self, handle: object) -> None: ...

    def lock_held(self, path: Path) -> bool:
        """Whether another holder has `lock(path)`, probed without creating or writing the
        file (readers of a directory they do not own). A missing file is not held."""
        ...


def write_all_at(f: File, data: bytes | memoryview, offset: int) -> None:
    """Write every byte, looping over short writes."""
    view = memoryview(data)
    while view:
        n = f.write_at(view, offset)
        if n <= 0:
            raise OSError(errno.EIO, f"write to {f.path} made no progress")
        view = view[n:]
        offset += n


def write_synced(fs: Fs, path: Path, data: bytes | memoryview) -> None:
    """Create/overwrite `path` with `data` and fdatasync it (no rename, no dir fsync)."""
    f = fs.open(path, create=True)
    try:
        f.truncate(0)
        write_all_at(f, data, 0)
        f.sync()
    finally:
        f.close()


def write_file_durably(fs: Fs, path: Path, data: bytes | memoryview) -> None:
    """tmp → write → fsync → rename over `path` → fsync the directory: after a crash `path`
    holds either its old content or all of `data`. The one copy of this sequence."""
    tmp = path.with_name(path.name + ".tmp")
    write_synced(fs, tmp, data)
    fs.rename(tmp, path)
    fs.fsync_dir(path.parent)


@contextlib.contextmanager
def mapped_file(fs: Fs, path: Path) -> Iterator[bytes | mmap.mmap]:
    """`fs.map_file(path)` for the duration of a `with` block. Unmapping is skipped while a
    view into the map is still alive (BufferError): the map then closes when collected."""
    buf = fs.map_file(path)
    try:
        yield buf
    finally:
        close = getattr(buf, "close", None)
        if close is not None:
            with contextlib.suppress(BufferError):
                close()


class RealFile:
    __slots__ = ("_fd", "path")

    def __init__(self, path: Path, fd: int) -> None:
        self.path = path
        self._fd = fd

    def write_at(self, data: bytes | memoryview, offset: int) -> int:
        return os.pwrite(self._fd, data, offset)

    def read_at(self, size: int, offset: int) -> bytes:
        return os.pread(self._fd, size, offset)

    def sync(self) -> None:
        os.fdatasync(self._fd)

    def truncate(self, size: int) -> None:
        os.ftruncate(self._fd, size)

    def size(self) -> int:
        return os.fstat(self._fd).st_size

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1


class RealFs:
    """The production filesystem."""

    def open(self, path: Path, *, create: bool = False) -> File:
        flags = os.O_RDWR | (os.O_CREAT if create else 0) | getattr(os, "O_CLOEXEC", 0)
        return RealFile(path, os.open(path, flags, 0o644))

    def exists(self, path: Path) -> bool:
        return path.exists()

    def is_dir(self, path: Path) -> bool:
        return path.is_dir()

    def listdir(self, path: Path) -> list[str]:
        try:
            return os.listdir(path)
        except FileNotFoundError:
            return []

    def mkdir(self, path: Path) -> None:
        path.mkdir(parents=True, exist_ok=True)

    def rename(self, src: Path, dst: Path) -> None:
        os.replace(src, dst)

    def unlink(self, path: Path) -> None:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)

    def rmtree(self, path: Path) -> None:
        shutil.rmtree(path, ignore_errors=True)

    def fsync_dir(self, path: Path) -> None:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
        try:
            os.fsync(fd)
        finally:
            os.close(fd)

    def read_file(self, path: Path) -> bytes:
        with open(path, "rb") as fh:
            return fh.read()

    def map_file(self, path: Path) -> bytes | mmap.mmap:
        with open(path, "rb") as fh:
            size = os.fstat(fh.fileno()).st_size
            if size == 0:
                return b""
            return mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ)

    def file_size(self, path: Path) -> int:
        return path.stat().st_size

    def lock(self, path: Path, content: bytes) -> object:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | getattr(os, "O_CLOEXEC", 0), 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            os.close(fd)
            raise BlockingIOError(errno.EWOULDBLOCK, f"{path} is locked") from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, content, 0)
        return fd

    def lock_held(self, path: Path) -> bool:
        # A shared probe on a read-only fd: it conflicts only with the server's exclusive
        # lock and changes nothing (no create, no truncate, no mtime). It is released at
        # once, so a server starting in that instant is refused for that instant only.
        try:
            fd = os.open(path, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
        except FileNotFoundError:
            return False
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except OSError:
            return True
        finally:
            os.close(fd)  # closing the fd drops the probe lock
        return False

    def unlock(self, handle: object) -> None:
        assert isinstance(handle, int)
        with contextlib.suppress(OSError):
            fcntl.flock(handle, fcntl.LOCK_UN)
            os.close(handle)


class ReadOnlyFs:
    """An `Fs` that reads through `inner` and refuses every change (`PermissionError`).

    Readers of a directory they do not own (the offline Spark reader) go through it, so
    running recovery code over someone else's files can never cut a tail, drop a segment
    or take a lock, even by mistake."""

    def __init__(self, inner: Fs) -> None:
        self._inner = inner

    def _refuse(self, what: str, path: Path) -> PermissionError:
        return PermissionError(errno.EROFS, f"read-only reader: refused to {what}", str(path))

    def open(self, path: Path, *, create: bool = False) -> File:
        raise self._refuse("open for writing", path)

    def exists(self, path: Path) -> bool:
        return self._inner.exists(path)

    def is_dir(self, path: Path) -> bool:
        return self._inner.is_dir(path)

    def listdir(self, path: Path) -> list[str]:
        return self._inner.listdir(path)

    def mkdir(self, path: Path) -> None:
        raise self._refuse("create a directory", path)

    def rename(self, src: Path, dst: Path) -> None:
        raise self._refuse("rename", src)

    def unlink(self, path: Path) -> None:
        raise self._refuse("unlink", path)

    def rmtree(self, path: Path) -> None:
        raise self._refuse("remove", path)

    def fsync_dir(self, path: Path) -> None:
        raise self._refuse("fsync", path)

    def read_file(self, path: Path) -> bytes:
        return self._inner.read_file(path)

    def map_file(self, path: Path) -> bytes | mmap.mmap:
        return self._inner.map_file(path)

    def file_size(self, path: Path) -> int:
        return self._inner.file_size(path)

    def lock(self, path: Path, content: bytes) -> object:
        raise self._refuse("lock", path)

    def unlock(self, handle: object) -> None:
        raise PermissionError(errno.EROFS, "read-only reader: refused to unlock")

    def lock_held(self, path: Path) -> bool:
        return self._inner.lock_held(path)
