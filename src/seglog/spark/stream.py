"""Streaming reader: offsets are per-topic next seqs, kept by Spark in the checkpoint.

`initialOffset`, `latestOffset`, `partitions`, `commit` and `prepareForTriggerAvailableNow`
run in one long-lived driver-side Python process per query, so this object may keep state
across them (the AvailableNow target, the last poll time). `read()` runs on a separately
unpickled copy on an executor and uses only the partition and the options.

Owner of the state: the driver-side instance only; nothing here is shared between queries.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator, Sequence
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    SupportsTriggerAvailableNow,
)

from seglog.spark.offsets import (
    TopicOffset,
    batch_ranges,
    decode_offset,
    encode_offset,
    prorate,
    split_ranges,
)
from seglog.spark.online import TopicView, discover, open_client, report_loss, start_seq
from seglog.spark.options import ReadOptions
from seglog.spark.partitions import RangePartition, read_partition, to_partitions

log = logging.getLogger("seglog.spark")


def plan_latest(
    start: dict[str, TopicOffset],
    views: dict[str, TopicView],
    first_for_new: dict[str, int],
    budget: int | None,
) -> dict[str, TopicOffset]:
    """The end offset of the next micro-batch (pure). Topics in `views` but not in `start`
    begin at `first_for_new[t]`; a topic whose head fell below its start was recreated and
    restarts at `first_for_new[t]` too. Topics that vanished keep their position."""
    begins: dict[str, int] = {}
    firsts: dict[str, int] = {}
    for t, v in views.items():
        if t in start and v.head_seq + 1 >= start[t].next:
            begins[t] = start[t].next
        else:
            begins[t] = firsts[t] = first_for_new[t]
    avail = {t: max(0, views[t].head_seq + 1 - begins[t]) for t in views}
    take = avail if budget is None else prorate(budget, avail)
    end = {t: TopicOffset(o.next) for t, o in start.items() if t not in views}
    for t in views:
        end[t] = TopicOffset(begins[t] + take[t], firsts.get(t))
    return end


class SeglogStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):  # type: ignore[misc]
    def __init__(self, opts: ReadOptions, schema: pa.Schema) -> None:
        self.opts = opts
        self.arrow = schema
        self._client: Any = None
        self._target: dict[str, TopicView] | None = None
        self._last_poll = 0.0
        self._latest: dict[str, TopicView] = {}

    def __getstate__(self) -> dict[str, Any]:  # the executor copy needs options only
        return {"opts": self.opts, "arrow": self.arrow}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(state["opts"], state["arrow"])  # type: ignore[misc]

    # ---- driver side -------------------------------------------------------------------
    def _conn(self) -> Any:
        if self._client is None:
            self._client = open_client(self.opts.conn)
        return self._client

    def _poll(self) -> dict[str, TopicView]:
        """Current heads, at most once per `minPollIntervalMs` (Spark polls an idle source
        about 72 times a second under the default trigger)."""
        wait = self.opts.min_poll_interval_ms / 1000.0 - (time.monotonic() - self._last_poll)
        if wait > 0:
            time.sleep(wait)
        self._last_poll = time.monotonic()
        views, missing = discover(self._conn(), self.opts.subscription)
        for t in missing:
            log.info("seglog: topic %r does not exist yet; waiting for it", t)
        self._latest = views
        return views

    def initialOffset(self) -> dict[str, Any]:
        views, missing = discover(self._conn(), self.opts.subscription)
        offsets = {
            t: TopicOffset(start_seq(self._conn(), self.opts.starting, v)) for t, v in views.items()
        }
        for t in missing:  # an explicit topic created later starts at its first seq
            offsets[t] = TopicOffset(1)
        return encode_offset(offsets)

    def getDefaultReadLimit(self) -> ReadLimit:
        n = self.opts.max_records_per_trigger
        return ReadAllAvailable() if n is None else ReadMaxRows(n)

    def prepareForTriggerAvailableNow(self) -> None:
        self._target, _ = discover(self._conn(), self.opts.subscription)

    def latestOffset(self, start: dict[str, Any], limit: ReadLimit) -> dict[str, Any]:
        begin = decode_offset(start)
        views = self._target if self._target is not None else self._poll()
        first_for_new: dict[str, int] = {}
        for t, v in views.items():
            if t not in begin:  # discovered during the query: Kafka starts such at earliest
                first_for_new[t] = v.earliest_seq
            elif v.head_seq + 1 < begin[t].next:
                report_loss(
                    t, begin[t].next, begin[t].next, "recreated", self.opts.fail_on_data_loss
                )
                first_for_new[t] = v.earliest_seq
        budget = limit.max_rows if isinstance(limit, ReadMaxRows) else None
        return encode_offset(plan_latest(begin, views, first_for_new, budget))

    def reportLatestOffset(self) -> dict[str, Any] | None:
        if not self._latest:
            return None
        return encode_offset({t: TopicOffset(v.head_seq + 1) for t, v in self._latest.items()})

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> Sequence[InputPartition]:
        ranges = batch_ranges(decode_offset(start), decode_offset(end))
        return to_partitions(
            split_ranges(ranges, self.opts.max_records_per_partition, self.opts.min_partitions)
        )

    def commit(self, end: dict[str, Any]) -> None:
        """Best effort (Spark calls it lazily): log the lag per topic."""
        if not self._latest:
            return
        done = decode_offset(end)
        lag = {
            t: max(0, v.head_seq + 1 - done[t].next) for t, v in self._latest.items() if t in done
        }
        log.debug("seglog stream committed %s; lag %s", {t: o.next for t, o in done.items()}, lag)

    def stop(self) -> None:
        if self._client is not None:
            from seglog.spark.online import close_client

            close_client(self._client)
            self._client = None

    # ---- executor side -----------------------------------------------------------------
    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        if not isinstance(partition, RangePartition):
            return iter(())
        return read_partition(self.opts, self.arrow, partition)
