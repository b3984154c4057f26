"""Sealed segments that snapshots reference (format 2, docs/storage.md): the only copy of
the records they hold, so never unlinked while a kept snapshot, or one being written, names
them.

Owner: the engine's one `SnapshotPins`. The snapshot writer holds the segments it captures
(`hold`, under each topic's lock) and settles the set once the new snapshot is durable;
`TopicSegments.drop_dead` asks `holds` under the topic's lock before unlinking. A topic
delete unlinks its files regardless: a replay that restores the topic from a snapshot
replays its delete too (`recovery` checks that no live record is left without its file).
"""

from __future__ import annotations

import threading
from collections.abc import Iterable

SegmentKey = tuple[int, int]  # topic_id, segment first seq


class SnapshotPins:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._kept: frozenset[SegmentKey] = frozenset()
        self._capturing: set[SegmentKey] = set()

    def holds(self, topic_id: int, first_seq: int) -> bool:
        key = (topic_id, first_seq)
        with self._lock:
            return key in self._kept or key in self._capturing

    def hold(self, keys: Iterable[SegmentKey]) -> None:
        """Segments a snapshot being written may reference (until `settle`)."""
        with self._lock:
            self._capturing.update(keys)

    def settle(self, kept: frozenset[SegmentKey]) -> frozenset[SegmentKey]:
        """The kept snapshots now reference exactly `kept` (nothing is being captured);
        returns the segments no longer held, whose drop was maybe put off."""
        with self._lock:
            released = (self._kept | self._capturing) - kept
            self._kept, self._capturing = kept, set()
            return frozenset(released)

    def abandon(self) -> None:
        """A snapshot failed, maybe after its file became durable: what it held stays
        held until a later snapshot settles the set."""
        with self._lock:
            self._kept = self._kept | self._capturing
            self._capturing = set()
