"""The connector's I/O against a running server, through the public client only.

Shared by the batch and the streaming reader: topic discovery, resolving start/end positions
(timestamps by binary search over one-record diffs) and reading one planned `SeqRange` into
Arrow batches through the columnar diff, without a Python object per record. A range read stops at the planned end even if the head has moved on, so a
retried or replayed task returns the same rows. A tombstone inside the range is data loss.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, Protocol

import pyarrow as pa

from seglog.spark.errors import SeglogDataLossError, data_loss_message
from seglog.spark.offsets import (
    Probe,
    SeqRange,
    first_seq_at_or_after,
    resolve_end,
    resolve_start,
)
from seglog.spark.options import (
    DIFF_PAGE_BYTES,
    DIFF_PAGE_LIMIT,
    MAX_SEQ,
    ConnOptions,
    Position,
    PositionKind,
    Subscription,
)
from seglog.spark.schema import page_batch

log = logging.getLogger("seglog.spark")


class DiffClient(Protocol):
    """What a range read needs from `seglog.client.Client` (fakes implement it in tests)."""

    def diff(self, topic: str, from_seq: int = 0, **kwargs: Any) -> Any: ...

    def diff_arrow(self, topic: str, from_seq: int = 0, **kwargs: Any) -> Any: ...


class ClientLike(DiffClient, Protocol):
    """The slice of `seglog.client.Client` the planners use."""

    def get_topic(self, topic: str, touch: bool = False) -> Any: ...

    def iter_topics(self, prefix: str | None = None) -> Any: ...


@dataclass(frozen=True, slots=True)
class TopicView:
    topic: str
    earliest_seq: int
    head_seq: int


def open_client(conn: ConnOptions) -> Any:
    from seglog.client import Client

    return Client(conn.url, api_key=conn.api_key, timeout=conn.timeout_s, retries=conn.retries)


def close_client(client: Any) -> None:
    close = getattr(client, "close", None)
    if callable(close):
        close()


def _check_seq(topic: str, seq: int) -> int:
    if seq > MAX_SEQ:
        raise OverflowError(f"topic {topic!r}: seq {seq} does not fit Spark's LongType")
    return seq


def discover(client: ClientLike, sub: Subscription) -> tuple[dict[str, TopicView], list[str]]:
    """Current (earliest, head) of every subscribed topic, plus explicit topics that do not
    exist. Uses one list call for a prefix/pattern and one state call per explicit topic."""
    from seglog.client import TopicNotFound

    views: dict[str, TopicView] = {}
    missing: list[str] = []
    if sub.is_explicit:
        for t in sub.topics:
            try:
                st = client.get_topic(t, touch=False)
            except TopicNotFound:
                missing.append(t)
                continue
            views[t] = TopicView(t, int(st.earliest_seq), _check_seq(t, int(st.head_seq)))
        return views, missing
    for s in client.iter_topics(prefix=sub.list_prefix()):
        if sub.matches(s.topic):
            views[s.topic] = TopicView(
                s.topic, int(s.earliest_seq), _check_seq(s.topic, int(s.head_seq))
            )
    return views, missing


def make_probe(client: DiffClient, topic: str) -> Probe:
    def probe(after: int) -> tuple[int, int] | None:
        res = client.diff(topic, after, limit=1, include_tags=False, include_meta=False)
        for r in res.records:
            return int(r.seq), int(r.ts)
        return None

    return probe


def start_seq(client: ClientLike, position: Position, view: TopicView) -> int:
    seq = resolve_start(position, view.topic, view.earliest_seq, view.head_seq)
    if seq is None:
        assert position.timestamp_ms is not None
        seq = first_seq_at_or_after(
            position.timestamp_ms, view.earliest_seq, view.head_seq, make_probe(client, view.topic)
        )
    return seq


def end_seq(client: ClientLike, position: Position, view: TopicView) -> int:
    """Exclusive end seq for a batch read."""
    seq = resolve_end(position, view.topic, view.head_seq)
    if seq is None:
        assert position.kind is PositionKind.TIMESTAMP and position.timestamp_ms is not None
        seq = first_seq_at_or_after(
            position.timestamp_ms, view.earliest_seq, view.head_seq, make_probe(client, view.topic)
        )
    return seq


def report_loss(topic: str, gap_from: int, gap_to: int, reason: str, fail: bool) -> None:
    msg = data_loss_message(topic, gap_from, gap_to, reason)
    if fail:
        raise SeglogDataLossError(msg)
    log.warning("%s (continuing: failOnDataLoss=false)", msg)


def read_range(
    client: DiffClient,
    rng: SeqRange,
    schema: pa.Schema,
    *,
    fail_on_data_loss: bool,
    include_meta: bool = True,
    page_limit: int = DIFF_PAGE_LIMIT,
    max_batch_bytes: int = DIFF_PAGE_BYTES,
) -> Iterator[pa.RecordBatch]:
    """Page the columnar diff (API §13.1) from `rng.after` and yield the records with
    seq <= `rng.upto`, one Arrow batch per page, built column by column."""
    from seglog.client import TopicNotFound

    cursor = rng.after
    while cursor < rng.upto:
        try:
            page = client.diff_arrow(
                rng.topic,
                cursor,
                limit=min(page_limit, rng.upto - cursor),
                include_tags=True,
                include_meta=include_meta,
                max_batch_bytes=max_batch_bytes,
            )
        except TopicNotFound:
            report_loss(rng.topic, cursor + 1, rng.upto, "deleted", fail_on_data_loss)
            break
        fields = page.fields
        tomb = fields.get("tombstone")
        if tomb is not None:
            if tomb["reason"] == "recreated":
                report_loss(rng.topic, cursor + 1, rng.upto, "recreated", fail_on_data_loss)
                break
            report_loss(
                rng.topic,
                int(tomb["gap_from"]),
                min(int(tomb["gap_to"]), rng.upto),
                str(tomb["reason"]),
                fail_on_data_loss,
            )
        rows = page.table
        if len(rows):
            batch = page_batch(schema, rng.topic, rows, rng.upto)
            if batch.num_rows:
                yield batch
        nxt = int(fields["next_from_seq"])
        if nxt <= cursor and not len(rows):
            if int(fields["head_seq"]) < rng.upto:  # the head went backwards: recreated
                report_loss(rng.topic, cursor + 1, rng.upto, "recreated", fail_on_data_loss)
            break
        cursor = nxt
