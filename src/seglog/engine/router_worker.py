"""The router worker (SEMANTICS §8.5): a background thread that drains every router behind
its source every `TICK_MS` (STORAGE §8: 50 ms), looping until a pass makes no progress —
and at once when a router's source publishes (a publisher listener sets an event; the
publisher never waits for forwarding), so a dest's live readers see copies within about a
thread hand-off instead of up to a tick later.

Forwarding is off the write path: a source write acks without waiting for it; readers of a
dest drain their feeding routers themselves (read-your-writes), so the worker only bounds
how stale an unread dest and live watchers can be. `Forwarder.forward_all` is the unit of
work; tests call it directly instead of running the thread.
"""

from __future__ import annotations

import logging
import threading

from seglog.engine.engine import Engine

log = logging.getLogger("seglog.routers")

TICK_MS = 50


class RouterWorker:
    def __init__(self, engine: Engine, tick_ms: int = TICK_MS) -> None:
        self.engine = engine
        self.tick_s = tick_ms / 1000.0
        self._stop = threading.Event()
        self._kick = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        self.engine.add_listener(self._on_append)
        self._thread = threading.Thread(target=self._run, name="seglog-routers", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Stop after the pass in progress (the final drain is the engine's, at close)."""
        self.engine.remove_listener(self._on_append)
        self._stop.set()
        self._kick.set()
        if self._thread is not None:
            self._thread.join()
            self._thread = None

    def _on_append(self, topic: str, _head: int) -> None:
        if self.engine.routers.is_source(topic):
            self._kick.set()

    def _run(self) -> None:
        while True:
            self._kick.wait(self.tick_s)
            self._kick.clear()  # publishes from here on kick the next pass
            if self._stop.is_set():
                return
            self.run_once()

    def run_once(self) -> int:
        """One tick: advance every router that is behind. Returns routers advanced."""
        e = self.engine
        if not e.ready or not len(e.routers):
            return 0
        try:
            return e.forwarder.forward_all()
        except Exception:
            log.exception("router forwarding pass failed")
            return 0
