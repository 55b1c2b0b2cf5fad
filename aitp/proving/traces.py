"""Proof search traces as plain row dicts for the lake tables `proof_nodes`, `proof_edges`, `proofs`.

Every column is in the lake's schemas (critic values, expansion steps, hyperedge children, ...:
what search analysis, training and `aitp viz proof` need). A hyperedge's children are listed in
`child_node_ids`; `dst_node_id` holds them comma-joined for readers that know one destination.
"""

from __future__ import annotations

import hashlib
import os
import socket

from aitp.proving.search.base import SearchResult
from aitp.proving.tree import Edge, ProofTree

TRACE_TABLES = ("proof_nodes", "proof_edges", "proofs")


def search_id(backend: str, theorem: str, algorithm: str, experiment: str = "", iteration: int = 0) -> str:
    """Stable id of one proof search: the same attempt rerun replaces, never duplicates, its rows."""
    key = f"{experiment}/{iteration}/{backend}/{theorem}/{algorithm}"
    return hashlib.sha256(key.encode()).hexdigest()[:16]


def _edge_outcome(tree: ProofTree, edge: Edge) -> str:
    if edge.outcome == "goals" and edge.parent in edge.children:
        return "no_progress"
    return {"goals": "success"}.get(edge.outcome, edge.outcome)


def trace_rows(
    result: SearchResult,
    backend: str,
    experiment: str = "",
    iteration: int = 0,
    split: str = "",
    model_version: str = "",
) -> dict[str, list[dict]]:
    """Rows of the three proof tables for one search result (experiment/iteration are partition keys)."""
    tree = result.tree
    sid = search_id(backend, result.theorem.name, result.algorithm, experiment, iteration)
    theorem_id = f"{backend}:{result.theorem.name}"
    worker = f"{socket.gethostname()}:{os.getpid()}"
    common = {"experiment": experiment, "iteration": iteration, "theorem_id": theorem_id, "search_id": sid}
    in_proof = tree.proof_edges() if tree.proved else {}
    used_edges = set(in_proof.values())

    def nid(n: int) -> str:
        return f"{sid}:n{n}"

    nodes = []
    for node in tree.nodes:
        parents = [tree.edges[e].parent for e in node.in_edges if tree.edges[e].parent != node.id]
        creator = parents[0] if parents and node.id != tree.root else None
        nodes.append(
            {
                **common,
                "node_id": nid(node.id),
                "parent_node_id": nid(creator) if creator is not None else None,
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
                "backend": backend,
                "search": result.algorithm,
                "split": split,
                "model_version": model_version,
                "worker": worker,
            }
        )
    edges = []
    for edge in tree.edges:
        children = [nid(c) for c in edge.children]
        edges.append(
            {
                **common,
                "edge_id": f"{sid}:e{edge.id}",
                "src_node_id": nid(edge.parent),
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
                "backend": backend,
                "search": result.algorithm,
                "model_version": model_version,
            }
        )
    proofs = []
    if result.proof is not None:
        proofs.append(
            {
                "experiment": experiment,
                "iteration": iteration,
                "theorem_id": theorem_id,
                "proof_id": f"{sid}:proof",
                "search_id": sid,
                "statement": result.theorem.statement,
                "proof_text": result.proof_text,
                "tactics": result.proof.tactics(),
                "n_steps": result.proof.size(),
                "verified": bool(result.check and result.check.ok),
                "verifier": f"{backend}: {result.check.message}" if result.check else f"{backend}: not checked",
                "model_version": model_version,
                "worker": worker,
                "latency_s": result.wall_seconds,
                "human_proof": result.theorem.proof,
                "search": result.algorithm,
                "split": split,
                "expansions": result.expansions,
                "prover_seconds": result.prover_seconds,
            }
        )
    return {"proof_nodes": nodes, "proof_edges": edges, "proofs": proofs}


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
    from pathlib import Path

    from aitp.atomic import publish_jsonl
    from aitp.home import resolve_home

    root = resolve_home(home) / "proving" / "traces" / f"experiment={experiment}" / f"iteration={iteration}"
    for table in TRACE_TABLES:
        publish_jsonl(Path(root) / table / f"{shard}.jsonl", rows.get(table, []))
    return str(root)
