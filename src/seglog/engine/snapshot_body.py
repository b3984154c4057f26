"""Rendering a snapshot body (STORAGE §5.2, format 2 of docs/storage.md) at the cost of
what is not yet sealed.

A snapshot lists every live record, and nearly all of them sit in sealed segments:
immutable, checksummed files, written and fsynced before they were registered. Rendering
those records again every snapshot costs Python time per record and, on a big topic,
stalls writers for seconds; restoring them costs a JSON decode per record. So a sealed
segment's slice of a topic is not rendered but **referenced**: the entry's `segments`
list names the segment and the seqs of it that are dead (a bitmap). Only records in no
sealed segment (the active tails) are rendered into `records`.

The referenced segments are then the only copy of those records, so they must outlive
every snapshot that references them: `SnapshotPins` holds them from the capture until no
kept snapshot names them.
"""

from __future__ import annotations

import base64
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import orjson

from seglog.engine.topic import Rows


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


def dead_bitmap(dead: bytes | bytearray) -> str:
    """The `dead` field of a segment reference: base64 of the flags packed little-endian,
    "" when none is set."""
    flags = np.frombuffer(bytes(dead), np.uint8) != 0
    if not flags.any():
        return ""
    return base64.b64encode(np.packbits(flags, bitorder="little").tobytes()).decode("ascii")


def dead_flags(bitmap: str, n: int) -> np.ndarray[Any, np.dtype[np.bool_]]:
    """Inverse of `dead_bitmap` for `n` seqs; raises ValueError on a malformed bitmap."""
    if not bitmap:
        return np.zeros(n, np.bool_)
    packed = np.frombuffer(base64.b64decode(bitmap, validate=True), np.uint8)
    if len(packed) != (n + 7) // 8:
        raise ValueError(f"dead bitmap of {len(packed)} bytes for {n} seqs")
    return np.unpackbits(packed, count=n, bitorder="little").astype(np.bool_)


def _topic_pieces(t: TopicRender, refs: list[dict[str, Any]]) -> Iterator[bytes]:
    """The topic's rendered `records` text piece by piece, lazily (the writer streams each
    to the file before the next is rendered); fills `refs` with its segment references."""
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
            yield t.render(rows, at, lo)
        dead = rows.dead[lo:hi]
        if dead.count(0):  # a segment with no live record here is left out: holes
            refs.append(
                {
                    "segment": first,
                    "segment_last": last,
                    "first": rows.first_seq + lo,
                    "last": rows.first_seq + hi - 1,
                    "dead": dead_bitmap(dead),
                }
            )
        at = hi
    if at < n:
        yield t.render(rows, at, n)


def body_pieces(
    snap_id: int,
    head: dict[str, Any],
    topics: Sequence[TopicRender],
    routers: list[dict[str, Any]],
    referenced: set[tuple[int, int]],
) -> Iterator[bytes]:
    """The §5.2 body (keys: `id`, `ts`, `next_topic_id`, `checkpoint`, `topics`, `routers`)
    piece by piece, for the writer to stream to the file without holding it all in memory;
    fills `referenced` with `(topic_id, segment first seq)` of every segment referenced."""
    yield orjson.dumps({"id": snap_id, **head})[:-1] + b',"topics":['
    for i, t in enumerate(topics):
        entry = orjson.dumps(t.entry)
        sep = b"" if i == 0 else b","
        if t.rows is None:  # ephemeral: its entry already says "records":[]
            yield sep + entry
            continue
        yield sep + entry[:-1] + b',"records":['
        refs: list[dict[str, Any]] = []
        first = True
        for text in _topic_pieces(t, refs):
            if not text:
                continue
            yield text if first else b"," + text
            first = False
        yield b'],"segments":' + orjson.dumps(refs) + b"}"
        referenced.update((t.topic_id, r["segment"]) for r in refs)
    yield b'],"routers":' + orjson.dumps(routers) + b"}"
