"""Proof traces: rows for proof_nodes, proof_edges and proofs, committed to the lake."""

from __future__ import annotations

import dataclasses
import os
import socket

import pytest

from aitp.proving.data.traces import TRACE_TABLES, search_id, trace_rows, write_traces
from aitp.proving.env import Theorem
from aitp.proving.search import Budget, SearchConfig, make_search
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


def test_search_statistics_land_in_the_lake(result, tmp_path):
    lake = pytest.importorskip("aitp.lake")
    write_traces(tmp_path, "exp", 0, trace_rows(result, "toy", experiment="exp", split="test"), shard="toy-htps")
    nodes = lake.read_partition(tmp_path, "proof_nodes", "exp", 0).to_pylist()
    edges = lake.read_partition(tmp_path, "proof_edges", "exp", 0).to_pylist()
    [proof] = lake.read_partition(tmp_path, "proofs", "exp", 0).to_pylist()
    by_id = {n["node_id"]: n for n in nodes}
    [root] = [n for n in nodes if n["is_root"]]
    assert root["expanded_at_step"] == 0 and root["parent_node_id"] is None
    steps = sorted(n["expanded_at_step"] for n in nodes if n["expanded_at_step"] is not None)
    assert steps == list(range(result.expansions))  # one expansion per step, none lost
    for edge in edges:  # an edge runs when its goal is expanded; a goal it creates is expanded later
        assert edge["step"] == by_id[edge["src_node_id"]]["expanded_at_step"]
        assert edge["child_node_ids"] == (edge["dst_node_id"].split(",") if edge["dst_node_id"] else [])
    for node in nodes:
        if node["parent_node_id"] is not None and node["expanded_at_step"] is not None:
            assert node["expanded_at_step"] > by_id[node["parent_node_id"]]["expanded_at_step"]
    assert all(0 < n["critic_value"] <= 1 for n in nodes)  # HTPS scores every goal with its critic
    assert all(n["search"] == "htps" and n["backend"] == "toy" and n["split"] == "test" for n in nodes)
    assert any(e["visits"] and e["value_mean"] is not None for e in edges) and any(e["in_proof"] for e in edges)
    assert proof["expansions"] == result.expansions and proof["prover_seconds"] == pytest.approx(result.prover_seconds)
    assert proof["search"] == "htps" and proof["human_proof"] == "split..."


def test_searches_without_a_critic_leave_it_null(tmp_path):
    lake = pytest.importorskip("aitp.lake")
    search = make_search("bestfs", SearchConfig(budget=Budget(expansions=10)))
    found = search.run(ToyEnv(), Theorem("toy4", "4", "toy"), ToyPolicy())
    write_traces(tmp_path, "exp", 0, trace_rows(found, "toy", experiment="exp"), shard="toy-bestfs")
    nodes = lake.read_partition(tmp_path, "proof_nodes", "exp", 0)
    assert nodes.column("critic_value").null_count == nodes.num_rows
    assert nodes.column("cumulative_logprob").null_count == 0


def test_rows_fill_every_column_of_the_proof_tables_in_the_trees_order(result):
    schemas = pytest.importorskip("aitp.lake.schemas")
    rows = trace_rows(result, "toy", experiment="exp", iteration=2)
    for table in TRACE_TABLES:  # created_at is filled at write time
        columns = {field.name for field in schemas.SCHEMAS[table]} - {"created_at"}
        assert rows[table] and all(set(row) == columns for row in rows[table]), table
    sid = search_id("toy", "toy6", "htps", "exp", 2)
    assert [n["node_id"] for n in rows["proof_nodes"]] == [f"{sid}:n{n.id}" for n in result.tree.nodes]
    assert [e["edge_id"] for e in rows["proof_edges"]] == [f"{sid}:e{e.id}" for e in result.tree.edges]
    workers = {row["worker"] for row in rows["proof_nodes"] + rows["proofs"]}
    assert workers == {f"{socket.gethostname()}:{os.getpid()}"}


def test_an_unproved_search_has_no_proof_row_and_an_unchecked_proof_says_so(result):
    search = make_search("bestfs", SearchConfig(budget=Budget(expansions=3)))
    failed = search.run(ToyEnv(), Theorem("toy40", "40", "toy"), ToyPolicy())
    rows = trace_rows(failed, "toy")
    assert failed.proof is None and rows["proofs"] == [] and rows["proof_nodes"] and rows["proof_edges"]
    [proof] = trace_rows(dataclasses.replace(result, check=None), "toy")["proofs"]
    assert proof["verified"] is False and proof["verifier"] == "toy: not checked"
