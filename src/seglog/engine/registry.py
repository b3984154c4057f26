"""The topic registry: topics by name and by id, and the next topic id, under ONE lock.

Owner: `Registry.lock` guards membership and `next_topic_id`. Control-plane changes (create,
config update, drop) commit their WAL frame and apply it while holding it, and a snapshot
holds it across its checkpoint and the listing of topics, so a committed change can never
fall between the snapshot and the replayed WAL (STORAGE §5.3). Lock order: the engine's
snapshot lock, then the registry lock, then any `TopicState.lock`. Lookups need no lock (single dict reads are atomic); whoever
acts on a topic re-checks `TopicState.deleted` under the topic's own lock.
"""

from __future__ import annotations

from collections.abc import Mapping

from seglog.engine.interrupts import ShieldedLock
from seglog.engine.topic import TopicState


class Registry:
    def __init__(self) -> None:
        self.lock = ShieldedLock(reentrant=True)
        self._by_name: dict[str, TopicState] = {}
        self._by_id: dict[int, TopicState] = {}
        # (membership version when the copy was taken, the names sorted)
        self._sorted: tuple[int, list[str]] | None = None
        self._version = 0  # bumped by every add and remove, under `lock`
        self.next_topic_id = 1

    @property
    def by_name(self) -> Mapping[str, TopicState]:
        return self._by_name

    @property
    def by_id(self) -> Mapping[int, TopicState]:
        return self._by_id

    def get(self, name: str) -> TopicState | None:
        return self._by_name.get(name)

    def __len__(self) -> int:
        return len(self._by_name)

    def all(self) -> list[TopicState]:
        """Every topic, by id (a copy: safe to iterate while topics come and go)."""
        return sorted(self._by_id.values(), key=lambda t: t.topic_id)

    def sorted_names(self) -> list[str]:
        """Every name in byte order (ASCII: str order), without taking `lock`: a control-
        plane change holds it across an fsync, and the event loop lists topics. A cached
        list is used only while no add or remove happened since before its copy was
        taken; `list(dict)` of str keys is one step under the GIL."""
        version = self._version
        cached = self._sorted
        if cached is not None and cached[0] == version:
            return cached[1]
        names = sorted(list(self._by_name))
        self._sorted = (version, names)
        return names

    def allocate_id(self) -> int:
        """Under `lock`: the id of a new topic instance."""
        tid = self.next_topic_id
        self.next_topic_id += 1
        return tid

    def note_id(self, topic_id: int) -> None:
        """Replay saw `topic_id` in use: never hand it out again."""
        self.next_topic_id = max(self.next_topic_id, topic_id + 1)

    def add(self, t: TopicState) -> None:
        self._by_name[t.name] = t
        self._by_id[t.topic_id] = t
        self._version += 1

    def remove(self, t: TopicState) -> None:
        self._by_name.pop(t.name, None)
        self._by_id.pop(t.topic_id, None)
        self._version += 1
        t.deleted = True
