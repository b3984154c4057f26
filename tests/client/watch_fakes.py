"""Scripted fakes of the watch endpoints (API.md §7) for `httpx.MockTransport`, and the
frame shorthands the watch tests share.

`ScriptedWatchServer` answers `POST /v0/watch` with a session built from the request body and
each `GET /v0/watch/:wid` with the next scripted step: raw SSE bytes (split into the given
chunks), optionally ending in a transport error, or a ready-made response (e.g. a 404).
`ChunkStream` serves the same chunks to a sync and an async client.
"""

from __future__ import annotations

import base64
import inspect
from collections.abc import AsyncIterator, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import httpx
import orjson

from seglog.client import WatchRecord
from tests.client.conftest import body_of, ok


def cursor_id(cursors: dict[str, int]) -> str:
    """The composite `id:` the server would send (written independently of the client)."""
    raw = orjson.dumps(cursors, option=orjson.OPT_SORT_KEYS)
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def frame(event: str, data: Any, id: str | None = None, sep: str = ": ") -> bytes:
    """One SSE frame exactly as API.md §7.3 writes it (`sep` ":" for the no-space form)."""
    lines = [] if id is None else [f"id{sep}{id}"]
    lines += [f"event{sep}{event}", f"data{sep}{orjson.dumps(data).decode()}"]
    return ("\n".join(lines) + "\n\n").encode()


def records_frame(
    topic: str, from_seq: int, seqs: Sequence[int], head: int, to_seq: int | None = None
) -> dict[str, Any]:
    recs = [{"$seq": s, "$ts": 1_748_467_200_000 + s, "data": {"n": s}} for s in seqs]
    last = to_seq if to_seq is not None else (seqs[-1] if seqs else from_seq)
    return {"topic": topic, "from_seq": from_seq, "head_seq": head, "records": recs, "to_seq": last}


def split(blob: bytes, sizes: Sequence[int]) -> list[bytes]:
    """Cut `blob` into pieces of the given sizes (cycled), the last piece taking the rest."""
    out, i, k = [], 0, 0
    while i < len(blob):
        n = max(sizes[k % len(sizes)], 1) if sizes else len(blob)
        out.append(blob[i : i + n])
        i, k = i + n, k + 1
    return out


class ChunkStream(httpx.SyncByteStream, httpx.AsyncByteStream):
    """A response body delivered chunk by chunk, optionally failing after the last chunk."""

    def __init__(self, chunks: Sequence[bytes], fail: Exception | None = None) -> None:
        self.chunks, self.fail = list(chunks), fail
        self.closed = False

    def __iter__(self) -> Iterator[bytes]:
        yield from self.chunks
        if self.fail is not None:
            raise self.fail

    async def __aiter__(self) -> AsyncIterator[bytes]:
        for chunk in self.chunks:
            yield chunk
        if self.fail is not None:
            raise self.fail

    def close(self) -> None:
        self.closed = True

    async def aclose(self) -> None:
        self.closed = True


def sse_response(chunks: Sequence[bytes], fail: Exception | None = None) -> httpx.Response:
    return httpx.Response(
        200,
        headers={"Content-Type": "text/event-stream", "Cache-Control": "no-store"},
        stream=ChunkStream(chunks, fail),
    )


def disconnect() -> httpx.ReadError:
    return httpx.ReadError("peer closed connection")


@dataclass
class Step:
    """One scripted stream GET: SSE bytes in `chunks` then `fail` (or a clean end), or a
    prepared `response`."""

    chunks: list[bytes] = field(default_factory=list)
    fail: Exception | None = None
    response: httpx.Response | None = None


@dataclass
class ScriptedWatchServer:
    steps: list[Step]
    heads: dict[str, int] = field(default_factory=dict)
    drop_on_create: set[str] = field(default_factory=set)
    creates: list[dict[str, Any]] = field(default_factory=list)
    create_params: list[dict[str, str]] = field(default_factory=list)
    gets: list[httpx.Request] = field(default_factory=list)

    def __call__(self, request: httpx.Request) -> httpx.Response:
        if request.method == "POST" and request.url.path == "/v0/watch":
            return self._create(request)
        if request.method == "GET" and request.url.path.startswith("/v0/watch/"):
            self.gets.append(request)
            if not self.steps:
                raise AssertionError("stream opened more often than scripted")
            step = self.steps.pop(0)
            if step.response is not None:
                return step.response
            return sse_response(step.chunks, step.fail)
        raise AssertionError(f"unexpected {request.method} {request.url}")

    def _create(self, request: httpx.Request) -> httpx.Response:
        body = body_of(request)
        self.creates.append(body)
        self.create_params.append(dict(request.url.params))
        wid = f"wid_{len(self.creates):022d}"
        topics: dict[str, Any] = {}
        for name, start in body["topics"].items():
            if name in self.drop_on_create:
                continue
            head = self.heads.get(name, 0)
            from_seq = head if start.get("tail") else start.get("from_seq", 0)
            topics[name] = {"from_seq": from_seq, "head_seq": head, "earliest_seq": 1}
        return ok(
            {
                "wid": wid,
                "stream_url": f"/v0/watch/{wid}",
                "session_ttl_ms": 300000,
                "topics": topics,
                "performance": {"server_total_ms": 0.1},
            }
        )


# --- shorthands for the watch tests ---------------------------------------------------------

RETRY = b"retry: 2000\n\n"  # what the server sends first on every stream
FIRST_DELAY = 2.0 * 0.75  # the first reconnect after it: 2 s · 2^0 · jitter 0.75 (FixedRng)


async def settle(value: Any) -> Any:
    """Await `value` if the async client returned a coroutine; the sync one's is final."""
    return await value if inspect.isawaitable(value) else value


def deleted(topic: str) -> bytes:
    return frame("topic-deleted", {"topic": topic, "head_seq": 0, "reason": "deleted"})


def recs(topic: str, frm: int, seqs: list[int], head: int = 100, to: int | None = None) -> bytes:
    """A `record` frame of `seqs` read after `frm` (`to_seq` defaults to the last seq)."""
    last = to if to is not None else seqs[-1]
    return frame("record", records_frame(topic, frm, seqs, head, to), cursor_id({topic: last}))


def seqs_of(events: list[Any]) -> list[int]:
    return [e.seq for e in events if isinstance(e, WatchRecord)]
