"""An incremental, transport-free `text/event-stream` decoder (WHATWG HTML §9.2.6).

Bytes go in as they arrive, in chunks split anywhere (inside a UTF-8 sequence, between `\\r`
and `\\n`, mid-field); complete events come out. Kept here rather than using httpx-sse because
the watch needs what that decoder drops: comment lines (`: hb <ms>` heartbeats prove the
connection is alive) and exact control over `retry:` and `id:` handling, shared by the sync and
async drivers.

Rules applied (the standard's, which API.md §7.3 relies on):
- a line ends at `\\r\\n`, `\\n` or `\\r`; a UTF-8 BOM at the very start is dropped;
- `name:value` and `name: value` are the same (one leading space after the colon is removed);
- a line starting with `:` is a comment; a line without a colon is a field with an empty value;
- `data` lines are joined with `\\n`; `id` containing NUL is ignored; `retry` must be all digits;
- a blank line dispatches the event; an event with no `data` line is not dispatched (but its
  `id:` still sets the last event id, as the standard says);
- the last event id persists across events until a later `id:` replaces it.
"""

from __future__ import annotations

import codecs
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class SSEEvent:
    """One dispatched event. `id` is the stream's last event id when it was dispatched."""

    event: str
    data: str
    id: str | None


@dataclass(frozen=True, slots=True)
class SSEComment:
    """A comment line (text after the `:`, one leading space removed): heartbeats."""

    text: str


@dataclass(frozen=True, slots=True)
class SSERetry:
    """A valid `retry:` field: the server's reconnection time in milliseconds."""

    ms: int


SSEItem = SSEEvent | SSEComment | SSERetry


class SSEDecoder:
    """Feed bytes, get `SSEItem`s in stream order. One decoder per connection."""

    def __init__(self) -> None:
        self._utf8 = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self._buf = ""
        self._started = False
        self._cr_pending = False  # the previous chunk ended with "\r": a "\n" next is its pair
        self._data: list[str] = []
        self._event = ""
        self._has_data = False
        self.last_event_id: str | None = None

    def feed(self, chunk: bytes) -> list[SSEItem]:
        text = self._utf8.decode(chunk)
        if not self._started and text:
            self._started = True
            text = text.removeprefix("\ufeff")
        if self._cr_pending and text.startswith("\n"):
            text = text[1:]
        self._cr_pending = False
        self._buf += text
        out: list[SSEItem] = []
        while True:
            cut = _line_end(self._buf)
            if cut is None:
                return out
            end, width = cut
            if width == 1 and self._buf[end] == "\r" and end + 1 == len(self._buf):
                # A lone "\r" at the end of what we have: it ends the line, but a "\n" in the
                # next chunk belongs to it and must not end another (empty) line.
                self._cr_pending = True
            line, self._buf = self._buf[:end], self._buf[end + width :]
            item = self._line(line)
            if item is not None:
                out.append(item)

    def _line(self, line: str) -> SSEItem | None:
        if not line:
            return self._dispatch()
        if line.startswith(":"):
            return SSEComment(line[1:].removeprefix(" "))
        name, colon, value = line.partition(":")
        if colon:
            value = value.removeprefix(" ")
        if name == "data":
            self._data.append(value)
            self._has_data = True
        elif name == "event":
            self._event = value
        elif name == "id":
            if "\0" not in value:
                self.last_event_id = value
        elif name == "retry" and value.isascii() and value.isdigit():
            return SSERetry(int(value))
        return None

    def _dispatch(self) -> SSEEvent | None:
        has_data, data, event = self._has_data, "\n".join(self._data), self._event
        self._data, self._event, self._has_data = [], "", False
        if not has_data:
            return None
        return SSEEvent(event or "message", data, self.last_event_id)


def _line_end(buf: str) -> tuple[int, int] | None:
    """Index and width of the first line terminator in `buf`, or None if none is complete."""
    lf, cr = buf.find("\n"), buf.find("\r")
    if cr < 0 or 0 <= lf < cr:
        return None if lf < 0 else (lf, 1)
    return (cr, 2) if lf == cr + 1 else (cr, 1)
