"""The seglog sink (batch and streaming): Arrow batches → appends with idempotency keys.

Each task cuts its rows into chunks (at most `writeBatchSize` records and `writeMaxBytes`
bytes, one topic per chunk) and appends chunk `n` with the key
- batch: `spark:{writeId}:{partitionId}:{n}` (`writeId` is fixed on the driver, so every task
  attempt of one write uses the same keys), or
- streaming: `spark:{queryId}:{batchId}:{partitionId}:{n}` (`queryId` survives restarts from
  the same checkpoint), from the TaskContext local properties.
A retried task or a replayed micro-batch re-sends the same chunks under the same keys and the
server answers `deduped` instead of appending again. This holds only while (1) the task sees
the same rows in the same order (true for the seglog source and file sources, not after a
non-deterministic shuffle or from a non-replayable source), and (2) the retry arrives within
the destination topic's `idempotency_window_ms` (default 2 minutes, and dedupe state does not
survive a server restart).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import (
    DataSourceArrowWriter,
    DataSourceStreamArrowWriter,
    WriterCommitMessage,
)
from pyspark.sql.types import StructType

from seglog.spark.options import DataFormat, SeglogOptionError, WriteOptions
from seglog.spark.schema import validate_sink_columns
from seglog.spark.sink_rows import Chunk, ChunkCutter, encode_batch

log = logging.getLogger("seglog.spark")


def check_sink(schema: StructType, opts: WriteOptions, overwrite: bool) -> None:
    if overwrite:
        raise SeglogOptionError(
            "mode: seglog topics are append-only; use mode('append') (overwrite is not supported)"
        )
    validate_sink_columns(schema.fieldNames(), opts.topic)


@dataclass
class WriteResult(WriterCommitMessage):  # type: ignore[misc]
    partition_id: int
    attempt: int
    records: int = 0
    chunks: int = 0
    deduped_chunks: int = 0
    ranges: list[tuple[str, int, int]] = field(default_factory=list)


def write_partition(
    client: Any,
    batches: Iterable[pa.RecordBatch],
    opts: WriteOptions,
    key_prefix: str,
    partition_id: int,
    attempt: int,
) -> WriteResult:
    """Append every row of one task; chunk `n` carries key `{key_prefix}:{n}`.

    Chunk `n + 1` is cut while chunk `n`'s append is in flight (on a thread of its own),
    so the task's encoding overlaps the server's work; appends still go one at a time, in
    chunk order, each only after the previous one was acknowledged."""
    result = WriteResult(partition_id=partition_id, attempt=attempt)
    parse = opts.data_format is DataFormat.JSON
    cutter = ChunkCutter(opts.write_batch_size, opts.write_max_bytes)

    def chunks() -> Iterator[Chunk]:
        for b in batches:
            yield from cutter.feed(encode_batch(b, parse, opts.topic))
        yield from cutter.finish()

    def append(n: int, chunk: Chunk) -> Any:
        return client.append_encoded(
            chunk.topic,
            chunk.records_json,
            node=opts.node,
            idempotency_key=f"{key_prefix}:{n}",
            create=opts.create,
            return_seqs=False,
        )

    def settle(chunk: Chunk, sent: Future[Any]) -> None:
        res = sent.result()
        result.chunks += 1
        result.records += chunk.count
        if res.deduped:
            result.deduped_chunks += 1
        result.ranges.append((chunk.topic, int(res.first_seq), int(res.last_seq)))

    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="seglog-sink") as sender:
        in_flight: tuple[Chunk, Future[Any]] | None = None
        try:
            for n, chunk in enumerate(chunks()):
                if in_flight is not None:
                    settle(*in_flight)
                in_flight = (chunk, sender.submit(append, n, chunk))
        except BaseException as cut_error:
            # Cutting the next chunk failed: an append still in flight comes first (its
            # error, if any, is the one to report).
            if in_flight is not None and not in_flight[1].cancelled():
                failed = in_flight[1].exception()
                if failed is not None and failed is not cut_error:
                    raise failed from cut_error
            raise
        if in_flight is not None:
            settle(*in_flight)
    return result


def _task() -> tuple[Any, int, int]:
    from pyspark import TaskContext

    ctx = TaskContext.get()
    if ctx is None:
        raise RuntimeError("seglog sink: write() must run inside a Spark task")
    return ctx, int(ctx.partitionId()), int(ctx.attemptNumber())


def _run(
    opts: WriteOptions, batches: Iterator[pa.RecordBatch], prefix: str, pid: int, attempt: int
) -> WriteResult:
    from seglog.spark.online import close_client, open_client

    client = open_client(opts.conn)
    try:
        return write_partition(client, batches, opts, prefix, pid, attempt)
    finally:
        close_client(client)


def _summary(messages: Iterable[WriterCommitMessage | None]) -> str:
    ok = [m for m in messages if isinstance(m, WriteResult)]
    recs = sum(m.records for m in ok)
    dd = sum(m.deduped_chunks for m in ok)
    ch = sum(m.chunks for m in ok)
    return f"{len(ok)} tasks, {recs} records in {ch} chunks ({dd} chunks deduplicated)"


class SeglogBatchWriter(DataSourceArrowWriter):  # type: ignore[misc]
    def __init__(self, opts: WriteOptions, write_id: str) -> None:
        self.opts = opts
        self.write_id = write_id  # made once on the driver: the same in every task attempt

    def write(self, iterator: Iterator[pa.RecordBatch]) -> WriteResult:
        _, pid, attempt = _task()
        return _run(self.opts, iterator, f"spark:{self.write_id}:{pid}", pid, attempt)

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        log.info("seglog write %s committed: %s", self.write_id, _summary(messages))

    def abort(self, messages: list[WriterCommitMessage | None]) -> None:
        log.warning(
            "seglog write %s aborted after %s; appended records stay (topics are append-only)",
            self.write_id,
            _summary(messages),
        )


class SeglogStreamWriter(DataSourceStreamArrowWriter):  # type: ignore[misc]
    def __init__(self, opts: WriteOptions) -> None:
        self.opts = opts

    def write(self, iterator: Iterator[pa.RecordBatch]) -> WriteResult:
        ctx, pid, attempt = _task()
        query_id = ctx.getLocalProperty("sql.streaming.queryId")
        batch_id = ctx.getLocalProperty("streaming.sql.batchId")
        if not query_id or batch_id is None:
            raise RuntimeError(
                "seglog stream sink: the task has no streaming query id / batch id; "
                "write streams with writeStream only"
            )
        return _run(self.opts, iterator, f"spark:{query_id}:{batch_id}:{pid}", pid, attempt)

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        log.info("seglog stream batch %s committed: %s", batchId, _summary(messages))

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        log.warning("seglog stream batch %s aborted after %s", batchId, _summary(messages))
