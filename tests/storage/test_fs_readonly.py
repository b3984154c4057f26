"""The read-only seam for readers of a directory they do not own: `ReadOnlyFs` refuses
every change, and `lock_held` probes a server's lock without creating or writing it."""

from __future__ import annotations

from pathlib import Path

import pytest

from seglog.storage.datadir import LOCK_NAME, DirLocks
from seglog.storage.fs import ReadOnlyFs, RealFs


def test_read_only_fs_reads_and_refuses_every_change(tmp_path: Path) -> None:
    f = tmp_path / "f"
    f.write_bytes(b"abc")
    fs = ReadOnlyFs(RealFs())
    assert fs.read_file(f) == b"abc" and fs.file_size(f) == 3 and fs.listdir(tmp_path) == ["f"]
    assert bytes(fs.map_file(f)) == b"abc" and fs.exists(f) and fs.is_dir(tmp_path)
    refused = [
        lambda: fs.open(f),
        lambda: fs.open(tmp_path / "new", create=True),
        lambda: fs.mkdir(tmp_path / "d"),
        lambda: fs.rename(f, tmp_path / "g"),
        lambda: fs.unlink(f),
        lambda: fs.rmtree(tmp_path),
        lambda: fs.fsync_dir(tmp_path),
        lambda: fs.lock(tmp_path / LOCK_NAME, b"pid=1\n"),
    ]
    for change in refused:
        with pytest.raises(PermissionError, match="read-only reader"):
            change()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["f"] and f.read_bytes() == b"abc"


def test_lock_held_probes_without_writing(tmp_path: Path) -> None:
    fs = RealFs()
    lock = tmp_path / LOCK_NAME
    assert not fs.lock_held(lock) and not lock.exists()  # no file: nobody holds it
    locks = DirLocks.acquire(fs, tmp_path)
    before = (lock.read_bytes(), lock.stat().st_mtime_ns)
    assert fs.lock_held(lock) and ReadOnlyFs(fs).lock_held(lock)
    assert (lock.read_bytes(), lock.stat().st_mtime_ns) == before
    locks.release()
    assert not fs.lock_held(lock)
    DirLocks.acquire(fs, tmp_path).release()  # the probe left nothing behind
