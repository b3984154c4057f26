"""Watch routes (API §7): `POST /v0/watch` creates a session, `GET /v0/watch/:wid` streams
it as Server-Sent Events. Checks run in the API's order; the stream itself is
`watch_stream.WatchStream`, run here as a raw ASGI response so that a client going away
cancels it at once and its connection slot is released however it ends."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable

import orjson
from starlette.requests import Request
from starlette.responses import Response
from starlette.types import Receive, Scope, Send

from seglog.core.sse import decode_cursor_map, rewind
from seglog.errors import ErrorCode, SeglogError
from seglog.http.app_state import RAW_SEND, ServerState, server_state
from seglog.http.auth import Scope as KeyScope
from seglog.http.auth import bearer_token
from seglog.http.common import elapsed_ms, json_body, json_response, read_body, require, started
from seglog.http.watch_request import parse_watch
from seglog.http.watch_sessions import SESSION_TTL_MS, WatchSession
from seglog.http.watch_stream import WatchStream
from seglog.http.wire_types import WatchCursor, WatchResponse

SSE_HEADERS = [
    (b"content-type", b"text/event-stream"),
    (b"cache-control", b"no-store"),
    (b"x-accel-buffering", b"no"),
]


async def create(request: Request) -> Response:
    if request.method != "POST":
        raise _not_allowed(request)
    t0 = started()
    who = require(request, (KeyScope.READ,))
    st = server_state(request)
    raw = await read_body(request, st.settings.max_body_bytes)
    req = parse_watch(json_body(request, raw))
    for name in req.topics:
        if not who.allows(name):
            raise SeglogError(
                ErrorCode.FORBIDDEN, f"api key may not access {name!r}", {"topic": name}
            )
    lenient = request.query_params.get("lenient", "").lower() in ("true", "1")
    cursors: dict[str, int] = {}
    described: dict[str, WatchCursor] = {}
    for name, start in req.topics.items():
        try:
            info = await st.db.get_topic(name, touch=False)
        except SeglogError as e:
            if e.code is ErrorCode.TOPIC_NOT_FOUND and lenient:
                continue
            raise
        from_seq = info.head_seq if start.tail else start.from_seq
        cursors[name] = from_seq
        described[name] = {
            "from_seq": from_seq,
            "head_seq": info.head_seq,
            "earliest_seq": info.earliest_seq,
        }
    owner = who.key_id if st.keyring.enabled else None
    options = {name: req.options.for_topic(req.topics[name]) for name in cursors}
    session = st.watch.create(owner, options, req.heartbeat_ms, cursors)
    body: WatchResponse = {
        "wid": session.wid,
        "stream_url": f"/v0/watch/{session.wid}",
        "session_ttl_ms": SESSION_TTL_MS,
        "topics": described,
        "performance": {"server_total_ms": elapsed_ms(t0)},
    }
    return json_response(orjson.dumps(body))


def _not_allowed(request: Request) -> SeglogError:
    return SeglogError(ErrorCode.METHOD_NOT_ALLOWED, f"{request.method} is not allowed here")


def accepts_sse(accept: str | None) -> bool:
    if accept is None or not accept.strip():
        return True
    return "text/event-stream" in accept or "*/*" in accept


def _first_query(request: Request, name: str) -> str | None:
    given = request.query_params.getlist(name)  # first occurrence wins (API §1.2)
    return given[0] if given else None


def _stream_token(request: Request) -> str | None:
    token = bearer_token(request.headers.get("authorization"))
    return token if token is not None else _first_query(request, "token")


async def open_stream(request: Request) -> Response:
    if request.method != "GET":
        raise _not_allowed(request)
    if not accepts_sse(request.headers.get("accept")):
        raise SeglogError(ErrorCode.NOT_ACCEPTABLE, "this stream is text/event-stream")
    st = server_state(request)
    session = st.watch.lookup(request.path_params["wid"])
    if session is None:
        raise SeglogError(ErrorCode.NOT_FOUND, "unknown or expired watch session")
    if session.owner_key is not None:
        who = st.keyring.authenticate(_stream_token(request))
        if who is None or who.key_id != session.owner_key:
            raise SeglogError(
                ErrorCode.UNAUTHORIZED, "this watch stream needs the key that created it"
            )
    st.slots.acquire(session.owner_key)
    generation = st.watch.take_over(session)  # before the rewind: no older stream moves it
    # `?last_event_id=` is seglog's addition for browsers: a new `EventSource` cannot set
    # the header, and a closed one's old stream may have moved the session on meanwhile.
    last_event = request.headers.get("last-event-id") or _first_query(request, "last_event_id")
    if last_event:
        session.cursors = rewind(session.cursors, decode_cursor_map(last_event))
    return SseResponse(st, session, generation)


class SseResponse(Response):
    """Streams a watch session; owns one connection slot, released on every exit."""

    def __init__(self, st: ServerState, session: WatchSession, generation: int) -> None:
        super().__init__(status_code=200)
        self._st = st
        self._session = session
        self._generation = generation

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        st, session = self._st, self._session
        stream = WatchStream(
            session,
            st.feed,
            st.wait_for_append,
            st.db.head_of,
            st.engine.clock,
            lambda: st.shutting_down,
            self._generation,
            st.park,
        )

        raw_send: Send = scope.get(RAW_SEND, send)  # see app.Guard: no per-chunk wrappers

        async def send_bytes(data: bytes) -> None:
            await raw_send({"type": "http.response.body", "body": data, "more_body": True})

        st.watch.stream_opened(session)
        try:
            await send({"type": "http.response.start", "status": 200, "headers": SSE_HEADERS})
            if await until_disconnect(stream.run(send_bytes), receive):
                await send({"type": "http.response.body", "body": b"", "more_body": False})
        finally:
            st.watch.stream_closed(session)
            if stream.all_deleted:
                # Nothing left to watch: a reconnect gets 404, so an EventSource stops
                # instead of reconnecting forever to a stream that ends at once.
                st.watch.drop(session)
            st.slots.release(session.owner_key)


async def until_disconnect(work: Awaitable[None], receive: Receive) -> bool:
    """Run `work` until it ends (True) or the client disconnects (False, work cancelled)."""
    task = asyncio.ensure_future(work)

    async def disconnected() -> None:
        while (await receive())["type"] != "http.disconnect":
            pass

    gone = asyncio.ensure_future(disconnected())
    try:
        await asyncio.wait({task, gone}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        task.cancel()
        gone.cancel()
        await asyncio.gather(task, gone, return_exceptions=True)
    if task.cancelled():
        return False
    task.result()  # re-raise a failure of the stream loop
    return True
