"""The ASGI application: one route table, a guard in front, canonical errors everywhere.

Request pipeline (API §0.2, §1): probes bypass auth unless `SEGLOG_PROBE_AUTH`; otherwise
authentication happens before routing (an unknown path without a key is 401), then the
per-key in-flight cap, then readiness (503 `not_ready` while recovery replays), then the
route. Handlers check scope/prefix, read the body under the size cap, check the content
type, parse, and call the engine. Every error leaves as the canonical error body.

The data plane (`/v0/topics/{topic}` and its fixed sub-paths, `routes.direct_endpoint`)
is dispatched by the guard straight to its handlers; everything else goes through
Starlette's router. Both answer errors alike.

Every `500 internal` is logged with its traceback on the `seglog.http.app` logger, exactly
once, whichever path produced it: an unexpected exception in a handler (Starlette's
`Exception` handler, or the guard's for the data plane), a `SeglogError(INTERNAL)` from
the engine, or an exception in the guard itself. Bad input never reaches those paths: a
body that ends early (malformed chunking, or the client closing mid-body) is
`400 invalid_request`.
"""

from __future__ import annotations

import logging
import re
from collections.abc import MutableMapping
from typing import Any
from urllib.parse import parse_qs

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import ClientDisconnect, Request
from starlette.responses import Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from seglog.errors import ErrorCode, SeglogError
from seglog.http import openapi
from seglog.http.app_state import RAW_SEND, STATE
from seglog.http.app_state import ServerState as ServerState  # the composition root's import
from seglog.http.auth import Principal, bearer_token
from seglog.http.common import body_ended_early
from seglog.http.errors import error_response, status_for
from seglog.http.routes import Endpoint, direct_endpoint, route_table

log = logging.getLogger(__name__)

PROBE_PATHS = frozenset({"/v0/health", "/v0/ready", "/healthz", "/readyz"})
ALWAYS_SERVED = PROBE_PATHS | {"/v0/metrics", "/v0/openapi.json"}
_WATCH_STREAM = re.compile(r"/v0/watch/[^/]+")  # GET /v0/watch/:wid, exactly
_WORK_STREAM = re.compile(r"/v0/topics/[^/]+/work")  # GET /v0/topics/:q/work
_CONSOLE = re.compile(r"/console(/[^/]+)?")  # the web console's static assets (API §13.3)
_LOGGED = "seglog.logged_exception"  # scope key: the exception already logged for this request


def log_internal(exc: BaseException, scope: MutableMapping[str, Any]) -> None:
    """Log a 500's traceback once per request (method and path only: no query string,
    which may carry `?token=`, and no headers)."""
    if scope.get(_LOGGED) is exc:
        return
    scope[_LOGGED] = exc
    log.error(
        "500 internal error on %s %r: %s",
        scope.get("method", "?"),
        scope.get("path", "?"),
        type(exc).__name__,
        exc_info=exc,
    )


def domain_error_response(exc: SeglogError, scope: MutableMapping[str, Any]) -> Response:
    """A `SeglogError` answered with its canonical body (and logged, if it is a 500)."""
    if status_for(exc.code) == 500:
        log_internal(exc, scope)
    return error_response(exc)


def http_error_response(exc: HTTPException) -> Response:
    """Starlette's own 404/405 (an unknown route, a method a route does not take) in the
    canonical error body."""
    if exc.status_code == 405:
        return error_response(SeglogError(ErrorCode.METHOD_NOT_ALLOWED, "method not allowed"))
    return error_response(SeglogError(ErrorCode.NOT_FOUND, "no such route"))


def _internal(exc: BaseException) -> SeglogError:
    return SeglogError(ErrorCode.INTERNAL, f"internal error: {type(exc).__name__}")


class Guard:
    """Pure-ASGI middleware: auth before routing, in-flight caps, readiness; then the
    data plane straight to its handlers (`_direct`), the rest to Starlette."""

    def __init__(self, app: Starlette, state: ServerState) -> None:
        self.app = app
        self.state = state

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        scope[STATE] = self.state
        if scope["type"] != "http":
            scope[RAW_SEND] = send  # a WebSocket's data-plane sends (`ws_outbound`)
            await self.app(scope, receive, send)
            return
        started = finished = False

        async def tracked(message: Message) -> None:
            nonlocal started, finished
            if message["type"] == "http.response.start":
                started = True
            elif message["type"] == "http.response.body" and not message.get("more_body"):
                finished = True
            await send(message)

        # Long-lived streams send their body chunks on the server's own `send`: each layer
        # of wrappers costs per chunk (a third of the loop's time with 100 SSE watchers),
        # and all of them only track the response start and end, which still pass here.
        scope[RAW_SEND] = send
        try:
            await self._guarded(scope, receive, tracked)
        except Exception as exc:
            # Starlette re-raises what its `Exception` handler already answered and logged;
            # anything else (the guard's own failures, and a data-plane handler's
            # unexpected exceptions) is logged and answered here.
            log_internal(exc, scope)
            if not started:
                await _send_error(send, _internal(exc))
            elif not finished:
                raise  # half a response is out: let the server abort the connection

    async def _guarded(self, scope: Scope, receive: Receive, send: Send) -> None:
        st = self.state
        path: str = scope["path"]
        auth_on = st.keyring.enabled
        principal: Principal | None = st.keyring.full_access
        # The SSE watch stream authenticates by session binding (API §1.2, §7.2), not up front.
        stream_get = scope["method"] in ("GET", "HEAD")
        exempt = stream_get and _WATCH_STREAM.fullmatch(path) is not None
        # The console's page and assets hold no data; the page asks for a key itself.
        static = stream_get and _CONSOLE.fullmatch(path) is not None
        exempt = exempt or static
        work = stream_get and _WORK_STREAM.fullmatch(path) is not None
        if auth_on and not exempt and (path not in PROBE_PATHS or st.settings.probe_auth):
            token = bearer_token(_header(scope, b"authorization"))
            if token is None and work:  # `?token=` only on the SSE GETs (API §1.2)
                token = _first_query(scope, "token")
            principal = st.keyring.authenticate(token)
            if principal is None:
                await _send_error(
                    send, SeglogError(ErrorCode.UNAUTHORIZED, "missing or unknown API key")
                )
                return
        scope["seglog.principal"] = principal
        if path not in ALWAYS_SERVED and not static and not st.db.ready:
            err = SeglogError(
                ErrorCode.NOT_READY,
                "recovery in progress",
                {"replay_progress": round(st.db.replay_progress, 4)},
                retry_after=1,
            )
            await _send_error(send, err)
            return
        cap = st.settings.max_inflight_per_key
        # A watch stream is not authenticated here (its session binding is checked by the
        # route) and holds no in-flight slot: stream GETs release theirs once open (§11).
        # A `/work` stream is authenticated here, so it needs a free slot to open, and
        # gives it back at once.
        counted = not exempt
        key = principal.key_id if (auth_on and principal is not None and counted) else None
        if key is not None and cap:
            n = st.inflight.get(key, 0)
            if n >= cap:
                await _send_error(
                    send,
                    SeglogError(ErrorCode.THROTTLED, "too many in-flight requests", retry_after=1),
                )
                return
            if work:
                key = None
            else:
                st.inflight[key] = n + 1
        try:
            direct = None if scope.get("root_path") else direct_endpoint(scope["method"], path)
            if direct is None:
                await self.app(scope, receive, send)
            else:
                await self._direct(direct[0], direct[1], scope, receive, send)
        finally:
            if key is not None and cap:
                left = st.inflight.get(key, 1) - 1
                if left > 0:
                    st.inflight[key] = left
                else:
                    st.inflight.pop(key, None)

    async def _direct(
        self, endpoint: Endpoint, topic: str, scope: Scope, receive: Receive, send: Send
    ) -> None:
        """A data-plane request straight to its handler, without the per-request wrappers
        of Starlette's router and its two exception layers (~20–30 % of a small request's
        time on the loop: BENCHMARKS.md, "the data plane past Starlette's router"). The
        handler gets what it reads from the scope (`app`, `path_params`; not Starlette's
        `router`, `route` or `endpoint` keys, which no handler uses). Errors are answered
        as `build_app`'s handlers answer them; anything else reaches `__call__`, which
        logs it and answers 500 as Starlette's would."""
        scope["app"] = self.app
        scope["path_params"] = {"topic": topic}
        request = Request(scope, receive, send)
        try:
            response = await endpoint(request)
        except SeglogError as exc:
            response = domain_error_response(exc, scope)
        except ClientDisconnect:
            response = error_response(body_ended_early())
        except HTTPException as exc:
            response = http_error_response(exc)
        await response(scope, receive, send)


def _first_query(scope: Scope, name: str) -> str | None:
    given = parse_qs(scope.get("query_string", b"").decode("latin-1")).get(name)
    return given[0] if given else None


def _header(scope: Scope, name: bytes) -> str | None:
    for k, v in scope["headers"]:
        if k == name:
            return str(v.decode("latin-1"))
    return None


async def _send_error(send: Send, err: SeglogError) -> None:
    resp = error_response(err)
    await send(
        {"type": "http.response.start", "status": resp.status_code, "headers": resp.raw_headers}
    )
    await send({"type": "http.response.body", "body": resp.body})


def build_app(state: ServerState) -> ASGIApp:
    routes = route_table(openapi.serve)

    async def http_error(_request: Request, exc: Exception) -> Response:
        assert isinstance(exc, HTTPException)
        return http_error_response(exc)

    async def domain_error(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, SeglogError)
        return domain_error_response(exc, request.scope)

    async def client_gone(_request: Request, _exc: Exception) -> Response:
        # A body read outside `read_body` hit the end of the stream: still bad input.
        return error_response(body_ended_early())

    async def crash(request: Request, exc: Exception) -> Response:
        log_internal(exc, request.scope)
        return error_response(_internal(exc))

    app = Starlette(
        routes=routes,
        exception_handlers={
            HTTPException: http_error,
            SeglogError: domain_error,
            ClientDisconnect: client_gone,
            Exception: crash,
        },
    )
    app.router.redirect_slashes = False  # `/v0/topics/` is 404, never a redirect
    return Guard(app, state)
