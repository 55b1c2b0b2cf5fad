"""The proof hypergraph: PROVED / FAILED / OPEN propagation, cycles, shortest proof extraction."""

from __future__ import annotations

from aitp.proving.env import TacticResult
from aitp.proving.search.tree import ProofTree, Status
from tests.proving.toy import toy_goal


def goals(*ns: int) -> TacticResult:
    return TacticResult("goals", [toy_goal(n) for n in ns])


PROVED = TacticResult("proved")
ERROR = TacticResult("error", error="no")


def test_hyperedge_proves_parent_only_when_all_children_proved():
    tree = ProofTree(toy_goal(5))
    edge = tree.add_edge(tree.root, "split", goals(4, 3))
    four, three = edge.children
    tree.add_edge(four, "close", PROVED)
    assert tree.nodes[four].status is Status.PROVED
    assert tree.nodes[tree.root].status is Status.OPEN
    tree.add_edge(three, "close", PROVED)
    assert tree.proved


def test_failure_needs_every_edge_dead_and_budget_spent():
    tree = ProofTree(toy_goal(5))
    tree.add_edge(tree.root, "bad", ERROR)
    assert tree.nodes[tree.root].status is Status.OPEN  # more tactics may still come
    edge = tree.add_edge(tree.root, "split", goals(4, 3))
    tree.mark_exhausted(tree.root, step=0)
    assert tree.nodes[tree.root].status is Status.OPEN  # children still open
    tree.add_edge(edge.children[1], "bad", ERROR)
    tree.mark_exhausted(edge.children[1], step=1)
    assert tree.nodes[edge.children[1]].status is Status.FAILED
    assert tree.failed  # the only live edge has a failed child
    assert tree.nodes[edge.children[0]].status is Status.OPEN


def test_cycle_alone_never_proves_and_fails_when_exhausted():
    tree = ProofTree(toy_goal(3))
    up = tree.add_edge(tree.root, "up", goals(4))
    four = up.children[0]
    down = tree.add_edge(four, "down", goals(3))
    assert down.cyclic and down.children == [tree.root]
    loop = tree.add_edge(tree.root, "loop", goals(3))
    assert loop.cyclic
    assert not tree.proved
    tree.mark_exhausted(tree.root, 0)
    assert tree.nodes[tree.root].status is Status.OPEN  # 4 is not exhausted yet
    tree.mark_exhausted(four, 1)
    assert tree.failed and tree.nodes[four].status is Status.FAILED


def test_cycle_with_an_exit_proves_through_the_exit():
    tree = ProofTree(toy_goal(3))
    four = tree.add_edge(tree.root, "up", goals(4)).children[0]
    tree.add_edge(four, "down", goals(3))
    tree.mark_exhausted(tree.root, 0)
    tree.mark_exhausted(four, 1)
    assert tree.failed
    # A proof of 4 found later (e.g. from another parent) revives both.
    tree2 = ProofTree(toy_goal(3))
    four = tree2.add_edge(tree2.root, "up", goals(4)).children[0]
    tree2.add_edge(four, "down", goals(3))
    tree2.add_edge(four, "close", PROVED)
    assert tree2.proved
    proof = tree2.extract_proof()
    assert proof.tactics() == ["up", "close"]


def test_shared_goals_are_one_node_and_shortest_proof_is_extracted():
    tree = ProofTree(toy_goal(4))
    split = tree.add_edge(tree.root, "split", goals(3, 2))
    half = tree.add_edge(tree.root, "half", goals(2))
    three, two = split.children
    assert half.children == [two]  # the same goal text is the same node
    tree.add_edge(two, "split", goals(1, 0))
    one, zero = tree.edges[-1].children
    tree.add_edge(one, "close", PROVED)
    tree.add_edge(zero, "close", PROVED)
    assert tree.nodes[two].status is Status.PROVED
    assert tree.proved  # via half, before 3 is proved
    proof = tree.extract_proof()
    assert proof.tactic == "half" and proof.size() == 4
    tree.add_edge(three, "close", PROVED)  # a cheaper-looking but longer alternative appears
    assert tree.extract_proof().size() == 4
    assert set(tree.proof_edges()) == {tree.root, two, one, zero}


def test_frontier_skips_goals_under_failed_or_proved_parents():
    tree = ProofTree(toy_goal(6))
    split = tree.add_edge(tree.root, "split", goals(5, 4))
    tree.mark_exhausted(tree.root, 0)
    five, four = split.children
    assert tree.frontier() == [five, four]
    tree.add_edge(four, "bad", ERROR)
    tree.mark_exhausted(four, 1)
    assert tree.failed and tree.frontier() == []


def test_propagation_through_long_chains_and_diamonds():
    tree = ProofTree(toy_goal(10))
    node = tree.root
    chain = []
    for n in range(9, 0, -1):
        node = tree.add_edge(node, "down", goals(n)).children[0]
        chain.append(node)
    tree.add_edge(node, "close", PROVED)
    assert all(tree.nodes[n].status is Status.PROVED for n in chain)
    assert tree.proved and tree.extract_proof().size() == 10
