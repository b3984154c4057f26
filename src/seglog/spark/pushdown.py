"""Filter pushdown for batch reads: `seq` and `ts` comparisons and `topic` equality narrow
the plan (online here; offline in `files.SeglogFilesPushdownReader`).

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

from collections.abc import Callable, Iterable, Sequence

import pyarrow as pa
from pyspark.sql.datasource import DataSourceReader, Filter, InputPartition
from pyspark.sql.types import StructType

from seglog.spark.filters import Pushed, absorb
from seglog.spark.offsets import Probe, SeqRange, first_seq_at_or_after, split_ranges
from seglog.spark.online import close_client, make_probe, open_client
from seglog.spark.options import (
    ReadOptions,
    is_offline,
    parse_files_options,
    parse_read_options,
)
from seglog.spark.partitions import to_partitions
from seglog.spark.schema import arrow_schema
from seglog.spark.source import SeglogBatchReader, SeglogDataSource, plan_batch

ProbeFor = Callable[[str], Probe]


def narrow_ts(ranges: Sequence[SeqRange], pushed: Pushed, probe_for: ProbeFor) -> list[SeqRange]:
    """Cut each range to the seqs whose `ts` can be in [ts_lo, ts_hi]: binary searches with
    one-record reads (`probe_for(topic)`), O(log n) each."""
    if pushed.ts_lo is None and pushed.ts_hi is None:
        return list(ranges)
    out: list[SeqRange] = []
    for r in ranges:
        probe = probe_for(r.topic)
        after, upto = r.after, r.upto
        # Only ever narrower: the seq bounds were consumed, Spark does not check them again.
        if pushed.ts_lo is not None:
            after = max(after, first_seq_at_or_after(pushed.ts_lo, after + 1, upto, probe) - 1)
        if pushed.ts_hi is not None and upto > after:
            upto = min(upto, first_seq_at_or_after(pushed.ts_hi + 1, after + 1, upto, probe) - 1)
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
            from seglog.spark.files import SeglogFilesPushdownReader

            return SeglogFilesPushdownReader(
                parse_files_options(self.options), arrow_schema(schema)
            )
        return SeglogPushdownReader(
            parse_read_options(self.options, streaming=False), arrow_schema(schema)
        )
