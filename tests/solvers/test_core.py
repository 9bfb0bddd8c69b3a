"""The C++ DAG utilities agree with plain Python statements of what they promise."""

import heapq
import itertools

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from phazec.solvers import core
from tests.examples import examples

pytestmark = pytest.mark.ext

Graph = tuple[int, list[tuple[int, int]]]


@st.composite
def dags(draw: st.DrawFn, max_nodes: int = 9) -> Graph:
    """A random DAG with its nodes relabelled by a random permutation (so ids are not an order)."""
    n = draw(st.integers(0, max_nodes))
    label = draw(st.permutations(range(n)))
    pairs = [(u, v) for u, v in itertools.combinations(range(n), 2)]
    chosen = draw(st.lists(st.sampled_from(pairs), unique=True)) if pairs else []
    return n, [(label[u], label[v]) for u, v in chosen]


@st.composite
def digraphs(draw: st.DrawFn) -> Graph:
    """A random directed graph without self-loops, cyclic or not."""
    n = draw(st.integers(2, 7))
    pairs = [(u, v) for u in range(n) for v in range(n) if u != v]
    return n, draw(st.lists(st.sampled_from(pairs), unique=True))


def reaches(n: int, edges: list[tuple[int, int]], source: int, target: int) -> bool:
    """Whether a non-empty path runs from source to target (plain depth-first search)."""
    stack = [v for u, v in edges if u == source]
    seen: set[int] = set()
    while stack:
        v = stack.pop()
        if v == target:
            return True
        if v not in seen:
            seen.add(v)
            stack += [w for u, w in edges if u == v]
    return False


def kahn_smallest_first(n: int, edges: list[tuple[int, int]]) -> list[int]:
    indegree = [sum(1 for _, v in set(edges) if v == w) for w in range(n)]
    ready = [v for v in range(n) if indegree[v] == 0]
    heapq.heapify(ready)
    order = []
    while ready:
        v = heapq.heappop(ready)
        order.append(v)
        for u, w in set(edges):
            if u == v:
                indegree[w] -= 1
                if indegree[w] == 0:
                    heapq.heappush(ready, w)
    return order


@settings(max_examples=examples(200), deadline=None)
@given(digraphs())
def test_find_cycle_returns_a_cycle_exactly_when_there_is_one(graph: Graph) -> None:
    n, edges = graph
    cycle = core.find_cycle(n, edges)
    if not any(reaches(n, edges, v, v) for v in range(n)):
        assert cycle == []
        return
    assert len(cycle) == len(set(cycle)) >= 2
    assert all((a, b) in edges for a, b in zip(cycle, [*cycle[1:], cycle[0]], strict=True))


@settings(max_examples=examples(200), deadline=None)
@given(dags())
def test_topological_order_is_kahn_smallest_first(graph: Graph) -> None:
    n, edges = graph
    order = core.topological_order(n, edges)
    assert order == kahn_smallest_first(n, edges)
    position = {v: i for i, v in enumerate(order)}
    assert sorted(order) == list(range(n))
    assert all(position[u] < position[v] for u, v in edges)


@settings(max_examples=examples(200), deadline=None)
@given(dags())
def test_downsets_are_every_successor_closed_set_in_order(graph: Graph) -> None:
    n, edges = graph
    expected = [
        list(subset)
        for size in range(n + 1)
        for subset in itertools.combinations(range(n), size)
        if all(v in subset for u, v in edges if u in subset)
    ]
    assert core.downsets(n, edges, 1 << 20) == expected


def test_cycle_is_rejected_by_order_and_downsets() -> None:
    edges = [(0, 1), (1, 2), (2, 0)]
    assert core.find_cycle(3, edges) in ([0, 1, 2], [1, 2, 0], [2, 0, 1])
    with pytest.raises(ValueError, match="cycle"):
        core.topological_order(3, edges)
    with pytest.raises(ValueError, match="cycle"):
        core.downsets(3, edges, 100)


def test_downset_limit_and_bad_edges_raise() -> None:
    # Three isolated nodes have 2**3 = 8 downsets.
    assert len(core.downsets(3, [], 8)) == 8
    with pytest.raises(ValueError, match="more than 7 downsets"):
        core.downsets(3, [], 7)
    with pytest.raises(ValueError, match=r"outside 0\.\.1"):
        core.find_cycle(2, [(0, 2)])
    with pytest.raises(ValueError, match="self-loop"):
        core.topological_order(2, [(1, 1)])
