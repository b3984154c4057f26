"""Watch sessions (API §7.1, §7.2; SEMANTICS §9): in memory only, each bound to the key
that created it, holding the authoritative per-topic cursors that every stream of the
session reads from and advances.

A session is reclaimed once it has no open stream and its last access (create, or the
close of its last stream) is more than `SESSION_TTL_MS` old; reclamation runs on every
create and every stream open, with time from the injected clock.

Owner: the event loop; no locks.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass

from seglog.clock import Clock
from seglog.core.sse import WID_RANDOM_BYTES, new_wid
from seglog.errors import throttled
from seglog.http.watch_request import DeliveryOptions

SESSION_TTL_MS = 300_000


@dataclass(slots=True)
class WatchSession:
    wid: str
    owner_key: str | None  # key id of the creating principal; None when auth was disabled
    options: dict[str, DeliveryOptions]  # per watched topic
    heartbeat_ms: int
    cursors: dict[str, int]  # topic → cursor; every watched topic, deleted ones included
    last_access_ms: int
    open_streams: int = 0
    generation: int = 0  # bumped by every stream open: older streams of the session stop


class WatchSessions:
    def __init__(
        self,
        clock: Clock,
        max_sessions: int,
        random_bytes: Callable[[int], bytes] = os.urandom,
    ) -> None:
        self._clock = clock
        self.max_sessions = max_sessions  # 0 = no cap
        self._random = random_bytes
        self._sessions: dict[str, WatchSession] = {}

    def __len__(self) -> int:
        return len(self._sessions)

    def reclaim(self) -> int:
        """Drop idle sessions (no open stream, last access older than the TTL)."""
        now = self._clock.now_ms()
        idle = [
            wid
            for wid, s in self._sessions.items()
            if s.open_streams == 0 and now - s.last_access_ms > SESSION_TTL_MS
        ]
        for wid in idle:
            del self._sessions[wid]
        return len(idle)

    def create(
        self,
        owner_key: str | None,
        options: dict[str, DeliveryOptions],
        heartbeat_ms: int,
        cursors: dict[str, int],
    ) -> WatchSession:
        self.reclaim()
        cap = self.max_sessions
        if cap and len(self._sessions) >= cap:
            raise throttled(
                f"watch session limit of {cap} reached",
                {"limit": "max_watch_sessions", "max": cap},
            )
        wid = new_wid(self._random(WID_RANDOM_BYTES))
        while wid in self._sessions:  # 128 random bits: never in practice, but never reuse
            wid = new_wid(self._random(WID_RANDOM_BYTES))
        s = WatchSession(wid, owner_key, options, heartbeat_ms, cursors, self._clock.now_ms())
        self._sessions[wid] = s
        return s

    def lookup(self, wid: str) -> WatchSession | None:
        """The session for a stream open (reclaiming idle ones first)."""
        self.reclaim()
        return self._sessions.get(wid)

    def drop(self, s: WatchSession) -> None:
        """Forget `s` once no stream is open on it."""
        if s.open_streams == 0:
            self._sessions.pop(s.wid, None)

    def take_over(self, s: WatchSession) -> int:
        """A new stream is opening on `s`: older streams stop moving its cursors from now
        on (they end at their next step). Returns the new stream's generation."""
        s.generation += 1
        return s.generation

    def stream_opened(self, s: WatchSession) -> None:
        s.open_streams += 1
        s.last_access_ms = self._clock.now_ms()

    def stream_closed(self, s: WatchSession) -> None:
        s.open_streams -= 1
        s.last_access_ms = self._clock.now_ms()
