"""`ServerState` and the handlers' access to it.

It lives below both the route table (`app`) and the route modules (`topics`, `records`,
`health`, `metrics_snapshot`) so that every one of them imports it and none imports `app`:
the package's import graph stays acyclic (tests/http/test_import_graph.py).
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field

from starlette.requests import Request

from seglog.config import Settings
from seglog.engine.aio import AppendWaiters
from seglog.engine.engine import Engine
from seglog.http.async_engine import AsyncEngine
from seglog.http.auth import KeyRing


@dataclass
class ServerState:
    """Owner of the server-wide mutable state that is not the engine's: per-key in-flight
    counters, the asyncio append waiters, the shutdown flag. Touched only on the loop."""

    engine: Engine
    settings: Settings
    keyring: KeyRing
    recovery_done: asyncio.Event = field(default_factory=asyncio.Event)
    waiters: AppendWaiters | None = None
    shutting_down: bool = False
    inflight: dict[str, int] = field(default_factory=dict)
    started_monotonic: float = 0.0

    def __post_init__(self) -> None:
        self.db = AsyncEngine(self.engine)  # how handlers reach the engine

    def start(self, loop: asyncio.AbstractEventLoop) -> None:
        self.waiters = AppendWaiters(self.engine, loop)

    async def begin_shutdown(self) -> None:
        self.shutting_down = True
        if self.waiters is not None:
            self.waiters.wake_all()


def server_state(request: Request) -> ServerState:
    st = request.app.state.seglog
    assert isinstance(st, ServerState)
    return st
