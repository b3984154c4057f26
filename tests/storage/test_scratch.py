"""Scratch memory (`storage.scratch`): large arrays over unnamed files in the data dir,
whose pages can leave the process without losing a value."""

from __future__ import annotations

import errno
import gc
import logging
import os
import resource
from pathlib import Path

import numpy as np
import pytest

from seglog.storage.scratch import (
    MAX_MAPS,
    MIN_BYTES,
    SCRATCH_DIR,
    ScratchSpace,
    default_max_maps,
)

MB = 1 << 20


def rss_file_mb() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("RssFile:"):
            return int(line.split()[1]) / 1024
    raise AssertionError("no RssFile in /proc/self/status")


def test_small_arrays_stay_on_the_heap_and_large_ones_are_mapped(tmp_path: Path) -> None:
    sp = ScratchSpace.create(tmp_path)
    small = sp.empty(MIN_BYTES // 4 - 1, np.uint32)
    assert sp.mapped_bytes == 0
    big = sp.empty(MIN_BYTES // 4, np.uint32)
    assert sp.mapped_bytes == MIN_BYTES
    big[:] = np.arange(len(big), dtype=np.uint32)
    small[:] = 7
    assert int(big[-1]) == len(big) - 1 and big.dtype == np.uint32 and big.flags.writeable
    assert sp.empty(0, np.uint8).size == 0  # nothing maps an empty file: heap


def test_released_pages_leave_the_process_and_keep_their_values(tmp_path: Path) -> None:
    sp = ScratchSpace.create(tmp_path)
    a = sp.empty(64 * MB // 8, np.int64)
    before = rss_file_mb()
    a[:] = np.arange(len(a), dtype=np.int64)
    filled = rss_file_mb()
    assert filled - before > 48  # the written pages are resident, counted as file pages
    assert sp.release_resident() == 64 * MB
    assert filled - rss_file_mb() > 48
    assert np.array_equal(a, np.arange(len(a), dtype=np.int64))  # mapped back on touch


def test_a_grown_array_keeps_its_values_without_a_second_file(tmp_path: Path) -> None:
    sp = ScratchSpace.create(tmp_path)
    a = sp.empty(MIN_BYTES, np.uint8)
    a[:] = np.arange(len(a), dtype=np.uint8)
    b = sp.grown(a, len(a), 4 * len(a))
    assert len(b) == 4 * len(a)
    assert np.array_equal(b[: len(a)], a)
    a[0] = 99  # the same file under both: nothing was copied
    assert b[0] == 99
    del a
    gc.collect()
    assert sp.mapped_bytes == 4 * MIN_BYTES
    b[len(b) - 1] = 5
    c = sp.grown(b, 3, 8 * MIN_BYTES)
    assert c[:3].tolist() == [99, 1, 2] and int(c[4 * MIN_BYTES - 1]) == 5


def test_a_heap_array_grows_by_a_copy(tmp_path: Path) -> None:
    sp = ScratchSpace.create(tmp_path)
    old = np.arange(10, dtype=np.int64)
    new = sp.grown(old, 4, MIN_BYTES)  # large: the copy lands in scratch memory
    assert new[:4].tolist() == [0, 1, 2, 3] and sp.mapped_bytes == MIN_BYTES * 8


def test_files_go_with_their_arrays_and_leave_no_name(tmp_path: Path) -> None:
    sp = ScratchSpace.create(tmp_path)
    arrays = [sp.empty(MIN_BYTES, np.uint8) for _ in range(3)]
    view = arrays[0][10:20]
    assert list((tmp_path / SCRATCH_DIR).iterdir()) == []
    assert sp.mapped_bytes == 3 * MIN_BYTES
    del arrays
    gc.collect()
    assert sp.mapped_bytes == MIN_BYTES  # a view keeps its mapping
    del view
    gc.collect()
    assert sp.mapped_bytes == 0 and sp._files == {}


def test_create_clears_what_an_earlier_process_left(tmp_path: Path) -> None:
    (tmp_path / SCRATCH_DIR).mkdir()
    (tmp_path / SCRATCH_DIR / "tmpabc").write_bytes(b"x" * 100)
    ScratchSpace.create(tmp_path)
    assert list((tmp_path / SCRATCH_DIR).iterdir()) == []


def test_a_full_disk_leaves_the_arrays_on_the_heap(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Blocks are reserved before a file is mapped: no space is an error here, never a
    SIGBUS when a page is first written."""
    sp = ScratchSpace.create(tmp_path)
    kept = sp.empty(MIN_BYTES, np.uint8)
    kept[:] = 3

    def full(fd: int, offset: int, length: int) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "posix_fallocate", full)
    a = sp.empty(MIN_BYTES, np.uint8)
    b = sp.grown(kept, MIN_BYTES, 2 * MIN_BYTES)  # the remap needs blocks too: a copy
    b[MIN_BYTES:] = 4
    assert sp.mapped_bytes == MIN_BYTES  # only `kept`
    assert int(b[:MIN_BYTES].sum()) == 3 * MIN_BYTES and int(b[-1]) == 4
    a[:] = 1


def test_no_descriptor_to_grow_with_means_a_copy(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    sp = ScratchSpace.create(tmp_path)
    a = sp.empty(MIN_BYTES, np.uint8)
    a[:] = 5

    def no_fd(fd: int) -> int:
        raise OSError(errno.EMFILE, "Too many open files")

    monkeypatch.setattr(os, "dup", no_fd)
    b = sp.grown(a, MIN_BYTES, 2 * MIN_BYTES)
    assert int(b[:MIN_BYTES].sum()) == 5 * MIN_BYTES and len(b) == 2 * MIN_BYTES


def test_at_most_max_maps_arrays_are_mapped(tmp_path: Path) -> None:
    sp = ScratchSpace.create(tmp_path, max_maps=2)
    a, b, c = (sp.empty(MIN_BYTES, np.uint8) for _ in range(3))
    assert sp.mapped_bytes == 2 * MIN_BYTES  # the third is on the heap
    grown = sp.grown(a, MIN_BYTES, 2 * MIN_BYTES)  # no room for a second mapping: a copy
    assert sp.mapped_bytes == 2 * MIN_BYTES
    del a, grown
    gc.collect()
    assert sp.empty(MIN_BYTES, np.uint8) is not None and sp.mapped_bytes == 2 * MIN_BYTES
    c[:] = 1
    b[:] = 2


def test_the_budget_is_a_fraction_of_the_descriptor_limit(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(resource, "getrlimit", lambda _r: (1024, 4096))
    assert default_max_maps() == 128
    monkeypatch.setattr(resource, "getrlimit", lambda _r: (1 << 20, 1 << 20))
    assert default_max_maps() == MAX_MAPS


def test_without_a_usable_directory_arrays_stay_on_the_heap(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    sp = ScratchSpace.create(tmp_path)
    (tmp_path / SCRATCH_DIR).rmdir()
    with caplog.at_level(logging.WARNING, "seglog.storage"):
        a = sp.empty(MIN_BYTES, np.uint8)
        b = sp.empty(MIN_BYTES, np.uint8)
    a[:] = 1
    b[:] = 2
    assert sp.mapped_bytes == 0 and int(a.sum()) == MIN_BYTES
    assert len([r for r in caplog.records if "heap memory" in r.message]) == 1
