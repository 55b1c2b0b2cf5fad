"""Breadth-first search: expand the shallowest open goals first."""

from __future__ import annotations

from aitp.proving.search.base import Search
from aitp.proving.search.tree import ProofTree


class BFS(Search):
    """Goals in breadth-first order from the root, ties broken by creation order."""

    name = "bfs"

    def select(self, tree: ProofTree, k: int) -> list[int]:
        frontier = tree.frontier()
        return sorted(frontier, key=lambda n: (tree.nodes[n].depth, n))[:k]
