"""The payload blob of an Append frame: `{"d":<data>}` or `{"d":<data>,"m":<meta>}`. Pure.

Written from already-compact JSON parts without re-serializing; `decode_blob` slices a
blob it recognizes as ours and parses anything else exactly.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
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


_PREFIX = np.frombuffer(b'{"d":', np.uint8)
_CLOSE = ord("}")


def decode_blobs(blobs: Sequence[bytes]) -> tuple[list[bytes], list[bytes | None]]:
    """`decode_blob` of each blob, as a data column and a meta column. When every blob is
    ours without meta (the common case) the checks run once over all of them joined —
    the prefix and the closing brace of each at its offset, `"m"` nowhere — and each
    blob is only sliced; otherwise each goes through `decode_blob`, with its result and
    its error."""
    n = len(blobs)
    joined = b"".join(blobs)
    if n and b'"m"' not in joined:
        lens = np.fromiter(map(len, blobs), np.int64, n)
        if int(lens.min()) >= 6:
            ends = np.cumsum(lens)
            starts = ends - lens
            buf = np.frombuffer(joined, np.uint8)
            heads = buf[starts[:, None] + np.arange(5)]
            if (heads == _PREFIX).all() and (buf[ends - 1] == _CLOSE).all():
                return [b[5:-1] for b in blobs], [None] * n
    data: list[bytes] = []
    meta: list[bytes | None] = []
    for b in blobs:
        d, m = decode_blob(b)
        data.append(d)
        meta.append(m)
    return data, meta
