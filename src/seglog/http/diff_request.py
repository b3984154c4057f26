"""The `POST /v0/topics/:topic/diff` body (API §4): a read from a cursor, with defaults
and clamps applied here so the route and the engine see only values in range."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from seglog.http.body_fields import bool_field, json_object, malformed, u32_field, u64_field
from seglog.model import DEFAULT_BATCH_BYTES, DEFAULT_DIFF_LIMIT, MAX_BATCH_BYTES, MAX_DIFF_LIMIT

MAX_WAIT_MS = 30_000
# The columnar form (API §13.1) allows larger pages: its per-record cost is a fraction of
# JSON's, and a read examines at most this many slots anyway.
MAX_ARROW_DIFF_LIMIT = 65_536
MAX_ARROW_BATCH_BYTES = 67_108_864


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
    raise malformed(f"{field} must be a string or an array of strings")


def parse_diff(obj: Any, columnar: bool = False) -> DiffRequest:
    """The request with defaults and clamps applied; `columnar` clamps to the Arrow form's
    larger page bounds (the defaults are the same)."""
    body = json_object(obj)
    limit = u32_field(body, "limit", 0)
    batch = u64_field(body, "max_batch_bytes", 0)
    max_limit = MAX_ARROW_DIFF_LIMIT if columnar else MAX_DIFF_LIMIT
    max_batch = MAX_ARROW_BATCH_BYTES if columnar else MAX_BATCH_BYTES
    return DiffRequest(
        from_seq=u64_field(body, "from_seq", 0),
        limit=min(limit, max_limit) if limit else DEFAULT_DIFF_LIMIT,
        nodes=parse_nodes(body["node"]) if "node" in body else (),
        include_tags=bool_field(body, "include_tags", False),
        include_meta=bool_field(body, "include_meta", True),
        wait_ms=min(u32_field(body, "wait_ms", 0), MAX_WAIT_MS),
        max_batch_bytes=min(batch, max_batch) if batch else DEFAULT_BATCH_BYTES,
    )
