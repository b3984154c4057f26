"""Request parsing/validation and response encoding for the `/v0` JSON API.

The only module of the server where raw JSON dicts live: bytes come in, typed request
values (`WriteRequest`, `DiffRequest`, `DeleteRequest`) go out; model results come in,
response bytes go out. No Starlette here, so every rule is testable without a server.

Rules (API §0.2, §3, §4, §5, §0.9): unknown fields are ignored; a wrong JSON type, a
negative number for an unsigned field, a bool where a number is required, a missing
required field or a non-object body is `invalid_request` with a message starting
`malformed JSON body:`; limit violations are `invalid_request` / `batch_too_large` /
`record_too_large` with plain messages. `null` is accepted only where the API allows it
(`data`, `meta`). Record payloads are encoded once with `orjson.dumps` (compact) and
spliced back into responses with `orjson.Fragment`, never re-encoded.
"""

from __future__ import annotations

import base64
import binascii
import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import orjson

from seglog.core import names
from seglog.core.jsonbytes import json_bytes
from seglog.errors import SeglogError, invalid
from seglog.model import (
    DEFAULT_BATCH_BYTES,
    DEFAULT_DIFF_LIMIT,
    MAX_BATCH_BYTES,
    MAX_DIFF_LIMIT,
    MAX_IDEMPOTENCY_KEY_BYTES,
    MAX_META_BYTES,
    MAX_META_KEYS,
    MAX_NODE_BYTES,
    MAX_RECORD_BYTES,
    MAX_TAG_BYTES,
    U64_MAX,
    DeleteResult,
    DropTopicResult,
    PutTopicResult,
    ReadResult,
    Record,
    RecordIn,
    Selector,
    TopicConfig,
    TopicInfo,
    WriteResult,
    check_batch_count,
    check_record_size,
)

MAX_WAIT_MS = 30_000
DEFAULT_PAGE_SIZE = 100
MAX_PAGE_SIZE = 1000
_INT = re.compile(r"[+-]?[0-9]+")

# --------------------------------------------------------------------------- helpers


def _malformed(message: str) -> SeglogError:
    return invalid(f"malformed JSON body: {message}")


def _utf8_len(value: str, field: str) -> int:
    try:
        return len(value.encode("utf-8"))
    except UnicodeEncodeError:
        raise _malformed(f"{field} is not valid UTF-8") from None


def _dumps(value: Any, field: str) -> bytes:
    try:
        return json_bytes(value)
    except orjson.JSONEncodeError as e:
        raise _malformed(f"{field} cannot be encoded as JSON: {e}") from None


def _u64(obj: dict[str, Any], key: str, default: int) -> int:
    if key not in obj:
        return default
    v = obj[key]
    if isinstance(v, bool) or not isinstance(v, int) or not 0 <= v <= U64_MAX:
        raise _malformed(f"{key} must be an unsigned integer")
    return v


def _bool(obj: dict[str, Any], key: str, default: bool) -> bool:
    if key not in obj:
        return default
    v = obj[key]
    if not isinstance(v, bool):
        raise _malformed(f"{key} must be a boolean")
    return v


def _opt_str(obj: dict[str, Any], key: str, max_bytes: int, field: str) -> str | None:
    if key not in obj:
        return None
    v = obj[key]
    if not isinstance(v, str):
        raise _malformed(f"{field} must be a string")
    if _utf8_len(v, field) > max_bytes:
        raise invalid(f"{field} exceeds {max_bytes} bytes", {"field": field, "max": max_bytes})
    return v


def _object(obj: Any) -> dict[str, Any]:
    if not isinstance(obj, dict):
        raise _malformed("the body must be a JSON object")
    return obj


# --------------------------------------------------------------------------- bodies


def is_json_content_type(value: str | None) -> bool:
    """API §0.2: after leading whitespace, the value starts with `application/json`."""
    return value is not None and value.lstrip().startswith("application/json")


# A run of 19+ digits may be an integer literal outside the 64-bit range, which orjson
# would silently turn into a float. Only then is the body re-checked precisely. The run is
# found by mapping digits to NUL and searching for 19 NULs: ~10x faster than a regex.
_DIGITS_TO_NUL = bytes(0 if 0x30 <= b <= 0x39 else 0x20 for b in range(256))
_LONG_DIGIT_RUN = b"\x00" * 19
_I64_MIN = -(2**63)
_U64_MAX = 2**64 - 1
_U64_DIGITS = len(str(_U64_MAX))
# The precise re-check is a flat scan of the bytes, never a recursive parse: a document
# nested up to orjson's depth limit must not reach Python's recursion limit.
_ESCAPE = re.compile(rb"\\.", re.DOTALL)
_LONG_NUMBER = re.compile(rb"-?[0-9]{19,}")
_NUMBER_PART_BEFORE = frozenset(b".eE+-")  # the run is a fraction or an exponent
_FLOAT_AFTER = frozenset(b".eE")  # the run is a float's integer part


def out_of_range_integer(raw: bytes) -> bytes | None:
    """The first integer literal of the valid JSON document `raw` (outside strings) that
    does not fit in `[-2**63, 2**64-1]`, or None.

    Escape pairs are blanked first (same length, so offsets hold). In valid JSON every
    backslash starts an escape and outside strings there are none, so every quote left
    delimits a string: a run of digits is inside a string iff an odd number of quotes
    precedes it.
    """
    text = _ESCAPE.sub(b"__", raw)
    quotes = 0
    scanned = 0
    for m in _LONG_NUMBER.finditer(text):
        start, end = m.span()
        quotes += text.count(b'"', scanned, start)
        scanned = start
        if quotes % 2:
            continue
        if start > 0 and text[start - 1] in _NUMBER_PART_BEFORE:
            continue
        if end < len(text) and text[end] in _FLOAT_AFTER:
            continue
        literal = m.group()
        if len(literal.lstrip(b"-")) > _U64_DIGITS or not _I64_MIN <= int(literal) <= _U64_MAX:
            return literal
    return None


def parse_json_body(raw: bytes | bytearray | memoryview) -> Any:
    try:
        obj = orjson.loads(raw)
    except orjson.JSONDecodeError as e:
        raise invalid(f"malformed JSON body: {e}") from None
    data = bytes(raw)
    if _LONG_DIGIT_RUN in data.translate(_DIGITS_TO_NUL):
        bad = out_of_range_integer(data)
        if bad is not None:
            shown = bad.decode("ascii") if len(bad) <= 40 else f"{bad[:40].decode('ascii')}..."
            raise invalid(
                f"malformed JSON body: integer {shown} is outside the 64-bit range; integers "
                "must fit in 64 bits (send larger numbers as strings)"
            )
    return obj


def valid_topic_name(name: object) -> bool:
    """API §0.8 topic name (1–255 ASCII bytes, see `seglog.core.names`)."""
    return names.valid_topic_name(name)


def valid_router_name(name: object) -> bool:
    """API §0.8 router name (topic charset plus `>`)."""
    return names.valid_router_name(name)


# --------------------------------------------------------------------------- write


@dataclass(frozen=True, slots=True)
class WriteRequest:
    """A validated `POST /v0/topics/:topic` body. `config` stays raw: the caller parses it
    with `TopicConfig.from_dict` only when the write may create the topic."""

    records: list[RecordIn]
    node: str | None = None
    idempotency_key: str | None = None
    create: bool | None = None
    config: dict[str, Any] | None = None
    disable_backpressure: bool = False


def check_idempotency_key(value: str | None) -> str | None:
    """An `Idempotency-Key` header value: empty ⇒ None, > 256 bytes ⇒ invalid_request."""
    if value is None or value == "":
        return None
    if _utf8_len(value, "Idempotency-Key") > MAX_IDEMPOTENCY_KEY_BYTES:
        raise invalid(
            f"idempotency key exceeds {MAX_IDEMPOTENCY_KEY_BYTES} bytes",
            {"field": "Idempotency-Key", "max": MAX_IDEMPOTENCY_KEY_BYTES},
        )
    return value


def parse_write(obj: Any) -> WriteRequest:
    """API §3 body rules, in order: records shape/count, batch fields, then each record."""
    body = _object(obj)
    if "records" not in body:
        raise _malformed("records is required")
    raw_records = body["records"]
    if not isinstance(raw_records, list):
        raise _malformed("records must be an array")
    check_batch_count(len(raw_records))
    node = _opt_str(body, "node", MAX_NODE_BYTES, "node")
    key = _opt_str(body, "idempotency_key", MAX_IDEMPOTENCY_KEY_BYTES, "idempotency_key")
    create = _bool(body, "create", False) if "create" in body else None
    config = body.get("config")
    if "config" in body and not isinstance(config, dict):
        raise _malformed("config must be a JSON object")
    backpressure = _bool(body, "disable_backpressure", False)
    records = [_parse_record(i, r, node) for i, r in enumerate(raw_records)]
    return WriteRequest(records, node, key, create, config, backpressure)


def _parse_record(i: int, rec: Any, batch_node: str | None) -> RecordIn:
    if type(rec) is dict and len(rec) == 1 and "data" in rec:
        # The common `{"data": ...}` record: no optional field to check.
        try:
            data_json = json_bytes(rec["data"])
        except orjson.JSONEncodeError:
            pass  # the full path below reports it
        else:
            if len(data_json) <= MAX_RECORD_BYTES:
                return RecordIn(data_json, None, batch_node, None)
    where = f"records[{i}]"
    if not isinstance(rec, dict):
        raise _malformed(f"{where} must be an object")
    if "data" not in rec:
        raise _malformed(f"{where}.data is required")
    tag = _opt_str(rec, "tag", MAX_TAG_BYTES, f"{where}.tag")
    node = _opt_str(rec, "node", MAX_NODE_BYTES, f"{where}.node")
    data_json = _dumps(rec["data"], f"{where}.data")
    meta = rec.get("meta")
    meta_json: bytes | None = None
    if meta is not None:
        meta_json = _dumps(meta, f"{where}.meta")
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


# --------------------------------------------------------------------------- diff


@dataclass(frozen=True, slots=True)
class DiffRequest:
    """A validated `POST /v0/topics/:topic/diff` body with defaults and clamps applied."""

    from_seq: int = 0
    limit: int = DEFAULT_DIFF_LIMIT
    nodes: tuple[str, ...] = ()
    include_tags: bool = False
    include_meta: bool = True
    wait_ms: int = 0
    max_batch_bytes: int = DEFAULT_BATCH_BYTES


def parse_nodes(value: Any, field: str = "node") -> tuple[str, ...]:
    """A `node` filter: a string or an array of strings."""
    if isinstance(value, str):
        return (value,)
    if isinstance(value, list) and all(isinstance(v, str) for v in value):
        return tuple(value)
    raise _malformed(f"{field} must be a string or an array of strings")


def parse_diff(obj: Any) -> DiffRequest:
    body = _object(obj)
    limit = _u64(body, "limit", 0)
    batch = _u64(body, "max_batch_bytes", 0)
    return DiffRequest(
        from_seq=_u64(body, "from_seq", 0),
        limit=min(limit, MAX_DIFF_LIMIT) if limit else DEFAULT_DIFF_LIMIT,
        nodes=parse_nodes(body["node"]) if "node" in body else (),
        include_tags=_bool(body, "include_tags", False),
        include_meta=_bool(body, "include_meta", True),
        wait_ms=min(_u64(body, "wait_ms", 0), MAX_WAIT_MS),
        max_batch_bytes=min(batch, MAX_BATCH_BYTES) if batch else DEFAULT_BATCH_BYTES,
    )


# --------------------------------------------------------------------------- delete


@dataclass(frozen=True, slots=True)
class DeleteRequest:
    """`POST /v0/topics/:topic/delete`: at least one of the two is set (AND when both)."""

    before_seq: int | None
    match: Selector | None


def parse_delete(obj: Any) -> DeleteRequest:
    body = _object(obj)
    before = _u64(body, "before_seq", 0) if "before_seq" in body else None
    match = Selector.parse(body["match"]) if "match" in body else None
    if before is None and match is None:
        raise invalid("at least one of before_seq or match is required")
    return DeleteRequest(before, match)


# --------------------------------------------------------------------------- query strings


def parse_config(obj: Any) -> TopicConfig:
    """A request's topic config object; type errors carry the API §0.2 message prefix."""
    try:
        return TopicConfig.from_dict(obj)
    except SeglogError as e:
        raise invalid(f"malformed JSON body: {e.message}", e.detail) from None


def parse_bool_query(value: str | None, default: bool) -> bool:
    """`true`/`1` ⇒ True, `false`/`0` ⇒ False, anything else (or absent) ⇒ `default`."""
    if value in ("true", "1"):
        return True
    if value in ("false", "0"):
        return False
    return default


def parse_page_size(value: str | None) -> int:
    """API §0.9: default 100, non-numeric ⇒ default, clamped to `[1, 1000]`. Any length
    of digits clamps (`int` refuses more than 4300 digits, so long values never reach it)."""
    if value is None or not _INT.fullmatch(value.strip()):
        return DEFAULT_PAGE_SIZE
    text = value.strip()
    digits = text.lstrip("+-").lstrip("0")
    if text.startswith("-") or not digits:
        return 1
    if len(digits) > len(str(MAX_PAGE_SIZE)):
        return MAX_PAGE_SIZE
    return min(int(digits), MAX_PAGE_SIZE)


def encode_cursor(after: str) -> str:
    """Standard base64 (with padding) of the compact JSON `{"after":"<name>"}`."""
    return base64.b64encode(orjson.dumps({"after": after})).decode("ascii")


def decode_cursor(value: str | None) -> str | None:
    """The `after` name of a list cursor; empty ⇒ None (first page). A `+` that arrived
    as a space through form-decoding and missing padding are tolerated."""
    if value is None or value == "":
        return None
    s = value.strip().replace(" ", "+")
    s += "=" * (-len(s) % 4)
    try:
        decoded = orjson.loads(base64.b64decode(s, validate=True))
    except (binascii.Error, ValueError):
        raise invalid("malformed cursor") from None
    after = decoded.get("after") if isinstance(decoded, dict) else None
    if not isinstance(after, str):
        raise invalid("malformed cursor")
    return after


# --------------------------------------------------------------------------- responses


def _perf(total_ms: float, **extra: float | int) -> dict[str, float | int]:
    return {"server_total_ms": float(total_ms), **extra}


def encode_write_result(res: WriteResult, return_seqs: bool, total_ms: float) -> bytes:
    body: dict[str, Any] = {
        "topic": res.topic,
        "first_seq": res.first_seq,
        "last_seq": res.last_seq,
    }
    if return_seqs:
        body["seqs"] = res.seqs
    body.update(
        head_seq=res.head_seq,
        count=res.count,
        created=res.created,
        deduped=res.deduped,
        performance=_perf(
            total_ms, wal_append_ms=float(res.wal_append_ms), fsync_ms=float(res.fsync_ms)
        ),
    )
    return orjson.dumps(body)


def record_object(
    r: Record, include_tags: bool, include_meta: bool, include_data: bool = True
) -> dict[str, Any]:
    """A record as API §0.4 shows it; `data`/`meta` are spliced, not re-encoded."""
    d: dict[str, Any] = {"$seq": r.seq, "$ts": r.ts}
    if r.node is not None:
        d["$node"] = r.node
    if include_tags and r.tag is not None:
        d["$tag"] = r.tag
    if include_data:
        d["data"] = orjson.Fragment(r.data_json)
    if include_meta and r.meta_json is not None:
        d["meta"] = orjson.Fragment(r.meta_json)
    return d


def _records_json(records: list[Record], include_tags: bool, include_meta: bool) -> bytes:
    """The `records` array. A record with no node, tag or meta to show is formatted
    directly (the same bytes orjson gives for its `record_object`, ~30 % cheaper)."""
    parts: list[bytes] = []
    add = parts.append
    for r in records:
        if (
            r.node is None
            and (r.tag is None or not include_tags)
            and (r.meta_json is None or not include_meta)
        ):
            add(b'{"$seq":%d,"$ts":%d,"data":%b}' % (r.seq, r.ts, r.data_json))
        else:
            add(orjson.dumps(record_object(r, include_tags, include_meta)))
    return b"[" + b",".join(parts) + b"]"


def encode_read_result(
    res: ReadResult, include_tags: bool, include_meta: bool, total_ms: float
) -> bytes:
    perf = _perf(total_ms, records_scanned=res.records_scanned)
    if res.cold_segments_read > 0:
        perf["cold_segments_read"] = res.cold_segments_read
    body = {
        "topic": res.topic,
        "records": orjson.Fragment(_records_json(res.records, include_tags, include_meta)),
        "next_from_seq": res.next_from_seq,
        "head_seq": res.head_seq,
        "earliest_seq": res.earliest_seq,
        "caught_up": res.caught_up,
        "tombstone": None if res.tombstone is None else res.tombstone.to_dict(),
        "lag": res.lag,
        "performance": perf,
    }
    return orjson.dumps(body)


@dataclass(frozen=True, slots=True)
class QueueCounts:
    """The `queue` member of a queue topic's state (API §2.2)."""

    ready: int
    in_flight: int
    dead_lettered: int


def encode_topic_info(info: TopicInfo, total_ms: float, queue: QueueCounts | None = None) -> bytes:
    body: dict[str, Any] = {
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
    }
    if queue is not None:
        body["queue"] = {
            "ready": queue.ready,
            "in_flight": queue.in_flight,
            "dead_lettered": queue.dead_lettered,
        }
    body["performance"] = _perf(total_ms)
    return orjson.dumps(body)


def topic_summary(info: TopicInfo) -> dict[str, Any]:
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
    body: dict[str, Any] = {"topics": [topic_summary(i) for i in infos]}
    if next_after is not None:
        body["next_cursor"] = encode_cursor(next_after)
    body["performance"] = _perf(total_ms)
    return orjson.dumps(body)


def encode_put_topic(res: PutTopicResult, total_ms: float) -> bytes:
    return orjson.dumps(
        {
            "topic": res.topic,
            "created": res.created,
            "config": res.config.to_dict(),
            "performance": _perf(total_ms),
        }
    )


def encode_drop_topic(res: DropTopicResult, total_ms: float) -> bytes:
    return orjson.dumps(
        {
            "topic": res.topic,
            "deleted": res.deleted,
            "routers_removed": sorted(res.routers_removed),
            "performance": _perf(total_ms),
        }
    )


def encode_delete_result(res: DeleteResult, total_ms: float) -> bytes:
    return orjson.dumps(
        {
            "topic": res.topic,
            "deleted": res.deleted,
            "earliest_seq": res.earliest_seq,
            "head_seq": res.head_seq,
            "count": res.count,
            "bytes": res.bytes,
            "performance": _perf(total_ms),
        }
    )
