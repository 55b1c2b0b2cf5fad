"""Candidates per goal: families from the goal and the library, capped so that none crowds the others out."""

from __future__ import annotations

from aitp.proving.data.theorem_set import TheoremSet
from aitp.proving.env import Goal, Theorem
from aitp.proving.models.candidates import CandidateGenerator, cap_families, goal_hypotheses, split_goal
from aitp.proving.models.ranked_policy import Exploration, RankedTacticPolicy

LIBRARY = TheoremSet(
    "tiny",
    "coq",
    [Theorem(f"L{i}", f"forall n : nat, f{i} n = n", "coq") for i in range(6)]
    + [Theorem("T", "forall a b c d e : nat, a + b + c + d + e = e + d + c + b + a", "coq")],
    [f"L{i}" for i in range(6)] + ["T"],
)
GOAL = Goal("a, b, c, d, e : nat\nIHa : a + 0 = a\n⊢ a + b + c + d + e = e + d + c + b + a", "T")


def test_goal_parts_and_hypotheses():
    hyps, concl = split_goal(GOAL.text)
    assert [n for n, _ in hyps] == ["a", "b", "c", "d", "e", "IHa"] and concl.startswith("a + b")
    assert goal_hypotheses(GOAL.text) == [("IHa", "equation")]


def test_one_candidate_per_family_after_capping():
    cands = CandidateGenerator("coq", LIBRARY, top_premises=3).candidates(GOAL)
    tactics = [c.tactic for c in cands]
    assert len(tactics) == len(set(tactics))  # deduplicated
    assert sum(t.startswith("destruct ") for t in tactics) == 4  # max_variables of the five
    assert "rewrite IHa" in tactics and "rewrite <- IHa" in tactics and "apply IHa" in tactics
    assert sum(c.family == "rewrite {}:premise" for c in cands) == 3
    capped = cap_families(cands, 1)
    assert [c.tactic for c in capped if c.head == "destruct"] == ["destruct a"]
    assert len({c.family for c in capped}) == len(capped)
    assert len(cap_families(cands, 0)) == len(cands)


def test_policy_suggests_one_destruct_per_goal_and_explores_outside_the_greedy_cut():
    generator = CandidateGenerator("coq", LIBRARY)
    greedy = RankedTacticPolicy(generator, family_cap=1)
    [top] = greedy.suggest([GOAL], n=30)
    assert sum(s.tactic.startswith("destruct") for s in top) == 1
    assert [s.tactic for s in top[:3]] == ["intros", "simpl", "reflexivity"]  # untrained: the default order
    cut = {s.tactic for s in greedy.suggest([GOAL], n=6)[0]}
    sampled = [
        {s.tactic for s in RankedTacticPolicy(generator, explore=Exploration(1.0, seed)).suggest([GOAL], 6)[0]}
        for seed in range(8)
    ]
    assert any(s - cut for s in sampled)  # exploration tries tactics the greedy cut never would
    assert sampled[0] == {
        s.tactic for s in RankedTacticPolicy(generator, explore=Exploration(1.0, 0)).suggest([GOAL], 6)[0]
    }  # the same seed samples the same order


def test_a_tactic_outside_the_current_candidates_is_still_recognised():
    generator = CandidateGenerator("coq", LIBRARY, top_premises=1)
    cand = generator.candidate_for(GOAL, "rewrite L5")
    assert cand is not None and cand.kind == "premise" and cand.arg_index == 1
    assert generator.candidate_for(GOAL, "induction e").kind == "var"
    assert generator.candidate_for(GOAL, "omega_is_gone") is None
