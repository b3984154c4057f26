"""The sink's columnar row encoding and chunk cut against the per-record reference.

- `encode_batch` gives, for any batch, the records of the per-record path (`batch_records`
  + `orjson.dumps`), whichever path it takes: the same JSON values, keys in the same order
  (spliced texts keep their own whitespace, which the server does not store);
- `ChunkCutter` cuts rows fed in any batch split exactly as the reference rule
  (`reference_chunks`, the sink's earlier per-record cutter) cuts the whole sequence;
- a JSON text that is not exactly one value is refused, never spliced.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any

import numpy as np
import orjson
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from seglog.spark.schema import SeglogSchemaError, batch_records
from seglog.spark.sink_rows import ChunkCutter, EncodedRows, _columnar, encode_batch


def reference_chunks(
    pairs: Iterable[tuple[str, dict[str, Any]]], max_records: int, max_bytes: int
) -> Iterator[tuple[str, list[dict[str, Any]]]]:
    """The rule: a chunk closes before a record of another topic, when it holds
    `max_records`, or when the record would take it past `max_bytes`."""
    topic: str | None = None
    chunk: list[dict[str, Any]] = []
    size = 0
    for t, rec in pairs:
        n = len(orjson.dumps(rec)) + 1
        if chunk and (t != topic or len(chunk) >= max_records or size + n > max_bytes):
            assert topic is not None
            yield topic, chunk
            chunk, size = [], 0
        topic = t
        chunk.append(rec)
        size += n
    if chunk:
        assert topic is not None
        yield topic, chunk


JSON_TEXT = st.sampled_from(
    ['{"x": 1}', "[1,2]", '"s"', "3.5", "null", " null", '{"a":{"b":[true]}}', '{"k":"é"}']
)
LABEL = st.none() | st.sampled_from(["t1", "é", 'q"uote', "back\\slash", "tab\t", "plain"])


@st.composite
def batches(draw: st.DrawFn) -> pa.RecordBatch:
    n = draw(st.integers(0, 12))
    cols: dict[str, Any] = {
        "data": pa.array(draw(st.lists(st.none() | JSON_TEXT, min_size=n, max_size=n)), pa.string())
    }
    for name in ("tag", "node"):
        if draw(st.booleans()):
            cols[name] = pa.array(draw(st.lists(LABEL, min_size=n, max_size=n)), pa.string())
    if draw(st.booleans()):
        cols["meta"] = pa.array(
            draw(st.lists(st.none() | JSON_TEXT, min_size=n, max_size=n)), pa.string()
        )
    if draw(st.booleans()):
        cols["topic"] = pa.array(
            draw(st.lists(st.sampled_from(["a", "b"]), min_size=n, max_size=n)), pa.string()
        )
    return pa.RecordBatch.from_pydict(cols)


def reference_rows(
    batch: pa.RecordBatch, parse: bool, topic: str | None
) -> list[tuple[str, bytes]]:
    return [
        (t, orjson.dumps(r) + b",")
        for t, r in batch_records(batch, parse_data=parse, topic_option=topic)
    ]


def rows_of(enc: EncodedRows) -> list[tuple[str, bytes]]:
    """Each row re-serialized compactly (keys keep their order)."""
    b = enc.bounds.tolist()
    out = []
    for i in range(len(enc)):
        text = enc.text[b[i] : b[i + 1]]
        assert text.endswith(b",")
        out.append((enc.topic(i), orjson.dumps(orjson.loads(text[:-1])) + b","))
    return out


@settings(max_examples=300, derandomize=True, database=None)
@given(batches(), st.booleans(), st.integers(0, 3))
def test_encoded_rows_are_the_per_record_bytes(
    batch: pa.RecordBatch, parse: bool, skip: int
) -> None:
    batch = batch.slice(min(skip, len(batch)))  # columns that start at an offset
    topic = None if "topic" in batch.schema.names else "dest"
    assert rows_of(encode_batch(batch, parse, topic)) == reference_rows(batch, parse, topic)


def test_plain_string_columns_take_the_columnar_path() -> None:
    b = pa.RecordBatch.from_pydict(
        {"data": ['{"n":1}', None], "tag": ["x", None], "meta": [None, "{}"]}
    )
    enc = _columnar(b, True, "d")
    assert enc is not None and rows_of(enc) == reference_rows(b, True, "d")
    quoted = pa.RecordBatch.from_pydict({"data": ["ok"], "tag": ['needs "escaping"']})
    assert _columnar(quoted, True, "d") is None  # the per-record path escapes it


@pytest.mark.parametrize("text", ['1,"tag":"x"', "nope", "", "[1", '{"a":1}}'])
def test_a_text_that_is_not_one_json_value_is_refused(text: str) -> None:
    b = pa.RecordBatch.from_pydict({"data": ['{"ok":1}', text]})
    with pytest.raises(SeglogSchemaError, match=r"column 'data' row 1 is not valid JSON"):
        encode_batch(b, True, "d")
    meta = pa.RecordBatch.from_pydict({"data": ["1", "2"], "meta": [None, text]})
    with pytest.raises(SeglogSchemaError, match=r"column 'meta' row 1 is not valid JSON"):
        encode_batch(meta, True, "d")


def test_text_format_sends_strings_as_json_strings() -> None:
    b = pa.RecordBatch.from_pydict({"data": ["nope", 'a "q"', None]})
    assert rows_of(encode_batch(b, False, "d")) == reference_rows(b, False, "d")


@settings(max_examples=300, derandomize=True, database=None)
@given(
    st.lists(st.tuples(st.sampled_from(["a", "b"]), st.integers(0, 300)), max_size=60),
    st.lists(st.integers(1, 20), max_size=6),
    st.integers(1, 7),
    st.integers(20, 400),
)
def test_chunk_cut_is_the_reference_cut_for_any_batch_split(
    pairs: list[tuple[str, int]], splits: list[int], max_n: int, max_bytes: int
) -> None:
    recs = [(t, {"data": "x" * n}) for t, n in pairs]
    want = [(t, c) for t, c in reference_chunks(recs, max_n, max_bytes)]
    cutter = ChunkCutter(max_n, max_bytes)
    got = []
    i = 0
    for size in [*splits, len(recs)]:
        part = recs[i : i + size]
        i += len(part)
        texts = [orjson.dumps(r) + b"," for _, r in part]
        bounds = np.zeros(len(texts) + 1, np.int64)
        np.cumsum([len(x) for x in texts], out=bounds[1:])
        enc = EncodedRows(b"".join(texts), bounds, [t for t, _ in part])
        got += [(c.topic, orjson.loads(c.records_json)) for c in cutter.feed(enc)]
        if i >= len(recs):
            break
    got += [(c.topic, orjson.loads(c.records_json)) for c in cutter.finish()]
    assert got == want


def test_an_empty_column_without_buffers_is_checked() -> None:
    empty = pa.Array.from_buffers(pa.string(), 0, [None, None, pa.py_buffer(b"")])
    empty.validate(full=True)
    b = pa.RecordBatch.from_arrays([empty], names=["data"])
    assert encode_batch(b, True, "d").text == b""
