"""HyperTree Proof Search (Lample et al., 2022): PUCT over hyperedges with virtual loss and a critic.

A simulation walks down from the root: at each expanded goal it picks the tactic edge with the
best PUCT score, then descends into *all* goals that edge left, collecting the unexpanded goals
it reaches (the leaves of the simulated hypertree). Several simulations fill one batch; virtual
loss (pessimistic pretend visits) steers them apart. After expansion, values are backed up: a
leaf is worth its critic value, a proved goal 1, a failed goal 0, and an inner goal the product
of its chosen edge's children.
"""

from __future__ import annotations

import math
from collections import defaultdict

from aitp.proving.search.base import Search
from aitp.proving.search.tree import Edge, ProofTree, Status


class HTPS(Search):
    """PUCT over hyperedges; `config.exploration` is the constant c, `config.virtual_loss` the loss."""

    name = "htps"
    uses_critic = True

    def reset(self, tree: ProofTree) -> None:
        self._sims: list[tuple[dict[int, int], list[int]]] = []
        self._virtual: dict[int, float] = defaultdict(float)

    def select(self, tree: ProofTree, k: int) -> list[int]:
        self._sims, self._virtual = [], defaultdict(float)
        leaves: list[int] = []
        for _ in range(4 * k):
            sim = self._simulate(tree)
            if sim is None:
                break
            chosen, sim_leaves = sim
            self._sims.append(sim)
            for eid in chosen.values():
                self._virtual[eid] += self.config.virtual_loss
            fresh = [leaf for leaf in sim_leaves if leaf not in leaves]
            leaves.extend(fresh)
            if len(leaves) >= k:
                break
        if not leaves:  # every simulation ended in dead ends: fall back on the critic's favourites
            frontier = tree.frontier()
            leaves = sorted(frontier, key=lambda n: -(tree.nodes[n].critic or 0.5))
        return leaves[:k]

    def update(self, tree: ProofTree, expanded: list[int]) -> None:
        for chosen, sim_leaves in self._sims:
            memo: dict[int, float] = {}
            for nid, eid in chosen.items():
                edge = tree.edges[eid]
                edge.visits += 1
                edge.value_sum += self._value(tree, nid, chosen, memo, set())
                tree.nodes[nid].visits += 1
            for leaf in sim_leaves:
                tree.nodes[leaf].visits += 1
        self._sims, self._virtual = [], defaultdict(float)

    # --- internals --------------------------------------------------------------------------------
    def _value(self, tree: ProofTree, nid: int, chosen: dict[int, int], memo: dict, busy: set) -> float:
        node = tree.nodes[nid]
        if node.status is Status.PROVED:
            return 1.0
        if node.status is Status.FAILED:
            return 0.0
        if nid in memo:
            return memo[nid]
        if nid not in chosen or nid in busy:
            return node.critic if node.critic is not None else 0.5
        busy.add(nid)
        value = math.prod(self._value(tree, c, chosen, memo, busy) for c in set(tree.edges[chosen[nid]].children))
        busy.discard(nid)
        memo[nid] = value
        return value

    def _q_init(self, tree: ProofTree, edge: Edge) -> float:
        values = []
        for c in set(edge.children):
            child = tree.nodes[c]
            values.append(1.0 if child.status is Status.PROVED else child.critic or 0.5)
        return math.prod(values)

    def _puct(self, tree: ProofTree, edges: list[Edge]) -> Edge:
        top = max(e.logprob for e in edges)
        weights = [math.exp(e.logprob - top) for e in edges]
        total_w = sum(weights)
        visits = [e.visits + self._virtual[e.id] for e in edges]
        sqrt_n = math.sqrt(max(sum(visits), 1.0))
        best, best_score = edges[0], -math.inf
        for edge, w, n in zip(edges, weights, visits):
            q = edge.value_sum / n if n > 0 else self._q_init(tree, edge)
            score = q + self.config.exploration * (w / total_w) * sqrt_n / (1.0 + n)
            if score > best_score:
                best, best_score = edge, score
        return best

    def _simulate(self, tree: ProofTree) -> tuple[dict[int, int], list[int]] | None:
        if tree.nodes[tree.root].status is not Status.OPEN:
            return None
        chosen: dict[int, int] = {}
        leaves: list[int] = []

        def descend(nid: int, path: frozenset[int]) -> None:
            node = tree.nodes[nid]
            if node.status is not Status.OPEN or nid in chosen or nid in leaves:
                return
            if not node.exhausted:
                leaves.append(nid)
                return
            edges = [
                tree.edges[e]
                for e in node.out_edges
                if not tree.edge_failed(tree.edges[e]) and not (set(tree.edges[e].children) & (path | {nid}))
            ]
            if not edges:
                return
            edge = self._puct(tree, edges)
            chosen[nid] = edge.id
            for child in dict.fromkeys(edge.children):
                descend(child, path | {nid})

        descend(tree.root, frozenset())
        return chosen, leaves
