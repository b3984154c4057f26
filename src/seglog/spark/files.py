"""Offline reader: a server's data dir read directly, no server involved, nothing written.

What it returns is defined by `seglog.offline` (the engine's own replay, run read-only):

- **stopped server** (no process holds `.seglog.lock`; clean stop or crash): exactly what an
  online read returns after that server restarts — newest valid snapshot + sealed segments
  + every WAL group up to its valid end (a torn tail is cut in memory, mid-WAL corruption
  fails the read), deletes, caps, floors, head reservations, TTL at planning time;
- **running server**: the state of its newest snapshot (delete flags set in sealed
  segments since then included, retention at planning time); the WAL is not read.

Partitions (planned on the driver, which replays once to learn heads and live seqs):

- `SegmentPartition`: one reused sealed segment (hot or cold) and the live seq runs in it.
  The executor reads the segment's bytes, verifying every frame's checksum (a mismatch
  always fails the read, naming the file and offset).
- `TailPartition`: the live seqs no sealed segment holds (the active tails, topics created
  after the snapshot, records only in the WAL). Their payloads are in the snapshot and the
  WAL, so the executor re-derives them by replaying the directory itself at the same point
  (snapshot id, WAL or not, `now_ms`) and checks the result against the plan. One task for
  every topic: the replay is the cost (a server start's), not the rows.
- `TailRows`: instead of a `TailPartition` when the tails hold at most
  `EMBED_TAIL_RECORDS` records in all: the driver, which has just replayed, puts one
  topic's tail records into the partition itself, saving the executor a second replay.

Partitions carry only plain values and paths: nothing depends on driver-local state.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

import numpy as np
import numpy.typing as npt
import orjson
import pyarrow as pa
from pyspark.sql.datasource import DataSource, DataSourceReader, Filter, InputPartition
from pyspark.sql.types import StructType

from seglog.spark.errors import SeglogCorruptionError, SeglogDataLossError
from seglog.spark.filters import Pushed, TopicsIn, absorb
from seglog.spark.options import (
    MAX_SEQ,
    FilesOptions,
    SeglogOptionError,
    parse_data_schema,
    parse_files_options,
)
from seglog.spark.schema import (
    arrow_schema,
    build_batch,
    data_is_text,
    page_batch,
    read_schema_ddl,
)
from seglog.spark.segment_arrow import SegmentRows, joined_table, segment_rows

log = logging.getLogger("seglog.spark")

ARROW_BATCH_ROWS = 65_536
# Segments are joined into one batch until their columns reach this many bytes (the last
# one may take it past: a segment alone holds up to its 64 MiB seal trigger).
ARROW_BATCH_BYTES = 32 << 20
# Tails of at most this many records (all topics together) travel inside the partitions;
# larger ones are re-derived by a replay on an executor.
EMBED_TAIL_RECORDS = 100_000
Ranges = tuple[tuple[int, int], ...]


@dataclass(frozen=True)
class SegmentSlice:
    first_seq: int
    last_seq: int
    segment: Any  # seglog.storage.segment.SegmentInfo (picklable value object)
    live: Ranges  # the seqs of this segment to return

    @property
    def live_count(self) -> int:
        return sum(b - a + 1 for a, b in self.live)


@dataclass(frozen=True)
class SegmentPartition(InputPartition):  # type: ignore[misc]
    """Consecutive sealed segments of one topic: up to `maxRecordsPerPartition` live
    records and `maxBytesPerPartition` bytes of segment files (a segment is never split),
    so a task's fixed cost is spread over many rows."""

    topic: str
    topic_id: int
    slices: tuple[SegmentSlice, ...]

    @property
    def first_seq(self) -> int:
        return self.slices[0].first_seq

    @property
    def last_seq(self) -> int:
        return self.slices[-1].last_seq


@dataclass(frozen=True)
class TailTopic:
    name: str
    topic_id: int
    head: int
    seqs: Ranges


@dataclass(frozen=True)
class TailRows(InputPartition):  # type: ignore[misc]
    """One topic's tail records themselves, read on the driver from its replay: a tail this
    small is cheaper to ship than to replay the directory again on an executor."""

    topic: str
    seq: tuple[int, ...]
    ts: tuple[int, ...]
    node: tuple[str | None, ...]
    tag: tuple[str | None, ...]
    data: tuple[bytes, ...]
    meta: tuple[bytes | None, ...]


@dataclass(frozen=True)
class TailPartition(InputPartition):  # type: ignore[misc]
    point: Any  # seglog.offline.Point: where the executor's replay must land
    topics: tuple[TailTopic, ...]


def plan(opts: FilesOptions, now_ms: int, pushed: Pushed | None = None) -> list[InputPartition]:
    """Replay the directory read-only and split what an online read would return into
    segment partitions and one tail partition. `pushed` filters narrow it: topics before
    the replay, seqs and `ts` (as a seq span per topic) after."""
    from seglog.offline import restrict, server_running
    from seglog.storage.snapshot import SnapshotMissingError

    if not (opts.path / "meta").is_dir():
        raise SeglogOptionError(f"path: {opts.path} is not a seglog data directory (no meta/)")
    running = server_running(opts.path)
    if running:
        if opts.require_stopped:
            raise SeglogOptionError(
                f"path: a server is running on {opts.path} (requireStopped=true); stop it, "
                "or drop the option to read as of its newest snapshot"
            )
        log.warning(
            "seglog offline: a server holds %s; reading as of its newest snapshot (records "
            "written since are not returned; read them online)",
            opts.path,
        )
    only = TopicsIn(opts.subscription.matches, None if pushed is None else pushed.topics)
    try:
        d = _open(opts, now_ms, running, only)
    except SnapshotMissingError as e:  # only if a snapshot vanished under us
        raise SeglogDataLossError(f"seglog offline: {e}; re-run the read") from e
    if running and not d.has_snapshot:
        raise SeglogOptionError(
            f"path: a server is running on {opts.path} and has no snapshot yet; read it "
            "online, or once it wrote one (every 60 s)"
        )
    views = d.topics()
    for r in d.underived():
        log.warning(
            "seglog offline: router %s is still behind its source after re-deriving its "
            "copies; the server would keep forwarding after its start",
            r,
        )
    topics = [_narrowed(d, t, pushed) for t in views if only(t.name)]
    if opts.subscription.is_explicit:
        wanted = {t for t in opts.subscription.topics if only(t)}  # not pushed out
        absent = sorted(wanted - {t.name for t in topics})
        if absent:
            raise SeglogOptionError(f"topics: {absent} not found in {opts.path}")
    parts: list[InputPartition] = []
    tails: list[TailTopic] = []
    for t in topics:
        slices = [
            SegmentSlice(
                seg.first_seq, seg.last_seq, seg, restrict(t.live, seg.first_seq, seg.last_seq)
            )
            for seg in t.segments
        ]
        parts += [
            SegmentPartition(t.name, t.topic_id, group)
            for group in group_slices(
                slices, opts.max_records_per_partition, opts.max_bytes_per_partition
            )
        ]
        if t.tail:
            tails.append(TailTopic(t.name, t.topic_id, t.head, t.tail))
    read = {s.segment.data_path for p in parts if isinstance(p, SegmentPartition) for s in p.slices}
    with _corruption_fails(opts):
        d.verify_unread(read)
    if sum(b - a + 1 for t in tails for a, b in t.seqs) <= EMBED_TAIL_RECORDS:
        parts += [_tail_rows(d, t) for t in tails]
    elif tails:
        parts.append(TailPartition(d.point, tuple(tails)))
    return parts


def group_slices(
    slices: list[SegmentSlice], records: int, size: int = MAX_SEQ
) -> list[tuple[SegmentSlice, ...]]:
    """Consecutive slices in groups of at most `records` live records and `size` bytes of
    segment files (a slice over either budget alone), in order."""
    groups: list[tuple[SegmentSlice, ...]] = []
    current: list[SegmentSlice] = []
    count = used = 0
    for s in slices:
        n, b = s.live_count, s.segment.data_bytes
        if current and (count + n > records or used + b > size):
            groups.append(tuple(current))
            current, count, used = [], 0, 0
        current.append(s)
        count += n
        used += b
    if current:
        groups.append(tuple(current))
    return groups


def _tail_rows(d: Any, t: TailTopic) -> TailRows:
    recs = list(d.records(t.name, t.topic_id, t.head, t.seqs))
    return TailRows(
        t.name,
        tuple(r.seq for r in recs),
        tuple(r.ts for r in recs),
        tuple(r.node for r in recs),
        tuple(r.tag for r in recs),
        tuple(bytes(r.data) for r in recs),
        tuple(None if r.meta is None else bytes(r.meta) for r in recs),
    )


def read_tail_rows(opts: FilesOptions, schema: pa.Schema, p: TailRows) -> Iterator[pa.RecordBatch]:
    n = len(p.seq)
    table = pa.table(
        {
            "seq": pa.array(p.seq, pa.int64()),
            "ts": pa.array(p.ts, pa.int64()),
            "node": pa.array(p.node, pa.string()),
            "tag": pa.array(p.tag, pa.string()),
            "data": pa.array(p.data, pa.binary()).view(pa.string()),
            "meta": (
                pa.array(p.meta, pa.binary()).view(pa.string())
                if opts.include_meta
                else pa.nulls(n, pa.string())
            ),
        }
    )
    for chunk in table.to_batches(max_chunksize=ARROW_BATCH_ROWS):
        yield page_batch(schema, p.topic, pa.Table.from_batches([chunk]), MAX_SEQ)


def _narrowed(d: Any, t: Any, pushed: Pushed | None) -> Any:
    """Topic view `t` cut to the seqs the pushed filters allow."""
    from seglog.offline import restrict

    if pushed is None:
        return t
    lo, hi = pushed.lo, pushed.hi
    if pushed.ts_lo is not None or pushed.ts_hi is not None:
        first, last = d.seq_span(t.name, pushed.ts_lo, pushed.ts_hi)
        lo, hi = max(lo, first), min(hi, last)
    live = restrict(t.live, lo, hi)
    segments = tuple(s for s in t.segments if restrict(live, s.first_seq, s.last_seq))
    return dataclasses.replace(t, live=live, segments=segments, tail=restrict(t.tail, lo, hi))


def _open(opts: FilesOptions, now_ms: int, running: bool, only: TopicsIn) -> Any:
    from seglog.offline import OfflineDir

    with _corruption_fails(opts):
        return OfflineDir.open(opts.path, opts.cold_path, now_ms, running=running, only=only)


@contextmanager
def _corruption_fails(opts: FilesOptions) -> Iterator[None]:
    """Damage recovery refuses on (mid-WAL corruption, a missing WAL file, a corrupt
    segment frame: the replay verifies every reused segment; a missing segment that the
    snapshot references) fails the read loudly."""
    from seglog.core.segment_format import SegmentCorruption
    from seglog.storage.snapshot import SealedSegmentMissingError
    from seglog.storage.walscan import WalCorruptionError, WalFilesMissingError

    try:
        yield
    except (WalCorruptionError, WalFilesMissingError, SealedSegmentMissingError) as e:
        raise SeglogCorruptionError(f"seglog offline: {opts.path}: {e}") from e
    except SegmentCorruption as e:
        raise SeglogCorruptionError(f"seglog offline: corrupt segment {e}") from e


class _Batches:
    """Rows collected into Arrow batches of `ARROW_BATCH_ROWS` for one topic."""

    def __init__(self, schema: pa.Schema, topic: str, include_meta: bool) -> None:
        self.schema, self.topic, self.include_meta = schema, topic, include_meta
        self.text = data_is_text(schema)
        self.cols: tuple[list[Any], ...] = ([], [], [], [], [], [])

    def add(self, seq: int, ts: int, tag: Any, node: Any, data: Any, meta: Any) -> bool:
        seqs, tss, tags, nodes, datas, metas = self.cols
        seqs.append(seq)
        tss.append(ts)
        tags.append(tag)
        nodes.append(node)
        datas.append(bytes(data).decode() if self.text else orjson.loads(data))
        metas.append(None if meta is None or not self.include_meta else bytes(meta).decode())
        return len(seqs) >= ARROW_BATCH_ROWS

    def flush(self) -> Iterator[pa.RecordBatch]:
        if self.cols[0]:
            yield build_batch(self.schema, self.topic, *self.cols)
            for v in self.cols:
                v.clear()


def _relocated(opts: FilesOptions, topic_id: int, first_seq: int) -> Any | None:
    """The segment's current location after a move between tiers, or None if it is gone."""
    from seglog.storage.segment import list_topic_segments

    for seg in list_topic_segments(opts.path, topic_id, opts.cold_path):
        if seg.first_seq == first_seq:
            return seg
    return None


def read_segment(
    opts: FilesOptions, schema: pa.Schema, p: SegmentPartition
) -> Iterator[pa.RecordBatch]:
    """The partition's live records, segment by segment, joined into batches of whole
    segments up to `ARROW_BATCH_ROWS` rows (a segment holds 10,000 records by default, and
    Spark pays per batch it takes from a Python source) or until the segments they hold
    reach `ARROW_BATCH_BYTES`; a segment larger than the row limit alone is cut at it, and
    one whose texts pass the byte limit is cut in pieces below it."""
    pending: list[SegmentRows | pa.Table] = []
    rows = size = 0
    for s in p.slices:
        read = _read_slice(opts, p, s)
        if read is None:
            continue
        for part in read.pieces(ARROW_BATCH_BYTES) if isinstance(read, SegmentRows) else [read]:
            if pending and rows + len(part) > ARROW_BATCH_ROWS:
                yield from _batches(schema, p.topic, pending)
                pending, rows, size = [], 0, 0
            pending.append(part)
            rows += len(part)
            size += part.nbytes
            if rows >= ARROW_BATCH_ROWS or size >= ARROW_BATCH_BYTES:
                yield from _batches(schema, p.topic, pending)
                pending, rows, size = [], 0, 0
    yield from _batches(schema, p.topic, pending)


def _batches(
    schema: pa.Schema, topic: str, parts: list[SegmentRows | pa.Table]
) -> Iterator[pa.RecordBatch]:
    if not parts:
        return
    if all(isinstance(x, SegmentRows) for x in parts):  # the common case: one gather
        joined = joined_table(cast("list[SegmentRows]", parts))
    else:
        tables = [
            x if isinstance(x, pa.Table) else _with_null_meta(joined_table([x])) for x in parts
        ]
        joined = tables[0] if len(tables) == 1 else pa.concat_tables(tables).combine_chunks()
    for chunk in joined.to_batches(max_chunksize=ARROW_BATCH_ROWS):
        yield page_batch(schema, topic, pa.Table.from_batches([chunk]), MAX_SEQ)


def _with_null_meta(table: pa.Table) -> pa.Table:
    return table.append_column("meta", pa.nulls(len(table), pa.string()))


def _read_slice(
    opts: FilesOptions, p: SegmentPartition, s: SegmentSlice
) -> SegmentRows | pa.Table | None:
    """The live records of one sealed segment (every frame verified, also those not
    returned): located in the segment's bytes (`segment_rows`) when every payload is in
    the sliced form, else decoded record by record into a table."""
    from seglog.core.frames import FrameError
    from seglog.core.segment_format import SegmentCorruption
    from seglog.core.segment_run import segment_columns_of
    from seglog.storage.segment import read_segment_layout

    seg = s.segment
    if not Path(seg.data_path).exists():
        seg = _relocated(opts, p.topic_id, s.first_seq)
        if seg is None:
            raise SeglogDataLossError(
                f"seglog offline: segment {s.first_seq}..{s.last_seq} of topic {p.topic!r} "
                "vanished after planning (dropped by retention); re-run the read"
            )
    try:
        data, lay = read_segment_layout(seg)
        rows = np.flatnonzero(~lay.deleted & in_ranges(lay.seq, s.live))
        picked = segment_rows(data, lay, rows)
        if picked is None:  # decoded record by record, which checks every frame
            table = _table_of_columns(segment_columns_of(data, lay), rows, opts.include_meta)
            return table if len(rows) else None
        return picked if len(rows) else None
    except (SegmentCorruption, FrameError) as e:  # a checksum-valid frame that is no record
        raise SeglogCorruptionError(
            f"seglog offline: corrupt segment {seg.data_path} (topic {p.topic!r}): {e}"
        ) from e


def _table_of_columns(cols: Any, rows: npt.NDArray[np.int64], include_meta: bool) -> pa.Table:
    """`segment_table`'s columns (and `meta`) from a segment decoded record by record."""
    return pa.table(
        {
            "seq": pa.array(cols.seq[rows]),
            "ts": pa.array(cols.ts[rows].astype(np.int64)),
            "node": pa.array(cols.node, pa.string()).take(rows),
            "tag": pa.array(cols.tag, pa.string()).take(rows),
            "data": pa.array(cols.data, pa.binary()).view(pa.string()).take(rows),
            "meta": (
                pa.array(cols.meta, pa.binary()).view(pa.string()).take(rows)
                if include_meta
                else pa.nulls(len(rows), pa.string())
            ),
        }
    )


def in_ranges(seqs: npt.NDArray[np.int64], ranges: Ranges) -> npt.NDArray[np.bool_]:
    """Which `seqs` fall in one of the inclusive, ascending `ranges`."""
    if not ranges:
        return np.zeros(len(seqs), np.bool_)
    firsts = np.array([r[0] for r in ranges], np.int64)
    lasts = np.array([r[1] for r in ranges], np.int64)
    at = np.searchsorted(firsts, seqs, side="right") - 1
    return (at >= 0) & (seqs <= lasts[np.maximum(at, 0)])


def read_tail(opts: FilesOptions, schema: pa.Schema, p: TailPartition) -> Iterator[pa.RecordBatch]:
    from seglog.offline import DirectoryChangedError, OfflineDir
    from seglog.storage.snapshot import SnapshotMissingError

    try:
        with _corruption_fails(opts):
            d = OfflineDir(opts.path, opts.cold_path, p.point)
    except SnapshotMissingError as e:
        raise SeglogDataLossError(
            f"seglog offline: {e} since planning (the server took newer ones); re-run the read"
        ) from e
    try:
        for t in p.topics:
            out = _Batches(schema, t.name, opts.include_meta)
            for r in d.records(t.name, t.topic_id, t.head, t.seqs):
                if out.add(r.seq, r.ts, r.tag, r.node, r.data, r.meta):
                    yield from out.flush()
            yield from out.flush()
    except DirectoryChangedError as e:
        raise SeglogDataLossError(f"seglog offline: {e}; re-run the read") from e


class SeglogFilesReader(DataSourceReader):  # type: ignore[misc]
    def __init__(self, opts: FilesOptions, schema: pa.Schema) -> None:
        self.opts = opts
        self.arrow = schema
        self.pushed: Pushed | None = None

    def partitions(self) -> Sequence[InputPartition]:
        return plan(self.opts, int(time.time() * 1000), self.pushed)

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        if isinstance(partition, SegmentPartition):
            return read_segment(self.opts, self.arrow, partition)
        if isinstance(partition, TailPartition):
            return read_tail(self.opts, self.arrow, partition)
        if isinstance(partition, TailRows):
            return read_tail_rows(self.opts, self.arrow, partition)
        return iter(())  # Spark's stand-in for "no partitions"


class SeglogFilesPushdownReader(SeglogFilesReader):
    """The offline reader with `seq`, `ts` and `topic` filter pushdown (`register(spark)`)."""

    def pushFilters(self, filters: list[Filter]) -> Iterable[Filter]:
        self.pushed, rest = absorb(filters)
        return rest


class SeglogFilesDataSource(DataSource):  # type: ignore[misc]
    """`spark.read.format("seglog_files").load("<data dir>")`: batch only, no server."""

    @classmethod
    def name(cls) -> str:
        return "seglog_files"

    def schema(self) -> str:
        return read_schema_ddl(parse_data_schema(self.options))

    def reader(self, schema: StructType) -> DataSourceReader:
        return SeglogFilesReader(parse_files_options(self.options), arrow_schema(schema))
