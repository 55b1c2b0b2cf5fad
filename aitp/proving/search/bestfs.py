"""Best-first search on the cumulative log-probability of the tactics leading to a goal."""

from __future__ import annotations

from aitp.proving.search.base import Search
from aitp.proving.tree import ProofTree


class BestFS(Search):
    """Expand the goals whose best path from the root has the highest total tactic log-prob."""

    name = "bestfs"

    def select(self, tree: ProofTree, k: int) -> list[int]:
        frontier = tree.frontier()
        return sorted(frontier, key=lambda n: (-tree.nodes[n].logprob, n))[:k]
