"""The sink's rows as append-body text, and the cut into keyed chunks.

`encode_batch` turns one Arrow batch into the JSON text of its records (API §3 record
objects, each followed by a comma), column by column with Arrow's string kernels when the
columns allow it: `data` (and `meta`) already JSON text, `tag`/`node`/`topic` strings that
need no JSON escaping. Each JSON text is still checked to be exactly one JSON value
(a C scan over the column for the common canonical text, `orjson.loads` for the
rest): spliced unchecked, a text like `1,"tag":"x"` would add fields to its record. Any other batch takes the per-record path (`batch_records`).

`ChunkCutter` cuts the rows, in order and across batches, into single-topic chunks of at
most `max_records` records and `max_bytes` bytes (a record bigger than that travels alone):
the cut depends only on the rows, so a retried task cuts, and keys, the same chunks.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt
import orjson
import pyarrow as pa
import pyarrow.compute as pc

from seglog.core.native import json_unproven_spans
from seglog.spark.schema import SeglogSchemaError, batch_records

# What JSON strings must escape: a text holding one of these cannot be quoted as it is.
_NEEDS_ESCAPE = r'["\\\x00-\x1f]'


@dataclass(frozen=True, slots=True)
class EncodedRows:
    """Rows `i` is `text[bounds[i]:bounds[i+1]]` (a record object and a comma), for topic
    `topics` (one for every row) or `topics[i]`."""

    text: bytes
    bounds: npt.NDArray[np.int64]
    topics: str | list[str]

    def __len__(self) -> int:
        return len(self.bounds) - 1

    def topic(self, i: int) -> str:
        return self.topics if isinstance(self.topics, str) else self.topics[i]

    def topic_runs(self) -> list[int]:
        """Row indexes where a new topic starts (after row 0), and the row count."""
        if isinstance(self.topics, str):
            return [len(self)]
        t = self.topics
        return [i for i in range(1, len(t)) if t[i] != t[i - 1]] + [len(t)]


def encode_batch(batch: pa.RecordBatch, parse_data: bool, topic_option: str | None) -> EncodedRows:
    """The batch's rows as record-object text: column by column when it can, else per record."""
    rows = _columnar(batch, parse_data, topic_option)
    if rows is not None:
        return rows
    texts: list[bytes] = []
    topics: list[str] = []
    for topic, rec in batch_records(batch, parse_data=parse_data, topic_option=topic_option):
        texts.append(orjson.dumps(rec) + b",")
        topics.append(topic)
    bounds = np.zeros(len(texts) + 1, np.int64)
    np.cumsum([len(t) for t in texts], out=bounds[1:])
    one = topics[0] if topics and topic_option is not None else topics
    return EncodedRows(b"".join(texts), bounds, one)


def _string(col: pa.Array | None) -> bool:
    return col is None or pa.types.is_string(col.type)


def _escapes(col: pa.Array) -> bool:
    return bool(pc.any(pc.match_substring_regex(col, _NEEDS_ESCAPE)).as_py())


def _check_json(name: str, col: pa.Array) -> npt.NDArray[np.bool_]:
    """Each non-null value is exactly one JSON value (what the per-record path's parse
    checks), so splicing it cannot change the record around it. Returns which values are
    the JSON `null`. A C scan proves the common, canonical value (`json_unproven_spans`,
    over the column's own buffers); orjson parses the others one by one."""
    if len(col) == 0:  # may have no offsets buffer at all
        return np.zeros(0, np.bool_)
    _, offsets, values = col.buffers()
    window = np.frombuffer(offsets, np.int32)[col.offset : col.offset + len(col) + 1]
    bounds = window.astype(np.int64)
    text = values if values is not None else b""
    nulls = pc.fill_null(pc.equal(col, "null"), False).to_numpy(zero_copy_only=False)
    for i in json_unproven_spans(text, bounds[:-1], bounds[1:]):
        if not col[i].is_valid:
            continue
        value = col[i].as_py()
        try:
            nulls[i] = orjson.loads(value) is None
        except orjson.JSONDecodeError:
            raise SeglogSchemaError(
                f"seglog sink: column {name!r} row {i} is not valid JSON: {value[:80]!r}; "
                "use .option('dataFormat', 'text') to send strings as JSON strings"
            ) from None
    return nulls  # type: ignore[no-any-return]


def _columnar(
    batch: pa.RecordBatch, parse_data: bool, topic_option: str | None
) -> EncodedRows | None:
    names = {n.lower(): i for i, n in enumerate(batch.schema.names)}

    def col(name: str) -> pa.Array | None:
        i = names.get(name)
        return None if i is None else batch.column(i)

    data, meta, topic_col = col("data"), col("meta"), col("topic")
    labels = {name: col(name) for name in ("tag", "node")}
    if data is None or not all(_string(c) for c in (data, meta, topic_col, *labels.values())):
        return None
    if any(c is not None and _escapes(c) for c in labels.values()):
        return None
    if parse_data:
        _check_json("data", data)
        data_text = pc.fill_null(data, "null")
    elif _escapes(data):
        return None
    else:
        data_text = pc.fill_null(pc.binary_join_element_wise('"', data, '"', ""), "null")
    pieces: list[pa.Array | str] = ['{"data":', data_text]
    for name, c in labels.items():
        if c is not None:
            pieces.append(pc.fill_null(pc.binary_join_element_wise(f',"{name}":"', c, '"', ""), ""))
    if meta is not None:
        json_null = _check_json("meta", meta)
        if json_null.any():  # `"meta": null` is no meta: the per-record path omits it
            meta = pc.if_else(pa.array(json_null), pa.scalar(None, pa.string()), meta)
        pieces.append(pc.fill_null(pc.binary_join_element_wise(',"meta":', meta, ""), ""))
    pieces.append("},")
    rows = pc.binary_join_element_wise(*pieces, "")
    topics: str | list[str]
    if topic_option is not None:
        topics = topic_option
    else:
        assert topic_col is not None  # validate_sink_columns requires a topic column
        values_or_none: list[str | None] = topic_col.to_pylist()
        if None in values_or_none:
            raise SeglogSchemaError(
                f"seglog sink: row {values_or_none.index(None)} has a null topic and no topic "
                "option is set"
            )
        topics = [str(t) for t in values_or_none]
    _, offsets, values = rows.buffers()
    bounds = np.frombuffer(offsets, np.int32)[rows.offset : rows.offset + len(rows) + 1]
    first, last = int(bounds[0]), int(bounds[-1])
    text = values.slice(first, last - first).to_pybytes() if len(rows) else b""
    return EncodedRows(text, (bounds - bounds[0]).astype(np.int64), topics)


@dataclass
class Chunk:
    topic: str
    records_json: bytes  # a JSON array of record objects
    count: int


@dataclass
class ChunkCutter:
    max_records: int
    max_bytes: int
    topic: str | None = None
    pieces: list[bytes] = field(default_factory=list)
    count: int = 0
    size: int = 0

    def feed(self, rows: EncodedRows) -> Iterator[Chunk]:
        """The chunks that `rows` complete; the last, open one waits for more rows."""
        bounds = rows.bounds
        i = 0
        for run_end in rows.topic_runs():
            topic = rows.topic(i) if i < len(rows) else None
            while i < run_end:
                if self.count and topic != self.topic:
                    yield self._take()
                self.topic = topic
                room = self.max_records - self.count
                budget = self.max_bytes - self.size
                fit = int(np.searchsorted(bounds, bounds[i] + budget, side="right")) - 1 - i
                k = min(room, fit, run_end - i)
                if k <= 0:
                    if self.count:
                        yield self._take()
                        continue
                    k = 1  # a record bigger than max_bytes travels alone
                self.pieces.append(rows.text[int(bounds[i]) : int(bounds[i + k])])
                self.count += k
                self.size += int(bounds[i + k] - bounds[i])
                i += k
                if self.count >= self.max_records:
                    yield self._take()

    def finish(self) -> Iterator[Chunk]:
        if self.count:
            yield self._take()

    def _take(self) -> Chunk:
        assert self.topic is not None
        body = b"".join(self.pieces)
        chunk = Chunk(self.topic, b"[" + body[:-1] + b"]", self.count)
        self.pieces, self.count, self.size = [], 0, 0
        return chunk
