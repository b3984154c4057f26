"""The SSE decoder against the exact wire bytes of API.md §7.3, split every way."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from seglog.client.sse import SSEComment, SSEDecoder, SSEEvent, SSEItem, SSERetry

# API.md §7.3, byte for byte (frames end with a blank line, `\n` endings).
SPEC_STREAM = (
    b"retry: 2000\n\n"
    b"id: eyJqb2JzIjo0MDk4fQ\n"
    b"event: record\n"
    b'data: {"topic":"jobs","from_seq":4096,"head_seq":5210,"records":[{"$seq":4097,"$ts":1748467200111,"$node":"node-B","data":{"url":"..."}}],"to_seq":4098}\n'
    b"\n"
    b"id: eyJldmVudHMiOjgzMDAwfQ\n"
    b"event: tombstone\n"
    b'data: {"topic":"events","reason":"cap","gap_from":80000,"gap_to":83000,"earliest_seq":83001,"head_seq":88130}\n'
    b"\n"
    b": hb 1748467215000\n"
    b"event: caught-up\n"
    b'data: {"topic":"jobs","head_seq":5210}\n'
    b"\n"
    b"event: topic-deleted\n"
    b'data: {"topic":"jobs.dlq","head_seq":0,"reason":"deleted"}\n'
    b"\n"
    b"id: eyJqb2JzIjo0MDk4fQ\n"
    b"event: error\n"
    b'data: {"code":"server_shutting_down","message":"server is shutting down; reconnect"}\n'
    b"\n"
)


def decode(*chunks: bytes) -> list[SSEItem]:
    dec = SSEDecoder()
    out: list[SSEItem] = []
    for c in chunks:
        out.extend(dec.feed(c))
    return out


def test_spec_stream_decodes_to_every_frame_kind() -> None:
    items = decode(SPEC_STREAM)
    assert items[0] == SSERetry(2000)
    events = [i for i in items if isinstance(i, SSEEvent)]
    assert [e.event for e in events] == [
        "record",
        "tombstone",
        "caught-up",
        "topic-deleted",
        "error",
    ]
    assert events[0].id == "eyJqb2JzIjo0MDk4fQ"
    assert events[0].data.startswith('{"topic":"jobs","from_seq":4096')
    assert events[1].id == "eyJldmVudHMiOjgzMDAwfQ"
    # A frame without `id:` keeps the stream's last event id (the standard's rule).
    assert events[2].id == "eyJldmVudHMiOjgzMDAwfQ"
    assert SSEComment("hb 1748467215000") in items


def test_no_space_after_colon_is_the_same() -> None:
    spaced = SPEC_STREAM
    tight = SPEC_STREAM.replace(b"id: ", b"id:").replace(b"event: ", b"event:")
    tight = tight.replace(b"data: ", b"data:").replace(b"retry: ", b"retry:")
    assert decode(tight)[1:] == decode(spaced)[1:]
    # Only one leading space is removed: the rest belongs to the value.
    assert decode(b"data:  x\n\n") == [SSEEvent("message", " x", None)]


def test_split_at_every_byte_boundary() -> None:
    whole = decode(SPEC_STREAM)
    for i in range(len(SPEC_STREAM) + 1):
        assert decode(SPEC_STREAM[:i], SPEC_STREAM[i:]) == whole, i


def test_one_byte_at_a_time() -> None:
    assert decode(*[bytes([b]) for b in SPEC_STREAM]) == decode(SPEC_STREAM)


@given(st.lists(st.integers(min_value=0, max_value=len(SPEC_STREAM)), max_size=12))
def test_split_anywhere(cuts: list[int]) -> None:
    points = sorted(set(cuts))
    pieces = [
        SPEC_STREAM[a:b] for a, b in zip([0, *points], [*points, len(SPEC_STREAM)], strict=True)
    ]
    assert decode(*pieces) == decode(SPEC_STREAM)


def test_crlf_and_cr_line_endings_and_cr_split_from_lf() -> None:
    lf = decode(SPEC_STREAM)
    crlf = SPEC_STREAM.replace(b"\n", b"\r\n")
    cr = SPEC_STREAM.replace(b"\n", b"\r")
    assert decode(crlf) == lf
    assert decode(cr) == lf
    for i in range(len(crlf) + 1):  # includes every cut between a "\r" and its "\n"
        assert decode(crlf[:i], crlf[i:]) == lf, i


def test_utf8_split_inside_a_code_point() -> None:
    blob = 'data: {"v":"é€😀"}\n\n'.encode()
    for i in range(len(blob) + 1):
        assert decode(blob[:i], blob[i:]) == [SSEEvent("message", '{"v":"é€😀"}', None)]


def test_multi_line_data_is_joined_with_newline() -> None:
    assert decode(b"data: a\ndata\ndata: b\n\n") == [SSEEvent("message", "a\n\nb", None)]


def test_event_without_data_is_not_dispatched_but_its_id_sticks() -> None:
    assert decode(b"id: 7\nevent: record\n\ndata: x\n\n") == [SSEEvent("message", "x", "7")]


def test_id_with_nul_is_ignored_and_bad_retry_is_ignored() -> None:
    assert decode(b"id: 1\n\nid: a\x00b\ndata: x\n\n") == [SSEEvent("message", "x", "1")]
    assert decode(b"retry: 12a\nretry: -1\nretry:\nretry: 5\n") == [SSERetry(5)]


def test_bom_is_stripped_only_at_the_start() -> None:
    assert decode(b"\xef\xbb\xbfdata: x\n\n") == [SSEEvent("message", "x", None)]
    assert decode(b"\xef\xbb", b"\xbfdata: x\n\n") == [SSEEvent("message", "x", None)]


def test_incomplete_trailing_frame_is_held_back() -> None:
    dec = SSEDecoder()
    assert dec.feed(b"event: record\ndata: {}\n") == []
    assert dec.feed(b"\n") == [SSEEvent("record", "{}", None)]


def test_unknown_fields_and_colonless_lines_are_ignored() -> None:
    assert decode(b"foo: bar\nevent\ndata: x\n\n") == [SSEEvent("message", "x", None)]
