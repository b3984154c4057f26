"""Offline reader: sealed segment files of a (stopped or running) server's data dir.

No server is involved. Topic names, ids, heads and watermarks come from the newest valid
snapshot (`meta/snapshot-*.bin`); segments are listed and read through the read-only API of
`seglog.storage.segment`, which verifies every frame's checksum (a mismatch always fails the
read). One Spark partition per segment, hot or cold tier.

What is returned is what the online source would return as of the newest snapshot, limited to
sealed segments:
- only seqs in `[earliest_live, snapshot head]`, where `earliest_live = max(base_seq, max of the
  four floors + 1)` (SEMANTICS §4.1): evicted, expired-by-watermark, trimmed and deleted-below
  prefixes are not returned;
- records with the delete flag set are skipped, and so are records TTL-expired relative to the
  time the read was planned (`now - ts > ttl_ms`);
- the active (unsealed) tail and anything written after the newest snapshot are not visible;
  read those online.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson
import pyarrow as pa
from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition
from pyspark.sql.types import StructType

from seglog.spark.errors import SeglogCorruptionError, SeglogDataLossError
from seglog.spark.options import (
    FilesOptions,
    SeglogOptionError,
    parse_data_schema,
    parse_files_options,
)
from seglog.spark.schema import arrow_schema, build_batch, data_is_text, read_schema_ddl

log = logging.getLogger("seglog.spark")

ARROW_BATCH_ROWS = 10_000
_FLOORS = ("evict_floor", "expiry_floor", "delete_floor", "source_trim_floor")


@dataclass(frozen=True, slots=True)
class TopicSnapshot:
    name: str
    topic_id: int
    live_from: int  # first seq that may be live
    head_seq: int
    ttl_ms: int


def live_from(entry: Mapping[str, Any]) -> int:
    """The earliest live seq a snapshot topic entry allows (SEMANTICS §4.1, before deletes)."""
    floor = max(int(entry.get(f, 0) or 0) for f in _FLOORS)
    return max(int(entry.get("base_seq", 1) or 1), floor + 1, 1)


def snapshot_topics(body: Mapping[str, Any], opts: FilesOptions) -> list[TopicSnapshot]:
    out: list[TopicSnapshot] = []
    for e in body.get("topics", []):
        name = str(e["name"])
        if not opts.subscription.matches(name):
            continue
        cfg = e.get("config") or {}
        out.append(
            TopicSnapshot(
                name,
                int(e["topic_id"]),
                live_from(e),
                int(e["head_seq"]),
                int(cfg.get("ttl_ms", 0) or 0),
            )
        )
    return sorted(out, key=lambda t: t.name)


@dataclass(frozen=True)
class SegmentPartition(InputPartition):  # type: ignore[misc]
    topic: str
    topic_id: int
    first_seq: int
    last_seq: int
    segment: Any  # seglog.storage.segment.SegmentInfo (picklable value object)
    lo: int
    hi: int
    ttl_ms: int
    now_ms: int


def plan_segments(opts: FilesOptions, now_ms: int) -> list[SegmentPartition]:
    from seglog.storage.fs import RealFs
    from seglog.storage.segment import list_topic_segments
    from seglog.storage.snapshot import load_latest_snapshot

    if not (opts.path / "meta").is_dir():
        raise SeglogOptionError(f"path: {opts.path} is not a seglog data directory (no meta/)")
    body = load_latest_snapshot(RealFs(), opts.path / "meta")
    if body is None:
        raise SeglogOptionError(
            f"path: no valid snapshot in {opts.path / 'meta'}; offline reads need one "
            "(the server writes one every 60 s and at shutdown)"
        )
    parts: list[SegmentPartition] = []
    topics = snapshot_topics(body, opts)
    if opts.subscription.is_explicit:
        absent = sorted(set(opts.subscription.topics) - {t.name for t in topics})
        if absent:
            raise SeglogOptionError(f"topics: {absent} not found in the snapshot of {opts.path}")
    for t in topics:
        for seg in list_topic_segments(opts.path, t.topic_id, opts.cold_path):
            if seg.last_seq < t.live_from or seg.first_seq > t.head_seq:
                continue
            parts.append(
                SegmentPartition(
                    t.name,
                    t.topic_id,
                    seg.first_seq,
                    seg.last_seq,
                    seg,
                    t.live_from,
                    t.head_seq,
                    t.ttl_ms,
                    now_ms,
                )
            )
    return parts


def _relocated(opts: FilesOptions, p: SegmentPartition) -> Any | None:
    """The segment's current location after a move between tiers, or None if it is gone."""
    from seglog.storage.segment import list_topic_segments

    for seg in list_topic_segments(opts.path, p.topic_id, opts.cold_path):
        if seg.first_seq == p.first_seq:
            return seg
    return None


def read_segment(
    opts: FilesOptions, schema: pa.Schema, p: SegmentPartition
) -> Iterator[pa.RecordBatch]:
    from seglog.core.payload_blob import decode_blob
    from seglog.core.segment_format import SegmentCorruption
    from seglog.storage.segment import iter_segment

    text = data_is_text(schema)
    include_meta = opts.include_meta
    lo, hi, ttl_ms, now_ms = p.lo, p.hi, p.ttl_ms, p.now_ms
    # plain local lists: this loop is the offline reader's hot path
    seqs: list[int] = []
    tss: list[int] = []
    tags: list[str | None] = []
    nodes: list[str | None] = []
    datas: list[Any] = []
    metas: list[str | None] = []

    def flush() -> pa.RecordBatch:
        b = build_batch(schema, p.topic, seqs, tss, tags, nodes, datas, metas)
        for v in (seqs, tss, tags, nodes, datas, metas):
            v.clear()
        return b

    seg = p.segment
    if not Path(seg.data_path).exists():
        seg = _relocated(opts, p)
        if seg is None:
            raise SeglogDataLossError(
                f"seglog offline: segment {p.first_seq}..{p.last_seq} of topic {p.topic!r} vanished "
                "after planning (dropped by retention); re-run the read"
            )
    try:
        for rec in iter_segment(seg):
            seq, ts = rec.seq, rec.ts
            if rec.deleted or seq < lo or seq > hi or (ttl_ms > 0 and now_ms - ts > ttl_ms):
                continue
            data_json, meta_json = decode_blob(rec.blob)
            seqs.append(seq)
            tss.append(ts)
            tags.append(rec.tag)
            nodes.append(rec.node)
            datas.append(bytes(data_json).decode() if text else orjson.loads(data_json))
            metas.append(
                None if meta_json is None or not include_meta else bytes(meta_json).decode()
            )
            if len(seqs) >= ARROW_BATCH_ROWS:
                yield flush()
    except SegmentCorruption as e:
        raise SeglogCorruptionError(
            f"seglog offline: corrupt segment {seg.data_path} (topic {p.topic!r}): {e}"
        ) from e
    if seqs:
        yield flush()


class SeglogFilesReader(DataSourceReader):  # type: ignore[misc]
    def __init__(self, opts: FilesOptions, schema: pa.Schema) -> None:
        self.opts = opts
        self.arrow = schema

    def partitions(self) -> Sequence[InputPartition]:
        return plan_segments(self.opts, int(time.time() * 1000))

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        if not isinstance(partition, SegmentPartition):
            return iter(())
        return read_segment(self.opts, self.arrow, partition)


class SeglogFilesDataSource(DataSource):  # type: ignore[misc]
    """`spark.read.format("seglog_files").load("<data dir>")`: batch only, no server."""

    @classmethod
    def name(cls) -> str:
        return "seglog_files"

    def schema(self) -> str:
        return read_schema_ddl(parse_data_schema(self.options))

    def reader(self, schema: StructType) -> DataSourceReader:
        return SeglogFilesReader(parse_files_options(self.options), arrow_schema(schema))
