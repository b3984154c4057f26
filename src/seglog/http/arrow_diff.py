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

from seglog.model import PackedColumns, ReadResult

ARROW_STREAM = "application/vnd.apache.arrow.stream"


def wants_arrow(accept: str | None) -> bool:
    """Whether an `Accept` header names the Arrow stream type (parameters ignored)."""
    if not accept:
        return False
    return any(part.split(";", 1)[0].strip().lower() == ARROW_STREAM for part in accept.split(","))


def encode_arrow_diff(
    res: ReadResult, include_tags: bool, include_meta: bool, scalars: bytes
) -> bytes:
    """One IPC stream: the schema (with `scalars` under `seglog`) and at most one batch,
    from a columnar read (`Engine.read(..., columnar=True)`)."""
    import pyarrow as pa

    cols = res.columns
    if cols is None:
        raise ValueError("encode_arrow_diff needs a columnar read")
    fields: list[Any] = [
        pa.field("seq", pa.int64(), nullable=False),
        pa.field("ts", pa.int64(), nullable=False),
        pa.field("node", pa.string()),
    ]
    if isinstance(cols, PackedColumns):
        columns = _packed_columns(cols, include_tags, include_meta)
    else:
        columns = [
            pa.array(cols.seq, pa.int64()),
            pa.array(cols.ts, pa.int64()),
            pa.array(cols.node, pa.string()),
        ]
        if include_tags:
            columns.append(pa.array(cols.tag, pa.string()))
        # Stored JSON text is UTF-8 already: build binary (no per-value validation), view it.
        columns.append(pa.array(cols.data, pa.binary()).view(pa.string()))
        if include_meta:
            columns.append(pa.array(cols.meta, pa.binary()).view(pa.string()))
    if include_tags:
        fields.append(pa.field("tag", pa.string()))
    fields.append(pa.field("data", pa.string(), nullable=False))
    if include_meta:
        fields.append(pa.field("meta", pa.string()))
    schema = pa.schema(fields, metadata={b"seglog": scalars})
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, schema) as writer:
        if len(cols):
            writer.write_batch(pa.record_batch(columns, schema=schema))
    out: bytes = sink.getvalue().to_pybytes()
    return out


def _packed_columns(cols: PackedColumns, include_tags: bool, include_meta: bool) -> list[Any]:
    """The same columns from a packed read: labels decoded by one `take` over the table,
    texts copied once from the segment spans (`arrow_spans.texts_array`), no meta (a packed read has
    none)."""
    import pyarrow as pa

    from seglog.arrow_spans import texts_array

    labels = pa.array(cols.labels, pa.string())
    columns: list[Any] = [
        pa.array(cols.seq, pa.int64()),
        pa.array(cols.ts, pa.int64()),
        labels.take(pa.array(cols.node)),
    ]
    if include_tags:
        columns.append(labels.take(pa.array(cols.tag)))
    columns.append(texts_array([(run.buf, run.starts, run.ends) for run in cols.data]))
    if include_meta:
        columns.append(pa.nulls(len(cols), pa.string()))
    return columns
