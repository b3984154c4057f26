"""The request parsers read exactly the fields their documented types declare.

The OpenAPI document's request schemas are generated from `wire_types`; the parsers are
hand-written (their error messages are part of the API). Each parser here runs on a body
that records every field it looks up, and the looked-up set must equal the type's fields:
a field parsed but undocumented, or documented but never read, fails. Response encoders
are held to their types by the type checker (`mypy`), and their real answers to the
generated schemas by `test_openapi_live.py`."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from seglog.errors import SeglogError
from seglog.http import wire_types as w
from seglog.http.delete_request import parse_delete
from seglog.http.diff_request import parse_diff
from seglog.http.openapi_schemas import SCHEMAS
from seglog.http.queue_request import parse_ack, parse_claim, parse_extend, parse_nack
from seglog.http.router_request import parse_router
from seglog.http.topic_config import parse_config
from seglog.http.watch_request import parse_watch
from seglog.http.write_request import parse_write


class Recorder(dict[str, Any]):
    """A JSON object that remembers which of its keys were looked up, and refuses to be
    walked whole (then the lookups would not say which fields the parser knows)."""

    def __init__(self, seen: set[str], *args: Any) -> None:
        super().__init__(*args)
        self.seen = seen

    def __contains__(self, key: object) -> bool:
        self.seen.add(str(key))
        return super().__contains__(key)

    def __getitem__(self, key: str) -> Any:
        self.seen.add(key)
        return super().__getitem__(key)

    def get(self, key: str, default: Any = None) -> Any:
        self.seen.add(key)
        return super().get(key, default)

    def __iter__(self) -> Any:
        raise AssertionError("the parser walked the whole object")

    def keys(self) -> Any:
        raise AssertionError("the parser walked the whole object")

    def items(self) -> Any:
        raise AssertionError("the parser walked the whole object")


def fields(t: Any) -> set[str]:
    return set(t.__required_keys__ | t.__optional_keys__)


def read_by(parse: Callable[[Recorder], object], body: dict[str, Any]) -> set[str]:
    seen: set[str] = set()
    try:
        parse(Recorder(seen, body))
    except SeglogError as e:  # the lookups before the error still count
        pytest.fail(f"a minimal valid body was refused: {e}")
    return seen


CASES: list[tuple[str, Any, Callable[[Any], object], dict[str, Any]]] = [
    ("config", w.TopicConfigRequest, parse_config, {}),
    ("diff", w.DiffRequest, parse_diff, {}),
    ("delete", w.DeleteRequest, parse_delete, {"before_seq": 3}),
    ("router", w.RouterRequest, lambda b: parse_router("r", b), {"source": "a", "dest": "b"}),
    ("claim", w.ClaimRequest, parse_claim, {"node": "n"}),
    ("ack", w.AckRequest, parse_ack, {"node": "n", "seqs": [1]}),
    ("nack", w.NackRequest, parse_nack, {"node": "n", "seqs": [1]}),
    ("extend", w.ExtendRequest, parse_extend, {"node": "n", "seqs": [1], "lease_ms": 1000}),
    ("watch", w.WatchRequest, parse_watch, {"topics": {"t": {}}}),
    ("write", w.WriteRequest, parse_write, {"records": [{"data": 1}]}),
]


@pytest.mark.parametrize(("name", "typ", "parse", "body"), CASES, ids=[c[0] for c in CASES])
def test_each_parser_reads_exactly_its_documented_fields(
    name: str, typ: Any, parse: Callable[[Any], object], body: dict[str, Any]
) -> None:
    assert read_by(parse, body) == fields(typ)
    assert set(SCHEMAS[typ.__name__]["properties"]) == fields(typ)


def test_nested_objects_read_exactly_their_documented_fields() -> None:
    record: set[str] = set()
    parse_write({"records": [Recorder(record, {"data": 1})]})
    assert record == fields(w.RecordIn)
    start: set[str] = set()
    parse_watch({"topics": {"t": Recorder(start, {})}})
    assert start == fields(w.WatchTopicStart)


def test_the_recorder_catches_an_undocumented_field() -> None:
    def sloppy(body: Any) -> object:
        return (parse_diff(body), body.get("from_sequence"))

    assert read_by(sloppy, {}) != fields(w.DiffRequest)
