"""Tactic policies: the fixed tactic set with ranked premises, and the generative adapter."""

from __future__ import annotations

import math
from dataclasses import dataclass

import pytest

from aitp.proving.data.theorems import TheoremSet
from aitp.proving.env import Goal, Theorem
from aitp.proving.errors import TacticRejectedError
from aitp.proving.models.fixed_policy import FixedTacticPolicy, fit_prior, goal_variables
from aitp.proving.models.generative import GenerativeTacticPolicy
from aitp.proving.models.premises import PremiseScorer, used_premises

LIBRARY = TheoremSet(
    "tiny",
    "hol-light",
    [
        Theorem("ADD_0", "!m. m + 0 = m", "hol-light", "INDUCT_TAC THEN ASM_REWRITE_TAC[ADD]", position=1),
        Theorem("MULT_0", "!m. m * 0 = 0", "hol-light", "INDUCT_TAC THEN ASM_REWRITE_TAC[MULT; ADD_0]", position=2),
        Theorem("ADD_SYM", "!m n. m + n = n + m", "hol-light", "INDUCT_TAC THEN ASM_REWRITE_TAC[ADD_0]", position=3),
    ],
    ["ADD", "MULT", "ADD_0", "MULT_0", "ADD_SYM"],
)


def test_fixed_policy_ranks_premises_and_normalises_logprobs():
    policy = FixedTacticPolicy("hol-light", LIBRARY, top_premises=2)
    goal = Goal("⊢ !m n. m + n = n + m", "ADD_SYM")
    [suggestions] = policy.suggest([goal], n=100)
    tactics = [s.tactic for s in suggestions]
    assert "ARITH_TAC" in tactics and any("ADD_0" in t for t in tactics)
    assert not any("ADD_SYM" in t for t in tactics)  # never the theorem itself
    total = sum(math.exp(s.logprob) for s in suggestions)
    assert total == pytest.approx(1.0)
    assert [s.logprob for s in suggestions] == sorted((s.logprob for s in suggestions), reverse=True)


def test_fixed_policy_restricts_to_named_tactics_or_fails_in_one_line():
    policy = FixedTacticPolicy("coq", None, tactics=["intros", "induction"])
    [suggestions] = policy.suggest([Goal("⊢ forall n m : nat, n + m = m + n", "t")], n=10)
    assert {s.tactic for s in suggestions} == {"intros", "induction n", "induction m"}
    with pytest.raises(TacticRejectedError, match="not in the coq fixed tactic set"):
        FixedTacticPolicy("coq", None, tactics=["intros", "sledgehammer"])


def test_goal_variables_of_coq_goals():
    assert goal_variables("n : nat\nl : list A\nH : n = 0\n⊢ forall (A : Type) (x : A), P") == ["n", "l", "x"]


def test_prior_is_learned_from_human_proofs():
    prior = fit_prior(LIBRARY.theorems, "hol-light")
    assert prior["INDUCT_TAC"] > prior["ARITH_TAC"]
    assert prior["ASM_REWRITE_TAC"] > prior["MESON_TAC" if "MESON_TAC" in prior else "ARITH_TAC"]


def test_premise_scorer_learns_from_human_proofs():
    statements = {f"P{i}": f"f{i} x = g{i} x" for i in range(20)}
    scorer = PremiseScorer(statements, dim=16, buckets=1024)
    examples = [(f"h{i} y = k{i} y", [f"P{i}"]) for i in range(20)]  # no token overlap: only learning helps
    before = sum(
        max(range(20), key=lambda j: scorer.score(g, [f"P{j}" for j in range(20)])[j]) == i
        for i, (g, _) in enumerate(examples)
    )
    scorer.fit(examples, epochs=30, batch=20, lr=0.1)
    after = sum(
        max(range(20), key=lambda j: scorer.score(g, [f"P{j}" for j in range(20)])[j]) == i
        for i, (g, _) in enumerate(examples)
    )
    assert after > before and after >= 15
    assert used_premises("REWRITE_TAC[ADD_0; Nat.add_comm]", ["ADD_0", "Coq.Arith.PeanoNat.Nat.add_comm", "X"]) == [
        "ADD_0",
        "Coq.Arith.PeanoNat.Nat.add_comm",
    ]


@dataclass
class FakeCompletion:
    text: str
    logprobs: list[float]


class KeywordSampler:
    """The sample(prompts, n, temperature, max_tokens, stop) shape."""

    def __init__(self):
        self.calls = 0

    def sample(self, prompts, n, temperature, max_tokens, stop):
        self.calls += 1
        outs = ["intros n.", "admit", "intros n", 'Redirect "x" Print nat', "lia"]
        return [[FakeCompletion(outs[i % len(outs)], [-0.1 * (i + 1)]) for i in range(n)] for _ in prompts]


class ParamsSampler:
    """The aitp.policies protocol shape: sample(prompts, params, seeds=None)."""

    def sample(self, prompts, params, seeds=None):
        return [
            [FakeCompletion("ARITH_TAC\nmore", [-0.5]), FakeCompletion("X;; y", [-0.1])] * params.n for _ in prompts
        ]


def test_generative_policy_validates_samples_against_the_grammar():
    sampler = KeywordSampler()
    policy = GenerativeTacticPolicy(sampler, "coq")
    goals = [Goal("⊢ forall n, n + 0 = n", "t"), Goal("⊢ True", "t")]
    out = policy.suggest(goals, n=5)
    assert sampler.calls == 1 and len(out) == 2  # one call for the whole batch
    assert [s.tactic for s in out[0]] == ["intros n", "lia"]  # deduplicated, best first, invalid dropped
    assert out[0][0].logprob == pytest.approx(-0.1)
    assert policy.rejected == 4


def test_generative_policy_speaks_the_params_protocol():
    pytest.importorskip("aitp.policies.base")
    policy = GenerativeTacticPolicy(ParamsSampler(), "hol-light")
    [suggestions] = policy.suggest([Goal("⊢ 1 + 1 = 2", "t")], n=2)
    assert [s.tactic for s in suggestions] == ["ARITH_TAC"]


def test_interleaved_policy_takes_turns_without_repeats():
    from aitp.proving.models.generative import InterleavedPolicy

    goal = Goal("⊢ True", "t")
    first = FixedTacticPolicy("coq", None, tactics=["intros", "lia", "auto"])
    second = FixedTacticPolicy("coq", None, tactics=["auto", "simpl", "easy"])
    [a], [b] = first.suggest([goal], 4), second.suggest([goal], 4)
    [mixed] = InterleavedPolicy(first, second).suggest([goal], n=4)
    tactics = [s.tactic for s in mixed]
    assert len(tactics) == 4 == len(set(tactics))  # distinct, at most n
    assert tactics[:2] == [a[0].tactic, b[0].tactic]  # turns: the first's best, then the second's
    assert set(tactics) <= {s.tactic for s in a + b}
