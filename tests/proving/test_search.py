"""Every search algorithm under the same budgets: on the toy prover, then on real Coq and HOL Light theorems."""

from __future__ import annotations

import pytest

from aitp.errors import BadInputError
from aitp.proving.env import Theorem
from aitp.proving.search import SEARCHES, Budget, SearchConfig, make_search
from tests.proving.cases import require
from tests.proving.toy import ToyEnv, ToyPolicy

ALGORITHMS = sorted(SEARCHES)


@pytest.mark.parametrize("algorithm", ALGORITHMS)
def test_each_search_proves_toy_theorems(algorithm):
    env, policy = ToyEnv(), ToyPolicy()
    config = SearchConfig(budget=Budget(expansions=60), tactics_per_goal=6, batch_size=4)
    for n in (1, 2, 5, 8):
        result = make_search(algorithm, config).run(env, Theorem(f"toy{n}", str(n), "toy"), policy)
        assert result.proved, (algorithm, n, result.stop_reason)
        assert result.check.ok and result.expansions <= 60


@pytest.mark.parametrize("algorithm", ALGORITHMS)
def test_policy_is_called_once_per_batch_of_goals(algorithm):
    env, policy = ToyEnv(), ToyPolicy(order=("up", "split"))  # never closes: runs to the budget
    config = SearchConfig(budget=Budget(expansions=24), tactics_per_goal=2, batch_size=4)
    result = make_search(algorithm, config).run(env, Theorem("toy", "9", "toy"), policy)
    assert result.expansions == 24 and result.stop_reason == "budget: expansions"
    assert result.policy_calls == len(policy.batches) < result.expansions
    assert max(policy.batches) <= 4 and sum(policy.batches) >= result.expansions
    assert not result.proved and result.proof is None


@pytest.mark.parametrize("algorithm", ALGORITHMS)
def test_budgets_are_the_same_for_every_algorithm(algorithm):
    env = ToyEnv()
    stopped = make_search(algorithm, SearchConfig(budget=Budget(wall_seconds=0.0))).run(
        env, Theorem("toy", "9", "toy"), ToyPolicy()
    )
    assert stopped.stop_reason == "budget: wall seconds" and stopped.expansions == 0
    env.prover_seconds = 0.0
    starved = make_search(algorithm, SearchConfig(budget=Budget(prover_seconds=0.0))).run(
        env, Theorem("toy", "9", "toy"), ToyPolicy()
    )
    assert starved.stop_reason == "budget: prover seconds"


def test_dead_end_search_reports_failure():
    env, policy = ToyEnv(), ToyPolicy(order=("loop", "up"))
    result = make_search("bfs", SearchConfig(budget=Budget(expansions=3))).run(env, Theorem("t", "3", "toy"), policy)
    assert not result.proved and result.tree.has_cycles


def test_htps_records_visits_and_values():
    env, policy = ToyEnv(), ToyPolicy()
    result = make_search("htps", SearchConfig(budget=Budget(expansions=30), exploration=2.0)).run(
        env, Theorem("t", "7", "toy"), policy
    )
    assert result.proved
    assert result.tree.nodes[result.tree.root].visits > 0
    assert any(e.visits > 0 and e.value_sum > 0 for e in result.tree.edges)


def test_unknown_search_is_a_one_line_error():
    with pytest.raises(BadInputError, match="unknown search 'dfs'"):
        make_search("dfs")


EQUAL_BUDGET = SearchConfig(budget=Budget(expansions=24, prover_seconds=30.0, wall_seconds=60.0), tactic_timeout=3.0)
COQ_EASY = [  # none of these closes by `lia` through the lemma itself (Nat.add_0_r did: see below)
    "Coq.Arith.EqNat.eq_nat_refl",
    "Coq.Bool.Bool.andb_true_r",
    "Coq.Bool.Bool.negb_involutive",
    "Coq.Lists.List.app_nil_r",
    "Coq.Arith.Compare_dec.not_le",
]


@pytest.fixture(scope="module")
def coq_setup(coq_theorem_home):
    require("coq")
    from aitp.proving.backends import open_env
    from aitp.proving.policies import FixedTacticPolicy
    from aitp.proving.theorems import load_theorem_set

    library = load_theorem_set("coq-stdlib", home=coq_theorem_home)
    env = open_env("coq", tactic_timeout=3.0)
    env.set_premises(library.premise_map())
    yield env, library, FixedTacticPolicy("coq", library)
    env.close()


@pytest.mark.parametrize("algorithm", ALGORITHMS)
def test_each_search_proves_easy_coq_lemmas(coq_setup, algorithm):
    env, library, policy = coq_setup
    for name in COQ_EASY:
        theorem = library._by_name.get(name) or Theorem(name, "", "coq")
        result = make_search(algorithm, EQUAL_BUDGET).run(env, theorem, policy)
        assert result.proved, (algorithm, name, result.stop_reason)
        assert result.check.ok, result.check.message


def test_a_coq_proof_through_the_lemma_itself_does_not_count(coq_setup):
    from aitp.proving.traces import trace_rows
    from tests.proving.cases import COQ_CASE

    env, _, policy = coq_setup
    # `lia` closes Nat.add_0_r at once, but lia's nat support is built from Nat.add_0_r.
    result = make_search("bestfs", EQUAL_BUDGET).run(env, COQ_CASE.theorem, policy)
    assert result.proof is not None and result.proof_text == "lia."
    assert not result.proved
    assert result.check.message == "proof depends on the theorem being proved: Nat.add_0_r"
    (row,) = trace_rows(result, "coq")["proofs"]
    assert row["verified"] is False and "depends on the theorem" in row["verifier"]


HOL_EASY = ["ADD_CLAUSES", "ADD_SYM", "CONJ_SYM", "LE_REFL", "ADD_ASSOC"]


@pytest.fixture(scope="module")
def hol_setup(hol_server, tmp_path_factory):
    from aitp.proving.hol_light import HolLightEnv
    from aitp.proving.policies import FixedTacticPolicy
    from aitp.proving.theorems import load_theorem_set

    library = load_theorem_set("hol-core", home=tmp_path_factory.mktemp("home"))
    env = HolLightEnv(tactic_timeout=3.0, server=hol_server)
    env.set_premises(library.premise_map())
    yield env, library, FixedTacticPolicy("hol-light", library)
    env.close()


@pytest.mark.hol_light
@pytest.mark.parametrize("algorithm", ALGORITHMS)
def test_each_search_proves_easy_hol_light_theorems(hol_setup, algorithm):
    env, library, policy = hol_setup
    for name in HOL_EASY:
        result = make_search(algorithm, EQUAL_BUDGET).run(env, library.get(name), policy)
        assert result.proved, (algorithm, name, result.stop_reason)
        assert result.check.ok, result.check.message
