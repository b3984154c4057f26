"""`POST /v0/topics/:topic` with `Content-Type: application/x-ndjson` (API §13.2).

Each non-empty line is one §3 record object. The body is parsed and committed as it
arrives, in chunks of at most `CHUNK_RECORDS` records or `CHUNK_BYTES` bytes of lines (each
chunk one atomic write, the request as a whole not), so memory stays bounded whatever the
body's size; lines that trickle in are committed `LINGER_S` after they arrive. An invalid line, or a chunk the topic refuses, stops the request: the error
body's `detail` adds `line` (the bad line, or the refused chunk's first) and
`committed_through_seq` (the last seq this request committed, null if none) to the usual
detail of that error. Batch-level fields come from the query (`node`, `create`).
"""

from __future__ import annotations

import asyncio
import contextlib
from dataclasses import dataclass, field
from typing import Any

import orjson
from starlette.requests import Request
from starlette.responses import Response

from seglog.core.ndjson import Lines, LineSplitter, LineTooLong, chunk_end
from seglog.errors import ErrorCode, SeglogError, invalid
from seglog.http.app_state import ServerState
from seglog.http.body_fields import malformed
from seglog.http.common import body_ended_early, elapsed_ms, json_response, started
from seglog.http.json_body import parse_json_body
from seglog.http.wire_types import NdjsonChunk, NdjsonWriteResponse
from seglog.http.write_decode import decode_lines_fast
from seglog.http.write_request import parse_record
from seglog.model import MAX_NODE_BYTES, MAX_RECORD_BYTES, RecordBatch, RecordIn

NDJSON = "application/x-ndjson"
CHUNK_RECORDS = 10_000
CHUNK_BYTES = 8 * 1024 * 1024
LINGER_S = 0.05  # lines wait at most this long for more before they are committed
MAX_LINE_BYTES = MAX_RECORD_BYTES  # "a per-line cap of 1 MiB"


def is_ndjson(content_type: str | None) -> bool:
    return content_type is not None and content_type.lstrip().lower().startswith(NDJSON)


@dataclass
class _Progress:
    chunks: list[NdjsonChunk] = field(default_factory=list)
    count: int = 0
    head_seq: int = 0
    created: bool = False

    @property
    def committed_through(self) -> int | None:
        return self.chunks[-1]["last_seq"] if self.chunks else None


class BadLine(Exception):
    """A line that is not a valid record: its number and the error `parse_write` gave."""

    def __init__(self, line: int, error: SeglogError) -> None:
        super().__init__(line, error)
        self.line = line
        self.error = error


def _at_line(e: SeglogError, line: int, progress: _Progress) -> SeglogError:
    """`e` with the line and what this request committed before it (API §13.2)."""
    detail: dict[str, Any] = dict(e.detail or {})
    detail.pop("index", None)  # a record index within a chunk means nothing to the client
    detail.update(line=line, committed_through_seq=progress.committed_through)
    where = f"line {line}"
    message = e.message if where in e.message else f"{e.message} ({where})"
    return SeglogError(e.code, message, detail, e.retry_after)


def _batch_node(request: Request) -> str | None:
    node = request.query_params.get("node")
    if node is not None and len(node.encode("utf-8", "surrogatepass")) > MAX_NODE_BYTES:
        raise invalid(
            f"node exceeds {MAX_NODE_BYTES} bytes", {"field": "node", "max": MAX_NODE_BYTES}
        )
    return node


def _create(request: Request) -> bool | None:
    value = request.query_params.get("create")
    if value is None:
        return None
    if value in ("true", "1"):
        return True
    if value in ("false", "0"):
        return False
    raise invalid("create must be true or false", {"field": "create"})


def parse_lines(lines: Lines, node: str | None) -> RecordBatch | list[RecordIn]:
    """The records of numbered NDJSON lines; the first bad line raises `BadLine`."""
    fast = decode_lines_fast(lines.texts, node)
    if fast is not None:
        return fast
    out: list[RecordIn] = []
    for number, text in lines.pairs():
        try:
            out.append(parse_record(0, parse_json_body(text), node, f"line {number}"))
        except SeglogError as e:
            raise BadLine(number, e) from None
    return out


async def append_ndjson(request: Request, name: str, st: ServerState) -> Response:
    t0 = started()
    if request.headers.get("idempotency-key"):
        raise invalid(
            "Idempotency-Key applies to JSON appends; an NDJSON append commits chunk by "
            "chunk and is not deduplicated",
            {"field": "Idempotency-Key"},
        )
    node = _batch_node(request)
    create = _create(request)
    progress = _Progress()

    async def commit(lines: Lines) -> None:
        try:
            records = parse_lines(lines, node)
        except BadLine as bad:
            raise _at_line(bad.error, bad.line, progress) from None
        try:
            st.check_write_pressure()
            res = await st.db.write(
                name, records, node=node, idempotency_key=None, create=create, config=None
            )
        except SeglogError as e:
            raise _at_line(e, lines.numbers[0], progress) from None
        progress.chunks.append(
            {"first_seq": res.first_seq, "last_seq": res.last_seq, "count": res.count}
        )
        progress.count += res.count
        progress.head_seq = res.head_seq
        progress.created = progress.created or res.created

    # The body is read by its own task, so that lines which arrive slowly (a `tail -f`
    # piped in) are committed `LINGER_S` after they arrive, not when a chunk fills up.
    incoming: asyncio.Queue[Lines | BaseException | None] = asyncio.Queue(4)
    reader = asyncio.ensure_future(_read_lines(request, incoming))
    pending = Lines()
    pending_bytes = 0
    try:
        while True:
            try:
                item = await asyncio.wait_for(incoming.get(), LINGER_S if pending else None)
            except TimeoutError:
                await commit(pending)
                pending, pending_bytes = Lines(), 0
                continue
            if item is None:
                break
            if isinstance(item, LineTooLong):
                raise SeglogError(
                    ErrorCode.RECORD_TOO_LARGE,
                    f"line {item.line} exceeds {item.max_line} bytes",
                    {
                        "line": item.line,
                        "max": item.max_line,
                        "committed_through_seq": progress.committed_through,
                    },
                )
            if isinstance(item, BaseException):
                raise body_ended_early() from item
            pending.numbers += item.numbers
            pending.texts += item.texts
            pending_bytes += sum(map(len, item.texts))
            while len(pending) >= CHUNK_RECORDS or pending_bytes >= CHUNK_BYTES:
                k = chunk_end(pending.texts, CHUNK_RECORDS, CHUNK_BYTES)
                assert k is not None  # one of the two bounds is reached
                chunk = Lines(pending.numbers[:k], pending.texts[:k])
                pending = Lines(pending.numbers[k:], pending.texts[k:])
                pending_bytes -= sum(map(len, chunk.texts))
                await commit(chunk)
    finally:
        reader.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await reader
    if pending:
        await commit(pending)
    if not progress.chunks:
        raise malformed("the body holds no record (one JSON record object per line)")
    body: NdjsonWriteResponse = {
        "topic": name,
        "count": progress.count,
        "head_seq": progress.head_seq,
        "chunks": progress.chunks,
        "performance": {"server_total_ms": elapsed_ms(t0)},
    }
    return json_response(orjson.dumps(body), 201 if progress.created else 200)


async def _read_lines(request: Request, out: asyncio.Queue[Lines | BaseException | None]) -> None:
    """The body's lines, batch by batch as they arrive, then None; or the error that ended
    it (`LineTooLong`, `ClientDisconnect`, ...). The queue is bounded: a client sending
    faster than chunks commit is held back by TCP."""
    splitter = LineSplitter(MAX_LINE_BYTES)
    try:
        async for chunk in request.stream():
            lines = splitter.feed(chunk)
            if lines:
                await out.put(lines)
        lines = splitter.finish()
        if lines:
            await out.put(lines)
    except asyncio.CancelledError:
        raise
    except Exception as e:  # the handler raises it: an ended body, a line too long, ...
        await out.put(e)
        return
    await out.put(None)
