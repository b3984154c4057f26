"""The watch stream's composite cursor (API.md §7.4): the `id:` of every SSE frame.

It is the unpadded base64url encoding of the compact JSON object mapping each watched topic to
its cursor, keys sorted: `{"events":88130,"jobs":5210}` → `eyJldmVudHMiOjg4MTMwLCJqb2JzIjo1MjEwfQ`.
The client re-encodes its own per-topic cursors rather than echoing the server's ids, so the
`Last-Event-ID` it sends never claims more than it actually handed out.
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Mapping

import orjson

from seglog.client.exceptions import SeglogProtocolError

U64_MAX = 2**64 - 1


def encode_cursor(cursors: Mapping[str, int]) -> str:
    """Compact, key-sorted JSON, base64url without padding."""
    raw = orjson.dumps(dict(cursors), option=orjson.OPT_SORT_KEYS)
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode("ascii")


def decode_cursor(value: str) -> dict[str, int]:
    """Inverse of `encode_cursor`; padding is optional. Raises `SeglogProtocolError` for
    anything that is not a base64url JSON object of topic → u64."""
    text = value.strip()
    try:
        raw = base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
        obj = orjson.loads(raw)
    except (binascii.Error, ValueError) as exc:
        raise SeglogProtocolError(f"malformed watch cursor {value!r}: {exc}") from exc
    if not isinstance(obj, dict):
        raise SeglogProtocolError(f"malformed watch cursor {value!r}: not a JSON object")
    out: dict[str, int] = {}
    for topic, seq in obj.items():
        # bool is an int subclass; JSON true is not a cursor.
        if isinstance(seq, bool) or not isinstance(seq, int) or not 0 <= seq <= U64_MAX:
            raise SeglogProtocolError(f"malformed watch cursor {value!r}: bad seq for {topic!r}")
        out[topic] = seq
    return out
