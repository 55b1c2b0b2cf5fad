"""Concurrent proof searches sharing one tactic policy: batched requests, the same answers, the same searches."""

from __future__ import annotations

import threading
import time

import pytest

from aitp.proving.env import Goal
from aitp.proving.models.fixed_policy import FixedTacticPolicy
from aitp.proving.search.concurrent import SharedTacticPolicy, search_concurrently
from tests.proving.cases import require


class CountingPolicy(FixedTacticPolicy):
    """The fixed Coq policy, recording the width of every call and taking a while per call like a model does."""

    def __init__(self, delay: float = 0.02) -> None:
        super().__init__("coq")
        self.widths: list[int] = []
        self.delay = delay

    def suggest(self, goals, n):
        self.widths.append(len(goals))
        time.sleep(self.delay)
        return super().suggest(goals, n)


GOALS = [Goal(f"n : nat\n============================\nn + {k} = {k} + n", "t") for k in range(24)]


def test_waiting_requests_are_answered_in_one_batch_each_with_its_own_answer():
    alone = FixedTacticPolicy("coq")
    expected = [alone.suggest([g], 4)[0] for g in GOALS]
    policy = CountingPolicy()
    answers: dict[int, list] = {}
    with SharedTacticPolicy(policy) as shared:
        threads = [
            threading.Thread(target=lambda k=k: answers.__setitem__(k, shared.suggest([GOALS[k]], 4)))
            for k in range(len(GOALS))
        ]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    assert [answers[k][0] for k in range(len(GOALS))] == expected
    assert sum(policy.widths) == len(GOALS) and len(policy.widths) < len(GOALS)  # batched: fewer calls than asks
    assert shared.load.calls == len(policy.widths) and shared.load.widest == max(policy.widths) > 1
    assert shared.load.goals == len(GOALS) and shared.load.busy_seconds > 0


def test_a_batch_never_exceeds_its_cap_and_different_widths_are_answered_apart():
    policy = CountingPolicy(delay=0.05)
    with SharedTacticPolicy(policy, max_goals=5) as shared:
        results: list = []
        threads = [
            threading.Thread(target=lambda k=k: results.append(shared.suggest(GOALS[k : k + 3], 1 + k % 2)))
            for k in range(8)
        ]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    assert max(policy.widths) <= 5 and sum(policy.widths) == 24
    assert all(len(r) == 3 for r in results)
    assert {len(r[0]) for r in results} == {1, 2}  # each request got the n it asked for


def test_an_error_of_the_model_reaches_every_waiting_search_and_the_policy_stays_usable():
    class Failing(FixedTacticPolicy):
        def suggest(self, goals, n):
            if any("boom" in g.text for g in goals):
                raise RuntimeError("decoder failed")
            return super().suggest(goals, n)

    with SharedTacticPolicy(Failing("coq")) as shared:
        with pytest.raises(RuntimeError, match="decoder failed"):
            shared.suggest([Goal("boom", "t")], 2)
        assert len(shared.suggest([GOALS[0]], 2)[0]) == 2
    with pytest.raises(ValueError, match="max_goals"):
        SharedTacticPolicy(FixedTacticPolicy("coq"), max_goals=0)


@pytest.fixture(scope="module")
def bool_library(coq_theorem_home):
    from aitp.proving.data.theorems import load_theorem_set

    return load_theorem_set("coq-stdlib", home=coq_theorem_home)


def test_concurrent_searches_find_what_one_search_at_a_time_finds(bool_library):
    require("coq")
    from aitp.proving.coq.env import CoqEnv
    from aitp.proving.learning import search_theorems
    from aitp.proving.models.prover_models import ProverModels
    from aitp.proving.search import Budget, SearchConfig, make_search

    theorems = [t for t in bool_library.split("train") if t.module == "Coq.Bool.Bool"][:6]
    models = ProverModels.untrained("coq", bool_library)
    config = SearchConfig(budget=Budget(4, 20.0, 40.0), tactics_per_goal=6, tactic_timeout=2.0)

    def session():
        env = CoqEnv(tactic_timeout=2.0)
        env.set_premises(bool_library.premise_map())
        return env

    with session() as env:
        alone = search_theorems(env, theorems, make_search("bestfs", config), models.policy(bool_library), "e", 1)
    with SharedTacticPolicy(models.policy(bool_library)) as shared:
        together, figures = search_concurrently(
            session, theorems, lambda: make_search("bestfs", config), shared, 3, "e", 1
        )
    assert together.proved == alone.proved and any(alone.proved.values())
    assert [a.theorem for a in together.attempts] == [t.name for t in theorems]  # theorem order kept
    proofs = {r["theorem_id"]: r["proof_text"] for r in alone.rows["proofs"]}
    assert {r["theorem_id"]: r["proof_text"] for r in together.rows["proofs"]} == proofs
    assert {t: len(rows) for t, rows in together.rows.items()} == {t: len(rows) for t, rows in alone.rows.items()}
    assert figures.searches == 3 and figures.theorems == 6
    assert 0 < figures.prover_busy_share <= 1 and 0 < figures.model_busy_share <= 1
    assert figures.tactics_per_second > 0 and figures.theorems_per_minute > 0 and figures.mean_batch_goals >= 1


def test_a_failing_prover_session_is_raised_in_the_caller(bool_library):
    from aitp.proving.errors import ProverUnavailableError
    from aitp.proving.search import Budget, SearchConfig, make_search

    def broken():
        raise ProverUnavailableError("no prover here")

    config = SearchConfig(budget=Budget(2, 5.0, 10.0), tactics_per_goal=2)
    with SharedTacticPolicy(FixedTacticPolicy("coq")) as shared, pytest.raises(ProverUnavailableError):
        search_concurrently(broken, bool_library.theorems[:3], lambda: make_search("bestfs", config), shared, 2)


def test_concurrent_searches_is_validated_and_recorded_only_when_set():
    from aitp.loop.config import LoopConfig
    from tests.loop.test_proving import PROVE

    plain = LoopConfig.model_validate(PROVE)
    assert plain.model_dump()["environment"]["concurrent_searches"] == 1
    wide = LoopConfig.model_validate({**PROVE, "environment": {**PROVE["environment"], "concurrent_searches": 8}})
    assert wide.model_dump()["environment"]["concurrent_searches"] == 8
    assert wide.build_environment(".").job(None, 1, train=True).searches == 8  # it takes effect in the job
    with pytest.raises(ValueError, match="concurrent_searches"):
        LoopConfig.model_validate({**PROVE, "environment": {**PROVE["environment"], "concurrent_searches": 0}})
