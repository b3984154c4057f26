"""HTTP/1.1 on the wire for the lean client paths (`_h1`, `_h1_aio`), without any I/O: the
request head, and a response read incrementally from a buffer its caller fills.

Why one reader for both: the sync path used `http.client`, whose header parsing goes
through the `email` package; with it a single-record `Client.append` cost ~300 µs of the
client's CPU, with this reader and `WireResponse` ~160 µs (BENCHMARKS.md, "Issue 12,
fourth session of 2026-11-27 (stop 36)"). Each path now only moves bytes: it appends
what arrives to a `bytearray` and calls `AnswerReader.feed` until an `Answer` comes back.
"""

from __future__ import annotations

import codecs
import email.message
import re
import zlib
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
_FIELD_NAME = re.compile(rb"[!#$%&'*+\-.^_`|~0-9A-Za-z]+")  # a token (RFC 9110 §5.1)


def request_head(
    method: str, target: str, host: str, headers: Mapping[str, str], body: bytes | None
) -> bytes:
    """The request line and headers, as `http.client` writes them (header names as given:
    the pools pass them lower case); a CR, LF or NUL in any of them, or a character outside
    Latin-1, is a `LocalProtocolError` (nothing is sent)."""
    lines = [f"{method} {target} HTTP/1.1", f"Host: {host}"]
    lines += [f"{k}: {v}" for k, v in headers.items() if k not in ("host", "content-length")]
    if "accept-encoding" not in headers:  # as `http.client` does: no compressed answers
        lines.append("Accept-Encoding: identity")
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
        self._scanned = 0  # _HEAD: how much of the buffer holds no head end

    def body_missing(self, buf: bytearray) -> int:
        """While reading a body of known length: how many of its bytes `buf` still lacks
        (0 otherwise), so that a caller can read them itself (`take_body`)."""
        return max(0, self._need - len(buf)) if self._state == _LENGTH else 0

    def take_body(self, body: bytes) -> Answer:
        """The answer, its body of known length read by the caller (whole: taken as the
        answer's content, not copied); `Ended` if `body` is short."""
        if self._state != _LENGTH:
            raise RuntimeError("take_body: the reader is not at a body of known length")
        if len(body) != self._need:
            raise Ended
        return self._answer(body)

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
                return self._answer(_take(buf, self._need))
            elif state == _CHUNK_LINE:
                line = _take_line(buf, "chunk size line")
                if line is None:
                    return _short(ended)
                size_text = line.split(b";", 1)[0].strip(b" \t")
                if _CHUNK_SIZE.fullmatch(size_text) is None:
                    raise httpx.RemoteProtocolError(f"malformed chunk size {size_text[:40]!r}")
                self._need = int(size_text, 16)
                self._state = _CHUNK_DATA if self._need else _TRAILER
            elif state == _CHUNK_DATA:
                size = self._need
                if len(buf) < size + 2:
                    return _short(ended)
                if buf[size : size + 2] != b"\r\n":  # strict, as h11: a size off by one
                    raise httpx.RemoteProtocolError("chunk not followed by CRLF")
                self._parts.append(_take(buf, size))
                del buf[:2]
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
                return Answer(self._status, self._headers, _take(buf, len(buf)), False, True)

    def _head(self, buf: bytearray) -> bool:
        """Parse a head from `buf` if one is whole (True); skips interim answers."""
        while True:
            end, after = _head_end(buf, max(0, self._scanned - 2))
            if end < 0 or end > MAX_HEAD:
                if len(buf) > MAX_HEAD:
                    raise httpx.RemoteProtocolError("response head too large")
                self._scanned = len(buf)  # the next search resumes about here
                return False
            self._scanned = 0
            status, version_11, raw = _parse_head(bytes(buf[:end]))
            del buf[:after]
            if status == 101:  # this client never asks to switch protocols
                raise httpx.RemoteProtocolError("unexpected 101 Switching Protocols")
            if not 100 <= status < 200:
                break
        self._status, self._headers = status, raw
        close = b"close" in _tokens(_field(raw, b"connection"))
        self._keep_alive = version_11 and not close
        coding = _field(raw, b"transfer-encoding")
        if self._method == "HEAD" or status in _NO_BODY_STATUS:
            self._state, self._need = _LENGTH, 0
        elif coding is not None:
            # Only `chunked` is understood (h11 too); a length is then ignored (RFC 9112
            # §6.3), and any other coding cannot be framed or decoded here.
            if _tokens(coding) != [b"chunked"]:
                raise httpx.RemoteProtocolError(f"unsupported Transfer-Encoding {coding[:40]!r}")
            self._state = _CHUNK_LINE
        elif (length := _field(raw, b"content-length")) is not None:
            self._state, self._need = _LENGTH, _content_length(length)
        else:
            self._state = _CLOSE
        return True

    def _answer(self, content: bytes) -> Answer:
        return Answer(self._status, self._headers, content, self._keep_alive, False)


def _head_end(buf: bytearray, start: int) -> tuple[int, int]:
    """Where the head in `buf` ends and its blank line after it, searching from `start`:
    the first empty line, ended by CRLF or (leniently, as `http.client` and h11 read it)
    bare LF; (-1, -1) if there is none yet. A line's own CR stays with the head, whose
    parser drops it."""
    lf_lf = buf.find(b"\n\n", start)
    lf_crlf = buf.find(b"\n\r\n", start)
    if lf_crlf >= 0 and (lf_lf < 0 or lf_crlf < lf_lf):
        return lf_crlf, lf_crlf + 3
    return (lf_lf, lf_lf + 2) if lf_lf >= 0 else (-1, -1)


def _field(raw: list[tuple[bytes, bytes]], name: bytes) -> bytes | None:
    """Every `name` field of a head joined with ", " (RFC 9110 §5.3), or None."""
    values = [v for k, v in raw if k.lower() == name]
    return b", ".join(values) if values else None


def _tokens(value: bytes | None) -> list[bytes]:
    """The comma-separated tokens of a field value, lower case, empty ones dropped."""
    if value is None:
        return []
    return [t for t in (part.strip(b" \t").lower() for part in value.split(b",")) if t]


def _take(buf: bytearray, n: int) -> bytes:
    """The first `n` bytes of `buf`, removed from it, copied once."""
    if n == len(buf):
        out = bytes(buf)
        buf.clear()
        return out
    with memoryview(buf) as view:
        out = bytes(view[:n])
    del buf[:n]
    return out


class WireHeaders:
    """A response's header fields, looked up as `httpx.Headers.get` does: by name in any
    case, repeated fields joined with ", ", and values decoded as ASCII if every field
    is, else as UTF-8 if every field is, else as Latin-1."""

    __slots__ = ("_encoding", "_raw")

    def __init__(self, raw: list[tuple[bytes, bytes]]) -> None:
        self._raw = raw
        self._encoding: str | None = None

    def get(self, key: str, default: Any = None) -> Any:
        name = key.lower().encode("latin-1", "replace")
        values = [v for k, v in self._raw if k.lower() == name]
        if not values:
            return default
        return ", ".join(v.decode(self._value_encoding()) for v in values)

    def _value_encoding(self) -> str:
        if self._encoding is None:
            self._encoding = "iso-8859-1"
            for encoding in ("ascii", "utf-8"):
                try:
                    for k, v in self._raw:
                        k.decode(encoding)
                        v.decode(encoding)
                except UnicodeDecodeError:
                    continue
                self._encoding = encoding
                break
        return self._encoding


class WireResponse:
    """A whole answer, as the client's parsers read it: the part of `httpx.Response` they
    use (`_base.Reply`). Building an `httpx.Response` instead cost ~120 µs of CPU per
    request here — as much as the rest of the lean path (BENCHMARKS.md, stop 36)."""

    __slots__ = ("content", "headers", "status_code")

    def __init__(self, status: int, raw: list[tuple[bytes, bytes]], content: bytes) -> None:
        self.status_code = status
        self.content = content
        self.headers = WireHeaders(raw)

    @classmethod
    def of(cls, answer: Answer) -> WireResponse:
        """The response to `answer`, its body decoded from any `Content-Encoding` (the
        lean paths ask for `identity`, but a proxy may compress anyway; httpx decodes
        gzip and deflate too)."""
        raw = answer.headers
        return cls(answer.status, raw, _decoded(_field(raw, b"content-encoding"), answer.content))

    @property
    def is_success(self) -> bool:
        return 200 <= self.status_code < 300

    @property
    def reason_phrase(self) -> str:
        return httpx.codes.get_reason_phrase(self.status_code)

    @property
    def text(self) -> str:
        """The body decoded as `httpx.Response.text` does: by the `charset` of its
        `Content-Type` (parsed as httpx parses it) if Python knows it, else as UTF-8;
        undecodable bytes replaced."""
        encoding = "utf-8"
        kind = self.headers.get("content-type")
        if kind is not None:
            msg = email.message.Message()
            msg["content-type"] = kind
            charset = msg.get_content_charset(failobj=None)
            if charset:
                try:
                    encoding = codecs.lookup(charset).name
                except LookupError:
                    pass
        return self.content.decode(encoding, errors="replace")


def _decoded(coding: bytes | None, content: bytes) -> bytes:
    """`content` with its `Content-Encoding` codings undone, last applied first, as far as
    they are gzip or deflate (httpx's own, without the optional brotli and zstd)."""
    for name in reversed(_tokens(coding)):
        if name == b"identity" or not content:
            continue
        try:
            if name in (b"gzip", b"x-gzip"):
                content = zlib.decompress(content, 16 + zlib.MAX_WBITS)
            elif name == b"deflate":  # zlib-wrapped as the RFC says, or raw as some send
                try:
                    content = zlib.decompress(content)
                except zlib.error:
                    content = zlib.decompress(content, -zlib.MAX_WBITS)
            else:  # as httpx: a coding it cannot undo leaves the body as it came
                return content
        except zlib.error as e:
            raise httpx.RemoteProtocolError(f"undecodable {name.decode()} body: {e}") from e
    return content


def _short(ended: bool) -> Answer | None:
    """More bytes are needed: None (no answer yet), or `Ended` when none will come."""
    if ended:
        raise Ended
    return None


def _take_line(buf: bytearray, what: str) -> bytes | None:
    """The next line (ended by CRLF, or leniently LF), taken from `buf` without its end,
    or None if none is whole yet."""
    end = buf.find(b"\n")
    if end < 0 or end > MAX_HEAD:
        if len(buf) > MAX_HEAD:
            raise httpx.RemoteProtocolError(f"{what} too long")
        return None
    line = bytes(buf[: end - 1 if end and buf[end - 1] == 0x0D else end])
    del buf[: end + 1]
    return line


def _parse_head(head: bytes) -> tuple[int, bool, list[tuple[bytes, bytes]]]:
    lines = [line[:-1] if line.endswith(b"\r") else line for line in head.split(b"\n")]
    status = _STATUS_LINE.fullmatch(lines[0])
    if status is None or int(status.group(2)) < 100:
        raise httpx.RemoteProtocolError(f"malformed status line {lines[0][:80]!r}")
    version, code = status.group(1), status.group(2)
    raw: list[tuple[bytes, bytes]] = []
    for line in lines[1:]:
        if line[:1] in (b" ", b"\t") and raw:  # obs-fold: the previous value goes on
            name, value = raw[-1]
            raw[-1] = (name, (value + b" " + line.strip(b" \t")).strip(b" "))
            continue
        name, sep, value = line.partition(b":")
        if not sep or _FIELD_NAME.fullmatch(name) is None:
            raise httpx.RemoteProtocolError(f"malformed header line {line[:80]!r}")
        raw.append((name, value.strip(b" \t")))
    return int(code), version == b"HTTP/1.1", raw


def _content_length(value: bytes) -> int:
    """Every `Content-Length` field joined: one number, or the same one repeated (RFC 9110
    §8.6); anything else is refused."""
    values = {v.strip(b" \t") for v in value.split(b",")}
    one = values.pop() if len(values) == 1 else b""
    if not one.isdigit() or len(one) > 18:
        raise httpx.RemoteProtocolError(f"malformed Content-Length {value[:40]!r}")
    return int(one)
