"""The append body's fast path: the common write decoded by msgspec, payloads kept as text.

`parse_write(parse_json_body(raw))` builds a Python object for every JSON value of every
record, then encodes each `data` back to compact JSON: two trips through Python objects per
record, most of an append's cost. Here msgspec decodes the body into structs whose `data` and
`meta` stay raw JSON text, which must be exactly what the slow path would store (compact,
every value in range, valid UTF-8, no duplicate keys): each text equal to
`dumps(loads(text))`. A C scan (`native.json_unproven`) proves that for the common payload
(no floats, no unicode escapes, short integers) at ~1/6 of orjson's cost; the texts it
cannot prove, and every meta, get one `orjson` round trip, joined into an array:
`dumps(loads("[a,b,...]")) == "[a,b,...]"` holds iff each text equals `dumps(loads(text))`.

Anything else — an unknown field, a `null` where the slow path wants a string, a config, a
limit exceeded, a payload that is not in that exact form — returns None, and the caller takes
the slow path, which then gives exactly its own result or error. So this module never decides
an error and never changes what is stored; a property test holds it to that.
"""

from __future__ import annotations

from typing import Any

import msgspec
import orjson
from msgspec import UNSET, Raw, UnsetType

from seglog.core.native import json_unproven, speedups
from seglog.http.write_request import WriteRequest
from seglog.model import (
    MAX_IDEMPOTENCY_KEY_BYTES,
    MAX_META_BYTES,
    MAX_META_KEYS,
    MAX_NODE_BYTES,
    MAX_RECORD_BYTES,
    MAX_RECORDS_PER_WRITE,
    MAX_TAG_BYTES,
    RecordBatch,
)


# gc=False: these structs hold only strings and raw spans, never a cycle, so the collector
# need not track the hundreds a batch decodes into.
class _Record(msgspec.Struct, forbid_unknown_fields=True, gc=False):
    data: Raw
    tag: str | UnsetType = UNSET
    node: str | UnsetType = UNSET
    meta: Raw | UnsetType = UNSET


class _Body(msgspec.Struct, forbid_unknown_fields=True, gc=False):
    records: list[_Record]
    node: str | UnsetType = UNSET
    idempotency_key: str | UnsetType = UNSET
    create: bool | UnsetType = UNSET
    disable_backpressure: bool = False


class _Envelope(msgspec.Struct, forbid_unknown_fields=True, gc=False):
    """`_Body` with its records left as raw JSON text, for `speedups.record_columns`."""

    records: Raw
    node: str | UnsetType = UNSET
    idempotency_key: str | UnsetType = UNSET
    create: bool | UnsetType = UNSET
    disable_backpressure: bool = False


_DECODER = msgspec.json.Decoder(_Body)
_ENVELOPE_DECODER = msgspec.json.Decoder(_Envelope)
_RECORDS_DECODER = msgspec.json.Decoder(list[_Record])
_RECORD_DECODER = msgspec.json.Decoder(_Record)
_NULL = b"null"


def _opt(value: str | UnsetType) -> str | None:
    return None if value is UNSET else value  # type: ignore[return-value]


def decode_write_fast(raw: bytes | bytearray | memoryview) -> WriteRequest | None:
    """The `WriteRequest` `parse_write(parse_json_body(raw))` returns, or None when this
    path cannot vouch for giving exactly that (the caller then takes the slow path).

    With the speedups, the common body (records of `data`, `tag` and `node` only, every
    payload canonical) is cut into its columns by one C pass (`record_columns`) under a
    msgspec decode of the batch fields; any other body gets the full msgspec decode."""
    body: _Body | _Envelope
    try:
        body = _ENVELOPE_DECODER.decode(raw) if speedups is not None else _DECODER.decode(raw)
    except (msgspec.DecodeError, UnicodeDecodeError, RecursionError):
        return None
    batch_node, key = _opt(body.node), _opt(body.idempotency_key)
    if not (_fits(batch_node, MAX_NODE_BYTES) and _fits(key, MAX_IDEMPOTENCY_KEY_BYTES)):
        return None
    out: RecordBatch | None
    if isinstance(body, _Envelope):
        assert speedups is not None
        cols = speedups.record_columns(
            body.records, MAX_RECORD_BYTES, MAX_TAG_BYTES, MAX_NODE_BYTES
        )
        if cols is not None:
            out = _batch_of(cols, batch_node)
        else:
            try:
                out = _records_in(_RECORDS_DECODER.decode(body.records), batch_node)
            except (msgspec.DecodeError, UnicodeDecodeError, RecursionError):
                return None
    else:
        out = _records_in(body.records, batch_node)
    if out is None:
        return None
    create = None if body.create is UNSET else bool(body.create)
    return WriteRequest(out, batch_node, key, create, None, body.disable_backpressure)


Columns = tuple[list[bytes], list[str | None], list[str | None], bool]


def record_columns_py(records: bytes, batch_node: str | None = None) -> Columns | None:
    """What `speedups.record_columns` must give for a `records` array whenever it gives
    anything: `(data, tag, node, own_node)` as the full decode sees them (node None where a
    record names none), or None where the full decode refuses the array or its batch."""
    try:
        recs = _RECORDS_DECODER.decode(records)
    except (msgspec.DecodeError, UnicodeDecodeError, RecursionError):
        return None
    batch = _records_in(recs, batch_node)
    if batch is None:
        return None
    nodes = [_opt(r.node) for r in recs]
    return batch.data, batch.tag, nodes, nodes.count(None) != len(nodes)


def _batch_of(cols: Columns, batch_node: str | None) -> RecordBatch | None:
    """The batch of `record_columns`' columns (`batch_node` fits its limit already)."""
    data, tags, nodes, own_node = cols
    n = len(data)
    if not 0 < n <= MAX_RECORDS_PER_WRITE:
        return None
    nodes = [batch_node if v is None else v for v in nodes] if own_node else [batch_node] * n
    return RecordBatch(data, [None] * n, nodes, tags)


def decode_lines_fast(lines: list[bytes], node: str | None) -> RecordBatch | None:
    """The records of NDJSON `lines` (one record object each, API §13.2) with the batch
    `node`: exactly what `parse_write` makes of `{"records": [<line>, ...], "node": node}`,
    or None when this path cannot vouch for that. Each line is decoded on its own, so no
    line can end or start another record. With the speedups, lines in the common form go
    through one C pass (`record_columns_lines`), as a JSON body's records do."""
    if speedups is not None:
        cols = speedups.record_columns_lines(lines, MAX_RECORD_BYTES, MAX_TAG_BYTES, MAX_NODE_BYTES)
        if cols is not None:
            return _batch_of(cols, node)
    return _lines_in(lines, node)


def _lines_in(lines: list[bytes], node: str | None) -> RecordBatch | None:
    recs: list[_Record] = []
    try:
        for line in lines:
            recs.append(_RECORD_DECODER.decode(line))
    except (msgspec.DecodeError, UnicodeDecodeError, RecursionError):
        return None
    return _records_in(recs, node)


def record_columns_lines_py(lines: list[bytes], batch_node: str | None = None) -> Columns | None:
    """What `speedups.record_columns_lines` must give for NDJSON `lines` whenever it gives
    anything (see `record_columns_py`)."""
    batch = _lines_in(lines, batch_node)
    if batch is None:
        return None
    nodes = [_opt(_RECORD_DECODER.decode(line).node) for line in lines]
    return batch.data, batch.tag, nodes, nodes.count(None) != len(nodes)


def _records_in(recs: list[_Record], batch_node: str | None) -> RecordBatch | None:
    """Column by column: one pass per field over the batch rather than per-record calls,
    into the columns the write path works on."""
    n = len(recs)
    if not 0 < n <= MAX_RECORDS_PER_WRITE:
        return None
    texts = [bytes(r.data) for r in recs]
    metas: list[bytes | None] = [None] * n
    present: list[int] = []
    raw_metas = [r.meta for r in recs]
    if raw_metas.count(UNSET) != n:
        for i, raw in enumerate(raw_metas):
            if raw is not UNSET:
                m = bytes(raw)  # type: ignore[arg-type]
                if m != _NULL:  # `"meta": null` is an absent meta
                    metas[i] = m
                    present.append(i)
    # The payloads a C scan cannot prove canonical (most batches: none), and the metas
    # (their key count is needed), go through orjson.
    unproven = [texts[i] for i in json_unproven(texts)]
    checked = unproven + [m for m in metas if m is not None]  # `present`'s, in order
    values: list[Any] = []
    if checked:
        joined = b"[" + b",".join(checked) + b"]"
        try:
            values = orjson.loads(joined)
            if orjson.dumps(values) != joined:
                return None
        except (orjson.JSONDecodeError, orjson.JSONEncodeError):  # e.g. nested too deep
            return None
    for k, i in enumerate(present):
        meta = metas[i]
        assert meta is not None
        parsed = values[len(unproven) + k]
        if len(meta) > MAX_META_BYTES or (isinstance(parsed, dict) and len(parsed) > MAX_META_KEYS):
            return None
        if len(texts[i]) + len(meta) > MAX_RECORD_BYTES:
            return None
    if max(map(len, texts)) > MAX_RECORD_BYTES:
        return None
    tags = _labels([r.tag for r in recs], None, MAX_TAG_BYTES)
    nodes = _labels([r.node for r in recs], batch_node, MAX_NODE_BYTES)
    if tags is None or nodes is None:
        return None
    return RecordBatch(texts, metas, nodes, tags)


def _labels(
    raw: list[str | UnsetType], default: str | None, max_bytes: int
) -> list[str | None] | None:
    """A label column (`tag` or `node`) with `default` where a record has none, or None
    when a label is over `max_bytes` of UTF-8."""
    if raw.count(UNSET) == len(raw):  # the common batch: no record sets its own
        return [default] * len(raw) if _fits(default, max_bytes) else None
    labels = [default if v is UNSET else v for v in raw]
    return labels if _all_fit(labels, max_bytes) else None  # type: ignore[return-value]


def _fits(value: str | None, max_bytes: int) -> bool:
    """`_all_fit([value], max_bytes)`, without a pass over a list."""
    return value is None or len(value) * 4 <= max_bytes or len(value.encode()) <= max_bytes


def _all_fit(values: list[Any], max_bytes: int) -> bool:
    """Whether every str in `values` (None: absent) is at most `max_bytes` of UTF-8."""
    longest = max((len(v) for v in values if v is not None), default=0)
    # A str of n code points encodes to at most 4n UTF-8 bytes: most batches need no encode.
    return longest * 4 <= max_bytes or all(
        v is None or len(v.encode("utf-8")) <= max_bytes for v in values
    )
