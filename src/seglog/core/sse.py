"""Server-Sent Events wire pieces of the multiplexed watch (API §7.3, §7.4): frames, the
composite cursor, and its rewind-only merge. Pure: bytes and dicts in, bytes and dicts out.

A frame is `id: …\\nevent: …\\ndata: …\\n\\n` with `\\n` line endings; `data` is one line of
compact JSON (orjson never emits a raw newline, so one `data:` line always suffices).
The composite cursor is the unpadded base64url of the compact JSON object mapping every
watched topic to its cursor, keys sorted — always the full map.
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Mapping

import orjson

WID_PREFIX = "wid_"
WID_RANDOM_BYTES = 16
RETRY_MS = 2000
U64_MAX = (1 << 64) - 1


def new_wid(random16: bytes) -> str:
    """`wid_` + unpadded base64url of 16 random bytes (26 characters in all)."""
    if len(random16) != WID_RANDOM_BYTES:
        raise ValueError("a wid needs exactly 16 random bytes")
    return WID_PREFIX + base64.urlsafe_b64encode(random16).rstrip(b"=").decode("ascii")


def encode_cursor_map(cursors: Mapping[str, int]) -> str:
    raw = orjson.dumps(dict(cursors), option=orjson.OPT_SORT_KEYS)
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode("ascii")


def decode_cursor_map(value: str) -> dict[str, int]:
    """The topic → cursor entries of a `Last-Event-ID`; an undecodable id gives `{}`, and
    entries whose value is not a u64 are dropped (API §7.4: ignored, not an error)."""
    s = value.strip()
    if not s:
        return {}
    try:
        decoded = orjson.loads(base64.urlsafe_b64decode(s + "=" * (-len(s) % 4)))
    except (binascii.Error, ValueError):
        return {}
    if not isinstance(decoded, dict):
        return {}
    return {
        k: v
        for k, v in decoded.items()
        if type(v) is int and 0 <= v <= U64_MAX  # bool is not a cursor
    }


def rewind(session: Mapping[str, int], last_event: Mapping[str, int]) -> dict[str, int]:
    """A `Last-Event-ID` can only move cursors back: min per topic the session watches."""
    return {t: min(c, last_event[t]) if t in last_event else c for t, c in session.items()}


def frame(event: str, data: bytes, event_id: str | None = None) -> bytes:
    head = b"id: " + event_id.encode("ascii") + b"\n" if event_id is not None else b""
    return head + b"event: " + event.encode("ascii") + b"\ndata: " + data + b"\n\n"


def retry_frame(ms: int = RETRY_MS) -> bytes:
    return b"retry: %d\n\n" % ms


def heartbeat(now_ms: int) -> bytes:
    return b": hb %d\n\n" % now_ms


def record_data(
    topic_json: bytes, from_seq: int, head_seq: int, records_json: bytes, to_seq: int
) -> bytes:
    """A `record` frame's data, keys in the API's order; `records_json` is the already
    encoded array (shared by every watcher of the batch, never re-encoded)."""
    return b'{"topic":%b,"from_seq":%d,"head_seq":%d,"records":%b,"to_seq":%d}' % (
        topic_json,
        from_seq,
        head_seq,
        records_json,
        to_seq,
    )
