"""What a router copy looks like (SEMANTICS §8.3 step 3, §8.6). Pure: bytes in, bytes out.

An `exactly_once` copy carries the router key in its `meta`:

    "_topics_router": {"idempotency_key": "router:<name>:<source topic_id>:<epoch>:<seq>",
                       "router", "source_topic", "source_topic_id", "source_epoch",
                       "source_seq"}

added to the original meta object when it has fewer than 64 keys (or already has the key);
any other original meta is wrapped as `{"_topics_router": …, "_topics_original_meta": …}`.
A record without meta gets `{"_topics_router": …}` alone: there is no original value to keep.
"""

from __future__ import annotations

from typing import Any

import orjson

from seglog.core.jsonbytes import json_bytes
from seglog.model import MAX_META_BYTES, MAX_META_KEYS, MAX_RECORD_BYTES

ROUTER_KEY = "_topics_router"
ORIGINAL_META_KEY = "_topics_original_meta"


def router_key(router: str, source_topic_id: int, epoch: int, seq: int) -> str:
    return f"router:{router}:{source_topic_id}:{epoch}:{seq}"


def exactly_once_meta(
    meta_json: bytes | None,
    router: str,
    source: str,
    source_topic_id: int,
    epoch: int,
    seq: int,
) -> bytes:
    """The copy's meta (compact JSON) for the §8.6 rules."""
    key = {
        "idempotency_key": router_key(router, source_topic_id, epoch, seq),
        "router": router,
        "source_topic": source,
        "source_topic_id": source_topic_id,
        "source_epoch": epoch,
        "source_seq": seq,
    }
    if meta_json is None:
        return json_bytes({ROUTER_KEY: key})
    original: Any = orjson.loads(meta_json)
    if isinstance(original, dict) and (len(original) < MAX_META_KEYS or ROUTER_KEY in original):
        return json_bytes({**original, ROUTER_KEY: key})
    return json_bytes({ROUTER_KEY: key, ORIGINAL_META_KEY: original})


def copy_is_valid(data_json: bytes, meta_json: bytes | None) -> bool:
    """Whether a copy passes the record rules of SEMANTICS §1.2 (a router key can push a
    meta that was within the limits over them)."""
    meta_len = 0 if meta_json is None else len(meta_json)
    if len(data_json) + meta_len > MAX_RECORD_BYTES or meta_len > MAX_META_BYTES:
        return False
    if meta_json is not None and meta_json.startswith(b"{"):
        obj = orjson.loads(meta_json)
        if isinstance(obj, dict) and len(obj) > MAX_META_KEYS:
            return False
    return True


def router_source_seq(meta_json: bytes | None, router: str, source_topic_id: int) -> int | None:
    """The source seq an `exactly_once` copy of `router` carries in its meta, or None (used
    to rebuild the duplicate index from a recovered dest)."""
    if meta_json is None or ROUTER_KEY.encode() not in meta_json:
        return None
    try:
        obj = orjson.loads(meta_json)
    except orjson.JSONDecodeError:
        return None
    key = obj.get(ROUTER_KEY) if isinstance(obj, dict) else None
    if not isinstance(key, dict):
        return None
    if key.get("router") != router or key.get("source_topic_id") != source_topic_id:
        return None
    seq = key.get("source_seq")
    return seq if isinstance(seq, int) and not isinstance(seq, bool) else None
