"""One contract suite for every prover backend that is installed here (the others skip, saying why)."""

from __future__ import annotations

import os
import time
import uuid

import pytest

from aitp.proving.backends import open_env
from aitp.proving.env import Theorem
from aitp.proving.errors import UnknownTheoremError
from tests.proving.cases import CASES, require


@pytest.fixture(
    scope="module",
    params=["coq", pytest.param("hol-light", marks=pytest.mark.hol_light), "leandojo"],
)
def case_env(request):
    case = CASES[request.param]
    require(case.backend)
    if case.backend == "hol-light":
        from aitp.proving.hol_light.env import HolLightEnv

        env = HolLightEnv(server=request.getfixturevalue("hol_server"))
    else:
        env = open_env(case.backend)
    yield case, env
    env.close()


def test_open_and_step(case_env):
    case, env = case_env
    root = env.open(case.theorem)
    assert "⊢" in root.text
    result = env.run_tactic(root, case.first_tactic)
    assert result.outcome == "goals", result.error
    assert result.goals and all(g.text for g in result.goals)
    assert result.seconds > 0


def test_failing_tactic_is_an_error_edge_and_session_survives(case_env):
    case, env = case_env
    root = env.open(case.theorem)
    failed = env.run_tactic(root, case.failing_tactic)
    assert failed.outcome == "error" and failed.error
    assert env.run_tactic(root, case.first_tactic).outcome == "goals"


def test_tactic_outside_allowlist_never_runs(case_env):
    case, env = case_env
    root = env.open(case.theorem)
    before = env.prover_seconds
    result = env.run_tactic(root, "launch_missiles 42")
    assert result.outcome == "error" and result.error.startswith("rejected")
    assert result.seconds == 0 and env.prover_seconds == before


def test_injection_is_an_error_edge_and_never_executed(case_env, tmp_path):
    case, env = case_env
    root = env.open(case.theorem)
    for template in case.injections:
        marker = tmp_path / f"pwned-{uuid.uuid4().hex}"
        result = env.run_tactic(root, template.format(marker=marker))
        assert result.outcome == "error", template
        time.sleep(0.05)
        assert not marker.exists(), f"side effect of {template!r} happened"
    assert env.run_tactic(root, case.first_tactic).outcome == "goals"


def test_give_up_tactics_never_count(case_env):
    case, env = case_env
    root = env.open(case.theorem)
    for tactic in case.give_up:
        assert env.run_tactic(root, tactic).outcome != "proved", tactic
        child = env.run_tactic(root, case.first_tactic).goals[0]
        assert env.run_tactic(child, tactic).outcome != "proved", tactic


def test_earlier_states_can_be_extended_again(case_env):
    case, env = case_env
    root = env.open(case.theorem)
    first = env.run_tactic(root, case.first_tactic)
    child = first.goals[0]
    env.run_tactic(child, case.failing_tactic)
    env.run_tactic(child, case.first_tactic)
    again = env.run_tactic(root, case.first_tactic)  # back to the root after going deeper
    assert [g.text for g in again.goals] == [g.text for g in first.goals]
    for goal in (first.goals[-1], child):  # and deep again, on goals created before
        assert env.run_tactic(goal, case.failing_tactic).outcome in ("error", "goals", "proved")


def test_proof_is_rebuilt_and_checked(case_env):
    case, env = case_env
    env.open(case.theorem)
    good = env.check_proof(case.theorem, case.proof)
    assert good.ok, good.message
    bad = env.check_proof(case.theorem, case.wrong_proof)
    assert not bad.ok
    for tactic in case.give_up:
        from aitp.proving.env import ProofStep

        assert not env.check_proof(case.theorem, ProofStep(tactic)).ok, tactic
    assert env.render_proof(case.proof)


def test_timeout_interrupts_and_leaves_session_usable(case_env):
    case, env = case_env
    if case.slow_tactic is None:
        pytest.skip(f"no known looping tactic for {case.backend}")
    root = env.open(case.theorem)
    child = env.run_tactic(root, case.first_tactic).goals[0]
    start = time.perf_counter()
    result = env.run_tactic(child, case.slow_tactic, timeout=1.0)
    assert result.outcome == "timeout", result
    assert time.perf_counter() - start < 15
    assert env.run_tactic(root, case.first_tactic).outcome == "goals"
    assert env.run_tactic(child, case.failing_tactic).outcome in ("error", "goals")


def test_killed_prover_is_replaced(case_env):
    case, env = case_env
    root = env.open(case.theorem)
    child = env.run_tactic(root, case.first_tactic).goals[0]
    crashes = env.crashes
    env.kill_prover()
    broken = env.run_tactic(root, case.first_tactic)
    assert broken.outcome == "error" and "crash" in broken.error
    assert env.crashes == crashes + 1
    assert env.run_tactic(root, case.first_tactic).outcome == "goals"
    assert env.run_tactic(child, case.failing_tactic).outcome == "error"  # replayed from its path
    assert env.check_proof(case.theorem, case.proof).ok


def test_unknown_theorem_is_a_one_line_error(case_env):
    case, env = case_env
    with pytest.raises(UnknownTheoremError) as err:
        env.open(Theorem("NO_SUCH_THEOREM_XYZ", "", case.backend))
    assert "\n" not in str(err.value)


def test_no_prover_processes_leak(case_env):
    case, env = case_env
    if case.backend != "coq":
        pytest.skip("process accounting is checked on the Coq backend")
    extra = open_env("coq")
    pid = extra._coq.proc.pid
    extra.close()
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)
