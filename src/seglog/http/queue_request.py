"""Bodies of the queue routes (API §9.1–§9.4) and the `/work` query (§9.5)."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from seglog.errors import ErrorCode, SeglogError, invalid
from seglog.http.body_fields import json_object, malformed, u32_field, u64_field, utf8_len
from seglog.http.query_params import query_int
from seglog.model import clamp_lease

MAX_CLAIM = 1000
MAX_SETTLE = 1000
MAX_NODE_BYTES = 128
DELAY_MS_MAX = 86_400_000
LEASE_PREFIX = "lease_"
_LEASE_ID = re.compile(LEASE_PREFIX + "([0-9a-f]+)")  # ASCII only: ranges are code points


@dataclass(frozen=True, slots=True)
class ClaimRequest:
    node: str  # checked by `check_node` after the topic lookup (API §9.1 check order)
    max: int
    lease_ms: int | None


@dataclass(frozen=True, slots=True)
class SettleRequest:
    """ack / nack / extend: `fences[i]` is the lease id required for `seqs[i]` (0 = none,
    -1 = `lease_0`, which no lease passes)."""

    node: str
    seqs: list[int]
    fences: list[int]
    delay_ms: int = 0
    lease_ms: int = 0


def lease_wire_id(lease_id: int) -> str:
    return f"{LEASE_PREFIX}{lease_id:x}"


def check_node(node: str) -> str:
    """Non-empty, at most 128 bytes (API §9.1, §9.5)."""
    if not node:
        raise invalid("node must be a non-empty string")
    if utf8_len(node, "node") > MAX_NODE_BYTES:
        raise invalid(
            f"node exceeds {MAX_NODE_BYTES} bytes", {"field": "node", "max": MAX_NODE_BYTES}
        )
    return node


def _node_field(body: dict[str, Any]) -> str:
    if "node" not in body:
        raise malformed("node is required")
    node = body["node"]
    if not isinstance(node, str):
        raise malformed("node must be a string")
    return node


def parse_claim(obj: Any) -> ClaimRequest:
    body = json_object(obj)
    node = _node_field(body)
    n = u32_field(body, "max", 1)
    lease = clamp_lease(u64_field(body, "lease_ms", 0)) if "lease_ms" in body else None
    return ClaimRequest(node, min(max(n, 1), MAX_CLAIM), lease)


def _settle_fields(body: dict[str, Any]) -> tuple[str, list[int], list[int]]:
    node = check_node(_node_field(body))
    if "seqs" not in body:
        raise malformed("seqs is required")
    seqs = body["seqs"]
    if not isinstance(seqs, list):
        raise malformed("seqs must be an array of unsigned integers")
    if len(seqs) > MAX_SETTLE:
        raise SeglogError(
            ErrorCode.BATCH_TOO_LARGE,
            f"seqs has {len(seqs)} entries; at most {MAX_SETTLE} per request",
            {"seqs": len(seqs), "max": MAX_SETTLE},
        )
    for s in seqs:
        if isinstance(s, bool) or not isinstance(s, int) or s < 0 or s > 2**64 - 1:
            raise malformed("seqs must be an array of unsigned integers")
    ids = body.get("lease_ids")
    if ids is None:
        return node, seqs, []
    if not isinstance(ids, list) or not all(isinstance(i, str) for i in ids):
        raise malformed("lease_ids must be an array of strings")
    if not ids:
        return node, seqs, []
    if len(ids) != len(seqs):
        raise invalid(
            f"lease_ids has {len(ids)} entries; it must match seqs ({len(seqs)})",
            {"seqs": len(seqs), "lease_ids": len(ids)},
        )
    return node, seqs, [_fence(i) for i in ids]


def _fence(wire: str) -> int:
    if wire == "":
        return 0
    m = _LEASE_ID.fullmatch(wire)
    if m is None:
        raise invalid(
            f'lease id {wire[:64]!r} is not "" or lease_<lowercase hex>',
            {"lease_id": wire[:64]},
        )
    # Lease ids start at 1, and fence 0 means "no fence" to the lease book: `lease_0` is
    # a fence no lease can pass, not a wildcard.
    return int(m[1], 16) or -1


def parse_ack(obj: Any) -> SettleRequest:
    node, seqs, fences = _settle_fields(json_object(obj))
    return SettleRequest(node, seqs, fences)


def parse_nack(obj: Any) -> SettleRequest:
    body = json_object(obj)
    node, seqs, fences = _settle_fields(body)
    delay = min(u64_field(body, "delay_ms", 0), DELAY_MS_MAX)
    return SettleRequest(node, seqs, fences, delay_ms=delay)


def parse_extend(obj: Any) -> SettleRequest:
    body = json_object(obj)
    node, seqs, fences = _settle_fields(body)
    if "lease_ms" not in body:
        raise malformed("lease_ms is required")
    return SettleRequest(node, seqs, fences, lease_ms=clamp_lease(u64_field(body, "lease_ms", 0)))


@dataclass(frozen=True, slots=True)
class WorkQuery:
    node: str
    max: int
    lease_ms: int | None


def parse_work_query(q: Mapping[str, str]) -> WorkQuery:
    """API §9.5: `node` required; `max` clamped to [1, 1000], unparseable ⇒ 1;
    `lease_ms` optional (clamped; unparseable ⇒ the topic's)."""
    node = check_node(q.get("node", ""))
    n = query_int(q.get("max"))
    raw = query_int(q.get("lease_ms"))
    lease = None if raw is None else clamp_lease(raw)
    return WorkQuery(node, 1 if n is None else min(max(n, 1), MAX_CLAIM), lease)
