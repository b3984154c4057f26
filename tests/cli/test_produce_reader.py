"""`seglog produce`'s stdin reader: the lines `for line in sys.stdin` would give, numbered,
however the input arrives (a read at a time: `read1`), in blocks that keep every byte."""

from __future__ import annotations

import io
import queue

from hypothesis import given
from hypothesis import strategies as st

from seglog.cli.produce import UNIVERSAL_NEWLINES, Block, ReadFailed, _read_blocks


class Chunks(io.RawIOBase):
    """A raw stream handing out `chunks` one per read, as a pipe does."""

    def __init__(self, chunks: list[bytes]) -> None:
        self.chunks = list(chunks)

    def readable(self) -> bool:
        return True

    def readinto(self, b: bytearray) -> int:  # type: ignore[override]
        if not self.chunks:
            return 0
        chunk = self.chunks.pop(0)
        n = min(len(b), len(chunk))
        b[:n] = chunk[:n]
        if n < len(chunk):
            self.chunks.insert(0, chunk[n:])
        return n


def read_items(chunks: list[bytes], errors: str = "strict") -> list[Block | ReadFailed]:
    stream = io.TextIOWrapper(io.BufferedReader(Chunks(chunks)), encoding="utf-8", errors=errors)
    q: queue.Queue[Block | ReadFailed | None] = queue.Queue()
    _read_blocks(stream, q)
    out: list[Block | ReadFailed] = []
    while (b := q.get_nowait()) is not None:
        out.append(b)
    return out


def read_all(chunks: list[bytes], errors: str = "strict") -> list[Block]:
    items = read_items(chunks, errors)
    assert all(isinstance(b, Block) for b in items), items
    return items  # type: ignore[return-value]


def iterated(data: bytes, errors: str = "strict") -> list[str]:
    """The lines of iterating `sys.stdin` (whose newline mode is "\n" but on Windows),
    each without its newline."""
    newline = None if UNIVERSAL_NEWLINES else "\n"
    stream = io.TextIOWrapper(io.BytesIO(data), encoding="utf-8", errors=errors, newline=newline)
    return [line[:-1] if line.endswith("\n") else line for line in stream]


pieces = st.lists(
    st.sampled_from(
        [b"a", b"bc", b"\n", b"\r", b"\r\n", b" ", b"{}", "é".encode(), "\U0001f600".encode()]
    ),
    max_size=40,
)


@given(pieces, st.lists(st.integers(1, 30), max_size=12))
def test_the_lines_of_text_iteration_whatever_the_reads(
    parts: list[bytes], cuts: list[int]
) -> None:
    data = b"".join(parts)
    chunks, at = [], 0
    for c in cuts:
        chunks.append(data[at : at + c])
        at += c
    chunks.append(data[at:])
    chunks = [c for c in chunks if c]
    blocks = read_all(chunks)
    lines = [line for b in blocks for line in b.lines]
    assert lines == iterated(data)
    numbers = [b.first + i for b in blocks for i in range(len(b.lines))]
    assert numbers == list(range(1, len(lines) + 1))
    assert sum(b.nbytes for b in blocks) == len(data)
    assert all(b.lines for b in blocks)


def test_a_read_hands_over_its_lines_at_once() -> None:
    blocks = read_all([b'{"a":1}\n{"a":2}\n{"a', b'":3}\n', b"tail"])
    assert [(b.first, b.lines) for b in blocks] == [
        (1, ['{"a":1}', '{"a":2}']),
        (3, ['{"a":3}']),
        (4, ["tail"]),
    ]


def test_the_stream_error_handler_applies() -> None:
    assert [ln for b in read_all([b"ok\n\xff\n"], "replace") for ln in b.lines] == ["ok", "\ufffd"]


class Failing(io.RawIOBase):
    def __init__(self, first: bytes) -> None:
        self.first: bytes | None = first

    def readable(self) -> bool:
        return True

    def readinto(self, b: bytearray) -> int:  # type: ignore[override]
        if self.first is None:
            raise OSError(5, "Input/output error")
        n, self.first = len(self.first), None
        b[:n] = b"a\nb\n"[:n]
        return n


def test_a_read_error_comes_after_the_lines_before_it_with_its_line_number() -> None:
    stream = io.TextIOWrapper(io.BufferedReader(Failing(b"a\nb\n")), encoding="utf-8")
    q: queue.Queue[Block | ReadFailed | None] = queue.Queue()
    _read_blocks(stream, q)
    items = [q.get_nowait() for _ in range(3)]
    assert isinstance(items[0], Block) and items[0].lines == ["a", "b"]
    assert isinstance(items[1], ReadFailed) and items[1].line == 3
    assert isinstance(items[1].error, OSError) and items[2] is None


def test_undecodable_bytes_reach_the_parse_in_their_line_whatever_the_handler() -> None:
    """A strict stdin would fail the whole read; its bytes come through as surrogates,
    in their own line, for the parse to refuse by number."""
    for errors in ("strict", "surrogateescape"):
        blocks = read_all([b"a\nb\xff\nc\n"], errors)
        assert [ln for b in blocks for ln in b.lines] == ["a", "b\udcff", "c"]


def test_a_carriage_return_stays_in_its_line_as_in_stdin() -> None:
    """`for line in sys.stdin` splits at "\n" only on POSIX: a progress line
    "50%\r100%" is one line (one record with --raw), a CRLF line keeps its "\r" for the
    parse to strip."""
    lines = [ln for b in read_all([b"50%\r100%\na\r\nb\r", b"\nc"]) for ln in b.lines]
    assert lines == (
        ["50%", "100%", "a", "b", "c"] if UNIVERSAL_NEWLINES else ["50%\r100%", "a\r", "b\r", "c"]
    )
