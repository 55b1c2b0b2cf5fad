"""Best-first search on the cumulative log-probability of the tactics leading to a goal.

Goals whose paths are equally likely (the goals one tactic left share its log-probability) are taken
in the order of a critic's values when one is given (the learned goal critic), else in creation order.
"""

from __future__ import annotations

from aitp.proving.search.base import Critic, Search, SearchConfig
from aitp.proving.search.tree import ProofTree


class BestFS(Search):
    """Expand the goals whose best path from the root has the highest total tactic log-prob; ties by critic."""

    name = "bestfs"

    def __init__(self, config: SearchConfig | None = None, critic: Critic | None = None) -> None:
        super().__init__(config, critic)
        self.uses_critic = critic is not None  # no critic given: no values computed, the order stays creation's

    def select(self, tree: ProofTree, k: int) -> list[int]:
        frontier = tree.frontier()
        nodes = tree.nodes
        return sorted(frontier, key=lambda n: (-nodes[n].logprob, -(nodes[n].critic or 0.0), n))[:k]
