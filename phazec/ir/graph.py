"""Graph utilities of the IR in plain Python: operator dependencies, topological order, cycles.

The layer graph and the operator graphs are small (tens to thousands of nodes), so these walk them in
Python; the compiled core has its own for the placement DP.
"""

from __future__ import annotations

from collections.abc import Sequence

from phazec.errors import PhazecError
from phazec.ir.core import Graph


def dataflow_deps(graph: Graph) -> tuple[tuple[int, int], ...]:
    """(i, j) for every op j that reads a tensor op i writes, ascending."""
    producer = {out: i for i, op in enumerate(graph.ops) for out in op.outputs if out}
    deps = {(producer[t], j) for j, op in enumerate(graph.ops) for t in op.inputs if t in producer}
    return tuple(sorted(deps))


def topological_order(
    n: int, deps: tuple[tuple[int, int], ...], names: list[str] | None = None
) -> tuple[int, ...]:
    """Ops ordered so every dependency points forward; ties go to the lower index.

    Raises:
        PhazecError: if the dependencies have a cycle (naming an op on it when `names` is given).
    """
    succs: list[list[int]] = [[] for _ in range(n)]
    indegree = [0] * n
    for a, b in set(deps):
        succs[a].append(b)
        indegree[b] += 1
    ready = sorted(i for i in range(n) if indegree[i] == 0)
    order: list[int] = []
    while ready:
        i = ready.pop(0)
        order.append(i)
        for j in succs[i]:
            indegree[j] -= 1
            if indegree[j] == 0:
                ready.append(j)
        ready.sort()
    if len(order) < n:
        stuck = next(i for i in range(n) if indegree[i] > 0)
        label = repr(names[stuck]) if names else str(stuck)
        raise PhazecError(f"The dependencies have a cycle through operator {label}; they must form a DAG.")
    return tuple(order)


def find_cycle(n: int, edges: Sequence[tuple[int, int]]) -> list[int]:
    """The nodes of one directed cycle among nodes 0..n-1, in the order the edges run (empty when the
    graph is acyclic).

    Raises:
        ValueError: an edge names a node outside 0..n-1.
    """
    succs: list[list[int]] = [[] for _ in range(n)]
    for a, b in edges:
        if not (0 <= a < n and 0 <= b < n):
            raise ValueError(f"edge ({a}, {b}) names a node outside 0..{n - 1}")
        succs[a].append(b)
    state = [0] * n  # 0: not seen, 1: on the current path, 2: done
    for root in range(n):
        if state[root]:
            continue
        path = [root]
        state[root] = 1
        stack = [iter(succs[root])]
        while stack:
            child = next(stack[-1], None)
            if child is None:
                state[path.pop()] = 2
                stack.pop()
            elif state[child] == 1:
                return path[path.index(child) :]
            elif state[child] == 0:
                state[child] = 1
                path.append(child)
                stack.append(iter(succs[child]))
    return []
