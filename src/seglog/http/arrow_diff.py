"""The columnar form of diff (API §13.1): the records of one read as an Arrow IPC stream,
for readers that want columns (Spark, pandas, polars) rather than JSON objects.

Columns: `seq` int64, `ts` int64 (ms), `node` utf8 (nullable), `tag` utf8 (nullable; only
with `include_tags`), `data` utf8 (the record's JSON text exactly as stored), `meta` utf8
(nullable JSON text; only with `include_meta`). Every scalar field of the JSON response
travels as one JSON object under the schema metadata key `seglog`; an empty read is a
stream with the schema and no batch. pyarrow is imported on first use: it is heavy, and
most servers never get this `Accept`.
"""

from __future__ import annotations

from typing import Any

from seglog.model import ReadResult

ARROW_STREAM = "application/vnd.apache.arrow.stream"


def wants_arrow(accept: str | None) -> bool:
    """Whether an `Accept` header names the Arrow stream type (parameters ignored)."""
    if not accept:
        return False
    return any(part.split(";", 1)[0].strip().lower() == ARROW_STREAM for part in accept.split(","))


def encode_arrow_diff(
    res: ReadResult, include_tags: bool, include_meta: bool, scalars: bytes
) -> bytes:
    """One IPC stream: the schema (with `scalars` under `seglog`) and at most one batch."""
    import pyarrow as pa

    recs = res.records
    fields: list[Any] = [
        pa.field("seq", pa.int64(), nullable=False),
        pa.field("ts", pa.int64(), nullable=False),
        pa.field("node", pa.string()),
    ]
    columns: list[Any] = [
        pa.array([r.seq for r in recs], pa.int64()),
        pa.array([r.ts for r in recs], pa.int64()),
        pa.array([r.node for r in recs], pa.string()),
    ]
    if include_tags:
        fields.append(pa.field("tag", pa.string()))
        columns.append(pa.array([r.tag for r in recs], pa.string()))
    fields.append(pa.field("data", pa.string(), nullable=False))
    columns.append(pa.array([r.data_json for r in recs], pa.string()))
    if include_meta:
        fields.append(pa.field("meta", pa.string()))
        columns.append(pa.array([r.meta_json for r in recs], pa.string()))
    schema = pa.schema(fields, metadata={b"seglog": scalars})
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, schema) as writer:
        if recs:
            writer.write_batch(pa.record_batch(columns, schema=schema))
    out: bytes = sink.getvalue().to_pybytes()
    return out
