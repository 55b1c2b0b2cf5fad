"""Proof traces: rows for proof_nodes, proof_edges and proofs, committed to the lake."""

from __future__ import annotations

import pytest

from aitp.proving.env import Theorem
from aitp.proving.search import Budget, SearchConfig, make_search
from aitp.proving.traces import TRACE_TABLES, search_id, trace_rows, write_traces
from tests.proving.toy import ToyEnv, ToyPolicy


@pytest.fixture(scope="module")
def result():
    search = make_search("htps", SearchConfig(budget=Budget(expansions=30)))
    return search.run(ToyEnv(), Theorem("toy6", "6", "toy", proof="split..."), ToyPolicy())


def test_rows_carry_goals_tactics_outcomes_and_search_statistics(result):
    rows = trace_rows(result, "toy", experiment="exp", iteration=2, split="test", model_version="fixed")
    nodes, edges, proofs = (rows[t] for t in TRACE_TABLES)
    assert len(nodes) == len(result.tree.nodes) and len(edges) == len(result.tree.edges)
    root = next(n for n in nodes if n["is_root"])
    assert root["goal"] == "⊢ 6" and root["status"] == "proved" and root["parent_node_id"] is None
    assert root["visits"] > 0 and root["critic_value"] is not None and root["expanded_at_step"] == 0
    assert {e["outcome"] for e in edges} >= {"success", "proved", "error", "no_progress"}
    split = next(e for e in edges if e["tactic"] == "split" and e["src_node_id"] == root["node_id"])
    assert len(split["child_node_ids"]) == 2 and split["dst_node_id"] == ",".join(split["child_node_ids"])
    assert all(e["latency_s"] >= 0 and e["step"] >= 0 and e["tactic_logprob"] < 0 for e in edges)
    assert any(e["in_proof"] for e in edges) and any(n["in_proof"] for n in nodes)
    errors = [e for e in edges if e["outcome"] == "error"]
    assert errors and all(e["error"] for e in errors)
    [proof] = proofs
    assert proof["verified"] and proof["n_steps"] == len(proof["tactics"]) and proof["human_proof"] == "split..."
    assert proof["search_id"] == root["search_id"] == search_id("toy", "toy6", "htps", "exp", 2)


def test_traces_are_committed_to_the_lake_and_replaced_on_rerun(result, tmp_path):
    lake = pytest.importorskip("aitp.lake")
    rows = trace_rows(result, "toy", experiment="exp", iteration=0)
    write_traces(tmp_path, "exp", 0, rows, shard="toy-htps")
    write_traces(tmp_path, "exp", 0, rows, shard="toy-htps")  # a rerun replaces, never duplicates
    nodes = lake.read_partition(tmp_path, "proof_nodes", "exp", 0)
    edges = lake.read_partition(tmp_path, "proof_edges", "exp", 0)
    proofs = lake.read_partition(tmp_path, "proofs", "exp", 0)
    assert nodes.num_rows == len(rows["proof_nodes"]) and edges.num_rows == len(rows["proof_edges"])
    assert proofs.num_rows == 1 and proofs.column("verified").to_pylist() == [True]
