"""The proof tree as a hypergraph: goals are nodes, a tactic is an edge to all the goals it leaves.

Identical goals (same printed text) share one node, so the graph may have cycles. Status:
- PROVED is the least fixed point: a goal is proved when some edge is a proof or has every child
  proved. A cycle therefore never proves anything by itself.
- FAILED is the complement of "still provable": a goal is failed when its expansion budget is
  spent and no edge can still succeed (an error, or a failed child, or support only through a
  cycle). Acyclic failure propagates incrementally; cycles are resolved by `resolve_cycles`.
The shortest proof (fewest tactic applications) is extracted with Knuth's generalisation of
Dijkstra's algorithm, which handles shared subgoals and cycles.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass, field
from enum import StrEnum

from aitp.proving.env import Goal, ProofStep, TacticResult


class Status(StrEnum):
    """Where a goal stands."""

    OPEN = "open"
    PROVED = "proved"
    FAILED = "failed"


@dataclass
class Node:
    """A goal of the search, with the statistics searches keep about it."""

    id: int
    goal: Goal
    depth: int
    status: Status = Status.OPEN
    in_edges: list[int] = field(default_factory=list)
    out_edges: list[int] = field(default_factory=list)
    expanded_at: int | None = None  # search step of its expansion
    exhausted: bool = False  # no more tactics will be tried on it
    logprob: float = 0.0  # best cumulative tactic log-prob of a path from the root
    critic: float | None = None  # goal-value estimate, P(provable)
    visits: int = 0


@dataclass
class Edge:
    """One tactic applied to one goal, and what came of it."""

    id: int
    parent: int
    tactic: str
    outcome: str
    children: list[int]
    error: str = ""
    logprob: float = 0.0
    seconds: float = 0.0
    step: int = 0
    cyclic: bool = False  # some child can reach the parent
    visits: int = 0
    value_sum: float = 0.0

    @property
    def live(self) -> bool:
        """Did the tactic run and leave goals (or none)?"""
        return self.outcome in ("goals", "proved")


class ProofTree:
    """Goals and tactic edges of one proof attempt, rooted at the theorem's goal."""

    def __init__(self, root: Goal) -> None:
        self.nodes: list[Node] = []
        self.edges: list[Edge] = []
        self._by_text: dict[str, int] = {}
        self.root = self._node_for(root, depth=0)

    # --- building --------------------------------------------------------------------------
    def _node_for(self, goal: Goal, depth: int) -> int:
        if goal.text in self._by_text:
            return self._by_text[goal.text]
        node = Node(id=len(self.nodes), goal=goal, depth=depth)
        self.nodes.append(node)
        self._by_text[goal.text] = node.id
        return node.id

    def add_edge(self, parent: int, tactic: str, result: TacticResult, logprob: float = 0.0, step: int = 0) -> Edge:
        """Record the result of `tactic` on node `parent`; creates children and propagates status."""
        pnode = self.nodes[parent]
        known = set(self._by_text.values())
        children = [self._node_for(g, pnode.depth + 1) for g in result.goals] if result.outcome == "goals" else []
        edge = Edge(
            len(self.edges), parent, tactic, result.outcome, children, result.error, logprob, result.seconds, step
        )
        self.edges.append(edge)
        pnode.out_edges.append(edge.id)
        for child in dict.fromkeys(children):
            cnode = self.nodes[child]
            cnode.in_edges.append(edge.id)
            cnode.logprob = max(cnode.logprob, pnode.logprob + logprob) if child in known else pnode.logprob + logprob
        edge.cyclic = any(c in known and self.reaches(c, parent) for c in children)
        if self._edge_proves(edge):
            self._mark_proved(parent, edge.id)
        elif pnode.exhausted:
            self._refresh_failed(parent)
        return edge

    def mark_exhausted(self, node_id: int, step: int | None = None) -> None:
        """No more tactics will be tried on this node (it was expanded, or is too deep)."""
        node = self.nodes[node_id]
        if step is not None and node.expanded_at is None:
            node.expanded_at = step
        node.exhausted = True
        self._refresh_failed(node_id)
        if self.has_cycles:
            self.resolve_cycles()

    # --- queries -------------------------------------------------------------------------------
    @property
    def has_cycles(self) -> bool:
        """Whether some edge leads back to one of its parent's ancestors."""
        return any(e.cyclic for e in self.edges)

    def reaches(self, start: int, target: int) -> bool:
        """Is `target` reachable from `start` through edges?"""
        seen, stack = {start}, [start]
        while stack:
            node = stack.pop()
            if node == target:
                return True
            for eid in self.nodes[node].out_edges:
                for child in self.edges[eid].children:
                    if child not in seen:
                        seen.add(child)
                        stack.append(child)
        return False

    def edge_failed(self, edge: Edge) -> bool:
        """Can this edge no longer contribute to a proof?"""
        return not edge.live or any(self.nodes[c].status is Status.FAILED for c in edge.children)

    def frontier(self) -> list[int]:
        """Unexpanded OPEN goals still worth expanding: reachable from the root through open goals and live edges."""
        if self.nodes[self.root].status is not Status.OPEN:
            return []
        out, seen, queue = [], {self.root}, [self.root]
        for node_id in queue:  # breadth-first, so `out` is in BFS order
            node = self.nodes[node_id]
            if not node.exhausted:
                out.append(node_id)
                continue
            for eid in node.out_edges:
                edge = self.edges[eid]
                if self.edge_failed(edge):
                    continue
                for child in edge.children:
                    if child not in seen and self.nodes[child].status is Status.OPEN:
                        seen.add(child)
                        queue.append(child)
        return out

    @property
    def proved(self) -> bool:
        """Is the root proved?"""
        return self.nodes[self.root].status is Status.PROVED

    @property
    def failed(self) -> bool:
        """Is the root failed?"""
        return self.nodes[self.root].status is Status.FAILED

    # --- propagation -----------------------------------------------------------------------------
    def _edge_proves(self, edge: Edge) -> bool:
        return edge.live and all(self.nodes[c].status is Status.PROVED for c in edge.children)

    def _mark_proved(self, node_id: int, edge_id: int) -> None:
        stack = [node_id]
        while stack:
            node = self.nodes[stack.pop()]
            if node.status is Status.PROVED:
                continue
            node.status = Status.PROVED
            for eid in node.in_edges:
                edge = self.edges[eid]
                if self.nodes[edge.parent].status is not Status.PROVED and self._edge_proves(edge):
                    stack.append(edge.parent)

    def _refresh_failed(self, node_id: int) -> None:
        stack = [node_id]
        while stack:
            node = self.nodes[stack.pop()]
            if node.status is not Status.OPEN or not node.exhausted:
                continue
            if all(self.edge_failed(self.edges[e]) for e in node.out_edges):
                node.status = Status.FAILED
                stack.extend(self.edges[e].parent for e in node.in_edges)

    def resolve_cycles(self) -> None:
        """Fail every exhausted goal whose only support runs through cycles (greatest fixed point)."""
        candidates = {n.id for n in self.nodes if n.status is Status.OPEN and n.exhausted}
        if not candidates:
            return
        alive: set[int] = set()
        pending: dict[int, int] = {}
        stack: list[int] = []
        for nid in candidates:
            for eid in self.nodes[nid].out_edges:
                edge = self.edges[eid]
                if self.edge_failed(edge):
                    continue
                waiting = {c for c in edge.children if c in candidates}
                pending[eid] = len(waiting)
                if not waiting:
                    stack.append(nid)
        while stack:
            nid = stack.pop()
            if nid in alive:
                continue
            alive.add(nid)
            for eid in self.nodes[nid].in_edges:
                if eid in pending:
                    pending[eid] -= 1
                    if pending[eid] == 0:
                        stack.append(self.edges[eid].parent)
        for nid in candidates - alive:
            self.nodes[nid].status = Status.FAILED
        for nid in candidates - alive:
            self._refresh_failed_parents(nid)

    def _refresh_failed_parents(self, node_id: int) -> None:
        for eid in self.nodes[node_id].in_edges:
            self._refresh_failed(self.edges[eid].parent)

    # --- proofs ----------------------------------------------------------------------------------
    def proof_edges(self, node_id: int | None = None) -> dict[int, int]:
        """For each goal of the shortest proof of `node_id` (default root): the edge proving it."""
        target = self.root if node_id is None else node_id
        if self.nodes[target].status is not Status.PROVED:
            return {}
        cost: dict[int, int] = {}
        best: dict[int, int] = {}
        heap: list[tuple[int, int, int]] = []
        pending: dict[int, int] = {}
        for edge in self.edges:
            if edge.live and self.nodes[edge.parent].status is Status.PROVED:
                pending[edge.id] = len(set(edge.children))
                if not edge.children:
                    heapq.heappush(heap, (1, edge.parent, edge.id))
        while heap and target not in cost:
            c, nid, eid = heapq.heappop(heap)
            if nid in cost:
                continue
            cost[nid], best[nid] = c, eid
            for in_eid in set(self.nodes[nid].in_edges):
                if in_eid in pending:
                    pending[in_eid] -= 1
                    if pending[in_eid] == 0:
                        edge = self.edges[in_eid]
                        heapq.heappush(heap, (1 + sum(cost[ch] for ch in edge.children), edge.parent, in_eid))
        used: dict[int, int] = {}
        stack = [target] if target in best else []
        while stack:
            nid = stack.pop()
            if nid not in used:
                used[nid] = best[nid]
                stack.extend(self.edges[best[nid]].children)
        return used

    def extract_proof(self, node_id: int | None = None) -> ProofStep | None:
        """The proof of `node_id` (default root) with the fewest tactic applications, or None."""
        target = self.root if node_id is None else node_id
        used = self.proof_edges(target)
        if not used:
            return None

        def build(nid: int) -> ProofStep:
            edge = self.edges[used[nid]]
            return ProofStep(edge.tactic, [build(ch) for ch in edge.children])

        return build(target)
