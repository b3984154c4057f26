"""NDJSON framing: lines out of arbitrarily cut chunks, numbered as the client counts them,
with a memory bound that raises as soon as a line is known to be too long."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from seglog.core.ndjson import LineSplitter, LineTooLong, chunk_end

lines_st = st.lists(
    st.one_of(
        st.binary(max_size=12).map(lambda b: b.replace(b"\n", b"x")),
        st.sampled_from([b"", b"  ", b"\r", b'{"data":1}\r', b" x "]),
    ),
    max_size=20,
)


def split_all(body: bytes, cuts: list[int], max_line: int) -> list[tuple[int, bytes]]:
    s = LineSplitter(max_line)
    out: list[tuple[int, bytes]] = []
    at = 0
    for c in [*sorted(set(cuts)), len(body)]:
        out += s.feed(body[at:c]).pairs()
        at = c
    return out + s.finish().pairs()


@given(lines_st, st.booleans(), st.lists(st.integers(0, 300), max_size=10))
def test_lines_whatever_the_chunking(
    lines: list[bytes], final_newline: bool, cuts: list[int]
) -> None:
    body = b"\n".join(lines) + (b"\n" if final_newline and lines else b"")
    want = [(i + 1, ln.strip()) for i, ln in enumerate(lines) if ln.strip()]
    assert split_all(body, [c for c in cuts if c <= len(body)], 1 << 20) == want


@given(lines_st, st.integers(1, 14), st.lists(st.integers(0, 300), max_size=10))
def test_too_long_line_raises_with_its_number(
    lines: list[bytes], max_line: int, cuts: list[int]
) -> None:
    body = b"\n".join(lines)
    too_long = [i + 1 for i, ln in enumerate(lines) if len(ln) > max_line]
    cuts = [c for c in cuts if c <= len(body)]
    if not too_long:
        assert split_all(body, cuts, max_line) == [
            (i + 1, ln.strip()) for i, ln in enumerate(lines) if ln.strip()
        ]
        return
    with pytest.raises(LineTooLong) as e:
        split_all(body, cuts, max_line)
    assert e.value.line == too_long[0]


def test_partial_line_is_refused_before_it_is_buffered_whole() -> None:
    s = LineSplitter(10)
    assert not s.feed(b"12345")
    with pytest.raises(LineTooLong):
        s.feed(b"678901")  # 11 bytes buffered, no newline yet


def test_lines_come_as_columns_with_their_numbers() -> None:
    s = LineSplitter(100)
    got = s.feed(b"a\n\n b \r\nc")
    assert (got.numbers, got.texts) == ([1, 3], [b"a", b"b"])
    got = s.feed(b"d\ne\n")
    assert (got.numbers, got.texts) == ([4, 5], [b"cd", b"e"])
    assert not s.finish()


def chunk_end_by_line(texts: list[bytes], max_records: int, max_bytes: int) -> int | None:
    """The handler's rule line by line: a chunk is committed when it holds `max_records`
    lines or its bytes reach `max_bytes`."""
    total = 0
    for i, text in enumerate(texts):
        total += len(text)
        if i + 1 == max_records or total >= max_bytes:
            return i + 1
    return None


@given(
    st.lists(st.binary(min_size=1, max_size=9), max_size=30),
    st.integers(1, 12),
    st.integers(1, 60),
)
def test_chunk_end_is_the_line_by_line_rule(
    texts: list[bytes], max_records: int, max_bytes: int
) -> None:
    assert chunk_end(texts, max_records, max_bytes) == chunk_end_by_line(
        texts, max_records, max_bytes
    )
