"""WAL-level tests reopen a writer the way recovery would, without the engine."""

from __future__ import annotations

from seglog.storage.fs import Fs
from seglog.storage.wal_files import FILE_SIZE, Position, WalGroup, seal_tail


def truncate_tails(
    fs: Fs, groups: list[WalGroup], file_size: int = FILE_SIZE
) -> dict[str, Position]:
    """Seal each group's newest file at its valid length (`seal_tail`) and fsync it;
    returns `{key: (idx, valid end)}` to pass to `Wal.open`."""
    return {
        g.key: seal_tail(fs, g.files[-1][0], g.files[-1][1], file_size, None)
        for g in groups
        if g.files
    }
