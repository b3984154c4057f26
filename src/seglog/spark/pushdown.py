"""Filter pushdown for batch reads: `seq` and `ts` comparisons and `topic` equality narrow
the plan.

Spark refuses a reader that implements `pushFilters` unless
`spark.sql.python.filterPushdown.enabled` is true (it defaults to false, and the query then
fails), so the statically registered `seglog` format has no pushdown; `register(spark)` turns
the setting on and replaces it with `SeglogPushdownDataSource` under the same name.

Seq bounds and topic sets are applied exactly by the range planner, so those filters are
consumed. A `ts` bound becomes a seq bound per topic by binary search (`ts` never decreases
with seq, SEMANTICS §2), so the read skips what the bound excludes; the filter is still
handed back for Spark to evaluate on the rows (it costs little and keeps the result exact
whatever the timestamp's precision). Every other filter is handed back too.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

import pyarrow as pa
from pyspark.sql.datasource import (
    DataSourceReader,
    EqualTo,
    Filter,
    GreaterThan,
    GreaterThanOrEqual,
    In,
    InputPartition,
    LessThan,
    LessThanOrEqual,
)
from pyspark.sql.types import StructType

from seglog.spark.offsets import Probe, SeqRange, first_seq_at_or_after, split_ranges
from seglog.spark.online import close_client, make_probe, open_client
from seglog.spark.options import MAX_SEQ, ReadOptions, is_offline, parse_read_options
from seglog.spark.partitions import to_partitions
from seglog.spark.schema import arrow_schema
from seglog.spark.source import SeglogBatchReader, SeglogDataSource, plan_batch

ProbeFor = Callable[[str], Probe]


@dataclass(frozen=True, slots=True)
class Pushed:
    """What the pushed filters allow: seqs in [lo, hi]; topics in `topics` (None = any);
    record `ts` (ms) in [ts_lo, ts_hi] (None = unbounded)."""

    lo: int = 1
    hi: int = MAX_SEQ
    topics: frozenset[str] | None = None
    ts_lo: int | None = None
    ts_hi: int | None = None


_EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)
_COMPARISONS = (GreaterThan, GreaterThanOrEqual, LessThan, LessThanOrEqual, EqualTo)


def _int(v: object) -> int | None:
    return v if isinstance(v, int) and not isinstance(v, bool) else None


def _micros(v: object) -> int | None:
    """Microseconds since the epoch of a timezone-aware datetime (Spark hands `timestamp`
    filter values over as such); a naive one is not pushed (its zone is unknown)."""
    if isinstance(v, dt.datetime) and v.tzinfo is not None:
        return (v - _EPOCH) // dt.timedelta(microseconds=1)
    return None


def _ts_bounds(f: Filter, lo: int | None, hi: int | None) -> tuple[int | None, int | None]:
    """Narrow the inclusive ms bounds [lo, hi] of `ts` by one comparison. A record's ts is
    whole ms, so `ts_ms * 1000 >= L` iff `ts_ms >= ceil(L / 1000)`, and `<= U` iff
    `ts_ms <= floor(U / 1000)`."""
    us = _micros(getattr(f, "value", None))
    if us is None:
        return lo, hi
    low = {GreaterThan: us + 1, GreaterThanOrEqual: us, EqualTo: us}.get(type(f))
    high = {LessThan: us - 1, LessThanOrEqual: us, EqualTo: us}.get(type(f))
    if low is not None:
        ms = -(-low // 1000)
        lo = ms if lo is None else max(lo, ms)
    if high is not None:
        ms = high // 1000
        hi = ms if hi is None else min(hi, ms)
    return lo, hi


def absorb(filters: Iterable[Filter]) -> tuple[Pushed, list[Filter]]:
    """Fold the filters the planner can apply exactly into `Pushed`; return the rest."""
    lo, hi, topics = 1, MAX_SEQ, None
    ts_lo: int | None = None
    ts_hi: int | None = None
    rest: list[Filter] = []
    for f in filters:
        attr = getattr(f, "attribute", None)
        if attr == ("ts",) and isinstance(f, _COMPARISONS):
            ts_lo, ts_hi = _ts_bounds(f, ts_lo, ts_hi)
            rest.append(f)
        elif attr == ("seq",) and isinstance(
            f, GreaterThan | GreaterThanOrEqual | LessThan | LessThanOrEqual | EqualTo
        ):
            v = _int(f.value)
            if v is None:
                rest.append(f)
            elif isinstance(f, GreaterThan):
                lo = max(lo, v + 1)
            elif isinstance(f, GreaterThanOrEqual):
                lo = max(lo, v)
            elif isinstance(f, LessThan):
                hi = min(hi, v - 1)
            elif isinstance(f, LessThanOrEqual):
                hi = min(hi, v)
            else:
                lo, hi = max(lo, v), min(hi, v)
        elif attr == ("topic",) and isinstance(f, EqualTo | In):
            values = (f.value,) if isinstance(f, EqualTo) else tuple(f.value)
            names = frozenset(v for v in values if isinstance(v, str))
            topics = names if topics is None else topics & names
        else:
            rest.append(f)
    return Pushed(lo, hi, topics, ts_lo, ts_hi), rest


def narrow_ts(ranges: Sequence[SeqRange], pushed: Pushed, probe_for: ProbeFor) -> list[SeqRange]:
    """Cut each range to the seqs whose `ts` can be in [ts_lo, ts_hi]: binary searches with
    one-record reads (`probe_for(topic)`), O(log n) each."""
    if pushed.ts_lo is None and pushed.ts_hi is None:
        return list(ranges)
    out: list[SeqRange] = []
    for r in ranges:
        probe = probe_for(r.topic)
        after, upto = r.after, r.upto
        if pushed.ts_lo is not None:
            after = first_seq_at_or_after(pushed.ts_lo, after + 1, upto, probe) - 1
        if pushed.ts_hi is not None and upto > after:
            upto = first_seq_at_or_after(pushed.ts_hi + 1, after + 1, upto, probe) - 1
        if upto > after:
            out.append(SeqRange(r.topic, after, upto))
    return out


def narrow(ranges: Sequence[SeqRange], pushed: Pushed) -> list[SeqRange]:
    """Intersect planned ranges with the pushed bounds (a range covers after < seq <= upto)."""
    out: list[SeqRange] = []
    for r in ranges:
        if pushed.topics is not None and r.topic not in pushed.topics:
            continue
        after, upto = max(r.after, pushed.lo - 1), min(r.upto, pushed.hi)
        if upto > after:
            out.append(SeqRange(r.topic, after, upto))
    return out


class SeglogPushdownReader(SeglogBatchReader):
    def __init__(self, opts: ReadOptions, schema: pa.Schema) -> None:
        super().__init__(opts, schema)
        self.pushed = Pushed()

    def pushFilters(self, filters: list[Filter]) -> Iterable[Filter]:
        self.pushed, rest = absorb(filters)
        return rest

    def partitions(self) -> Sequence[InputPartition]:
        client = open_client(self.opts.conn)
        try:
            whole = plan_batch(self.opts, client, split=False)
            ranges = narrow_ts(
                narrow(whole, self.pushed), self.pushed, lambda t: make_probe(client, t)
            )
        finally:
            close_client(client)
        return to_partitions(
            split_ranges(ranges, self.opts.max_records_per_partition, self.opts.min_partitions)
        )


class SeglogPushdownDataSource(SeglogDataSource):
    """Format `seglog` with seq/topic filter pushdown for online batch reads."""

    def reader(self, schema: StructType) -> DataSourceReader:
        if is_offline(self.options):
            return super().reader(schema)
        return SeglogPushdownReader(
            parse_read_options(self.options, streaming=False), arrow_schema(schema)
        )
