"""Filter pushdown for batch reads: `seq` comparisons and `topic` equality narrow the plan.

Spark refuses a reader that implements `pushFilters` unless
`spark.sql.python.filterPushdown.enabled` is true (it defaults to false, and the query then
fails), so the statically registered `seglog` format has no pushdown; `register(spark)` turns
the setting on and replaces it with `SeglogPushdownDataSource` under the same name.

Seq bounds and topic sets are applied exactly by the range planner, so those filters are
consumed; every other filter is handed back for Spark to evaluate.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
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

from seglog.spark.offsets import SeqRange, split_ranges
from seglog.spark.online import close_client, open_client
from seglog.spark.options import MAX_SEQ, ReadOptions, is_offline, parse_read_options
from seglog.spark.partitions import to_partitions
from seglog.spark.schema import arrow_schema
from seglog.spark.source import SeglogBatchReader, SeglogDataSource, plan_batch


@dataclass(frozen=True, slots=True)
class Pushed:
    """What the pushed filters allow: seqs in [lo, hi]; topics in `topics` (None = any)."""

    lo: int = 1
    hi: int = MAX_SEQ
    topics: frozenset[str] | None = None


def _int(v: object) -> int | None:
    return v if isinstance(v, int) and not isinstance(v, bool) else None


def absorb(filters: Iterable[Filter]) -> tuple[Pushed, list[Filter]]:
    """Fold the filters the planner can apply exactly into `Pushed`; return the rest."""
    lo, hi, topics = 1, MAX_SEQ, None
    rest: list[Filter] = []
    for f in filters:
        attr = getattr(f, "attribute", None)
        if attr == ("seq",) and isinstance(
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
    return Pushed(lo, hi, topics), rest


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
        finally:
            close_client(client)
        ranges = narrow(whole, self.pushed)
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
