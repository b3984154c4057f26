"""Router graph rules (SEMANTICS §8.2): cycle detection with its reported path, fan-in."""

from __future__ import annotations

import itertools
from graphlib import CycleError, TopologicalSorter

from hypothesis import given
from hypothesis import strategies as st

from seglog.core.router_graph import cyclic_edges, fan_in_conflict, find_cycle

NODES = st.sampled_from(list("abcdefg"))
EDGES = st.lists(st.tuples(NODES, NODES).filter(lambda e: e[0] != e[1]), max_size=25)


def _reaches(edges: list[tuple[str, str]], start: str, goal: str) -> bool:
    seen, todo = {start}, [start]
    while todo:
        n = todo.pop()
        if n == goal:
            return True
        for s, d in edges:
            if s == n and d not in seen:
                seen.add(d)
                todo.append(d)
    return False


def test_two_node_cycle_is_reported_as_a_path() -> None:
    assert find_cycle([("B", "A")], "A", "B") == ["A", "B", "A"]


def test_longer_cycle_path_and_shortest_choice() -> None:
    edges = [("b", "c"), ("c", "d"), ("d", "a"), ("b", "a")]
    assert find_cycle(edges, "a", "b") == ["a", "b", "a"]
    assert find_cycle([("b", "c"), ("c", "a")], "a", "b") == ["a", "b", "c", "a"]


def test_no_cycle_without_a_path_back() -> None:
    assert find_cycle([("a", "b"), ("b", "c")], "a", "c") is None
    assert find_cycle([], "a", "b") is None


@given(EDGES, NODES, NODES)
def test_cycle_iff_dest_reaches_source(edges: list[tuple[str, str]], s: str, d: str) -> None:
    if s == d:
        return
    path = find_cycle(edges, s, d)
    assert (path is not None) == _reaches(edges, d, s)
    if path is not None:
        assert path[0] == path[-1] == s and path[1] == d
        # every hop after the new edge is an existing edge
        for a, b in itertools.pairwise(path[1:]):
            assert (a, b) in edges
        assert len(set(path[:-1])) == len(path) - 1  # a simple cycle


@given(st.lists(st.tuples(NODES, NODES).filter(lambda e: e[0] != e[1]), max_size=40))
def test_accepting_only_acyclic_edges_keeps_a_dag(candidates: list[tuple[str, str]]) -> None:
    accepted: list[tuple[str, str]] = []
    for s, d in candidates:
        if find_cycle(accepted, s, d) is None:
            accepted.append((s, d))
    graph: dict[str, set[str]] = {}
    for s, d in accepted:
        graph.setdefault(d, set()).add(s)
    try:
        list(TopologicalSorter(graph).static_order())
    except CycleError as e:  # pragma: no cover - the property failing
        raise AssertionError(f"accepted edges form a cycle: {e}") from None


def test_fan_in() -> None:
    edges = [("a", "x"), ("b", "y")]
    assert fan_in_conflict(edges, "c", "x") == "a"
    assert fan_in_conflict(edges, "a", "x") is None  # same source: a second router is fine
    assert fan_in_conflict(edges, "c", "z") is None


@given(EDGES, NODES, NODES)
def test_fan_in_property(edges: list[tuple[str, str]], s: str, d: str) -> None:
    other = fan_in_conflict(edges, s, d)
    feeders = {a for a, b in edges if b == d and a != s}
    assert (other is not None) == bool(feeders)
    if other is not None:
        assert other in feeders


@given(st.lists(st.tuples(st.sampled_from("abcdef"), st.sampled_from("abcdef")), max_size=12))
def test_cyclic_edges_are_those_whose_dest_reaches_their_source(
    edges: list[tuple[str, str]],
) -> None:
    cyclic = cyclic_edges(edges)
    for i, (s, d) in enumerate(edges):
        others = edges[:i] + edges[i + 1 :]
        assert ((s, d) in cyclic) == (find_cycle(others, s, d) is not None), (s, d, edges)
