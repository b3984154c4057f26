"""Router copies' exactly-once metadata (SEMANTICS §8.6) and copy validation."""

from __future__ import annotations

import orjson

from seglog.core.router_copy import (
    copy_is_valid,
    exactly_once_meta,
    router_key,
    router_source_seq,
)

KEY = {
    "idempotency_key": "router:r:7:1:42",
    "router": "r",
    "source_topic": "src",
    "source_topic_id": 7,
    "source_epoch": 1,
    "source_seq": 42,
}


def _meta(original: object) -> object:
    raw = None if original is None else orjson.dumps(original)
    return orjson.loads(exactly_once_meta(raw, "r", "src", 7, 1, 42))


def test_router_key_format() -> None:
    assert router_key("a->b", 3, 1, 9) == "router:a->b:3:1:9"


def test_key_added_to_a_small_object() -> None:
    assert _meta({"trace": "z"}) == {"trace": "z", "_topics_router": KEY}


def test_no_meta_gets_the_key_alone() -> None:
    assert _meta(None) == {"_topics_router": KEY}


def test_non_object_meta_is_wrapped() -> None:
    assert _meta([1, 2]) == {"_topics_router": KEY, "_topics_original_meta": [1, 2]}
    assert _meta("s") == {"_topics_router": KEY, "_topics_original_meta": "s"}


def test_full_object_is_wrapped_unless_it_has_the_key() -> None:
    full = {f"k{i}": i for i in range(64)}
    assert _meta(full) == {"_topics_router": KEY, "_topics_original_meta": full}
    has = {f"k{i}": i for i in range(63)} | {"_topics_router": "old"}
    assert _meta(has) == {**has, "_topics_router": KEY}
    small = {f"k{i}": i for i in range(63)}
    assert _meta(small) == {**small, "_topics_router": KEY}


def test_source_seq_round_trip() -> None:
    meta = exactly_once_meta(b'{"a":1}', "r", "src", 7, 1, 42)
    assert router_source_seq(meta, "r", 7) == 42
    assert router_source_seq(meta, "other", 7) is None
    assert router_source_seq(meta, "r", 8) is None
    assert router_source_seq(b'{"a":1}', "r", 7) is None
    assert router_source_seq(None, "r", 7) is None


def test_copy_validity_limits() -> None:
    assert copy_is_valid(b"1", None)
    assert copy_is_valid(b"1", b"{}")
    assert not copy_is_valid(b"1", b'"' + b"x" * 16384 + b'"')  # meta over 16384 bytes
    assert not copy_is_valid(b'"' + b"x" * 1_048_576 + b'"', None)  # record over 1 MiB
    many = orjson.dumps({f"k{i}": 0 for i in range(65)})
    assert not copy_is_valid(b"1", many)
