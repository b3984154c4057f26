"""The `POST /v0/topics/:topic` (append) body and `Idempotency-Key` header (API §3).

Checked in order: the records array's shape and count, the batch fields, then each
record. Limit violations are `invalid_request` / `batch_too_large` / `record_too_large`
with plain messages; `null` is accepted only for `data` and `meta`. Each record's `data`
and `meta` are encoded here once, compactly, and never re-encoded after.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import orjson

from seglog.core.jsonbytes import json_bytes
from seglog.errors import invalid
from seglog.http.body_fields import (
    bool_field,
    compact_json,
    json_object,
    malformed,
    optional_str_field,
    utf8_len,
)
from seglog.model import (
    MAX_IDEMPOTENCY_KEY_BYTES,
    MAX_META_BYTES,
    MAX_META_KEYS,
    MAX_NODE_BYTES,
    MAX_RECORD_BYTES,
    MAX_TAG_BYTES,
    RecordBatch,
    RecordIn,
    check_batch_count,
    check_record_size,
)


@dataclass(frozen=True, slots=True)
class WriteRequest:
    """A validated `POST /v0/topics/:topic` body. `config` stays raw: the caller parses it
    with `TopicConfig.from_dict` only when the write may create the topic."""

    records: RecordBatch | list[RecordIn]
    node: str | None = None
    idempotency_key: str | None = None
    create: bool | None = None
    config: dict[str, Any] | None = None
    disable_backpressure: bool = False


def check_idempotency_key(value: bytes | None) -> str | None:
    """An `Idempotency-Key` header value as the key it names: its bytes read as UTF-8 (as
    the same key in the body is, so both forms dedupe together), or as Latin-1 when they
    are not UTF-8 (what browsers send for such text). Empty ⇒ None; over 256 bytes of
    UTF-8 ⇒ invalid_request."""
    if not value:
        return None
    try:
        key = value.decode("utf-8")
    except UnicodeDecodeError:
        key = value.decode("latin-1")
    if utf8_len(key, "Idempotency-Key") > MAX_IDEMPOTENCY_KEY_BYTES:
        raise invalid(
            f"idempotency key exceeds {MAX_IDEMPOTENCY_KEY_BYTES} bytes",
            {"field": "Idempotency-Key", "max": MAX_IDEMPOTENCY_KEY_BYTES},
        )
    return key


def parse_write(obj: Any) -> WriteRequest:
    """API §3 body rules, in order: records shape/count, batch fields, then each record."""
    body = json_object(obj)
    if "records" not in body:
        raise malformed("records is required")
    raw_records = body["records"]
    if not isinstance(raw_records, list):
        raise malformed("records must be an array")
    check_batch_count(len(raw_records))
    node = optional_str_field(body, "node", MAX_NODE_BYTES, "node")
    key = optional_str_field(body, "idempotency_key", MAX_IDEMPOTENCY_KEY_BYTES, "idempotency_key")
    create = bool_field(body, "create", False) if "create" in body else None
    config = body.get("config")
    if "config" in body and not isinstance(config, dict):
        raise malformed("config must be a JSON object")
    backpressure = bool_field(body, "disable_backpressure", False)
    records = [parse_record(i, r, node) for i, r in enumerate(raw_records)]
    return WriteRequest(records, node, key, create, config, backpressure)


def parse_record(i: int, rec: Any, batch_node: str | None, where: str | None = None) -> RecordIn:
    """One §3 record object; errors name it `where` (default `records[i]`)."""
    if type(rec) is dict and len(rec) == 1 and "data" in rec:
        # The common `{"data": ...}` record: no optional field to check.
        try:
            data_json = json_bytes(rec["data"])
        except orjson.JSONEncodeError:
            pass  # the full path below reports it
        else:
            if len(data_json) <= MAX_RECORD_BYTES:
                return RecordIn(data_json, None, batch_node, None)
    where = where or f"records[{i}]"
    if not isinstance(rec, dict):
        raise malformed(f"{where} must be an object")
    if "data" not in rec:
        raise malformed(f"{where}.data is required")
    tag = optional_str_field(rec, "tag", MAX_TAG_BYTES, f"{where}.tag")
    node = optional_str_field(rec, "node", MAX_NODE_BYTES, f"{where}.node")
    data_json = compact_json(rec["data"], f"{where}.data")
    meta = rec.get("meta")
    meta_json: bytes | None = None
    if meta is not None:
        meta_json = compact_json(meta, f"{where}.meta")
        if len(meta_json) > MAX_META_BYTES:
            raise invalid(
                f"{where}.meta exceeds {MAX_META_BYTES} bytes",
                {"index": i, "bytes": len(meta_json), "max": MAX_META_BYTES},
            )
        if isinstance(meta, dict) and len(meta) > MAX_META_KEYS:
            raise invalid(
                f"{where}.meta has more than {MAX_META_KEYS} keys",
                {"index": i, "keys": len(meta), "max": MAX_META_KEYS},
            )
    check_record_size(len(data_json) + (len(meta_json) if meta_json is not None else 0), i)
    return RecordIn(data_json, meta_json, node if node is not None else batch_node, tag)
