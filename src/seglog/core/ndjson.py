"""NDJSON framing for the streaming append (API §13.2): numbered lines out of a byte stream.

Pure and incremental: `feed` takes the body's chunks as they arrive (a line may span any
number of them) and returns the lines it completed. Lines are numbered from 1 as the client
counts them (blank lines count, but are not returned); a trailing `\\r` and surrounding
whitespace are stripped. Memory stays bounded: a line longer than `max_line` bytes raises
`LineTooLong` as soon as that many bytes of it are buffered.
"""

from __future__ import annotations


class LineTooLong(ValueError):
    def __init__(self, line: int, max_line: int) -> None:
        super().__init__(f"line {line} exceeds {max_line} bytes")
        self.line = line
        self.max_line = max_line


class LineSplitter:
    def __init__(self, max_line: int) -> None:
        self.max_line = max_line
        self._partial = bytearray()
        self._number = 0  # lines completed so far

    def feed(self, chunk: bytes) -> list[tuple[int, bytes]]:
        """The lines `chunk` completes, as (number, stripped text), blank ones left out."""
        out: list[tuple[int, bytes]] = []
        start = 0
        while True:
            end = chunk.find(b"\n", start)
            if end < 0:
                break
            if self._partial:
                self._partial += chunk[start:end]
                line = bytes(self._partial)
                self._partial.clear()
            else:
                line = chunk[start:end]
            self._complete(line, out)
            start = end + 1
        rest = len(chunk) - start
        if rest:
            if len(self._partial) + rest > self.max_line:
                raise LineTooLong(self._number + 1, self.max_line)
            self._partial += chunk[start:]
        return out

    def finish(self) -> list[tuple[int, bytes]]:
        """The last line, if the body did not end with a newline."""
        out: list[tuple[int, bytes]] = []
        if self._partial:
            line = bytes(self._partial)
            self._partial.clear()
            self._complete(line, out)
        return out

    def _complete(self, line: bytes, out: list[tuple[int, bytes]]) -> None:
        self._number += 1
        if len(line) > self.max_line:
            raise LineTooLong(self._number, self.max_line)
        text = line.strip()
        if text:
            out.append((self._number, text))
