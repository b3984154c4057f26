"""NDJSON framing for the streaming append (API §13.2): numbered lines out of a byte stream.

Pure and incremental: `feed` takes the body's chunks as they arrive (a line may span any
number of them) and returns the lines it completed. Lines are numbered from 1 as the client
counts them (blank lines count, but are not returned); a trailing `\\r` and surrounding
whitespace are stripped. Memory stays bounded: a line longer than `max_line` bytes raises
`LineTooLong` as soon as that many bytes of it are buffered.

A chunk's lines are cut by one `bytes.split` and handed out as columns (`Lines`), not one
tuple per line: per line, the loop this replaced cost more than decoding the record
(BENCHMARKS.md, "Stop 41").
"""

from __future__ import annotations

from bisect import bisect_left
from dataclasses import dataclass, field
from itertools import accumulate


class LineTooLong(ValueError):
    def __init__(self, line: int, max_line: int) -> None:
        super().__init__(f"line {line} exceeds {max_line} bytes")
        self.line = line
        self.max_line = max_line


@dataclass(slots=True)
class Lines:
    """Non-blank lines, stripped (`texts`), with their line numbers (`numbers`)."""

    numbers: list[int] = field(default_factory=list)
    texts: list[bytes] = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.texts)

    def pairs(self) -> list[tuple[int, bytes]]:
        return list(zip(self.numbers, self.texts, strict=True))


class LineSplitter:
    def __init__(self, max_line: int) -> None:
        self.max_line = max_line
        self._partial = bytearray()
        self._number = 0  # lines completed so far

    def feed(self, chunk: bytes) -> Lines:
        """The lines `chunk` completes, blank ones left out."""
        parts = chunk.split(b"\n")
        rest = parts.pop()  # what follows the last newline: the start of a line
        if parts and self._partial:
            self._partial += parts[0]
            parts[0] = bytes(self._partial)
            self._partial.clear()
        lines = self._complete(parts)
        if rest:
            if len(self._partial) + len(rest) > self.max_line:
                raise LineTooLong(self._number + 1, self.max_line)
            self._partial += rest
        return lines

    def finish(self) -> Lines:
        """The last line, if the body did not end with a newline."""
        if not self._partial:
            return Lines()
        line = bytes(self._partial)
        self._partial.clear()
        return self._complete([line])

    def _complete(self, parts: list[bytes]) -> Lines:
        first = self._number + 1
        self._number += len(parts)
        if not parts:
            return Lines()
        if max(map(len, parts)) > self.max_line:
            for i, part in enumerate(parts):
                if len(part) > self.max_line:
                    raise LineTooLong(first + i, self.max_line)
        texts = [part.strip() for part in parts]
        if all(texts):
            return Lines(list(range(first, first + len(texts))), texts)
        return Lines([first + i for i, t in enumerate(texts) if t], [t for t in texts if t])


def chunk_end(texts: list[bytes], max_records: int, max_bytes: int) -> int | None:
    """How many of `texts` make the next chunk: the first `max_records`, or fewer, up to
    and including the line at which their bytes reach `max_bytes`; None while they reach
    neither (the chunk is not full yet)."""
    head = texts[:max_records]
    sums = list(accumulate(map(len, head)))
    k = bisect_left(sums, max_bytes)  # the first line at which the total reaches it
    if k < len(sums):
        return k + 1
    return max_records if len(head) == max_records else None
