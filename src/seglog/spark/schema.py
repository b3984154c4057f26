"""The fixed read schema, its Arrow form, record → Arrow builders and sink column rules.

Read schema (Kafka's fixed schema, seglog's fields):
`topic string, seq bigint, ts timestamp, tag string, node string, data string, meta string`.
`data` is the record's JSON text (JSON `null` is the text "null"), or, with `dataSchema`, a
struct parsed from it (a record whose data does not fit the schema gets a null `data`, as
Spark's `from_json` does in PERMISSIVE mode). `meta` is JSON text, or null when absent.

Spark checks that every Arrow batch a reader yields *equals* the Arrow form of the Spark schema
(`timestamp[us, tz=UTC]`, `string` not `large_string`), so the Arrow schema is always derived
from the Spark schema with the same function Spark uses (`to_arrow_schema(..., timezone="UTC")`).
"""

from __future__ import annotations

import base64
import datetime as dt
import decimal
from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np
import orjson
import pyarrow as pa

READ_COLUMNS = ("topic", "seq", "ts", "tag", "node", "data", "meta")
SINK_COLUMNS = frozenset({"data", "tag", "node", "meta", "topic"})


class SeglogSchemaError(ValueError):
    """A DataFrame's columns do not fit what the seglog sink can write."""


def read_schema_ddl(data_type: str | None = None) -> str:
    return (
        "topic string, seq bigint, ts timestamp, tag string, node string, "
        f"data {data_type or 'string'}, meta string"
    )


def arrow_schema(spark_schema: Any) -> pa.Schema:
    """The Arrow schema Spark expects for `spark_schema` (a pyspark StructType)."""
    from pyspark.sql.pandas.types import to_arrow_schema

    schema: pa.Schema = to_arrow_schema(spark_schema, timezone="UTC")
    return schema


def data_is_text(schema: pa.Schema) -> bool:
    return bool(pa.types.is_string(schema.field("data").type))


def _data_array(values: Sequence[Any], typ: pa.DataType) -> pa.Array:
    if pa.types.is_string(typ):
        return pa.array(values, type=typ)
    try:
        return pa.array(values, type=typ)
    except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError, ValueError, OverflowError):
        fitted: list[Any] = []
        for v in values:
            try:
                pa.array([v], type=typ)
                fitted.append(v)
            except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError, ValueError, OverflowError):
                fitted.append(None)
        return pa.array(fitted, type=typ)


def build_batch(
    schema: pa.Schema,
    topic: str,
    seqs: Sequence[int],
    ts_ms: Sequence[int],
    tags: Sequence[str | None],
    nodes: Sequence[str | None],
    data: Sequence[Any],
    metas: Sequence[str | None],
) -> pa.RecordBatch:
    """One Arrow batch in `schema`. `data` holds JSON texts when the data column is a string,
    else decoded JSON values to fit into the data column's type."""
    n = len(seqs)
    ts_type = schema.field("ts").type
    cols = [
        pa.array([topic] * n, type=schema.field("topic").type),
        pa.array(seqs, type=schema.field("seq").type),
        pa.array([t * 1000 for t in ts_ms], type=pa.int64()).cast(ts_type),
        pa.array(tags, type=schema.field("tag").type),
        pa.array(nodes, type=schema.field("node").type),
        _data_array(data, schema.field("data").type),
        pa.array(metas, type=schema.field("meta").type),
    ]
    return pa.RecordBatch.from_arrays(cols, schema=schema)


def page_batch(schema: pa.Schema, topic: str, page: pa.Table, upto: int) -> pa.RecordBatch:
    """One Arrow batch in `schema` from a columnar diff page (API §13.1 columns), cut at
    seq `upto`, column by column: no Python object per record."""
    import pyarrow.compute as pc

    seqs = page.column("seq")
    n = len(page)
    if n and seqs[n - 1].as_py() > upto:
        n = int(np.searchsorted(seqs.to_numpy(), upto, side="right"))
        page = page.slice(0, n)
    names = set(page.column_names)

    def text(name: str) -> pa.Array:
        if name not in names:
            return pa.nulls(n, pa.string())
        return _one_array(page.column(name))

    ts_ms = _one_array(page.column("ts"))
    cols = [
        pa.repeat(pa.scalar(topic, schema.field("topic").type), n),
        _one_array(page.column("seq")).cast(schema.field("seq").type),
        pc.multiply(ts_ms, 1000).cast(schema.field("ts").type),
        text("tag"),
        text("node"),
        _data_column(text("data"), schema.field("data").type),
        text("meta"),
    ]
    return pa.RecordBatch.from_arrays(cols, schema=schema)


def _one_array(column: pa.ChunkedArray) -> pa.Array:
    """`column` as one array: its chunk itself when it has one (`combine_chunks` copies
    even then, ~25 ns per 60-byte text)."""
    return column.chunk(0) if column.num_chunks == 1 else column.combine_chunks()


def _data_column(texts: pa.Array, typ: pa.DataType) -> pa.Array:
    """The `data` column: the JSON texts as they are, or parsed into `typ`."""
    if pa.types.is_string(typ):
        return texts
    if pa.types.is_struct(typ):
        try:
            return _parse_structs(texts, typ)
        except pa.ArrowNotImplementedError:
            pass  # a field type Arrow's JSON reader does not read: the per-record path
    return _data_array([None if t is None else orjson.loads(t) for t in texts.to_pylist()], typ)


def _parse_structs(texts: pa.Array, typ: pa.DataType) -> pa.Array:
    """Each text parsed into the struct `typ` by Arrow's JSON reader; a text that is not an
    object whose fields fit `typ` becomes a null row (Spark's PERMISSIVE `from_json`). A
    page parses in one call; a page holding such texts is halved until they are isolated,
    so k bad texts cost O(k log n) reader calls, not one per record."""
    if len(texts) == 0:
        return pa.array([], typ)
    parsed = _read_lines(texts, typ)
    if parsed is not None:
        return parsed
    if len(texts) == 1:
        return pa.nulls(1, typ)
    mid = len(texts) // 2
    halves = [_parse_structs(texts.slice(0, mid), typ), _parse_structs(texts.slice(mid), typ)]
    return pa.concat_arrays(halves)


def _read_lines(texts: pa.Array, typ: pa.DataType) -> pa.Array | None:
    """The texts as one NDJSON body through `pyarrow.json`, or None if any line fails."""
    import pyarrow.compute as pc
    import pyarrow.json as pajson

    # Only objects go to the reader: a top-level `null` line crashes pyarrow's JSON reader
    # (segfault, pyarrow 26), and no other non-object can fit a struct anyway.
    if texts.null_count or not pc.all(pc.starts_with(texts, "{")).as_py():
        return None
    lines = pc.binary_join_element_wise(texts, pa.scalar(""), "\n")
    _, offsets_buf, values = lines.buffers()
    offsets = np.frombuffer(offsets_buf, np.int32)[lines.offset : lines.offset + len(lines) + 1]
    body = values[int(offsets[0]) : int(offsets[-1])]
    try:
        table = pajson.read_json(
            pa.BufferReader(body),
            parse_options=pajson.ParseOptions(
                explicit_schema=pa.schema(list(typ)), unexpected_field_behavior="ignore"
            ),
        )
    except pa.ArrowInvalid:
        return None
    if len(table) != len(texts):
        return None
    parsed = table.select([f.name for f in typ]).combine_chunks()
    return pa.StructArray.from_arrays(
        [parsed.column(i).combine_chunks() for i in range(len(typ))], fields=list(typ)
    )


# ---- sink ---------------------------------------------------------------------------------


def validate_sink_columns(names: Sequence[str], topic_option: str | None) -> None:
    """Refuse a DataFrame the sink cannot write faithfully: unknown columns are an error (never
    silently dropped), `data` is required, and a topic comes from the option or a column."""
    lowered = [n.lower() for n in names]
    unknown = sorted(n for n in names if n.lower() not in SINK_COLUMNS)
    if unknown:
        raise SeglogSchemaError(
            f"seglog sink: unknown column(s) {unknown}; allowed columns are data (required), "
            "tag, node, meta, topic. Select or drop columns before writing."
        )
    if "data" not in lowered:
        raise SeglogSchemaError("seglog sink: a 'data' column is required")
    if topic_option is None and "topic" not in lowered:
        raise SeglogSchemaError(
            "seglog sink: no destination topic: set .option('topic', ...) or add a 'topic' column"
        )
    if len(set(lowered)) != len(lowered):
        raise SeglogSchemaError(f"seglog sink: duplicate column names in {list(names)}")


def _jsonable(typ: pa.DataType, value: Any) -> Any:
    """A JSON-serializable form of one Arrow value of type `typ` (maps become objects)."""
    if value is None:
        return None
    if pa.types.is_map(typ):
        return {str(k): _jsonable(typ.item_type, v) for k, v in value}
    if pa.types.is_struct(typ):
        return {f.name: _jsonable(f.type, value.get(f.name)) for f in typ}
    if pa.types.is_list(typ) or pa.types.is_large_list(typ) or pa.types.is_fixed_size_list(typ):
        return [_jsonable(typ.value_type, v) for v in value]
    if isinstance(value, decimal.Decimal):
        return float(value)
    if isinstance(value, dt.datetime | dt.date | dt.time):
        return value.isoformat()
    if isinstance(value, bytes):
        return base64.b64encode(value).decode()
    if isinstance(value, dt.timedelta):
        return value.total_seconds()
    return value


def _needs_walk(typ: pa.DataType) -> bool:
    return not (
        pa.types.is_string(typ)
        or pa.types.is_large_string(typ)
        or pa.types.is_integer(typ)
        or pa.types.is_floating(typ)
        or pa.types.is_boolean(typ)
        or pa.types.is_null(typ)
    )


def column_values(col: pa.Array | pa.ChunkedArray) -> list[Any]:
    values: list[Any] = col.to_pylist()
    if _needs_walk(col.type):
        return [_jsonable(col.type, v) for v in values]
    return values


def parse_json_column(name: str, values: Sequence[Any], parse: bool) -> list[Any]:
    """Strings holding JSON text are parsed (`parse`); others pass through as values."""
    if not parse:
        return list(values)
    out: list[Any] = []
    for i, v in enumerate(values):
        if isinstance(v, str):
            try:
                out.append(orjson.loads(v))
            except orjson.JSONDecodeError:
                raise SeglogSchemaError(
                    f"seglog sink: column {name!r} row {i} is not valid JSON: {v[:80]!r}; "
                    "use .option('dataFormat', 'text') to send strings as JSON strings"
                ) from None
        else:
            out.append(v)
    return out


def batch_records(
    batch: pa.RecordBatch, *, parse_data: bool, topic_option: str | None
) -> Iterator[tuple[str, dict[str, Any]]]:
    """(topic, append-record) pairs in row order. The `topic` option wins over a column."""
    names = {n.lower(): i for i, n in enumerate(batch.schema.names)}
    n = batch.num_rows

    def col(name: str) -> list[Any] | None:
        i = names.get(name)
        return None if i is None else column_values(batch.column(i))

    raw_data = col("data")
    assert raw_data is not None
    data_is_str = pa.types.is_string(batch.column(names["data"]).type) or pa.types.is_large_string(
        batch.column(names["data"]).type
    )
    data = parse_json_column("data", raw_data, parse_data and data_is_str)
    metas = col("meta")
    if metas is not None:
        meta_is_str = pa.types.is_string(batch.column(names["meta"]).type)
        metas = parse_json_column("meta", metas, meta_is_str)
    tags, nodes, topics = col("tag"), col("node"), col("topic")
    for i in range(n):
        rec: dict[str, Any] = {"data": data[i]}
        if tags is not None and tags[i] is not None:
            rec["tag"] = str(tags[i])
        if nodes is not None and nodes[i] is not None:
            rec["node"] = str(nodes[i])
        if metas is not None and metas[i] is not None:
            rec["meta"] = metas[i]
        topic = topic_option if topic_option is not None else (topics[i] if topics else None)
        if topic is None:
            raise SeglogSchemaError(
                f"seglog sink: row {i} has a null topic and no topic option is set"
            )
        yield str(topic), rec
