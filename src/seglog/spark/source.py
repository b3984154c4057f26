"""The `seglog` data source: batch reader, and the entry points for streaming and the sink.

Process model (PySpark 4.3): the DataSource is built and pickled in a short-lived planner
process; `partitions()` runs there; each `RangePartition` is pickled to an executor's Python
worker, which calls `read()` on an unpickled reader. So readers carry only options and the
Arrow schema, and open their HTTP client lazily in `read()`.

`option("path", dir)` without `url` switches to the offline segment-file reader (files.py);
the same reader is also registered as format `seglog_files`.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator, Sequence
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    DataSourceStreamWriter,
    DataSourceWriter,
    InputPartition,
)
from pyspark.sql.types import StructType

from seglog.spark.offsets import SeqRange, split_ranges
from seglog.spark.online import (
    close_client,
    discover,
    end_seq,
    open_client,
    start_seq,
)
from seglog.spark.options import (
    ReadOptions,
    SeglogOptionError,
    is_offline,
    parse_data_schema,
    parse_files_options,
    parse_read_options,
    parse_write_options,
)
from seglog.spark.partitions import RangePartition, read_partition, to_partitions
from seglog.spark.schema import arrow_schema, read_schema_ddl


def plan_batch(opts: ReadOptions, client: Any, *, split: bool = True) -> list[SeqRange]:
    """Resolve topics and [start, end) per topic once, on the driver, and split the ranges."""
    views, missing = discover(client, opts.subscription)
    if missing:
        raise SeglogOptionError(f"topics: topic(s) {missing} do not exist on {opts.conn.url}")
    ranges: list[SeqRange] = []
    for t in sorted(views):
        v = views[t]
        begin = start_seq(client, opts.starting, v)
        end = end_seq(client, opts.ending, v)
        if end > begin:
            ranges.append(SeqRange(t, begin - 1, end - 1))
    if not split:
        return ranges
    return split_ranges(ranges, opts.max_records_per_partition, opts.min_partitions)


class SeglogBatchReader(DataSourceReader):  # type: ignore[misc]
    def __init__(self, opts: ReadOptions, schema: pa.Schema) -> None:
        self.opts = opts
        self.arrow = schema

    def partitions(self) -> Sequence[InputPartition]:
        client = open_client(self.opts.conn)
        try:
            return to_partitions(plan_batch(self.opts, client))
        finally:
            close_client(client)

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        if not isinstance(partition, RangePartition):  # Spark's stand-in for "no partitions"
            return iter(())
        return read_partition(self.opts, self.arrow, partition)


class SeglogDataSource(DataSource):  # type: ignore[misc]
    """`spark.read/readStream/write/writeStream.format("seglog")`."""

    @classmethod
    def name(cls) -> str:
        return "seglog"

    def schema(self) -> str:
        # Only dataSchema shapes the schema; the rest is validated by reader()/writer().
        return read_schema_ddl(parse_data_schema(self.options))

    def reader(self, schema: StructType) -> DataSourceReader:
        if is_offline(self.options):
            from seglog.spark.files import SeglogFilesReader

            return SeglogFilesReader(parse_files_options(self.options), arrow_schema(schema))
        return SeglogBatchReader(
            parse_read_options(self.options, streaming=False), arrow_schema(schema)
        )

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        from seglog.spark.stream import SeglogStreamReader

        if is_offline(self.options):
            raise SeglogOptionError(
                "path: offline (segment file) reads are batch only; use url to stream"
            )
        return SeglogStreamReader(
            parse_read_options(self.options, streaming=True), arrow_schema(schema)
        )

    def writer(self, schema: StructType, overwrite: bool) -> DataSourceWriter:
        from seglog.spark.sink import SeglogBatchWriter, check_sink

        opts = parse_write_options(self.options)
        check_sink(schema, opts, overwrite)
        return SeglogBatchWriter(opts, opts.write_id or str(uuid.uuid4()))

    def streamWriter(self, schema: StructType, overwrite: bool) -> DataSourceStreamWriter:
        from seglog.spark.sink import SeglogStreamWriter, check_sink

        opts = parse_write_options(self.options)
        check_sink(schema, opts, overwrite)
        return SeglogStreamWriter(opts)
