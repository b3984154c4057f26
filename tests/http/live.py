"""Assertions and small request helpers for the black-box (`test_live_*`) HTTP suite."""

from __future__ import annotations

import base64
import socket
import time
from typing import Any

import httpx
import orjson

JSON = {"Content-Type": "application/json"}

CONFIG_KEYS = [
    "type",
    "ttl_ms",
    "cap_records",
    "cap_bytes",
    "discard",
    "durable",
    "durability",
    "priority",
    "auto_priority",
    "auto_create",
    "idempotency_window_ms",
    "dedupe_node",
    "lease_ms",
    "claim_jitter_ms",
    "max_deliveries",
    "dead_letter",
    "leases_durable",
]

DEFAULT_CONFIG: dict[str, Any] = {
    "type": "log",
    "ttl_ms": 0,
    "cap_records": 0,
    "cap_bytes": 0,
    "discard": "old",
    "durable": False,
    "durability": "disk",
    "priority": None,
    "auto_priority": True,
    "auto_create": True,
    "idempotency_window_ms": 120000,
    "dedupe_node": True,
    "lease_ms": 30000,
    "claim_jitter_ms": 0,
    "max_deliveries": 0,
    "dead_letter": None,
    "leases_durable": False,
}

WRITE_KEYS = {"topic", "first_seq", "last_seq", "head_seq", "count", "created", "deduped"}
STATE_KEYS = {
    "topic",
    "type",
    "head_seq",
    "earliest_seq",
    "next_seq",
    "count",
    "bytes",
    "config",
    "effective_priority",
    "last_write_ts",
    "last_read_ts",
}
DIFF_KEYS = {
    "topic",
    "records",
    "next_from_seq",
    "head_seq",
    "earliest_seq",
    "caught_up",
    "tombstone",
    "lag",
}
DELETE_KEYS = {"topic", "deleted", "earliest_seq", "head_seq", "count", "bytes"}
LIST_ROW_KEYS = {
    "topic",
    "head_seq",
    "earliest_seq",
    "count",
    "bytes",
    "durable",
    "effective_priority",
}


def describe(r: httpx.Response) -> str:
    return f"{r.request.method} {r.request.url} -> {r.status_code} {r.text[:500]!r}"


def error_of(
    r: httpx.Response,
    status: int,
    code: str,
    *,
    detail: dict[str, Any] | None = None,
    message_prefix: str | None = None,
) -> dict[str, Any]:
    """Assert `r` is the canonical error body (API §0.5) with this status/code; return the
    inner `error` object."""
    assert r.status_code == status, describe(r)
    assert r.headers.get("content-type", "").startswith("application/json"), describe(r)
    body = r.json()
    assert isinstance(body, dict) and set(body) == {"error"}, describe(r)
    err = body["error"]
    assert isinstance(err, dict), describe(r)
    assert {"code", "message"} <= set(err) <= {"code", "message", "detail"}, describe(r)
    assert err["code"] == code, describe(r)
    assert isinstance(err["message"], str) and err["message"], describe(r)
    if "detail" in err:
        assert isinstance(err["detail"], dict), describe(r)
    if detail is not None:
        assert err.get("detail") == detail, describe(r)
    if message_prefix is not None:
        assert err["message"].startswith(message_prefix), describe(r)
    if status == 429 or code == "not_ready":
        assert r.headers.get("retry-after") == "1", describe(r)
    return err


def is_canonical_error(r: httpx.Response) -> bool:
    try:
        body = r.json()
    except ValueError:
        return False
    if not isinstance(body, dict) or set(body) != {"error"}:
        return False
    err = body["error"]
    return (
        isinstance(err, dict)
        and {"code", "message"} <= set(err) <= {"code", "message", "detail"}
        and isinstance(err["code"], str)
        and isinstance(err["message"], str)
        and bool(err["message"])
        and isinstance(err.get("detail", {}), dict)
    )


def ok(r: httpx.Response, status: int = 200, *, perf: bool = True) -> dict[str, Any]:
    """Assert a success JSON body (bare object, no envelope) and its `performance` block."""
    assert r.status_code == status, describe(r)
    assert r.headers.get("content-type", "").startswith("application/json"), describe(r)
    body = r.json()
    assert isinstance(body, dict), describe(r)
    assert "error" not in body, describe(r)
    if perf:  # data/control endpoints: no envelope keys, a performance block
        assert "status" not in body, describe(r)
        p = body.get("performance")
        assert isinstance(p, dict), describe(r)
        assert isinstance(p.get("server_total_ms"), float), describe(r)
        assert p["server_total_ms"] >= 0.0
    return body


def put_topic(
    c: httpx.Client, name: str, config: dict[str, Any] | None = None, status: int = 201
) -> dict[str, Any]:
    if config is None:
        return ok(c.put(f"/v0/topics/{name}"), status)
    return ok(c.put(f"/v0/topics/{name}", json=config), status)


def write(
    c: httpx.Client,
    name: str,
    records: list[dict[str, Any]],
    status: int | None = None,
    **fields: Any,
) -> dict[str, Any]:
    r = c.post(f"/v0/topics/{name}", json={"records": records, **fields})
    assert r.status_code in ((status,) if status else (200, 201)), describe(r)
    return ok(r, r.status_code)


def data_records(*values: Any) -> list[dict[str, Any]]:
    return [{"data": v} for v in values]


def diff(c: httpx.Client, name: str, **body: Any) -> dict[str, Any]:
    return ok(c.post(f"/v0/topics/{name}/diff", json=body))


def state(c: httpx.Client, name: str, touch: bool = False) -> dict[str, Any]:
    return ok(c.get(f"/v0/topics/{name}", params={"touch": "true" if touch else "false"}))


def seqs_of(d: dict[str, Any]) -> list[int]:
    return [rec["$seq"] for rec in d["records"]]


def cursor_for(after: str) -> str:
    return base64.b64encode(orjson.dumps({"after": after})).decode()


def now_ms() -> int:
    return int(time.time() * 1000)


def json_size(value: Any) -> int:
    return len(orjson.dumps(value))


class RawResponse:
    """A response read off a raw socket (for requests h11/httpx refuse to send, such as
    header values with leading/trailing whitespace)."""

    def __init__(self, status: int, headers: dict[str, str], body: bytes) -> None:
        self.status_code = status
        self.headers = headers
        self.content = body

    def json(self) -> Any:
        return orjson.loads(self.content)


def raw_http(
    address: str,
    method: str,
    path: str,
    headers: list[tuple[str, str]] | None = None,
    body: bytes = b"",
) -> RawResponse:
    """One HTTP/1.1 request over a fresh socket, bytes exactly as given (`Connection: close`)."""
    host, _, port = address.rpartition(":")
    lines = [f"{method} {path} HTTP/1.1", f"Host: {address}", "Connection: close"]
    lines += [f"{k}:{v}" for k, v in headers or []]
    if body or method in ("POST", "PUT"):
        lines.append(f"Content-Length: {len(body)}")
    payload = ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + body
    with socket.create_connection((host.strip("[]"), int(port)), timeout=10) as s:
        s.sendall(payload)
        chunks: list[bytes] = []
        while True:
            chunk = s.recv(65536)
            if not chunk:
                break
            chunks.append(chunk)
    raw = b"".join(chunks)
    head, _, rest = raw.partition(b"\r\n\r\n")
    status_line, *header_lines = head.decode("latin-1").split("\r\n")
    hdrs = {}
    for line in header_lines:
        k, _, v = line.partition(":")
        hdrs[k.strip().lower()] = v.strip()
    if hdrs.get("transfer-encoding", "").lower() == "chunked":
        out = b""
        while rest:
            size_s, _, rest = rest.partition(b"\r\n")
            size = int(size_s.split(b";")[0], 16)
            if size == 0:
                break
            out, rest = out + rest[:size], rest[size + 2 :]
        rest = out
    return RawResponse(int(status_line.split()[1]), hdrs, rest)


def raw_error_of(r: RawResponse, status: int, code: str) -> None:
    assert r.status_code == status, (r.status_code, r.content)
    body = r.json()
    assert set(body) == {"error"} and body["error"]["code"] == code, body
