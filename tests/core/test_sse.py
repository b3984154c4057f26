"""`seglog.core.sse`: the watch's composite cursor (API §7.4) and SSE frame bytes (API §7.3)."""

from __future__ import annotations

import base64
import json
import re
from typing import Any

import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st

from seglog.core.sse import (
    U64_MAX,
    decode_cursor_map,
    encode_cursor_map,
    frame,
    heartbeat,
    new_wid,
    record_data,
    retry_frame,
    rewind,
)

u64s = st.integers(min_value=0, max_value=U64_MAX)
topic_names = st.from_regex(r"\A[A-Za-z0-9][A-Za-z0-9._:-]{0,40}\Z")
cursor_maps = st.dictionaries(topic_names, u64s, max_size=20)
any_keys = st.dictionaries(st.text(max_size=12), u64s, max_size=10)
json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=8),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=6), inner, max_size=4)
    ),
    max_leaves=12,
)


def b64url(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode("ascii")


# --------------------------------------------------------------------------- encode / decode


@given(any_keys)
def test_encode_decode_round_trip(m: dict[str, int]) -> None:
    assert decode_cursor_map(encode_cursor_map(m)) == m


@given(cursor_maps)
def test_encoding_is_unpadded_base64url_of_sorted_compact_json(m: dict[str, int]) -> None:
    enc = encode_cursor_map(m)
    assert re.fullmatch(r"[A-Za-z0-9_-]*", enc), enc
    raw = base64.urlsafe_b64decode(enc + "=" * (-len(enc) % 4))
    assert raw == json.dumps(dict(sorted(m.items())), separators=(",", ":")).encode()
    assert list(json.loads(raw)) == sorted(m)


def test_encoding_example() -> None:
    # API §7.4's example map; keys sorted whatever the insertion order
    assert encode_cursor_map({"jobs": 5210, "events": 88130}) == b64url(
        b'{"events":88130,"jobs":5210}'
    )
    assert encode_cursor_map({"jobs": 4098}) == "eyJqb2JzIjo0MDk4fQ"  # API §7.3's id


@given(st.text(max_size=200))
def test_decode_arbitrary_text_never_raises(s: str) -> None:
    out = decode_cursor_map(s)
    assert isinstance(out, dict)
    for k, v in out.items():
        assert isinstance(k, str)
        assert type(v) is int and 0 <= v <= U64_MAX


@given(json_values)
def test_decode_arbitrary_json_keeps_only_u64_values(value: Any) -> None:
    try:
        raw = orjson.dumps(value)
    except orjson.JSONEncodeError:  # integers beyond 64 bits
        raw = json.dumps(value).encode()
    for enc in (b64url(raw), base64.urlsafe_b64encode(raw).decode(), "  " + b64url(raw) + " "):
        out = decode_cursor_map(enc)
        if not isinstance(value, dict):
            assert out == {}
            continue
        expect = {k: v for k, v in value.items() if type(v) is int and 0 <= v <= U64_MAX}
        assert out == expect


@given(st.binary(max_size=100))
def test_decode_arbitrary_bytes_never_raises(raw: bytes) -> None:
    for enc in (b64url(raw), base64.b64encode(raw).decode("ascii")):
        out = decode_cursor_map(enc)
        assert all(type(v) is int and 0 <= v <= U64_MAX for v in out.values())


@pytest.mark.parametrize(
    "value",
    [
        "",
        "   ",
        "!!!",
        "e30",  # {}
        b64url(b"[1,2]"),
        b64url(b'{"a":-1,"b":1.0,"c":true,"d":"1","e":null,"f":18446744073709551616}'),
        b64url(b'{"a":1'),
        "\u00e9\u00e9\u00e9\u00e9",
        b64url(b"\xff\xfe\x00"),
        "A",
    ],
)
def test_decode_junk_is_empty(value: str) -> None:
    assert decode_cursor_map(value) == {}


def test_decode_edges() -> None:
    assert decode_cursor_map(b64url(b'{"a":0,"b":18446744073709551615}')) == {
        "a": 0,
        "b": U64_MAX,
    }
    assert decode_cursor_map(b64url(b'{"a":1,"b":-1,"c":false}')) == {"a": 1}


# --------------------------------------------------------------------------- rewind


@given(cursor_maps, any_keys)
def test_rewind_never_raises_a_cursor(session: dict[str, int], last: dict[str, int]) -> None:
    before = dict(session)
    out = rewind(session, last)
    assert session == before  # the input is not mutated
    assert list(out) == list(session)  # exactly the session's topics
    for t, c in out.items():
        assert c <= session[t]
        assert c == (min(session[t], last[t]) if t in last else session[t])


@given(cursor_maps)
def test_rewind_with_own_id_is_identity(session: dict[str, int]) -> None:
    assert rewind(session, decode_cursor_map(encode_cursor_map(session))) == session
    assert rewind(session, {}) == session


# --------------------------------------------------------------------------- frames


def test_frame_bytes() -> None:
    assert frame("record", b'{"a":1}', "eyJ4IjoxfQ") == (
        b'id: eyJ4IjoxfQ\nevent: record\ndata: {"a":1}\n\n'
    )
    assert frame("caught-up", b"{}") == b"event: caught-up\ndata: {}\n\n"
    assert retry_frame() == b"retry: 2000\n\n"
    assert retry_frame(5) == b"retry: 5\n\n"
    assert heartbeat(1748467200111) == b": hb 1748467200111\n\n"


@given(topic_names, u64s, u64s, st.lists(u64s, max_size=5), u64s)
def test_record_data_is_compact_json_in_api_order(
    topic: str, from_seq: int, head: int, seqs: list[int], to_seq: int
) -> None:
    records = [{"$seq": s, "$ts": 1, "data": None} for s in seqs]
    data = record_data(orjson.dumps(topic), from_seq, head, orjson.dumps(records), to_seq)
    assert b"\n" not in data
    parsed = json.loads(data)
    assert list(parsed) == ["topic", "from_seq", "head_seq", "records", "to_seq"]
    assert parsed == {
        "topic": topic,
        "from_seq": from_seq,
        "head_seq": head,
        "records": records,
        "to_seq": to_seq,
    }
    f = frame("record", data, encode_cursor_map({topic: to_seq}))
    lines = f.split(b"\n")
    assert lines[0].startswith(b"id: ") and lines[1] == b"event: record"
    assert lines[2] == b"data: " + data and lines[3:] == [b"", b""]


@given(st.binary(min_size=16, max_size=16))
def test_new_wid(raw: bytes) -> None:
    wid = new_wid(raw)
    assert len(wid) == 26 and re.fullmatch(r"wid_[A-Za-z0-9_-]{22}", wid)
    assert base64.urlsafe_b64decode(wid[4:] + "==") == raw


@pytest.mark.parametrize("n", [0, 15, 17, 32])
def test_new_wid_needs_16_bytes(n: int) -> None:
    with pytest.raises(ValueError):
        new_wid(b"\x00" * n)
