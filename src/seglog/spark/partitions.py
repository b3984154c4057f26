"""Seq-range input partitions, shared by the batch and the streaming readers. Pickled to
executors by this module's path, so they carry only plain values."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import pyarrow as pa
from pyspark.sql.datasource import InputPartition

from seglog.spark.offsets import SeqRange
from seglog.spark.online import close_client, open_client, read_range
from seglog.spark.options import ReadOptions


@dataclass(frozen=True)
class RangePartition(InputPartition):  # type: ignore[misc]
    """Read seqs `after < seq <= upto` of `topic`."""

    topic: str
    after: int
    upto: int

    def as_range(self) -> SeqRange:
        return SeqRange(self.topic, self.after, self.upto)


def to_partitions(ranges: Sequence[SeqRange]) -> list[InputPartition]:
    return [RangePartition(r.topic, r.after, r.upto) for r in ranges]


def read_partition(
    opts: ReadOptions, schema: pa.Schema, p: RangePartition
) -> Iterator[pa.RecordBatch]:
    client = open_client(opts.conn)
    try:
        yield from read_range(
            client,
            p.as_range(),
            schema,
            fail_on_data_loss=opts.fail_on_data_loss,
            include_meta=opts.include_meta,
            page_limit=opts.page_limit,
            max_batch_bytes=opts.max_batch_bytes,
        )
    finally:
        close_client(client)
