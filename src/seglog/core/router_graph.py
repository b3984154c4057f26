"""Router graph rules (SEMANTICS §8.2), pure: edges in, a verdict out.

The graph has one directed edge `source → dest` per router. Two rules guard a new edge:

- **single source per dest** (`fan_in_conflict`): a dest fed by a router from a different
  source refuses another feeder, so each derived dest has exactly one source log to be
  re-derived from (invariant 12);
- **DAG by default** (`find_cycle`): the edge `source → dest` closes a cycle when `dest`
  already reaches `source`; the cycle is reported as the topic path
  `[source, dest, …, source]`.

Both ignore the router being upserted (its own edge is replaced, never doubled), which
the caller expresses by leaving it out of `edges`.
"""

from __future__ import annotations

from collections.abc import Iterable


def find_cycle(edges: Iterable[tuple[str, str]], source: str, dest: str) -> list[str] | None:
    """The cycle the edge `source → dest` would close over `edges`, as
    `[source, dest, …, source]`, or None. A shortest such path (breadth-first), so the
    report is deterministic for a given edge set whatever its order."""
    if source == dest:
        return [source, source]
    out: dict[str, list[str]] = {}
    for s, d in edges:
        out.setdefault(s, []).append(d)
    for nexts in out.values():
        nexts.sort()  # deterministic among equally short paths
    parent: dict[str, str] = {dest: dest}
    frontier = [dest]
    while frontier:
        nxt: list[str] = []
        for node in frontier:
            for d in out.get(node, ()):
                if d in parent:
                    continue
                parent[d] = node
                if d == source:
                    path = [source]
                    while path[-1] != dest:
                        path.append(parent[path[-1]])
                    path.reverse()  # dest … source
                    return [source, *path]
                nxt.append(d)
        frontier = nxt
    return None


def fan_in_conflict(edges: Iterable[tuple[str, str]], source: str, dest: str) -> str | None:
    """The other source already feeding `dest`, or None when `source → dest` keeps a single
    source per dest."""
    for s, d in edges:
        if d == dest and s != source:
            return s
    return None


def cyclic_edges(edges: Iterable[tuple[str, str]]) -> set[tuple[str, str]]:
    """The edges that lie on some cycle: `s → d` with `d` reaching `s` (both in one
    strongly connected component, or `s == d`). Kosaraju's two passes, iterative: O(edges)."""
    edge_list = list(edges)
    out: dict[str, list[str]] = {}
    back: dict[str, list[str]] = {}
    for s, d in edge_list:
        out.setdefault(s, []).append(d)
        back.setdefault(d, []).append(s)
    order: list[str] = []  # nodes by finishing time of a depth-first walk
    seen: set[str] = set()
    for root in list(out):
        if root in seen:
            continue
        seen.add(root)
        stack = [(root, iter(out.get(root, ())))]
        while stack:
            node, it = stack[-1]
            nxt = next((d for d in it if d not in seen), None)
            if nxt is None:
                stack.pop()
                order.append(node)
            else:
                seen.add(nxt)
                stack.append((nxt, iter(out.get(nxt, ()))))
    component: dict[str, int] = {}
    for root in reversed(order):  # walk the reversed graph in reverse finishing order
        if root in component:
            continue
        component[root] = len(component)
        todo = [root]
        while todo:
            node = todo.pop()
            for s in back.get(node, ()):
                if s not in component:
                    component[s] = component[root]
                    todo.append(s)
    return {
        (s, d)
        for s, d in edge_list
        if s == d or (s in component and component.get(d) == component[s])
    }
