"""The payload blob of an Append frame: `{"d":<data>}` or `{"d":<data>,"m":<meta>}`. Pure.

Written from already-compact JSON parts without re-serializing; `decode_blob` slices a
blob it recognizes as ours and parses anything else exactly.
"""

from __future__ import annotations

import orjson

from seglog.core.frames import FrameError
from seglog.core.jsonbytes import json_bytes


def encode_blob(data_json: bytes, meta_json: bytes | None) -> bytes:
    """`{"d":<data>}` or `{"d":<data>,"m":<meta>}` from compact JSON parts."""
    if meta_json is None:
        return b'{"d":' + data_json + b"}"
    return b'{"d":' + data_json + b',"m":' + meta_json + b"}"


def decode_blob(blob: bytes) -> tuple[bytes, bytes | None]:
    """Compact JSON of data and meta. A blob we wrote without meta is sliced, not parsed:
    any `"m"` anywhere sends it to the exact (parsing) path, so a data value that merely
    contains that text is still decoded correctly."""
    if blob.startswith(b'{"d":') and blob.endswith(b"}") and blob.find(b'"m"', 5) < 0:
        return blob[5:-1], None
    try:
        obj = orjson.loads(blob)
    except orjson.JSONDecodeError as e:
        raise FrameError(f"payload blob is not JSON: {e}") from None
    if not isinstance(obj, dict) or "d" not in obj or not obj.keys() <= {"d", "m"}:
        raise FrameError("payload blob is not {'d': ...[, 'm': ...]}")
    return json_bytes(obj["d"]), (json_bytes(obj["m"]) if "m" in obj else None)
