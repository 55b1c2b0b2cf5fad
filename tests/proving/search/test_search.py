"""Every search algorithm under the same budgets: on the toy prover, then on real Coq and HOL Light theorems."""

from __future__ import annotations

import pytest

from aitp.errors import BadInputError
from aitp.proving.env import Theorem
from aitp.proving.search import SEARCHES, Budget, ClosingTactic, SearchConfig, make_search
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


@pytest.mark.parametrize("algorithm", ALGORITHMS)
def test_closing_tactics_are_tried_first_on_goals_no_deeper_than_their_bound(algorithm):
    """`close` proves goals <= 1; the policy never suggests it, so only the closing tactic can finish the proof."""
    env, policy = ToyEnv(), ToyPolicy(order=("split",))
    plain = SearchConfig(budget=Budget(expansions=30), tactics_per_goal=1)
    theorem = Theorem("t", "3", "toy")
    assert not make_search(algorithm, plain).run(env, theorem, policy).proved
    closing = SearchConfig(
        budget=Budget(expansions=30), tactics_per_goal=1, closing_tactics=(ClosingTactic("close", 1.0),)
    )
    result = make_search(algorithm, closing).run(env, theorem, policy)
    assert result.proved and result.check.ok
    for edge in result.tree.edges:  # on every goal expanded, the closing tactic ran before the policy's
        first = min(e.id for e in result.tree.edges if e.parent == edge.parent)
        assert result.tree.edges[first].tactic == "close"
    shallow = SearchConfig(
        budget=Budget(expansions=30), tactics_per_goal=1, closing_tactics=(ClosingTactic("close", 1.0, max_depth=0),)
    )
    result = make_search(algorithm, shallow).run(env, theorem, policy)
    assert not result.proved
    assert all(e.tactic != "close" or result.tree.nodes[e.parent].depth == 0 for e in result.tree.edges)


@pytest.mark.parametrize("algorithm", ALGORITHMS)
def test_a_widening_search_asks_for_more_tactics_once_it_runs_out_of_goals(algorithm):
    """At one tactic a goal the policy only ever splits; widened to two it also closes, and the proof is found."""
    env, theorem = ToyEnv(), Theorem("t", "2", "toy")
    narrow = SearchConfig(budget=Budget(expansions=200), tactics_per_goal=1)
    assert not make_search(algorithm, narrow).run(env, theorem, ToyPolicy(order=("split", "close"))).proved
    widening = SearchConfig(budget=Budget(expansions=200), tactics_per_goal=1, widen=True)
    policy = ToyPolicy(order=("split", "close"))
    result = make_search(algorithm, widening).run(env, theorem, policy)
    assert result.proved and result.check.ok and result.policy_calls == len(policy.batches)
    splits_only = ToyPolicy(order=("split",))  # offers one tactic however many are asked for: no second attempt
    stuck = make_search(algorithm, widening).run(env, theorem, splits_only)
    assert not stuck.proved and stuck.stop_reason in ("failed", "no goals left")
    assert (
        stuck.policy_calls
        == make_search(algorithm, narrow).run(env, theorem, ToyPolicy(order=("split",))).policy_calls * 2
    )


@pytest.mark.parametrize("algorithm", ALGORITHMS)
def test_a_widening_search_runs_a_tactic_on_a_goal_once(algorithm):
    """A later, wider attempt reuses what the earlier ones ran: the prover sees each (goal, tactic) pair once."""

    class CountingEnv(ToyEnv):
        def __init__(self) -> None:
            super().__init__()
            self.runs: list[tuple[str, str]] = []

        def run_tactic(self, goal, tactic, timeout=None):
            self.runs.append((goal.text, tactic))
            return super().run_tactic(goal, tactic, timeout)

    env, theorem = CountingEnv(), Theorem("t", "2", "toy")
    widening = SearchConfig(
        budget=Budget(expansions=200),
        tactics_per_goal=1,
        widen=True,
        closing_tactics=(ClosingTactic("down", 1.0, max_depth=0),),
    )
    result = make_search(algorithm, widening).run(env, theorem, ToyPolicy(order=("split", "close")))
    assert result.proved and result.check.ok
    assert len(env.runs) == len(set(env.runs))
    assert any(e.tactic == "down" for e in result.tree.edges)  # the last tree holds the root's reused edges
    assert result.policy_calls >= 2  # it did widen


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
    from aitp.proving.data.theorems import load_theorem_set
    from aitp.proving.models.fixed_policy import FixedTacticPolicy

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
    from aitp.proving.data.traces import trace_rows
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
    from aitp.proving.data.theorems import load_theorem_set
    from aitp.proving.hol_light.env import HolLightEnv
    from aitp.proving.models.fixed_policy import FixedTacticPolicy

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


class _SplitThenAuto:
    """A fixed tactic policy: split the iff at the root, then try `auto` (which proves neither side)."""

    def suggest(self, goals, n):
        from aitp.proving.search import TacticSuggestion

        return [[TacticSuggestion("intros; split" if "<->" in g.text else "auto", -0.5)] for g in goals]


def test_bestfs_breaks_ties_by_the_critic_it_is_given(coq_setup):
    env, library, _ = coq_setup
    theorem = library.get("Coq.Bool.Bool.andb_true_iff")  # `intros; split` leaves two equally likely goals
    config = SearchConfig(budget=Budget(expansions=2), tactics_per_goal=1, batch_size=1)

    def first_expanded(search):
        tree = search.run(env, theorem, _SplitThenAuto()).tree
        (child,) = [n for n in tree.nodes if n.expanded_at == 1]
        return child.goal.text, [n.critic for n in tree.nodes]

    plain, values = first_expanded(make_search("bestfs", config))
    assert values == [None, None, None]  # no critic given: none computed, creation order decides
    assert plain.endswith("b1 && b2 = true -> b1 = true /\\ b2 = true")
    prefers_the_second = lambda goals: [0.9 if g.text.endswith("-> b1 && b2 = true") else 0.2 for g in goals]  # noqa: E731
    steered, values = first_expanded(make_search("bestfs", config, prefers_the_second))
    assert steered.endswith("-> b1 && b2 = true") and values == [0.2, 0.2, 0.9]


def test_htps_takes_its_values_from_a_learned_critic(coq_setup):
    from aitp.proving.models.goal_critic import GoalCritic, fit_critic

    env, library, policy = coq_setup
    critic = GoalCritic()
    texts = ["b : bool\n⊢ b && true = b", "l : list nat\n⊢ rev (rev l) = l", "⊢ true = true", "n : nat\n⊢ n * 0 = 0"]
    fit_critic(critic, texts, [1.0, 0.0, 1.0, 0.0], epochs=5)
    config = SearchConfig(budget=Budget(expansions=6), tactics_per_goal=6, batch_size=2)
    result = make_search("htps", config, critic).run(env, library.get("Coq.Lists.List.app_nil_r"), policy)
    nodes = result.tree.nodes
    expected = critic([n.goal for n in nodes])
    assert [n.critic for n in nodes] == pytest.approx(expected)  # every goal valued by the learned critic
    assert len({round(v, 6) for v in expected}) > 1 and 0.5 not in expected  # not the constant critic's 0.5
    assert any(e.visits for e in result.tree.edges)  # and HTPS backed them up along its simulations


class _SlowCheckEnv(ToyEnv):
    """The toy prover whose re-check of a found proof takes a while (a real prover's check costs seconds)."""

    def check_proof(self, theorem: Theorem, proof):
        import time

        time.sleep(0.5)
        return super().check_proof(theorem, proof)


@pytest.mark.parametrize("algorithm", ALGORITHMS)
def test_a_search_reports_its_own_time_without_the_recheck_after_it(algorithm):
    config = SearchConfig(budget=Budget(expansions=60), tactics_per_goal=6, batch_size=4)
    result = make_search(algorithm, config).run(_SlowCheckEnv(), Theorem("toy5", "5", "toy"), ToyPolicy())
    assert result.proved and result.check.ok
    assert result.wall_seconds < 0.4  # the toy search takes milliseconds; the 0.5 s check is left out
