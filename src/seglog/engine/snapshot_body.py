"""Rendering a snapshot body (STORAGE §5.2) at the cost of what changed since the last one.

A snapshot lists every live record, and nearly all of them sit in sealed segments, whose
records never change except by being deleted. Rendering them again every snapshot costs
Python time per record (read the payload back from the segment, format the JSON) and, on a
big topic, stalls writers for seconds at every snapshot. So each sealed segment's slice of
a topic's `records` array is a **chunk**: the body is assembled here with the byte offsets
of every chunk known, and the next snapshot copies a chunk's bytes from the previous
snapshot file instead of rendering it again when the chunk's **signature** is unchanged:
its first and last rendered seq and a hash of its delete flags. The bytes are then exactly
what rendering would produce (the same records, the same deterministic encoder). Records
not in a sealed segment (the active tails) are always rendered.

The previous file is checked (header and body checksum) before any byte of it is reused, so
a damaged file is never propagated: its chunks are rendered instead.

Owner: `RenderCache` belongs to the engine and is used only by the snapshot writer (one at
a time, under the engine's snapshot lock).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson
import xxhash

from seglog.engine.topic import Rows
from seglog.storage.fs import Fs
from seglog.storage.snapshot import HEADER_SIZE, body_checksum_ok

log = logging.getLogger("seglog.snapshot")

ChunkKey = tuple[int, int, int]  # topic_id, segment first seq, segment last seq
Signature = tuple[int, int, int]  # first rendered seq, last rendered seq, xxh3 of dead flags


@dataclass(frozen=True, slots=True)
class Chunk:
    """A rendered chunk's place in a snapshot file: `[start, end)` absolute offsets."""

    signature: Signature
    start: int
    end: int


@dataclass
class RenderCache:
    """Where each sealed chunk of the newest snapshot lies in its file."""

    path: Path | None = None
    chunks: dict[ChunkKey, Chunk] = field(default_factory=dict)
    reused: int = 0  # chunks copied by the last snapshot (for tests and metrics)
    rendered: int = 0

    def forget(self) -> None:
        self.path, self.chunks = None, {}


@dataclass(slots=True)
class TopicRender:
    """One captured topic: its §5.2 entry without `records`, its rows (None: ephemeral),
    and the sealed segments (first, last) overlapping the rows, ascending."""

    topic_id: int
    entry: dict[str, Any]
    rows: Rows | None
    sealed: list[tuple[int, int]]
    # Renders rows[lo:hi] (payloads read back as needed); set by the capturer.
    render: Callable[[Rows, int, int], bytes] | None = None


@dataclass(slots=True)
class _Piece:
    key: ChunkKey | None  # None for the unsealed tail
    signature: Signature
    data: bytes | memoryview


def signature(rows: Rows, lo: int, hi: int) -> Signature:
    return (
        rows.first_seq + lo,
        rows.first_seq + hi - 1,
        xxhash.xxh3_64_intdigest(rows.dead[lo:hi]),
    )


def _pieces(t: TopicRender, previous: Any, cache: RenderCache) -> Iterator[_Piece]:
    """The topic's `records` chunk by chunk, lazily: the writer streams each to the file
    before the next is read or rendered, so memory holds one chunk, not the body."""
    rows = t.rows
    assert rows is not None and t.render is not None
    n = len(rows.ts)
    at = 0
    for first, last in t.sealed:
        lo = max(first - rows.first_seq, at)
        hi = min(last - rows.first_seq + 1, n)
        if hi <= lo:
            continue
        if lo > at:  # rows before this segment that no sealed segment holds
            yield _Piece(None, signature(rows, at, lo), t.render(rows, at, lo))
        key = (t.topic_id, first, last)
        sig = signature(rows, lo, hi)
        old = cache.chunks.get(key)
        if previous is not None and old is not None and old.signature == sig:
            cache.reused += 1
            yield _Piece(key, sig, previous[old.start : old.end])
        else:
            cache.rendered += 1
            yield _Piece(key, sig, t.render(rows, lo, hi))
        at = hi
    if at < n:
        yield _Piece(None, signature(rows, at, n), t.render(rows, at, n))


def _previous(fs: Fs, cache: RenderCache) -> Any:
    """The previous snapshot file's bytes, if it is still there and intact."""
    if cache.path is None or not cache.chunks:
        return None
    try:
        buf = fs.map_file(cache.path)
    except OSError:
        cache.forget()
        return None
    if not body_checksum_ok(buf):
        log.warning("snapshot %s no longer matches its checksum; rendering it anew", cache.path)
        cache.forget()
        return None
    return buf


def body_pieces(
    fs: Fs,
    snap_id: int,
    head: dict[str, Any],
    topics: Sequence[TopicRender],
    routers: list[dict[str, Any]],
    cache: RenderCache,
    chunks: dict[ChunkKey, Chunk],
) -> Iterator[bytes]:
    """The §5.2 body (keys: `id`, `ts`, `next_topic_id`, `checkpoint`, `topics`, `routers`)
    piece by piece, for the writer to stream to the file without holding it all in memory;
    fills `chunks` with where the sealed chunks land in that file."""
    previous = _previous(fs, cache)
    cache.reused = cache.rendered = 0
    size = HEADER_SIZE  # offsets are absolute in the file
    try:
        piece = orjson.dumps({"id": snap_id, **head})[:-1] + b',"topics":['
        size += len(piece)
        yield piece
        for i, t in enumerate(topics):
            entry = orjson.dumps(t.entry)
            sep = b"" if i == 0 else b","
            if t.rows is None:  # ephemeral: its entry already says "records":[]
                size += len(sep) + len(entry)
                yield sep + entry
                continue
            piece = sep + entry[:-1] + b',"records":['
            size += len(piece)
            yield piece
            first = True
            for p in _pieces(t, previous, cache):
                if not len(p.data):
                    if p.key is not None:
                        chunks[p.key] = Chunk(p.signature, size, size)
                    continue
                if not first:
                    size += 1
                    yield b","
                first = False
                if p.key is not None:
                    chunks[p.key] = Chunk(p.signature, size, size + len(p.data))
                size += len(p.data)
                yield bytes(p.data)
            size += 2
            yield b"]}"
        yield b'],"routers":' + orjson.dumps(routers) + b"}"
    finally:
        close = getattr(previous, "close", None)
        if close is not None:
            close()
