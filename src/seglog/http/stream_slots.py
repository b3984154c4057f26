"""Stream connection slots (API §11): the server-wide and per-key caps on open SSE
streams and WebSockets. A slot is taken before a stream opens (refusal = `429` with
`Retry-After: 1`) and given back however the stream ends.

Owner: the event loop; no locks (every caller runs on the loop).
"""

from __future__ import annotations

from seglog.errors import throttled


class StreamSlots:
    def __init__(self, max_total: int, max_per_key: int) -> None:
        self.max_total = max_total  # 0 = no cap
        self.max_per_key = max_per_key  # 0 = no cap; applies only to keyed (auth) streams
        self.total = 0
        self._per_key: dict[str, int] = {}

    def acquire(self, key: str | None) -> None:
        """Take a slot for a stream counted against `key` (None when auth is disabled)."""
        if self.max_total and self.total >= self.max_total:
            raise throttled(f"stream connection limit of {self.max_total} reached")
        if key is not None:
            held = self._per_key.get(key, 0)
            if self.max_per_key and held >= self.max_per_key:
                raise throttled(f"stream connection limit of {self.max_per_key} per key reached")
            self._per_key[key] = held + 1
        self.total += 1

    def release(self, key: str | None) -> None:
        self.total -= 1
        if key is not None:
            left = self._per_key.get(key, 1) - 1
            if left > 0:
                self._per_key[key] = left
            else:
                self._per_key.pop(key, None)

    def held_by(self, key: str) -> int:
        return self._per_key.get(key, 0)
