"""Response bodies of the topic and record routes, as bytes (API §0.4, §0.7, §2–§5).

Key order follows the API's examples, and every whole body ends with the `performance`
block (§0.7). Record payloads were encoded once, on write, with `orjson.dumps` (compact);
they are spliced back with `orjson.Fragment`, never re-encoded.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import cast

import orjson

from seglog.core import native
from seglog.http.cursors import encode_cursor
from seglog.http.wire_types import (
    DeleteResponse,
    DiffResponse,
    DiffScalars,
    DropTopicResponse,
    Performance,
    PutTopicResponse,
    TopicList,
    TopicState,
    TopicSummary,
    WriteResponse,
)
from seglog.http.wire_types import (
    Record as RecordWire,
)
from seglog.model import (
    DeleteResult,
    DropTopicResult,
    PutTopicResult,
    ReadResult,
    Record,
    RecordColumns,
    TopicInfo,
    WriteResult,
)


def _perf(total_ms: float) -> Performance:
    return {"server_total_ms": float(total_ms)}


def encode_write_result(res: WriteResult, return_seqs: bool, total_ms: float) -> bytes:
    perf: Performance = {
        "server_total_ms": float(total_ms),
        "wal_append_ms": float(res.wal_append_ms),
        "fsync_ms": float(res.fsync_ms),
    }
    body: WriteResponse
    if return_seqs:
        body = {
            "topic": res.topic,
            "first_seq": res.first_seq,
            "last_seq": res.last_seq,
            "seqs": res.seqs,
            "head_seq": res.head_seq,
            "count": res.count,
            "created": res.created,
            "deduped": res.deduped,
            "performance": perf,
        }
    else:
        body = {
            "topic": res.topic,
            "first_seq": res.first_seq,
            "last_seq": res.last_seq,
            "head_seq": res.head_seq,
            "count": res.count,
            "created": res.created,
            "deduped": res.deduped,
            "performance": perf,
        }
    return orjson.dumps(body)


def record_object(
    r: Record, include_tags: bool, include_meta: bool, include_data: bool = True
) -> RecordWire:
    """A record as API §0.4 shows it; `data`/`meta` are spliced, not re-encoded."""
    d: RecordWire = {"$seq": r.seq, "$ts": r.ts}
    if r.node is not None:
        d["$node"] = r.node
    if include_tags and r.tag is not None:
        d["$tag"] = r.tag
    if include_data:
        d["data"] = orjson.Fragment(r.data_json)
    if include_meta and r.meta_json is not None:
        d["meta"] = orjson.Fragment(r.meta_json)
    return d


def records_array(
    records: list[Record], include_tags: bool, include_meta: bool, include_data: bool = True
) -> bytes:
    """The `records` array of a diff, an SSE `record` frame or a WebSocket `record`
    message. A record with no node, tag or meta to show is formatted directly (the same
    bytes orjson gives for its `record_object`, ~30 % cheaper)."""
    parts: list[bytes] = []
    add = parts.append
    for r in records:
        if (
            include_data
            and r.node is None
            and (r.tag is None or not include_tags)
            and (r.meta_json is None or not include_meta)
        ):
            add(b'{"$seq":%d,"$ts":%d,"data":%b}' % (r.seq, r.ts, r.data_json))
        else:
            add(orjson.dumps(record_object(r, include_tags, include_meta, include_data)))
    return b"[" + b",".join(parts) + b"]"


def json_rows_py(seqs: list[int], ts: list[int], data: list[bytes]) -> bytes:
    """The JSON array of records with nothing but seq, ts and data to show (the twin of
    the C `json_rows`, which formats a page of 1,000 in ~30 µs instead of ~200 µs)."""
    return (
        b"["
        + b",".join(
            [b'{"$seq":%d,"$ts":%d,"data":%b}' % row for row in zip(seqs, ts, data, strict=True)]
        )
        + b"]"
    )


json_rows: Callable[[list[int], list[int], list[bytes]], bytes] = (
    json_rows_py if native.speedups is None else native.speedups.json_rows
)


def columns_array(cols: RecordColumns, include_tags: bool, include_meta: bool) -> bytes:
    """`records_array` for a columnar read: the same bytes, without a `Record` per row.
    Rows with nothing but seq, ts and data to show (the common case) are formatted in one
    pass; the others like `record_object`."""
    n = len(cols.seq)
    # `count` scans in C: a generator over 1,000 rows costs ~25 µs per column.
    shown_tag = include_tags and cols.tag.count(None) < n
    shown_meta = include_meta and cols.meta.count(None) < n
    if not shown_tag and not shown_meta and cols.node.count(None) == n:
        return json_rows(cols.seq, cols.ts, cols.data)
    parts: list[bytes] = []
    for seq, ts, node, tag, data, meta in zip(
        cols.seq, cols.ts, cols.node, cols.tag, cols.data, cols.meta, strict=True
    ):
        d: RecordWire = {"$seq": seq, "$ts": ts}
        if node is not None:
            d["$node"] = node
        if include_tags and tag is not None:
            d["$tag"] = tag
        d["data"] = orjson.Fragment(data)
        if include_meta and meta is not None:
            d["meta"] = orjson.Fragment(meta)
        parts.append(orjson.dumps(d))
    return b"[" + b",".join(parts) + b"]"


def read_result_fields(res: ReadResult, total_ms: float) -> DiffScalars:
    """Every field of a diff response but `records` (API §4), in the wire's order."""
    perf: Performance = {"server_total_ms": float(total_ms), "records_scanned": res.records_scanned}
    if res.cold_segments_read > 0:
        perf["cold_segments_read"] = res.cold_segments_read
    return {
        "topic": res.topic,
        "next_from_seq": res.next_from_seq,
        "head_seq": res.head_seq,
        "earliest_seq": res.earliest_seq,
        "caught_up": res.caught_up,
        "tombstone": None if res.tombstone is None else res.tombstone.to_dict(),
        "lag": res.lag,
        "performance": perf,
    }


def encode_read_result(
    res: ReadResult, include_tags: bool, include_meta: bool, total_ms: float
) -> bytes:
    f = read_result_fields(res, total_ms)
    if res.columns is not None:
        assert isinstance(res.columns, RecordColumns)  # packed reads are for Arrow only
        array = columns_array(res.columns, include_tags, include_meta)
    else:
        array = records_array(res.records, include_tags, include_meta)
    body: DiffResponse = {
        "topic": f["topic"],
        # Rendered as JSON text above: spliced in, not encoded again.
        "records": cast("list[RecordWire]", orjson.Fragment(array)),
        "next_from_seq": f["next_from_seq"],
        "head_seq": f["head_seq"],
        "earliest_seq": f["earliest_seq"],
        "caught_up": f["caught_up"],
        "tombstone": f["tombstone"],
        "lag": f["lag"],
        "performance": f["performance"],
    }
    return orjson.dumps(body)


def encode_topic_info(info: TopicInfo, total_ms: float) -> bytes:
    body: TopicState = {
        "topic": info.topic,
        "type": info.config.type.value,
        "head_seq": info.head_seq,
        "earliest_seq": info.earliest_seq,
        "next_seq": info.next_seq,
        "count": info.count,
        "bytes": info.bytes,
        "config": info.config.to_dict(),
        "effective_priority": info.effective_priority,
        "last_write_ts": info.last_write_ts,
        "last_read_ts": info.last_read_ts,
        "performance": _perf(total_ms),
    }
    queue = info.queue
    if queue is not None:
        perf = body.pop("performance")  # type: ignore[misc]  # re-added last, as on the wire
        body["queue"] = {
            "ready": queue.ready,
            "in_flight": queue.in_flight,
            "dead_lettered": queue.dead_lettered,
        }
        body["performance"] = perf
    return orjson.dumps(body)


def topic_summary(info: TopicInfo) -> TopicSummary:
    """One row of `GET /v0/topics` (API §2.3)."""
    return {
        "topic": info.topic,
        "head_seq": info.head_seq,
        "earliest_seq": info.earliest_seq,
        "count": info.count,
        "bytes": info.bytes,
        "durable": info.config.durable,
        "effective_priority": info.effective_priority,
    }


def encode_topic_summary(info: TopicInfo) -> bytes:
    return orjson.dumps(topic_summary(info))


def encode_topic_list(infos: Iterable[TopicInfo], next_after: str | None, total_ms: float) -> bytes:
    """`GET /v0/topics`; `next_cursor` only when `next_after` (last name of the page) is set."""
    topics = [topic_summary(i) for i in infos]
    body: TopicList
    if next_after is not None:
        cursor = encode_cursor(next_after)
        body = {"topics": topics, "next_cursor": cursor, "performance": _perf(total_ms)}
    else:
        body = {"topics": topics, "performance": _perf(total_ms)}
    return orjson.dumps(body)


def encode_put_topic(res: PutTopicResult, total_ms: float) -> bytes:
    body: PutTopicResponse = {
        "topic": res.topic,
        "created": res.created,
        "config": res.config.to_dict(),
        "performance": _perf(total_ms),
    }
    return orjson.dumps(body)


def encode_drop_topic(res: DropTopicResult, total_ms: float) -> bytes:
    body: DropTopicResponse = {
        "topic": res.topic,
        "deleted": res.deleted,
        "routers_removed": sorted(res.routers_removed),
        "performance": _perf(total_ms),
    }
    return orjson.dumps(body)


def encode_delete_result(res: DeleteResult, total_ms: float) -> bytes:
    body: DeleteResponse = {
        "topic": res.topic,
        "deleted": res.deleted,
        "earliest_seq": res.earliest_seq,
        "head_seq": res.head_seq,
        "count": res.count,
        "bytes": res.bytes,
        "performance": _perf(total_ms),
    }
    return orjson.dumps(body)
