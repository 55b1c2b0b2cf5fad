"""Proof search traces as plain row dicts for the lake tables `proof_nodes`, `proof_edges`, `proofs`.

Every column is in the lake's schemas (critic values, expansion steps, hyperedge children, ...:
what search analysis, training and `aitp viz proof` need). A hyperedge's children are listed in
`child_node_ids`; `dst_node_id` holds them comma-joined for readers that know one destination.
"""

from __future__ import annotations

import hashlib
import os
import socket
from dataclasses import dataclass

from aitp.proving.search.base import SearchResult
from aitp.proving.search.tree import Edge, Node, ProofTree

TRACE_TABLES = ("proof_nodes", "proof_edges", "proofs")


def search_id(backend: str, theorem: str, algorithm: str, experiment: str = "", iteration: int = 0) -> str:
    """Stable id of one proof search: the same attempt rerun replaces, never duplicates, its rows."""
    key = f"{experiment}/{iteration}/{backend}/{theorem}/{algorithm}"
    return hashlib.sha256(key.encode()).hexdigest()[:16]


@dataclass(frozen=True)
class _SearchKeys:
    """What the rows of one search share: partition keys, ids and provenance, worked out once."""

    experiment: str
    iteration: int
    theorem_id: str
    search_id: str
    backend: str
    search: str
    split: str
    model_version: str
    worker: str

    def common(self) -> dict:
        """The columns that open every node and edge row: they join a row to its search."""
        return {
            "experiment": self.experiment,
            "iteration": self.iteration,
            "theorem_id": self.theorem_id,
            "search_id": self.search_id,
        }

    def node_id(self, node: int) -> str:
        """A node's id, unique across searches so that the lake can hold many trees."""
        return f"{self.search_id}:n{node}"


def _edge_outcome(tree: ProofTree, edge: Edge) -> str:
    """The lake's word for what a tactic did: goals that include the one it started from made no progress."""
    if edge.outcome == "goals" and edge.parent in edge.children:
        return "no_progress"
    return {"goals": "success"}.get(edge.outcome, edge.outcome)


def _node_row(keys: _SearchKeys, tree: ProofTree, node: Node, in_proof: dict[int, int], restarts: int) -> dict:
    """One goal: its parent is the goal whose tactic first reached it (none for the root)."""
    parents = [tree.edges[e].parent for e in node.in_edges if tree.edges[e].parent != node.id]
    creator = parents[0] if parents and node.id != tree.root else None
    return {
        **keys.common(),
        "node_id": keys.node_id(node.id),
        "parent_node_id": keys.node_id(creator) if creator is not None else None,
        "depth": node.depth,
        "goal": node.goal.text,
        "status": node.status.value,
        "visits": node.visits,
        "value_estimate": node.critic,
        "critic_value": node.critic,
        "cumulative_logprob": node.logprob,
        "expanded_at_step": node.expanded_at,
        "is_root": node.id == tree.root,
        "in_proof": node.id in in_proof,
        "prover_restarts": restarts if node.id == tree.root else None,
        "backend": keys.backend,
        "search": keys.search,
        "split": keys.split,
        "model_version": keys.model_version,
        "worker": keys.worker,
    }


def _edge_row(keys: _SearchKeys, tree: ProofTree, edge: Edge, used_edges: set[int]) -> dict:
    """One tactic application: a hyperedge from its goal to every goal it left."""
    children = [keys.node_id(c) for c in edge.children]
    return {
        **keys.common(),
        "edge_id": f"{keys.search_id}:e{edge.id}",
        "src_node_id": keys.node_id(edge.parent),
        "dst_node_id": ",".join(children) or None,
        "child_node_ids": children,
        "tactic": edge.tactic,
        "tactic_logprob": edge.logprob,
        "outcome": _edge_outcome(tree, edge),
        "error": edge.error or None,
        "latency_s": edge.seconds,
        "step": edge.step,
        "cyclic": edge.cyclic,
        "visits": edge.visits,
        "value_mean": edge.value_sum / edge.visits if edge.visits else None,
        "in_proof": edge.id in used_edges,
        "backend": keys.backend,
        "search": keys.search,
        "model_version": keys.model_version,
    }


def _proof_row(keys: _SearchKeys, result: SearchResult) -> dict:
    """The proof a search found, with the checker's verdict and what the search spent finding it."""
    check = result.check
    return {
        "experiment": keys.experiment,
        "iteration": keys.iteration,
        "theorem_id": keys.theorem_id,
        "proof_id": f"{keys.search_id}:proof",
        "search_id": keys.search_id,
        "statement": result.theorem.statement,
        "proof_text": result.proof_text,
        "tactics": result.proof.tactics(),
        "n_steps": result.proof.size(),
        "verified": bool(check and check.ok),
        "verifier": f"{keys.backend}: {check.message}" if check else f"{keys.backend}: not checked",
        "model_version": keys.model_version,
        "worker": keys.worker,
        "latency_s": result.wall_seconds,
        "human_proof": result.theorem.proof,
        "search": keys.search,
        "split": keys.split,
        "expansions": result.expansions,
        "prover_seconds": result.prover_seconds,
    }


def trace_rows(
    result: SearchResult,
    backend: str,
    experiment: str = "",
    iteration: int = 0,
    split: str = "",
    model_version: str = "",
) -> dict[str, list[dict]]:
    """Rows of the three proof tables for one search result (experiment/iteration are partition keys)."""
    name, tree = result.theorem.name, result.tree
    keys = _SearchKeys(
        experiment=experiment,
        iteration=iteration,
        theorem_id=f"{backend}:{name}",
        search_id=search_id(backend, name, result.algorithm, experiment, iteration),
        backend=backend,
        search=result.algorithm,
        split=split,
        model_version=model_version,
        worker=f"{socket.gethostname()}:{os.getpid()}",
    )
    in_proof = tree.proof_edges() if tree.proved else {}
    used_edges = set(in_proof.values())
    return {
        "proof_nodes": [_node_row(keys, tree, node, in_proof, result.restarts) for node in tree.nodes],
        "proof_edges": [_edge_row(keys, tree, edge, used_edges) for edge in tree.edges],
        "proofs": [_proof_row(keys, result)] if result.proof is not None else [],
    }


def merge_rows(parts: list[dict[str, list[dict]]]) -> dict[str, list[dict]]:
    """Concatenate the rows of several searches, table by table."""
    return {table: [row for part in parts for row in part.get(table, [])] for table in TRACE_TABLES}


def write_traces(home, experiment: str, iteration: int, rows: dict[str, list[dict]], shard: str = "0") -> str:
    """Commit the three tables to the lake (an unknown column is an error, never dropped), or JSONL without a lake."""
    try:
        from aitp.lake import write_partition
    except ImportError:
        return _write_jsonl(home, experiment, iteration, rows, shard)
    for table in TRACE_TABLES:
        write_partition(home, table, experiment, iteration, rows.get(table, []), shard=shard)
    return f"lake tables {', '.join(TRACE_TABLES)} (experiment={experiment}, iteration={iteration}, shard={shard})"


def _write_jsonl(home, experiment: str, iteration: int, rows: dict[str, list[dict]], shard: str) -> str:
    """The same tables as JSONL files, for an install where the lake (pyarrow, DuckDB) cannot be imported."""
    from pathlib import Path

    from aitp.atomic import publish_jsonl
    from aitp.home import resolve_home

    root = resolve_home(home) / "proving" / "traces" / f"experiment={experiment}" / f"iteration={iteration}"
    for table in TRACE_TABLES:
        publish_jsonl(Path(root) / table / f"{shard}.jsonl", rows.get(table, []))
    return str(root)
