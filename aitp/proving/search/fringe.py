"""Fringe search (after TacticZero): keep sets of goals that together would prove the root.

A fringe is a set of open goals whose proofs would prove the theorem. Its score is the sum of
the log critic values of its goals. The best fringe's goals are expanded (the next fringes'
goals fill the rest of the batch); every fringe containing an expanded goal is then replaced by one fringe per live
tactic edge of that goal (the goal swapped for the goals the tactic left), keeping the best few.
"""

from __future__ import annotations

import math

from aitp.proving.search.base import Search
from aitp.proving.search.tree import ProofTree, Status

MAX_FRINGES = 4096
MAX_CHILD_FRINGES = 64


class Fringe(Search):
    """Best fringe first; the critic scores goals."""

    name = "fringe"
    uses_critic = True

    def reset(self, tree: ProofTree) -> None:
        self.fringes: set[frozenset[int]] = {frozenset({tree.root})}

    def _score(self, tree: ProofTree, fringe: frozenset[int]) -> float:
        total = 0.0
        for nid in fringe:
            node = tree.nodes[nid]
            if node.exhausted:
                return -math.inf  # its expansions live on in other fringes
            total += math.log(node.critic or 0.5)
        return total

    def _clean(self, tree: ProofTree) -> None:
        cleaned = set()
        for fringe in self.fringes:
            if any(tree.nodes[n].status is Status.FAILED for n in fringe):
                continue
            cleaned.add(frozenset(n for n in fringe if tree.nodes[n].status is Status.OPEN))
        self.fringes = cleaned

    def select(self, tree: ProofTree, k: int) -> list[int]:
        self._clean(tree)
        scored = [(self._score(tree, f), sorted(f)) for f in self.fringes if f]
        scored = [(s, f) for s, f in scored if s > -math.inf]
        if not scored:
            return []
        scored.sort(key=lambda sf: (-sf[0], sf[1]))
        chosen: list[int] = []  # the best fringe's goals first, then the next fringes' to fill the batch
        for _, fringe in scored:
            for nid in sorted(fringe, key=lambda n: -(tree.nodes[n].critic or 0.5)):
                if nid not in chosen:
                    chosen.append(nid)
            if len(chosen) >= k:
                break
        return chosen[:k]

    def update(self, tree: ProofTree, expanded: list[int]) -> None:
        done = set(expanded)
        kept, grown = set(), set()
        for fringe in self.fringes:
            hit = fringe & done
            if not hit:
                kept.add(fringe)
                continue
            options = [fringe - hit]
            for nid in hit:
                node = tree.nodes[nid]
                if node.status is Status.PROVED:
                    continue
                swaps = [
                    frozenset(c for c in tree.edges[e].children if tree.nodes[c].status is not Status.PROVED)
                    for e in node.out_edges
                    if not tree.edge_failed(tree.edges[e]) and not tree.edges[e].cyclic
                ]
                options = [o | s for o in options for s in swaps]
                options.sort(key=lambda f: -self._score(tree, f) if f else -math.inf)
                options = options[:MAX_CHILD_FRINGES]
            grown.update(options)
        merged = sorted(kept | grown, key=lambda f: -self._score(tree, f) if f else -math.inf)
        self.fringes = set(merged[:MAX_FRINGES])
