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

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import orjson

from seglog.engine.topic import Rows
from seglog.storage.snapshot import dead_bitmap


@dataclass(frozen=True, slots=True)
class SealedPart:
    """Seqs `[first, last]` of a topic's retained range that the sealed segment spanning
    `[segment, segment_last]` holds."""

    segment: int
    segment_last: int
    first: int
    last: int


@dataclass(slots=True)
class TopicRender:
    """One captured topic: its §5.2 entry without `records` and, for a persistent topic,
    its retained range from `first_seq` cut into parts, ascending: the sealed segments'
    (referenced with their slice of `dead`, the range's dead flags) and copies of the rows
    in between (rendered). Ephemeral: no parts."""

    topic_id: int
    entry: dict[str, Any]
    first_seq: int = 0
    dead: bytearray = field(default_factory=bytearray)
    parts: list[Rows | SealedPart] | None = None
    # Renders a copied part's live records; set by the capturer.
    render: Callable[[Rows], bytes] | None = None


def _topic_pieces(t: TopicRender, refs: list[dict[str, Any]]) -> Iterator[bytes]:
    """The topic's rendered `records` text piece by piece, lazily (the writer streams each
    to the file before the next is rendered); fills `refs` with its segment references."""
    assert t.parts is not None and t.render is not None
    for part in t.parts:
        if isinstance(part, Rows):
            yield t.render(part)
            continue
        dead = t.dead[part.first - t.first_seq : part.last - t.first_seq + 1]
        if dead.count(0):  # a segment with no live record here is left out: holes
            refs.append(
                {
                    "segment": part.segment,
                    "segment_last": part.segment_last,
                    "first": part.first,
                    "last": part.last,
                    "dead": dead_bitmap(dead),
                }
            )


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
        if t.parts is None:  # ephemeral: its entry already says "records":[]
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
