"""Property tests: whatever string a model writes, a tactic fails as an error edge and nothing runs.

Most generated strings go through the validators alone (cheap, > 1,000 per backend); a few hundred go
through the live prover's `run_tactic`, after which the same session must still prove a known theorem.
"""

from __future__ import annotations

import re
from collections import Counter

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from aitp.proving.coq.tactics import DENIED, parse_coq_tactic
from aitp.proving.env import Goal, ProofStep, ProverEnv, TacticResult
from aitp.proving.errors import TacticRejectedError
from aitp.proving.hol_light.tactics import HOL_CONVS, HOL_TACTICS, parse_hol_tactic
from aitp.proving.search import Budget, SearchConfig, TacticSuggestion, make_search
from tests.proving.cases import COQ_CASE, HOL_CASE, require
from tests.proving.tactic_strings import MARKER, coq_strings, hol_strings

VALIDATOR_EXAMPLES = 1600
BATCH = 10
LIVE_EXAMPLES = 200
COQ_FORBIDDEN = frozenset({"Nat.add_0_r", "add_0_r", "aitp_goal"})
HOL_PREMISES = frozenset({"ADD", "ADD_0", "ADD_SUC", "ADD_SYM", "LE_REFL", "MULT_CLAUSES"})
HOL_ATOMS = frozenset(
    {*HOL_TACTICS, *HOL_CONVS, *HOL_PREMISES}
    | set("then thenl orelse repeat try tac thms thm term thmtac conv name gsym conjunct1 conjunct2 spec specl".split())
)
# The cases the issue reported: each used to raise out of `run_tactic` or to fail after validation.
COQ_REPORTED = ["(" * 990 + "auto" + ")" * 990, "try " * 490 + "auto", "do 2 " * 390 + "auto"]
HOL_REPORTED = [
    "(" * 1300 + "ARITH_TAC" + ")" * 1300,
    "TRY " * 300 + "ARITH_TAC",
    "MP_TAC " + "(GSYM " * 500 + "ADD_SYM" + ")" * 500,
    "REWRITE_TAC [" + ";".join(["ADD"] * 900) + "]",  # 3,600 characters written, 4,500 in canonical form
]
SETTINGS = dict(deadline=None, database=None, derandomize=True, suppress_health_check=list(HealthCheck))


def _run_property(strategy, examples: int, check) -> list[str]:
    """Run `check` on about `examples` generated strings, drawn in batches (hypothesis costs ~5 ms a
    draw on a loaded 2-core machine; the validators take microseconds); return the strings seen."""
    seen: list[str] = []

    @settings(max_examples=examples // BATCH, **SETTINGS)
    @given(st.lists(strategy, min_size=BATCH, max_size=BATCH, unique=True))
    def run(texts: list[str]) -> None:
        for text in texts:
            seen.append(text)
            check(text)

    run()
    return seen


def _coq_check(text: str) -> None:
    try:
        tactic = parse_coq_tactic(text, COQ_FORBIDDEN)
    except TacticRejectedError as exc:
        assert "\n" not in str(exc)
        return
    assert parse_coq_tactic(tactic, COQ_FORBIDDEN) == tactic  # what `run` sends is what was validated
    assert '"' not in tactic and "(*" not in tactic and not re.search(r"\.(\s|$)", tactic)
    names = set(re.findall(r"[A-Za-z_][A-Za-z0-9_'.]*", tactic))
    assert not {n.rsplit(".", 1)[-1] for n in names} & DENIED and not names & COQ_FORBIDDEN


def _hol_check(text: str) -> None:
    try:
        parsed = parse_hol_tactic(text, HOL_PREMISES, None, frozenset({"ADD_CLAUSES"}))
    except TacticRejectedError as exc:
        assert "\n" not in str(exc)
        return
    again = parse_hol_tactic(parsed.text, HOL_PREMISES, None, frozenset({"ADD_CLAUSES"}))
    assert again == parsed  # the canonical text parses to itself and to the same s-expression
    atoms = re.findall(r'"(?:\\.|[^"\\])*"|[()]|[^\s()"]+', parsed.sexp)
    assert {a for a in atoms if a not in "()" and not a.startswith('"')} <= HOL_ATOMS


def test_coq_validator_refuses_or_accepts_stably():
    seen = _run_property(coq_strings(), VALIDATOR_EXAMPLES, _coq_check)
    assert len(set(seen)) >= 1000
    for text in COQ_REPORTED:
        with pytest.raises(TacticRejectedError, match="nested deeper"):
            parse_coq_tactic(text)


def test_hol_validator_refuses_or_accepts_stably():
    seen = _run_property(hol_strings(), VALIDATOR_EXAMPLES, _hol_check)
    assert len(set(seen)) >= 1000
    for text in HOL_REPORTED:
        with pytest.raises(TacticRejectedError):
            parse_hol_tactic(text, HOL_PREMISES)


def test_hol_canonical_text_keeps_its_meaning():
    parsed = parse_hol_tactic("TRY (REPEAT ((CONJ_TAC)) ORELSE (ARITH_TAC))")
    assert parsed.text == "TRY (REPEAT CONJ_TAC ORELSE ARITH_TAC)"
    assert parsed.sexp == "(try (orelse (repeat (tac CONJ_TAC)) (tac ARITH_TAC)))"
    assert parse_hol_tactic(parsed.text) == parsed


def test_hol_conv_tac_has_its_grammar():
    assert parse_hol_tactic("CONV_TAC NUM_REDUCE_CONV").sexp == "(conv NUM_REDUCE_CONV)"
    assert parse_hol_tactic("CONV_TAC(ARITH_RULE)").text == "CONV_TAC ARITH_RULE"
    assert parse_hol_tactic("TRY (CONV_TAC TAUT) THEN ARITH_TAC").text == "TRY (CONV_TAC TAUT) THEN ARITH_TAC"
    for bad in ("CONV_TAC", "CONV_TAC mk_thm", "CONV_TAC (fun t -> ASSUME t)", "CONV_TAC ARITH_TAC"):
        with pytest.raises(TacticRejectedError):
            parse_hol_tactic(bad)


class _RaisingEnv(ProverEnv):
    """A backend whose prover fails in ways `run_tactic` must absorb (faked: a real prover cannot be made to)."""

    name = "raising"

    def __init__(self, error: Exception) -> None:
        super().__init__()
        self.error, self.replaced = error, 0

    def open(self, theorem):
        return Goal("⊢ True", theorem.name)

    def validate_tactic(self, goal, tactic):
        if tactic == "deep":
            raise RecursionError("maximum recursion depth exceeded")
        return tactic

    def _run(self, goal, tactic, timeout):
        raise self.error

    def _replace(self):
        self.replaced += 1

    def check_proof(self, theorem, proof):
        raise AssertionError("not reached")

    def render_proof(self, proof):
        return proof.tactic


@pytest.mark.parametrize("error", [TacticRejectedError("too long"), ValueError("bad reply"), KeyError(3)])
def test_every_failure_of_a_tactic_is_an_error_edge(error):
    env = _RaisingEnv(error)
    goal = env.open(COQ_CASE.theorem)
    for tactic in ("auto", "deep", None):
        result = env.run_tactic(goal, tactic)
        assert isinstance(result, TacticResult) and result.outcome == "error" and "\n" not in result.error
    assert env.replaced == (0 if isinstance(error, TacticRejectedError) else 1)


# --- the live provers ----------------------------------------------------------------------------


def _prove_by_steps(env: ProverEnv, goal: Goal, step: ProofStep) -> None:
    result = env.run_tactic(goal, step.tactic)
    if step.children:
        assert result.outcome == "goals" and len(result.goals) == len(step.children), result
        for child, sub in zip(result.goals, step.children):
            _prove_by_steps(env, child, sub)
    else:
        assert result.outcome == "proved", result


def _live(env: ProverEnv, case, strategy, reported: list[str], marker) -> Counter:
    """Throw generated and reported strings at `run_tactic` on the root and on a child goal."""
    root = env.open(case.theorem)
    child = env.run_tactic(root, case.first_tactic).goals[0]
    outcomes: Counter = Counter()

    @settings(max_examples=LIVE_EXAMPLES, **SETTINGS)
    @given(strategy, st.booleans())
    def run(text: str, deep: bool) -> None:
        result = env.run_tactic(child if deep else root, text.replace(MARKER, str(marker)), timeout=0.3)
        assert result.outcome in ("goals", "proved", "error", "timeout") and "\n" not in result.error
        outcomes[result.outcome] += 1

    run()
    for text in reported:
        result = env.run_tactic(root, text)
        assert result.outcome == "error" and result.error.startswith("rejected"), result
    assert not marker.exists(), "a generated tactic had a side effect"
    _prove_by_steps(env, env.open(case.theorem), case.proof)  # the same session still proves the theorem
    assert env.check_proof(case.theorem, case.proof).ok
    return outcomes


@pytest.fixture(scope="module")
def coq_env():
    require("coq")
    from aitp.proving.backends import open_env

    env = open_env("coq", tactic_timeout=1.0)
    yield env
    env.close()


def test_coq_run_tactic_survives_generated_strings(coq_env, tmp_path):
    outcomes = _live(coq_env, COQ_CASE, coq_strings(), COQ_REPORTED, tmp_path / "ran")
    print(outcomes)
    assert outcomes["goals"] + outcomes["proved"] > 0  # some strings were real tactics that ran


class _HostilePolicy:
    """Proposes the reported crashers and injections first, then the steps of a real proof."""

    def __init__(self, hostile: list[str], proof: ProofStep) -> None:
        self.hostile, self.good = hostile, list(dict.fromkeys(_tactics(proof)))

    def suggest(self, goals, n):
        return [[TacticSuggestion(t) for t in self.hostile + self.good] for _ in goals]


def _tactics(step: ProofStep) -> list[str]:
    return [step.tactic, *(t for c in step.children for t in _tactics(c))]


def test_coq_search_with_hostile_tactics_still_proves(coq_env, tmp_path):
    marker = tmp_path / "ran"
    hostile = [*COQ_REPORTED, *(t.format(marker=marker) for t in COQ_CASE.injections), "", "\x00", "Qed."]
    config = SearchConfig(budget=Budget(expansions=16), tactics_per_goal=len(hostile) + 8, tactic_timeout=1.0)
    result = make_search("bestfs", config).run(coq_env, COQ_CASE.theorem, _HostilePolicy(hostile, COQ_CASE.proof))
    assert result.proved, result.stop_reason
    assert not marker.exists()


@pytest.fixture(scope="module")
def hol_env(hol_server):
    from aitp.proving.hol_light.env import HolLightEnv

    env = HolLightEnv(tactic_timeout=1.0, server=hol_server)
    yield env
    env.close()


@pytest.mark.hol_light
def test_hol_run_tactic_survives_generated_strings(hol_env, tmp_path):
    outcomes = _live(hol_env, HOL_CASE, hol_strings(), HOL_REPORTED, tmp_path / "ran")
    print(outcomes)
    assert outcomes["goals"] + outcomes["proved"] > 0


@pytest.mark.hol_light
def test_hol_conv_tac_runs(hol_env):
    root = hol_env.open(HOL_CASE.theorem)
    assert "CONV_TAC" in hol_env.tactics
    assert hol_env.run_tactic(root, "CONV_TAC ARITH_RULE").outcome == "proved"
    unchanged = hol_env.run_tactic(root, "CONV_TAC (NUM_REDUCE_CONV)")  # runs; no numeral to reduce here
    assert unchanged.outcome == "goals" and [g.text for g in unchanged.goals] == [root.text]


@pytest.mark.hol_light
def test_hol_term_parsing_counts_against_the_tactic_timer(hol_env):
    root = hol_env.open(HOL_CASE.theorem)
    child = hol_env.run_tactic(root, HOL_CASE.first_tactic).goals[0]
    term = " + ".join(["(x:num)"] * 360)  # a 3,600-character term that takes 4 s to parse
    result = hol_env.run_tactic(child, f"EXISTS_TAC `{term}`", timeout=0.3)
    assert result.outcome == "timeout" and result.seconds < 3, result
    assert hol_env.run_tactic(child, "ARITH_TAC").outcome == "proved"
