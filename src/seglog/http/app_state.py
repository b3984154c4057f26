"""Access to the `ServerState` a handler runs under (kept apart from `app` to avoid an
import cycle between the route modules and the route table)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from starlette.requests import Request

if TYPE_CHECKING:
    from seglog.http.app import ServerState


def server_state(request: Request) -> ServerState:
    st: Any = request.app.state.seglog
    return st  # type: ignore[no-any-return]
