"""UpDown search (after BAIT): scores flow up from goals to ancestors and down into contexts.

Up: the log-probability of proving a goal is its critic value (discounted by depth) while it is
unexpanded, and afterwards the best tactic edge's sum of its children's up scores (0 when
proved). Down: a goal's context score is the best way, over the edges that produced it, of
proving its parent's context plus its siblings. The goal to expand is the frontier goal with the
best up + context score: the goal of the most promising complete fringe.
"""

from __future__ import annotations

import math

from aitp.proving.search.base import Search
from aitp.proving.search.tree import ProofTree, Status

DEPTH_DISCOUNT = math.log(0.99)


class UpDown(Search):
    """Expand the goal of the best-scoring fringe, with scores propagated up and down the graph."""

    name = "updown"
    uses_critic = True

    def select(self, tree: ProofTree, k: int) -> list[int]:
        up_memo: dict[int, float] = {}
        ctx_memo: dict[int, float] = {}
        scored = []
        for nid in tree.frontier():
            score = self._initial(tree, nid) + self._context(tree, nid, ctx_memo, up_memo, set())
            if score > -math.inf:
                scored.append((score, nid))
        scored.sort(key=lambda sn: (-sn[0], sn[1]))
        return [nid for _, nid in scored[:k]]

    def _initial(self, tree: ProofTree, nid: int) -> float:
        node = tree.nodes[nid]
        return math.log(node.critic or 0.5) + node.depth * DEPTH_DISCOUNT

    def _up(self, tree: ProofTree, nid: int, memo: dict[int, float], busy: set[int]) -> float:
        node = tree.nodes[nid]
        if node.status is Status.PROVED:
            return 0.0
        if node.status is Status.FAILED or nid in busy:
            return -math.inf
        if nid in memo:
            return memo[nid]
        if not node.exhausted:
            return self._initial(tree, nid)
        busy.add(nid)
        best = -math.inf
        for eid in node.out_edges:
            edge = tree.edges[eid]
            if not tree.edge_failed(edge):
                best = max(best, sum(self._up(tree, c, memo, busy) for c in set(edge.children)))
        busy.discard(nid)
        memo[nid] = best
        return best

    def _context(self, tree: ProofTree, nid: int, memo: dict, up_memo: dict, busy: set[int]) -> float:
        if nid == tree.root:
            return 0.0
        if nid in memo:
            return memo[nid]
        if nid in busy:
            return -math.inf
        busy.add(nid)
        best = -math.inf
        for eid in tree.nodes[nid].in_edges:
            edge = tree.edges[eid]
            parent = tree.nodes[edge.parent]
            if parent.status is not Status.OPEN or tree.edge_failed(edge):
                continue
            siblings = sum(self._up(tree, s, up_memo, set()) for s in set(edge.children) if s != nid)
            best = max(best, self._context(tree, edge.parent, memo, up_memo, busy) + siblings)
        busy.discard(nid)
        memo[nid] = best
        return best
