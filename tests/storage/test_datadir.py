"""Data-directory layout and lock (STORAGE §2)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from seglog.storage.datadir import (
    ColdDirInUse,
    DataDir,
    DataDirInUse,
    DirLocks,
    list_topic_ids,
    make_dirs_durably,
)
from seglog.storage.fs import RealFs


def test_open_creates_the_layout_and_writes_the_pid(tmp_path: Path) -> None:
    root, cold = tmp_path / "a" / "data", tmp_path / "cold"
    dd = DataDir.open(RealFs(), root, cold)
    try:
        assert (dd.root, dd.meta_dir, dd.wal_dir, dd.topics_dir, dd.cold_topics_dir) == (
            root, root / "meta", root / "wal", root / "topics", cold / "topics",
        )  # fmt: skip
        for d in (dd.meta_dir, dd.wal_dir, dd.topics_dir, cold / "topics"):
            assert d.is_dir()
        assert (root / ".seglog.lock").read_bytes() == f"pid={os.getpid()}\n".encode()
        assert dd.locked
    finally:
        dd.close()
    other = DataDir.open(RealFs(), tmp_path / "b")
    assert other.cold_topics_dir is None
    other.close()


def test_second_open_fails_while_held_and_succeeds_after_close(tmp_path: Path) -> None:
    root = tmp_path / "data"
    first = DataDir.open(RealFs(), root)
    with pytest.raises(DataDirInUse, match=rf"^data directory {root} is already in use$"):
        DataDir.open(RealFs(), root)
    assert (root / ".seglog.lock").read_bytes() == f"pid={os.getpid()}\n".encode()
    first.close()
    first.close()  # idempotent
    assert not first.locked
    second = DataDir.open(RealFs(), root)
    second.close()


def test_list_topic_ids(tmp_path: Path) -> None:
    fs = RealFs()
    assert list_topic_ids(fs, tmp_path / "missing") == []
    for name in ("0000000A", "00000001", "DEADBEEF", "0000000a", "000000001", "seg", "0000000G"):
        (tmp_path / name).mkdir()
    assert list_topic_ids(fs, tmp_path) == [1, 10, 0xDEADBEEF]


def test_make_dirs_durably_is_idempotent(tmp_path: Path) -> None:
    fs = RealFs()
    target = tmp_path / "x" / "y" / "z"
    make_dirs_durably(fs, target)
    make_dirs_durably(fs, target)
    assert target.is_dir()


def test_the_cold_dir_is_locked_too_and_a_held_one_leaves_nothing_locked(tmp_path: Path) -> None:
    cold = tmp_path / "cold"
    first = DataDir.open(RealFs(), tmp_path / "a", cold)
    try:
        assert (cold / ".seglog.lock").read_bytes() == f"pid={os.getpid()}\n".encode()
        with pytest.raises(ColdDirInUse, match=rf"^cold directory {cold} is already in use$"):
            DataDir.open(RealFs(), tmp_path / "b", cold)
        assert not (tmp_path / "b" / "topics").exists()  # refused before the layout
        DataDir.open(RealFs(), tmp_path / "b").close()  # b's data-dir lock was let go
    finally:
        first.close()
    DataDir.open(RealFs(), tmp_path / "b", cold).close()


def test_a_cold_dir_that_is_the_data_dir_is_refused(tmp_path: Path) -> None:
    root = tmp_path / "data"
    with pytest.raises(ColdDirInUse, match=r"is the data directory$"):
        DataDir.open(RealFs(), root, tmp_path / "x" / ".." / "data")
    DataDir.open(RealFs(), root).close()


def test_a_data_dir_adopts_locks_taken_earlier(tmp_path: Path) -> None:
    """The server locks before it listens; the engine's DataDir adopts those locks (no
    window in which the directories are unlocked) and releases them on close."""
    fs = RealFs()
    root, cold = tmp_path / "data", tmp_path / "cold"
    locks = DirLocks.acquire(fs, root, cold)
    dd = DataDir.open(fs, root, cold, locks)
    with pytest.raises(DataDirInUse):
        DataDir.open(fs, root)
    with pytest.raises(DataDirInUse):
        DirLocks.acquire(fs, tmp_path / "other", cold)
    dd.close()
    assert not locks.held
    locks.release()  # idempotent: the owner's release after the DataDir's is harmless
    DataDir.open(fs, root, cold).close()
