"""The C scan that proves append payloads canonical (`native.json_unproven`) against its
exact twin: it never proves a text the twin rejects (it is sound, on canonical, re-spaced,
re-escaped and byte-damaged JSON), and it proves every canonical text of the subset it
claims (so the fast path really skips orjson for the common payload)."""

from __future__ import annotations

import json
import os

import numpy as np
import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from seglog.core import native

if native.speedups is None and os.environ.get("SEGLOG_REQUIRE_NATIVE") == "1":
    pytest.fail("seglog._speedups is not built (SEGLOG_REQUIRE_NATIVE=1)", pytrace=False)

needs_native = pytest.mark.skipif(native.speedups is None, reason="seglog._speedups not built")


def c_unproven(texts: list[bytes]) -> list[int]:
    assert native.speedups is not None
    return native.speedups.json_unproven(texts)  # type: ignore[no-any-return]


# Everything JSON holds, floats, escapes, huge integers and duplicate-prone keys included.
any_scalar = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**64), max_value=2**65),
    st.floats(allow_nan=False, allow_infinity=False),
    st.text(max_size=12),
    st.sampled_from(["\x00", "\x7f", "\u2028", "é", "\U0001f600", '"', "\\", "\b\f\n\r\t"]),
)
any_json = st.recursive(
    any_scalar,
    lambda kids: st.one_of(
        st.lists(kids, max_size=5), st.dictionaries(st.text(max_size=4), kids, max_size=5)
    ),
    max_leaves=20,
)

# The subset the scan claims to prove: no floats, integers of at most 18 digits, strings
# whose control characters have short escapes, at most 32 keys per object.
short_int = st.integers(min_value=-(10**18) + 1, max_value=10**18 - 1)
proven_text = st.text(
    alphabet=st.characters(blacklist_categories=("Cs",), blacklist_characters=[
        chr(c) for c in range(0x20) if chr(c) not in "\b\f\n\r\t"
    ]),
    max_size=16,
)  # fmt: skip
proven_json = st.recursive(
    st.one_of(st.none(), st.booleans(), short_int, proven_text),
    lambda kids: st.one_of(
        st.lists(kids, max_size=6), st.dictionaries(proven_text, kids, max_size=6)
    ),
    max_leaves=30,
)


def other_forms(value: object) -> list[bytes]:
    """Texts of `value` other than orjson's: spaced, ASCII-escaped, sorted."""
    return [
        json.dumps(value).encode(),
        json.dumps(value, separators=(",", ":"), ensure_ascii=True).encode(),
        json.dumps(value, separators=(",", ":"), ensure_ascii=False, sort_keys=True).encode(),
    ]


@needs_native
@settings(max_examples=500, deadline=None)
@given(value=any_json, cut=st.integers(0, 400), byte=st.integers(0, 255))
def test_the_scan_proves_only_what_orjson_round_trips(value: object, cut: int, byte: int) -> None:
    try:
        canonical = orjson.dumps(value)
    except TypeError:  # an integer beyond 64 bits: Python's compact form
        canonical = json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode()
    damaged = bytearray(canonical)
    if damaged:
        damaged[cut % len(damaged)] = byte
    texts = [
        canonical,
        *other_forms(value),
        bytes(damaged),
        canonical[: cut % 40],
        canonical + b" ",
    ]
    exact = set(native.json_unproven_py(texts))
    assert exact <= set(c_unproven(texts)), texts


@needs_native
@settings(max_examples=500, deadline=None)
@given(values=st.lists(proven_json, max_size=8))
def test_the_scan_proves_every_canonical_text_of_its_subset(values: list[object]) -> None:
    texts = [orjson.dumps(v) for v in values]
    assert c_unproven(texts) == []
    assert native.json_unproven_py(texts) == []


@needs_native
@pytest.mark.parametrize(
    "text",
    [
        b"", b" ", b"1 ", b" 1", b"-0", b"01", b"-", b"1.0", b"1e5", b"1E5", b"-1.5",
        b"1234567890123456789", b"18446744073709551616", b'"\\u0001"', b'"\\/"', b'"a\x01"',
        b'"\xed\xa0\x80"', b'"\xc0\xaf"', b'"\xe0\x80\xaf"', b'"\xf0\x80\x80\xaf"',
        b'"\xf4\x90\x80\x80"', b'"\xc3"', b'"abc', b'{"a":1,"a":2}', b'{"a":{"b":1},"a":2}',
        b"[1,]", b"[,1]", b'{"a":}', b'{"a"1}', b'{"a":1,}', b"{1:2}", b"tru", b"nul", b"True",
        b"[1]]", b"[[1]", b"1,2", b"{}}", b"[" * 65 + b"]" * 65,
        orjson.dumps({f"k{i}": i for i in range(33)}),
    ],
)  # fmt: skip
def test_the_scan_leaves_these_to_the_exact_check(text: bytes) -> None:
    assert c_unproven([b"1", text, b"2"]) == [1]


@needs_native
@pytest.mark.parametrize(
    "text",
    [
        b"0", b"-1", b"123456789012345678", b"-123456789012345678", b"true", b"false", b"null",
        b'""', b'"\\"\\\\\\n\\t\\r\\b\\f"', "é\u2028\U0001f600\x7f".join('""').encode(),
        b"[]", b"{}", b'[[],{},[{}]]', b'{"a":{"a":{"a":1}},"b":[1,"a"]}',
        b'{"a":1,"b":{"a":2}}', b"[" * 64 + b"]" * 64,
        orjson.dumps({f"k{i}": i for i in range(32)}),
    ],
)  # fmt: skip
def test_the_scan_proves_these(text: bytes) -> None:
    assert native.json_unproven_py([text]) == []
    assert c_unproven([text]) == []


@needs_native
def test_the_scan_refuses_a_text_that_is_not_bytes() -> None:
    with pytest.raises(TypeError, match=r"texts\[1\] is not bytes"):
        c_unproven([b"1", "2"])  # type: ignore[list-item]


def test_without_the_speedups_every_text_is_left_to_the_exact_check(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(native, "speedups", None)
    assert native.json_unproven([b"1", b"x", b"{}"]) == [0, 1, 2]


@needs_native
@settings(max_examples=200, deadline=None)
@given(values=st.lists(any_json, max_size=6), gap=st.binary(max_size=3))
def test_the_span_form_is_the_list_form_over_the_spans(values: list[object], gap: bytes) -> None:
    texts = [orjson.dumps(v) for v in values if not _too_big(v)]
    buf, starts, stops = b"", [], []
    for t in texts:
        buf += gap
        starts.append(len(buf))
        buf += t
        stops.append(len(buf))
    a, b = np.array(starts, np.int64), np.array(stops, np.int64)
    assert native.json_unproven_spans(buf, a, b) == c_unproven(texts)
    assert native.json_unproven_spans_py(buf, a, b) == native.json_unproven_py(texts)


def _too_big(value: object) -> bool:
    try:
        orjson.dumps(value)
    except TypeError:  # an integer beyond 64 bits
        return True
    return False


@pytest.mark.parametrize("pure", [False, True])
@pytest.mark.parametrize("bad", [(-1, 3), (4, 3), (0, 11)])
def test_a_span_outside_the_buffer_is_refused(
    pure: bool, bad: tuple[int, int], monkeypatch: pytest.MonkeyPatch
) -> None:
    if pure:
        monkeypatch.setattr(native, "speedups", None)
    elif native.speedups is None:
        pytest.skip("seglog._speedups not built")
    with pytest.raises(ValueError):
        native.json_unproven_spans(b"0123456789", np.array([bad[0]]), np.array([bad[1]]))
