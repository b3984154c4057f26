"""HTTP/1.1 on the wire for the lean client paths (`_h1`, `_h1_aio`), without any I/O: the
request head, and a response read incrementally from a buffer its caller fills.

Why one reader for both: the sync path used `http.client`, whose header parsing goes
through the `email` package and which costs ~250 µs of CPU per request here, against
~30 µs for this reader (BENCHMARKS.md, "Issue 12, session of 2026-11-27 (stop 36)").
Each path now only moves bytes: it appends what arrives to a `bytearray` and calls
`AnswerReader.feed` until an `Answer` comes back.
"""

from __future__ import annotations

import codecs
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import httpx

# The largest response head accepted (status line and headers), as h11's default; also
# the longest chunk-size or trailer line.
MAX_HEAD = 64 * 1024
_NO_BODY_STATUS = (204, 304)
_FORBIDDEN = frozenset("\r\n\0")
_STATUS_LINE = re.compile(rb"(HTTP/1\.[01]) ([0-9]{3})(?: .*)?", re.DOTALL)
_CHUNK_SIZE = re.compile(rb"[0-9A-Fa-f]{1,16}")


def request_head(
    method: str, target: str, host: str, headers: Mapping[str, str], body: bytes | None
) -> bytes:
    """The request line and headers, as `http.client` writes them; a CR, LF or NUL in any
    of them, or a character outside Latin-1, is a `LocalProtocolError` (nothing is sent)."""
    lines = [f"{method} {target} HTTP/1.1", f"Host: {host}"]
    lines += [f"{k}: {v}" for k, v in headers.items() if k not in ("host", "content-length")]
    if body is not None:
        lines.append(f"Content-Length: {len(body)}")
    elif method in ("POST", "PUT", "PATCH"):
        lines.append("Content-Length: 0")
    if " " in target or any(not _FORBIDDEN.isdisjoint(line) for line in lines):
        raise httpx.LocalProtocolError("a request header or target holds a CR, LF, NUL or space")
    text = "\r\n".join(lines)
    try:
        return text.encode("latin-1") + b"\r\n\r\n"
    except UnicodeEncodeError as e:
        raise httpx.LocalProtocolError(f"a request header is not Latin-1: {e}") from e


def host_header(host: str, port: int) -> str:
    """The `Host` value for an origin (an IPv6 literal in brackets, port 80 left out)."""
    name = f"[{host}]" if ":" in host else host
    return name if port == 80 else f"{name}:{port}"


class Ended(Exception):
    """The peer closed the connection before the answer was complete."""


@dataclass(frozen=True, slots=True)
class Answer:
    status: int
    headers: list[tuple[bytes, bytes]]
    content: bytes
    # Whether the connection may carry another request as far as this answer goes: no
    # `Connection: close`, HTTP/1.1, and not delimited by the close. (The caller also
    # checks that nothing arrived beyond it and that its request went out whole.)
    keep_alive: bool
    by_close: bool  # the body ended with the connection: a reset there is no end


# What the reader waits for next.
_HEAD, _LENGTH, _CHUNK_LINE, _CHUNK_DATA, _TRAILER, _CLOSE = range(6)


class AnswerReader:
    """One response, taken from the front of a buffer as its bytes arrive. `feed` consumes
    what it can and returns the `Answer` once it is whole (interim 1xx answers skipped,
    as h11 does), or None while more bytes are needed; bytes after the answer stay in
    the buffer. A malformed answer raises `httpx.RemoteProtocolError`; an answer cut by
    the peer's close raises `Ended`."""

    def __init__(self, method: str) -> None:
        self._method = method
        self._state = _HEAD
        self._status = 0
        self._headers: list[tuple[bytes, bytes]] = []
        self._keep_alive = True
        self._need = 0  # _LENGTH: the body's length; _CHUNK_DATA: the chunk's
        self._parts: list[bytes] = []

    def feed(self, buf: bytearray, ended: bool) -> Answer | None:
        """Advance over `buf` (consumed from its front); `ended`: nothing more will
        arrive on this connection."""
        while True:
            state = self._state
            if state == _HEAD:
                if not self._head(buf):
                    return _short(ended)
            elif state == _LENGTH:
                if len(buf) < self._need:
                    return _short(ended)
                content = bytes(buf[: self._need])
                del buf[: self._need]
                return self._answer(content)
            elif state == _CHUNK_LINE:
                line = _take_line(buf, "chunk size line")
                if line is None:
                    return _short(ended)
                size_text = line.split(b";", 1)[0].strip()
                if _CHUNK_SIZE.fullmatch(size_text) is None:
                    raise httpx.RemoteProtocolError(f"malformed chunk size {size_text[:40]!r}")
                self._need = int(size_text, 16)
                self._state = _CHUNK_DATA if self._need else _TRAILER
            elif state == _CHUNK_DATA:
                size = self._need
                if len(buf) < size + 2:
                    return _short(ended)
                if buf[size : size + 2] != b"\r\n":
                    raise httpx.RemoteProtocolError("chunk not followed by CRLF")
                self._parts.append(bytes(buf[:size]))
                del buf[: size + 2]
                self._state = _CHUNK_LINE
            elif state == _TRAILER:  # after the last chunk: trailers up to an empty line
                line = _take_line(buf, "chunked trailer")
                if line is None:
                    return _short(ended)
                if not line:
                    return self._answer(b"".join(self._parts))
            else:  # _CLOSE: the body is whatever arrives until the peer closes
                if not ended:
                    return None
                content = bytes(buf)
                buf.clear()
                return Answer(self._status, self._headers, content, False, True)

    def _head(self, buf: bytearray) -> bool:
        """Parse a head from `buf` if one is whole (True); skips interim answers."""
        while True:
            end = buf.find(b"\r\n\r\n")
            if end < 0:
                if len(buf) > MAX_HEAD:
                    raise httpx.RemoteProtocolError("response head too large")
                return False
            status, version_11, raw = _parse_head(bytes(buf[:end]))
            del buf[: end + 4]
            if not 100 <= status < 200 or status == 101:
                break
        fields: dict[bytes, bytes] = {}
        for k, v in raw:
            name = k.lower()
            if name == b"content-length" and fields.get(name, v) != v:
                raise httpx.RemoteProtocolError("conflicting Content-Length headers")
            fields[name] = v
        self._status, self._headers = status, raw
        self._keep_alive = version_11 and b"close" not in fields.get(b"connection", b"").lower()
        if self._method == "HEAD" or status in _NO_BODY_STATUS or 100 <= status < 200:
            self._state, self._need = _LENGTH, 0
        elif b"chunked" in fields.get(b"transfer-encoding", b"").lower():
            self._state = _CHUNK_LINE
        elif b"content-length" in fields:
            self._state, self._need = _LENGTH, _content_length(fields[b"content-length"])
        else:
            self._state = _CLOSE
        return True

    def _answer(self, content: bytes) -> Answer:
        return Answer(self._status, self._headers, content, self._keep_alive, False)


class WireHeaders:
    """A response's header fields, looked up as `httpx.Headers.get` does: by name in any
    case, repeated fields joined with ", ", values decoded as Latin-1."""

    __slots__ = ("_raw",)

    def __init__(self, raw: list[tuple[bytes, bytes]]) -> None:
        self._raw = raw

    def get(self, key: str, default: Any = None) -> Any:
        name = key.lower().encode("latin-1")
        values = [v.decode("latin-1") for k, v in self._raw if k.lower() == name]
        return ", ".join(values) if values else default


class WireResponse:
    """A whole answer, as the client's parsers read it: the part of `httpx.Response` they
    use (`_base.Reply`). Building an `httpx.Response` instead cost ~120 µs of CPU per
    request here — as much as the rest of the lean path (BENCHMARKS.md, stop 36)."""

    __slots__ = ("content", "headers", "status_code")

    def __init__(self, status: int, raw: list[tuple[bytes, bytes]], content: bytes) -> None:
        self.status_code = status
        self.content = content
        self.headers = WireHeaders(raw)

    @property
    def is_success(self) -> bool:
        return 200 <= self.status_code < 300

    @property
    def reason_phrase(self) -> str:
        return httpx.codes.get_reason_phrase(self.status_code)

    @property
    def text(self) -> str:
        """The body decoded as `httpx.Response.text` does: by the `charset` of its
        `Content-Type` if Python knows it, else as UTF-8; undecodable bytes replaced."""
        encoding = "utf-8"
        for param in str(self.headers.get("content-type", "")).split(";")[1:]:
            key, _, value = param.strip().partition("=")
            if key.lower() == "charset" and value:
                try:
                    encoding = codecs.lookup(value.strip("'\"")).name
                except LookupError:
                    pass
        return self.content.decode(encoding, errors="replace")


def _short(ended: bool) -> Answer | None:
    """More bytes are needed: None (no answer yet), or `Ended` when none will come."""
    if ended:
        raise Ended
    return None


def _take_line(buf: bytearray, what: str) -> bytes | None:
    """The next CRLF-terminated line, taken from `buf`, or None if none is whole yet."""
    end = buf.find(b"\r\n")
    if end < 0:
        if len(buf) > MAX_HEAD:
            raise httpx.RemoteProtocolError(f"{what} too long")
        return None
    line = bytes(buf[:end])
    del buf[: end + 2]
    return line


def _parse_head(head: bytes) -> tuple[int, bool, list[tuple[bytes, bytes]]]:
    lines = head.split(b"\r\n")
    status = _STATUS_LINE.fullmatch(lines[0])
    if status is None:
        raise httpx.RemoteProtocolError(f"malformed status line {lines[0][:80]!r}")
    version, code = status.group(1), status.group(2)
    raw: list[tuple[bytes, bytes]] = []
    for line in lines[1:]:
        name, sep, value = line.partition(b":")
        if not sep or not name or name != name.strip():
            raise httpx.RemoteProtocolError(f"malformed header line {line[:80]!r}")
        raw.append((name, value.strip(b" \t")))
    return int(code), version == b"HTTP/1.1", raw


def _content_length(value: bytes) -> int:
    if not value.isdigit() or len(value) > 18:
        raise httpx.RemoteProtocolError(f"malformed Content-Length {value[:40]!r}")
    return int(value)
