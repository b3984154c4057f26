"""The router registry: every router's definition and runtime state (SEMANTICS §8.1).

Owner: `RouterTable.lock` (reentrant) guards the membership, every `Router`'s runtime state
(`cursor`, `forwarded_total`, `dest_base`, its duplicate index) and the hop table. It is
held across a whole forwarding step, which serializes forwarding (so per router too), and
by a snapshot from its checkpoint until the routers are captured (STORAGE §5.3 steps 3–5),
so a captured cursor always matches the captured dest. Lock order: the engine's snapshot
lock, `Registry.lock`, `RouterTable.lock`, then any `TopicState.lock`; nothing takes this lock while holding a
topic lock. Lock-free reads (`behind`, `feeding`) only ever look at single attributes.

Hop counts (§8.2) live here, in memory only: `hops[topic_id][seq]` for copies landed in a
topic that is itself some router's source; a recovered record counts as 0 hops.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from seglog.core.frame_bodies import RouterCreateBody
from seglog.core.router_graph import cyclic_edges
from seglog.engine.interrupts import ShieldedLock
from seglog.model import Selector
from seglog.router_model import Guarantee, RouterInfo, RouterSpec

HOP_PRUNE_AT = 65_536  # entries per topic before entries below its base_seq are dropped


@dataclass(slots=True, eq=False)
class Router:
    spec: RouterSpec
    cursor: int  # source seq forwarded through
    forwarded_total: int
    dest_base: int
    # exactly_once only: source seq → dest seq of its copy (checked for liveness on use)
    copies: dict[int, int] = field(default_factory=dict)
    removed: bool = False
    # (spec, cursor, forwarded_total) as the newest snapshot on disk holds them, and as the
    # one being written captured them: a router still there needs no snapshot before a
    # change ends its re-derivation (`Engine.settle_copies`).
    snapshotted: tuple[RouterSpec, int, int] | None = None
    capturing: tuple[RouterSpec, int, int] | None = None

    def at_snapshot(self) -> bool:
        return self.snapshotted == (self.spec, self.cursor, self.forwarded_total)

    def info(self) -> RouterInfo:
        return RouterInfo(self.spec, self.forwarded_total)


def spec_of(body: RouterCreateBody) -> RouterSpec:
    return RouterSpec(
        name=body.name,
        source=body.source,
        dest=body.dest,
        preserve_node=body.preserve_node,
        preserve_tag=body.preserve_tag,
        create_dest=body.create_dest,
        filter=body.filter,
        allow_cycle=body.allow_cycle,
        guarantee=Guarantee.EXACTLY_ONCE if body.exactly_once else Guarantee.AT_LEAST_ONCE,
    )


def create_body(spec: RouterSpec, cursor: int, dest_base: int) -> RouterCreateBody:
    return RouterCreateBody(
        spec.name,
        spec.source,
        spec.dest,
        spec.preserve_node,
        spec.preserve_tag,
        spec.create_dest,
        spec.allow_cycle,
        spec.exactly_once,
        spec.filter,
        cursor,
        dest_base,
    )


class RouterTable:
    def __init__(self) -> None:
        self.lock = ShieldedLock(reentrant=True)
        self._by_name: dict[str, Router] = {}
        # Endpoint indexes: every read asks which routers feed its topic. A router's
        # endpoints never change (re-pointing is refused), so they follow add/remove.
        self._by_dest: dict[str, list[Router]] = {}
        self._sources: dict[str, int] = {}
        self.hops: dict[int, dict[int, int]] = {}
        # names of the routers whose edge lies on a cycle; None: membership changed since
        self._cyclic: frozenset[str] | None = None

    # ---- lookups (lock-free: single dict reads) -------------------------------------
    def get(self, name: str) -> Router | None:
        return self._by_name.get(name)

    def __len__(self) -> int:
        return len(self._by_name)

    def all(self) -> list[Router]:
        """Every router, by name (a copy)."""
        return [self._by_name[n] for n in sorted(self._by_name)]

    def feeding(self, dest: str) -> list[Router]:
        return list(self._by_dest.get(dest, ()))

    def touching(self, topic: str) -> list[Router]:
        return [r for r in self.all() if r.spec.source == topic or r.spec.dest == topic]

    def is_source(self, topic: str) -> bool:
        return self._sources.get(topic, 0) > 0

    def on_cycle(self, name: str) -> bool:
        """Whether router `name`'s edge lies on a cycle of the router graph (only
        `allow_cycle` routers close one, SEMANTICS §8.2)."""
        cyclic = self._cyclic
        if cyclic is None:
            routers = list(self._by_name.values())
            edges = cyclic_edges((r.spec.source, r.spec.dest) for r in routers)
            cyclic = frozenset(
                r.spec.name for r in routers if (r.spec.source, r.spec.dest) in edges
            )
            self._cyclic = cyclic
        return name in cyclic

    def edges(self, excluding: str) -> list[tuple[str, str]]:
        """`source → dest` of every router but `excluding` (the one being upserted)."""
        return [
            (r.spec.source, r.spec.dest) for n, r in list(self._by_name.items()) if n != excluding
        ]

    # ---- membership (under `lock`) ------------------------------------------------------
    def add(self, r: Router) -> None:
        old = self._by_name.get(r.spec.name)
        if old is not None:
            self.remove(old.spec.name)
        self._by_name[r.spec.name] = r
        self._cyclic = None
        self._by_dest[r.spec.dest] = [*self._by_dest.get(r.spec.dest, ()), r]
        self._sources[r.spec.source] = self._sources.get(r.spec.source, 0) + 1

    def remove(self, name: str) -> Router | None:
        r = self._by_name.pop(name, None)
        if r is None:
            return None
        self._cyclic = None
        r.removed = True
        rest = [x for x in self._by_dest.get(r.spec.dest, ()) if x is not r]
        if rest:
            self._by_dest[r.spec.dest] = rest  # a new list: lock-free readers keep theirs
        else:
            self._by_dest.pop(r.spec.dest, None)
        left = self._sources.get(r.spec.source, 0) - 1
        if left > 0:
            self._sources[r.spec.source] = left
        else:
            self._sources.pop(r.spec.source, None)
        return r

    def forget_topic(self, topic_id: int) -> None:
        self.hops.pop(topic_id, None)

    # ---- hop counts (under `lock`) ------------------------------------------------------
    def hop(self, topic_id: int, seq: int) -> int:
        table = self.hops.get(topic_id)
        return 0 if table is None else table.get(seq, 0)

    def set_hops(self, topic_id: int, first_seq: int, hops: Iterable[int], base_seq: int) -> None:
        table = self.hops.setdefault(topic_id, {})
        for k, h in enumerate(hops):
            table[first_seq + k] = h
        if len(table) > HOP_PRUNE_AT:
            for seq in [s for s in table if s < base_seq]:
                del table[seq]

    # ---- replay (recovery, STORAGE §6 step 4) -------------------------------------------
    def replay_create(self, body: RouterCreateBody) -> None:
        """Upsert without checks; an existing router keeps its runtime state."""
        spec = spec_of(body)
        r = self._by_name.get(spec.name)
        if r is None or (r.spec.source, r.spec.dest) != (spec.source, spec.dest):
            # Router frames all go to shard 0, so a delete replays between two creates of
            # different pairs; should one not, the later definition starts afresh.
            self.add(Router(spec, body.initial_cursor, 0, body.initial_dest_base))
        else:
            r.spec = spec

    def replay_delete(self, name: str) -> None:
        self.remove(name)

    # ---- snapshots (STORAGE §5.2) --------------------------------------------------------
    def capture(self) -> list[dict[str, Any]]:
        """Under `lock`: the §5.2 `routers` array."""
        out: list[dict[str, Any]] = []
        for r in self.all():
            s = r.spec
            r.capturing = (s, r.cursor, r.forwarded_total)
            out.append(
                {
                    "name": s.name,
                    "source": s.source,
                    "dest": s.dest,
                    "preserve_node": s.preserve_node,
                    "preserve_tag": s.preserve_tag,
                    "create_dest": s.create_dest,
                    "allow_cycle": s.allow_cycle,
                    "guarantee": s.guarantee.value,
                    "filter": None if s.filter is None else s.filter.to_wire(),
                    "forward_cursor": r.cursor,
                    "forwarded_total": r.forwarded_total,
                    "dest_base": r.dest_base,
                }
            )
        return out

    def captured(self) -> None:
        """The snapshot that ran `capture` is durable: its routers are at it."""
        for r in self.all():
            r.snapshotted, r.capturing = r.capturing, None

    def restore(self, entries: Iterable[dict[str, Any]]) -> None:
        for e in entries:
            flt = e.get("filter")
            spec = RouterSpec(
                name=str(e["name"]),
                source=str(e["source"]),
                dest=str(e["dest"]),
                preserve_node=bool(e.get("preserve_node", True)),
                preserve_tag=bool(e.get("preserve_tag", True)),
                create_dest=bool(e.get("create_dest", True)),
                filter=None if flt is None else Selector.parse(flt),
                allow_cycle=bool(e.get("allow_cycle", False)),
                guarantee=Guarantee(e.get("guarantee", "at_least_once")),
            )
            r = Router(
                spec,
                int(e.get("forward_cursor", 0)),
                int(e.get("forwarded_total", 0)),
                int(e.get("dest_base", 0)),
            )
            r.snapshotted = (spec, r.cursor, r.forwarded_total)
            self.add(r)


def prune_copies(r: Router, dest_base_seq: int) -> None:
    """Drop duplicate-index entries whose copy fell below the dest's live front (a
    copy that left the dest is no longer evidence, §8.4), once the index is large."""
    if len(r.copies) > HOP_PRUNE_AT:
        for src in [k for k, v in r.copies.items() if v < dest_base_seq]:
            del r.copies[src]
