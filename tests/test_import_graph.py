"""No import cycles between modules of `seglog`, counting `TYPE_CHECKING` imports as edges
too (issue 9: engine ↔ recovery/snapshots, the http route modules ↔ `app`, cli ↔ server,
spark source ↔ stream all had one). grimp is import-linter's graph builder."""

from __future__ import annotations

import grimp


def _cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (iterative Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for root in sorted(edges):
        if root in index:
            continue
        work = [(root, iter(sorted(edges[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(edges[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def test_cycle_finder_finds_cycles() -> None:
    edges = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}, "e": {"e"}}
    assert _cycles(edges) == [["a", "b", "c"]]
    assert _cycles({"a": {"b"}, "b": set()}) == []


def test_http_package_has_no_import_cycles() -> None:
    graph = grimp.build_graph("seglog", exclude_type_checking_imports=False)
    http = {m for m in graph.modules if m == "seglog.http" or m.startswith("seglog.http.")}
    assert "seglog.http.app" in http and "seglog.http.topics" in http
    edges = {m: set(graph.find_modules_directly_imported_by(m)) & http for m in http}
    assert _cycles(edges) == []


def test_no_module_of_seglog_is_in_an_import_cycle() -> None:
    graph = grimp.build_graph("seglog", exclude_type_checking_imports=False)
    # Packages are nodes too: a package's __init__ importing a submodule that imports the
    # package back is a cycle like any other.
    edges = {
        m: set(graph.find_modules_directly_imported_by(m)) & graph.modules for m in graph.modules
    }
    assert _cycles(edges) == []
