"""Router control plane (API §6, SEMANTICS §8.1–§8.2): create/update, delete, state, list.

Every change commits its frame durably before it applies (RouterCreate / RouterDelete,
STORAGE §3.3), under the engine's snapshot lock, then `Registry.lock`, then
`RouterTable.lock` (the engine's lock order), so a snapshot sees each change wholly before
or wholly after its checkpoint; a delete or a spec change snapshots first (`settle`). A
refused request changes nothing: every check runs before the first frame is logged.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from seglog.core.frame_bodies import RouterDeleteBody
from seglog.core.frames import FrameType
from seglog.core.names import valid_router_name, valid_topic_name
from seglog.core.router_graph import fan_in_conflict, find_cycle
from seglog.engine.forwarding import Forwarder
from seglog.engine.interrupts import ShieldedLock
from seglog.engine.registry import Registry
from seglog.engine.routers import Router, RouterTable, create_body
from seglog.errors import ErrorCode, SeglogError, invalid, throttled, topic_not_found
from seglog.router_model import DropRouterResult, PutRouterResult, RouterInfo, RouterSpec

LogDurable = Callable[[int, FrameType, bytes], None]
CreateTopic = Callable[[str], None]  # with the default config (a durable TopicCreate)


def router_not_found(name: str) -> SeglogError:
    return SeglogError(
        ErrorCode.ROUTER_NOT_FOUND, f"router {name!r} does not exist", {"router": name}
    )


def check_names(spec: RouterSpec) -> None:
    """The first three checks of API §6.1 (they need no state)."""
    if not valid_router_name(spec.name):
        raise invalid(f"invalid router name {spec.name!r}", {"router": spec.name})
    if spec.source == spec.dest:
        raise invalid(
            "a router's source and dest must differ", {"source": spec.source, "dest": spec.dest}
        )
    for field, name in (("source", spec.source), ("dest", spec.dest)):
        if not valid_topic_name(name):
            raise invalid(f"invalid {field} topic name {name!r}", {field: name})


@dataclass(frozen=True, slots=True)
class RouterControl:
    registry: Registry
    routers: RouterTable
    forwarder: Forwarder
    log_durable: LogDurable
    create_topic: CreateTopic
    # Taken before the registry's: a delete or a spec change first puts the router's
    # copies in a snapshot (`settle`, `Engine.settle_copies`), with nothing forwarded
    # until its frame is logged.
    snapshot_lock: ShieldedLock
    settle: Callable[[Sequence[Router]], None]
    max_routers: int = 0
    max_topics: int = 0

    def put(self, spec: RouterSpec) -> PutRouterResult:
        """API §6.1, checks in its exact order."""
        check_names(spec)
        name, source, dest = spec.name, spec.source, spec.dest
        reg, table = self.registry, self.routers
        with self.snapshot_lock, reg.lock, table.lock:
            if not spec.create_dest and reg.get(dest) is None:
                raise topic_not_found(dest)
            edges = table.edges(excluding=name)
            if fan_in_conflict(edges, source, dest) is not None:
                raise SeglogError(
                    ErrorCode.TOPIC_EXISTS_INCOMPATIBLE,
                    f"topic {dest!r} is already fed by a router from another source",
                    {"topic": dest, "reason": "router_dest_fan_in"},
                )
            existing = table.get(name)
            if existing is not None and (existing.spec.source, existing.spec.dest) != (
                source,
                dest,
            ):
                raise SeglogError(
                    ErrorCode.TOPIC_EXISTS_INCOMPATIBLE,
                    f"router {name!r} cannot be re-pointed; delete it first",
                    {
                        "router": name,
                        "reason": "router_repoint_forbidden",
                        "existing_source": existing.spec.source,
                        "existing_dest": existing.spec.dest,
                    },
                )
            cap = self.max_routers
            if existing is None and cap and len(table) >= cap:
                raise throttled(
                    f"router limit of {cap} reached", {"limit": "max_routers", "max": cap}
                )
            if not spec.allow_cycle:
                cycle = find_cycle(edges, source, dest)
                if cycle is not None:
                    raise SeglogError(
                        ErrorCode.ROUTER_CYCLE,
                        f"router {name!r} would close the cycle {' -> '.join(cycle)}",
                        {"cycle": cycle},
                    )
            self._create_endpoints(source, dest)
            s, d = reg.get(source), reg.get(dest)
            assert s is not None and d is not None  # created above, under the registry lock
            if existing is not None:
                if existing.spec != spec:  # replay re-derives with the spec it meets
                    self.settle([existing])
                cursor, base = existing.cursor, existing.dest_base
            else:
                # No backfill: only records appended after the creation are forwarded.
                cursor, base = s.head, d.head
            self.log_durable(0, FrameType.ROUTER_CREATE, create_body(spec, cursor, base).encode())
            if existing is not None:
                existing.spec = spec  # the runtime state stays (§8.1)
            else:
                table.add(Router(spec, cursor, 0, base))
        return PutRouterResult(spec, existing is None)

    def _create_endpoints(self, source: str, dest: str) -> None:
        """Auto-create missing endpoints with the default config; the topic cap is checked
        for all of them first, so a refusal creates neither (nor the router)."""
        missing = [n for n in (source, dest) if self.registry.get(n) is None]
        cap = self.max_topics
        if missing and cap and len(self.registry) + len(missing) > cap:
            raise throttled(f"topic limit of {cap} reached", {"limit": "max_topics", "max": cap})
        for n in missing:
            self.create_topic(n)

    def delete(self, name: str) -> DropRouterResult:
        """API §6.4; forwarded records stay in the dest."""
        with self.snapshot_lock, self.registry.lock, self.routers.lock:
            r = self.routers.get(name)
            if r is None:
                return DropRouterResult(name, False)
            self.settle([r])  # nothing re-derives its copies once it is gone
            self.log_durable(0, FrameType.ROUTER_DELETE, RouterDeleteBody(name).encode())
            self.routers.remove(name)
        return DropRouterResult(name, True)

    def spec(self, name: str) -> RouterSpec:
        r = self.routers.get(name)
        if r is None:
            raise router_not_found(name)
        return r.spec

    def state(self, name: str) -> RouterInfo:
        """API §6.2: drive the router to its source head, then report it."""
        r = self.routers.get(name)
        if r is None:
            raise router_not_found(name)
        self.forwarder.advance(r)
        return r.info()

    def list(
        self,
        prefix: str = "",
        source: str | None = None,
        dest: str | None = None,
        after: str | None = None,
        limit: int = 100,
    ) -> tuple[list[RouterInfo], bool]:
        """A page of routers by name (byte order) strictly after `after`, and whether
        another matching router follows."""
        rows = self.routers.all()
        names = [r.spec.name for r in rows]
        lo = bisect_right(names, after) if after is not None else 0
        if prefix:
            lo = max(lo, bisect_left(names, prefix))
        out: list[RouterInfo] = []
        for r in rows[lo:]:
            if prefix and not r.spec.name.startswith(prefix):
                break
            if (source is not None and r.spec.source != source) or (
                dest is not None and r.spec.dest != dest
            ):
                continue
            if len(out) == limit:
                return out, True
            out.append(r.info())
        return out, False
