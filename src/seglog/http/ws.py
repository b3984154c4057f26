"""`GET /v0/ws` (API §8): the WebSocket data plane's upgrade.

Checked before the upgrade, each refusal an HTTP response with the canonical error body
(granian supports ASGI's WebSocket denial responses): readiness (`503`), authentication
with an `Authorization: Bearer` key when auth is enabled (`401`; no scope is needed to
connect, each command is authorized on its own), and the stream connection caps (`429`).
A plain `GET` without an upgrade is `400`; other methods `405`.
"""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import Response
from starlette.websockets import WebSocket

from seglog.errors import ErrorCode, SeglogError
from seglog.http.app_state import STATE, ServerState
from seglog.http.auth import bearer_token
from seglog.http.errors import error_response
from seglog.http.ws_session import WsSession


async def endpoint(websocket: WebSocket) -> None:
    st = websocket.scope[STATE]
    assert isinstance(st, ServerState)
    if not st.db.ready or st.shutting_down:
        code = ErrorCode.NOT_READY if not st.db.ready else ErrorCode.SHUTTING_DOWN
        await _deny(websocket, SeglogError(code, "the server is not serving", retry_after=1))
        return
    who = st.keyring.authenticate(bearer_token(websocket.headers.get("authorization")))
    if who is None:
        await _deny(websocket, SeglogError(ErrorCode.UNAUTHORIZED, "missing or unknown API key"))
        return
    key = who.key_id if st.keyring.enabled else None
    try:
        st.slots.acquire(key)
    except SeglogError as e:
        await _deny(websocket, e)
        return
    try:
        await websocket.accept()
        await WsSession(websocket, st, who).run()
    finally:
        st.slots.release(key)


async def _deny(websocket: WebSocket, err: SeglogError) -> None:
    await websocket.send_denial_response(error_response(err))


async def plain_get(request: Request) -> Response:
    if request.method != "GET":
        raise SeglogError(ErrorCode.METHOD_NOT_ALLOWED, f"{request.method} is not allowed here")
    raise SeglogError(ErrorCode.INVALID_REQUEST, "GET /v0/ws needs a WebSocket upgrade")
