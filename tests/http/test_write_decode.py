"""The append body's fast path (`decode_write_fast`) never decides anything the slow path
(`parse_write(parse_json_body(raw))`) would decide differently: whenever it answers, its
answer equals the slow path's result, and the slow path did not raise. And it does answer
for the bodies clients actually send, or it would be no faster."""

from __future__ import annotations

import contextlib
import dataclasses
import json
from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from seglog.core import native
from seglog.errors import SeglogError
from seglog.http.json_body import parse_json_body
from seglog.http.write_decode import (
    decode_write_fast,
    record_columns_lines_py,
    record_columns_py,
)
from seglog.http.write_request import WriteRequest, parse_write
from seglog.model import MAX_NODE_BYTES, MAX_RECORD_BYTES, MAX_TAG_BYTES, RecordBatch, RecordIn


def slow(raw: bytes) -> WriteRequest | SeglogError:
    try:
        return parse_write(parse_json_body(raw))
    except SeglogError as e:
        return e


def listed(req: WriteRequest) -> WriteRequest:
    """`req` with its records as a list of `RecordIn` (the fast path's are a batch)."""
    return dataclasses.replace(req, records=list(req.records))


def check(raw: bytes) -> WriteRequest | None:
    fast = decode_write_fast(raw)
    if fast is not None:
        expected = slow(raw)
        assert not isinstance(expected, SeglogError), (raw[:300], expected)
        assert isinstance(fast.records, RecordBatch)
        assert listed(fast) == listed(expected), raw[:300]
    return fast


scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**64), max_value=2**65),
    st.floats(allow_nan=False, allow_infinity=False),
    st.text(max_size=12),
)
json_values = st.recursive(
    scalars,
    lambda kids: st.one_of(
        st.lists(kids, max_size=4), st.dictionaries(st.text(max_size=6), kids, max_size=4)
    ),
    max_leaves=12,
)
odd_strings = st.one_of(st.text(max_size=8), st.text(min_size=60, max_size=300), st.none())
field_values = st.one_of(odd_strings, st.integers(), st.booleans(), json_values)


@st.composite
def records(draw: Any) -> dict[str, Any]:
    rec: dict[str, Any] = {}
    if draw(st.integers(0, 20)):
        rec["data"] = draw(json_values)
    for key in ("tag", "node"):
        if draw(st.booleans()):
            rec[key] = draw(st.one_of(st.text(max_size=8), field_values))
    if draw(st.integers(0, 3)) == 0:
        rec["meta"] = draw(st.one_of(json_values, st.dictionaries(st.text(max_size=3), scalars)))
    if draw(st.integers(0, 10)) == 0:
        rec["extra"] = draw(json_values)
    return rec


@st.composite
def bodies(draw: Any) -> dict[str, Any]:
    body: dict[str, Any] = {"records": draw(st.lists(records(), max_size=6))}
    for key, values in (
        ("node", field_values),
        ("idempotency_key", field_values),
        ("create", st.one_of(st.booleans(), st.none(), st.integers())),
        ("disable_backpressure", st.one_of(st.booleans(), st.none())),
        ("config", st.one_of(st.none(), st.just({"durability": "disk"}), st.integers())),
    ):
        if draw(st.integers(0, 4)) == 0:
            body[key] = draw(values)
    if draw(st.integers(0, 20)) == 0:
        body["records"] = draw(json_values)
    return body


def encodings(body: Any) -> list[bytes]:
    """The same body as clients write it: compact, with spaces, ASCII-escaped."""
    out = []
    try:
        out.append(orjson.dumps(body))
    except TypeError:  # an integer orjson cannot encode
        pass
    out.append(json.dumps(body).encode())
    out.append(json.dumps(body, ensure_ascii=False, separators=(",", ":")).encode())
    out.append(json.dumps(body, indent=1).encode())
    return out


@settings(max_examples=400)
@given(bodies())
def test_fast_path_equals_slow_path(body: dict[str, Any]) -> None:
    for raw in encodings(body):
        check(raw)


@settings(max_examples=200)
@given(bodies(), st.data())
def test_fast_path_equals_slow_path_on_mangled_bytes(body: dict[str, Any], data: Any) -> None:
    raw = bytearray(json.dumps(body, separators=(",", ":")).encode())
    for _ in range(data.draw(st.integers(1, 3))):
        if not raw:
            break
        at = data.draw(st.integers(0, len(raw) - 1))
        raw[at : at + 1] = data.draw(
            st.sampled_from([b"", b" ", b"\\", b'"', b",", b"1e999", b"\xff", b"\\ud800", b"}"])
        )
    check(bytes(raw))


@pytest.mark.parametrize(
    "raw",
    [
        b'{"records":[{"data":1,"data":2}]}',  # duplicate keys: the last wins in both
        b'{"records":[{"data":{"a":1,"a":2}}]}',  # ... inside data: must be re-encoded
        b'{"records":[{"data":18446744073709551616}]}',  # beyond 64 bits
        b'{"records":[{"data":1e400}]}',
        b'{"records":[{"data":-0}]}',
        b'{"records":[{"data":1.50}]}',
        b'{"records":[{"data":"\\u00e9"}]}',  # an escape orjson would not write
        b'{"records":[{"data":"\xff"}]}',  # not UTF-8
        b'{"records":[{"data":"\\ud800"}]}',  # a lone surrogate
        b'{"records":[{"data":1,"tag":null}]}',
        b'{"records":[{"data":1,"meta":null}]}',
        b'{"records":[{"data":1}],"node":null}',
        b'{"records":[{"data":1}],"config":{"durability":"disk"}}',
        b'{"records":[{"data":1}],"records":[{"data":2}]}',
        b'{"records":[]}',
        b'{"records":[{"data":' + b"[" * 300 + b"]" * 300 + b"}]}",  # too deep to encode
        b'{"records":[{"data":' + b"[" * 2000 + b"]" * 2000 + b"}]}",  # too deep to decode
        b"",
        b"[]",
    ],
)
def test_edge_bodies(raw: bytes) -> None:
    check(raw)


def test_limits_are_left_to_the_slow_path() -> None:
    big = orjson.dumps({"records": [{"data": "x" * MAX_RECORD_BYTES}]})
    assert decode_write_fast(big) is None
    assert isinstance(slow(big), SeglogError)
    long_tag = orjson.dumps({"records": [{"data": 1, "tag": "é" * MAX_TAG_BYTES}]})
    assert decode_write_fast(long_tag) is None
    assert isinstance(slow(long_tag), SeglogError)
    many = orjson.dumps({"records": [{"data": 1}] * 10_001})
    assert decode_write_fast(many) is None


def test_the_bodies_clients_send_take_the_fast_path() -> None:
    recs = [
        {"data": {"user": f"u{i}", "n": i, "ok": True, "x": 1.5, "s": "a b"}, "tag": "t"}
        for i in range(100)
    ]
    recs[3]["meta"] = {"k": "v"}
    recs[4]["node"] = "n1"
    raw = orjson.dumps({"records": recs, "node": "batch", "idempotency_key": "k1"})
    fast = check(raw)
    assert fast is not None
    assert fast.records[0] == RecordIn(orjson.dumps(recs[0]["data"]), None, "batch", "t")
    assert fast.records[3].meta_json == b'{"k":"v"}'
    assert fast.records[4].node == "n1"
    assert fast.idempotency_key == "k1"
    assert check(b'{"records":[{"data":null}]}') is not None


@settings(max_examples=300)
@given(st.lists(records(), min_size=1, max_size=6), st.one_of(st.none(), st.text(max_size=8)))
def test_lines_fast_path_equals_slow_path(recs: list[dict[str, Any]], node: str | None) -> None:
    """NDJSON lines (API §13.2): each line decoded on its own equals `parse_write` of that
    line as a one-record batch with the query's node."""
    from seglog.http.write_decode import decode_lines_fast

    for sep in ((",", ":"), (", ", ": ")):
        lines = [json.dumps(r, separators=sep, ensure_ascii=False).encode() for r in recs]
        fast = decode_lines_fast(lines, node)
        if fast is None:
            continue
        batch = {} if node is None else {"node": node}
        slow = [parse_write({"records": [parse_json_body(ln)], **batch}).records[0] for ln in lines]
        assert list(fast) == slow


def test_lines_fast_path_is_taken_and_never_spans_lines() -> None:
    from seglog.http.write_decode import decode_lines_fast

    fast = decode_lines_fast([b'{"data":1}', b'{"data":{"a":[2]},"tag":"x"}'], "n")
    assert fast is not None and list(fast) == [
        RecordIn(b"1", None, "n", None),
        RecordIn(b'{"a":[2]}', None, "n", "x"),
    ]
    assert decode_lines_fast([b'{"data":[1', b'2]},{"data":3}'], None) is None
    assert decode_lines_fast([b'{"data":1},{"data":2}'], None) is None


needs_native = pytest.mark.skipif(native.speedups is None, reason="seglog._speedups not built")


def c_columns(records: bytes) -> Any:
    assert native.speedups is not None
    return native.speedups.record_columns(records, MAX_RECORD_BYTES, MAX_TAG_BYTES, MAX_NODE_BYTES)


def records_texts(body: dict[str, Any]) -> list[bytes]:
    """`body`'s records array as clients write it (compact, spaced, indented)."""
    recs = body["records"]
    out = [json.dumps(recs).encode(), json.dumps(recs, indent=1, ensure_ascii=False).encode()]
    with contextlib.suppress(TypeError):  # an integer orjson cannot encode
        out.append(orjson.dumps(recs))
    return out


@needs_native
@settings(max_examples=400)
@given(bodies())
def test_the_c_columns_are_the_full_decodes_whenever_given(body: dict[str, Any]) -> None:
    for text in records_texts(body):
        got = c_columns(text)
        if got is not None:
            assert got == record_columns_py(text), text[:300]


printable = st.text(st.characters(min_codepoint=0x20, blacklist_categories=("Cs",)), max_size=8)
plain_values = st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(-(10**18) + 1, 10**18 - 1), printable),
    lambda kids: st.one_of(
        st.lists(kids, max_size=3), st.dictionaries(printable, kids, max_size=3)
    ),
    max_leaves=8,
)
labels = st.one_of(
    st.sampled_from(["t1", "t2", "é", "\U0001f600"]),
    printable,
    st.sampled_from(['q"', "a\\b", "x" * 300, "é" * 130]),
)


@st.composite
def common_records(draw: Any) -> bytes:
    """Record arrays mostly in the form the C pass takes: data without floats, string
    labels (some too long or needing escapes), now and then a meta or another key; with
    or without whitespace between the tokens."""
    spaced = draw(st.booleans())
    recs = []
    for _ in range(draw(st.integers(1, 5))):
        fields = [("data", draw(plain_values))]
        for key in ("tag", "node"):
            if draw(st.booleans()):
                fields.append((key, draw(labels)))
        if draw(st.integers(0, 15)) == 0:
            fields.append((draw(st.sampled_from(["meta", "extra", "data", "tag"])), 1))
        order = draw(st.permutations(fields))
        sep, colon = (" , ", " : ") if spaced else (",", ":")
        text = sep.join(f"{json.dumps(k)}{colon}{orjson.dumps(v).decode()}" for k, v in order)
        recs.append("{" + text + "}")
    return ("[" + (" , " if spaced else ",").join(recs) + "]").encode()


@needs_native
@settings(max_examples=400)
@given(common_records())
def test_the_c_columns_of_common_records_are_the_full_decodes(text: bytes) -> None:
    got = c_columns(text)
    if got is not None:
        assert got == record_columns_py(text), text[:300]


@needs_native
@settings(max_examples=100)
@given(bodies(), st.data())
def test_the_c_columns_on_mangled_bytes(body: dict[str, Any], data: Any) -> None:
    raw = bytearray(json.dumps(body["records"], separators=(",", ":")).encode())
    for _ in range(data.draw(st.integers(1, 3))):
        if not raw:
            break
        at = data.draw(st.integers(0, len(raw) - 1))
        raw[at : at + 1] = data.draw(
            st.sampled_from([b"", b" ", b"\\", b'"', b",", b"}", b"]", b"{", b":", b"\xff"])
        )
    got = c_columns(bytes(raw))
    if got is not None:
        assert got == record_columns_py(bytes(raw))


@needs_native
def test_the_common_records_take_the_c_pass() -> None:
    recs = [{"data": {"user": f"u{i}", "n": i, "ok": True}, "tag": f"t{i % 3}"} for i in range(50)]
    recs[7]["node"] = "n1"
    spaced = (
        "[\n "
        + ",\n ".join(
            " { " + " , ".join(f'"{k}" : {orjson.dumps(v).decode()}' for k, v in r.items()) + " } "
            for r in recs
        )
        + " ]\n"
    )  # whitespace between the tokens; each data value compact (canonical)
    for text in (orjson.dumps(recs), spaced.encode()):
        got = c_columns(text)
        assert got is not None and got == record_columns_py(text)
        data, tags, nodes, own = got
        assert data[1] == b'{"user":"u1","n":1,"ok":true}' and own and nodes[7] == "n1"
        assert tags[0] is tags[3]  # one str per distinct label
    # left to the full decode: a float, an escape, a meta, another key, a duplicate, a null
    for rec in (
        b'{"data":1.5}', b'{"data":"\\u00e9"}', b'{"data":1,"meta":{}}', b'{"data":1,"x":1}',
        b'{"data":1,"data":2}', b'{"data":1,"tag":null}', b'{"data":1,"tag":"a\\"b"}',
        b'{"tag":"t"}', b"[]", b'{"data":1}x', b'{"data":1,}', b'{"data":1}]x',
    ):  # fmt: skip
        assert c_columns(b"[" + rec + b"]") is None, rec
    long_tag = orjson.dumps([{"data": 1, "tag": "é" * (MAX_TAG_BYTES // 2 + 1)}])
    assert c_columns(long_tag) is None
    assert c_columns(orjson.dumps([{"data": "x" * MAX_RECORD_BYTES}])) is None


def c_line_columns(lines: list[bytes]) -> Any:
    assert native.speedups is not None
    return native.speedups.record_columns_lines(
        lines, MAX_RECORD_BYTES, MAX_TAG_BYTES, MAX_NODE_BYTES
    )


def as_lines(array: bytes) -> list[bytes]:
    """A `common_records` array's records, one per line (cut at its top-level commas, so
    a mangled one may cut a record in two or leave two on one line)."""
    inner = array.strip()[1:-1]
    out, depth, start, in_string, escaped = [], 0, 0, False, False
    for i, ch in enumerate(inner):
        if in_string:
            escaped = not escaped and ch == 0x5C
            in_string = escaped or ch != 0x22
        elif ch == 0x22:
            in_string = True
        elif ch in b"[{":
            depth += 1
        elif ch in b"]}":
            depth -= 1
        elif ch == 0x2C and depth == 0:
            out.append(inner[start:i])
            start = i + 1
    return [*out, inner[start:]]


@needs_native
@settings(max_examples=400)
@given(common_records(), st.data())
def test_the_c_line_columns_are_the_per_line_decodes(text: bytes, data: Any) -> None:
    lines = as_lines(text)
    if data.draw(st.booleans()) and len(lines) > 1:  # two records on one line, or one cut
        at = data.draw(st.integers(0, len(lines) - 2))
        joint = data.draw(st.sampled_from([b",", b"", b" "]))
        lines[at : at + 2] = [lines[at] + joint + lines[at + 1]]
    got = c_line_columns(lines)
    if got is not None:  # the per-line decodes, and the records' columns as one array
        assert got == record_columns_lines_py(lines), lines
        assert got == c_columns(b"[" + b",".join(lines) + b"]")


@needs_native
def test_the_c_line_columns_refuse_what_is_not_one_record_per_line() -> None:
    assert c_line_columns([b'{"data":1}', b' {"data":[2]} ']) == (
        [b"1", b"[2]"],
        [None, None],
        [None, None],
        False,
    )
    for lines in (
        [], [b'{"data":1},{"data":2}'], [b'{"data":[1', b'2]}'], [b'{"data":1}x'],
        [b'{"data":1}', b""], [b'[{"data":1}]'],
    ):  # fmt: skip
        assert c_line_columns(lines) is None, lines
    assert c_line_columns([bytearray(b'{"data":1}')]) is None  # left to the full decode
    assert record_columns_lines_py([bytearray(b'{"data":1}')]) is not None
