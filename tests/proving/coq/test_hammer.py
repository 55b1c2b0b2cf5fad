"""CoqHammer in the Coq backend: its tactics are allowlisted only where loaded, circular proofs are refused, and a
theorem hidden from its premise search is proved from earlier lemmas."""

from __future__ import annotations

import pytest

from aitp.proving.coq import hammer as coq_hammer
from aitp.proving.coq.hammer import reconstruction, session_sentences, use_lemmas
from aitp.proving.coq.hints import blacklist_sentence, forbidden_citations
from aitp.proving.coq.tactics import COQ_AUTOMATION_TACTICS, cited_names, parse_coq_tactic
from aitp.proving.env import Goal, ProofStep, Theorem
from aitp.proving.errors import TacticRejectedError
from aitp.proving.models.candidates import CandidateGenerator
from tests.proving.cases import require

ADD_COMM = Theorem("Nat.add_comm", "", "coq", module="Coq.Arith.PeanoNat")
FORBIDDEN = frozenset({"Nat.add_comm", "add_comm"})


def require_hammer() -> None:
    """Skip, naming the install command, where Coq or CoqHammer is missing."""
    require("coq")
    ok, why = coq_hammer.coqhammer_available()
    if not ok:
        pytest.skip(f"CoqHammer unavailable: {why}")


def test_use_lemmas_and_the_premise_rule():
    tactic = "hauto lq: on drew: off use: Nat.add_comm, Coq.Init.Logic.eq_sym unfold: Nat.add"
    assert use_lemmas(tactic) == ["Nat.add_comm", "Coq.Init.Logic.eq_sym"]
    assert use_lemmas("sauto; qauto use: a") == ["a"]
    assert use_lemmas("sfirstorder") == []
    allowed = frozenset({"Coq.Init.Logic.eq_sym", "Coq.Arith.PeanoNat.Nat.add_0_r"})
    forbidden = frozenset({"Coq.Arith.PeanoNat.Nat.add_comm", "Coq.Arith.PeanoNat.Nat.inv"})
    assert forbidden_citations(cited_names(tactic), forbidden, allowed) == ["Nat.add_comm"]
    assert forbidden_citations(cited_names("hauto inv: list use: Nat.add_0_r, eq_sym"), forbidden, allowed) == []
    assert forbidden_citations(["Nat.add_comm"], frozenset(), allowed) == []
    assert blacklist_sentence(sorted(forbidden)) == (
        'Add Search Blacklist "Coq.Arith.PeanoNat.Nat.add_comm" "Coq.Arith.PeanoNat.Nat.inv".'
    )
    assert blacklist_sentence([]) is None


def test_reconstruction_and_time_limits():
    assert reconstruction(["noise", "Replace the hammer tactic with: hauto  use: a, b "]) == "hauto use: a, b"
    assert reconstruction(["Replace the `best` tactic with:\n\tsfirstorder use: x"]) == "sfirstorder use: x"
    assert reconstruction(["Hammer failed"]) is None
    # CoqHammer 1.3.2 prints `srun eauto use: L`, which Coq cannot parse; the tactic it ran is `srun (eauto) use: L`
    assert reconstruction(["Replace the hammer tactic with:\n\tsrun eauto use: a, b."]) == "srun (eauto) use: a, b."
    assert reconstruction(["Replace the hammer tactic with: srun eauto"]) == "srun (eauto)"
    assert parse_coq_tactic("srun (eauto) use: a, b", automation=True) == "srun (eauto) use: a, b"
    with pytest.raises(TacticRejectedError, match="not in the Coq allowlist"):
        parse_coq_tactic("srun (unlisted) use: a", automation=True)
    assert session_sentences(2.0)[1:] == ("Set Hammer ATPLimit 1.", "Set Hammer ReconstrLimit 1.")
    assert session_sentences(20.0)[1:] == ("Set Hammer ATPLimit 10.", "Set Hammer ReconstrLimit 5.")


def test_automation_tactics_need_a_session_that_loads_them(monkeypatch):
    for tactic in ("sauto", "hammer", "intros; hauto lq: on use: Nat.mul_comm, Nat.add_0_r"):
        assert parse_coq_tactic(tactic, FORBIDDEN, automation=True) == tactic
        with pytest.raises(TacticRejectedError, match="CoqHammer"):
            parse_coq_tactic(tactic, FORBIDDEN)
    monkeypatch.setattr(
        coq_hammer, "coqhammer_available", lambda: (False, "not here; " + coq_hammer.HAMMER_INSTALL_HINT)
    )
    with pytest.raises(TacticRejectedError, match="scripts/install_provers.sh") as err:
        parse_coq_tactic("sauto", FORBIDDEN)
    assert "\n" not in str(err.value)


@pytest.mark.parametrize(
    "tactic", ["sauto use: Nat.add_comm", "hauto use: Nat.mul_comm, add_comm", "qauto inv: add_comm"]
)
def test_automation_never_names_the_theorem(tactic):
    with pytest.raises(TacticRejectedError, match="theorem being proved"):
        parse_coq_tactic(tactic, FORBIDDEN, automation=True)


def test_automation_candidates_are_opt_in():
    goal = Goal("⊢ forall n : nat, n + 0 = n", "t")
    plain = [c.tactic for c in CandidateGenerator("coq").candidates(goal)]
    with_hammer = [c.tactic for c in CandidateGenerator("coq", automation=True).candidates(goal)]
    assert not {t.split()[0] for t in plain} & COQ_AUTOMATION_TACTICS
    assert with_hammer[: len(plain)] == plain and {"sauto", "hammer"} <= set(with_hammer)


@pytest.fixture(scope="module")
def hammer_env():
    require_hammer()
    from aitp.proving.coq.env import CoqEnv

    with CoqEnv(tactic_timeout=4.0, automation=True) as env:
        yield env


def test_sauto_proves_and_the_check_accepts(hammer_env):
    theorem = Theorem("andb_comm", "", "coq", module="Coq.Bool.Bool")
    assert hammer_env.run_tactic(hammer_env.open(theorem), "sauto").outcome == "proved"
    assert hammer_env.check_proof(theorem, ProofStep("sauto")).ok


def test_circular_sauto_proof_is_refused(hammer_env):
    """sauto "proves" n + m = m + n through lia, whose library lemmas are proved from Nat.add_comm itself."""
    goal = hammer_env.open(ADD_COMM)
    assert hammer_env.run_tactic(goal, "sauto use: Nat.add_comm").error.startswith("rejected:")
    assert hammer_env.run_tactic(goal, "sauto").outcome == "proved"
    check = hammer_env.check_proof(ADD_COMM, ProofStep("sauto"))
    assert not check.ok and "depends on the theorem being proved" in check.message


def test_a_session_without_automation_refuses_sauto():
    require_hammer()
    from aitp.proving.coq.env import CoqEnv

    with CoqEnv(tactic_timeout=2.0) as env:
        result = env.run_tactic(Goal("⊢ True", ADD_COMM.name), "sauto")  # refused before it reaches Coq
    assert result.outcome == "error" and "CoqEnv(automation=True)" in result.error


def test_circular_hammer_proof_is_refused(hammer_env):
    """hammer (E) finds a proof of Nat.add_comm through library lemmas proved from it: the check refuses
    both `hammer` and the reconstruction it printed."""
    result = hammer_env.run_tactic(hammer_env.open(ADD_COMM), "hammer")
    assert result.outcome == "proved"
    replay = reconstruction(hammer_env.printed)
    assert replay is not None
    for proof in ("hammer", replay):
        check = hammer_env.check_proof(ADD_COMM, ProofStep(proof))
        assert not check.ok and "depends on the theorem being proved" in check.message


def test_a_hammer_proof_records_its_reconstruction_and_its_premises_are_checked(hammer_env):
    """What `hammer` proves is recorded as the tactic it reconstructed (it replays without the provers); a
    reconstruction citing a lemma stated after the theorem is refused with its name."""
    theorem = Theorem("andb_comm", "", "coq", module="Coq.Bool.Bool")
    hammer_env.set_premises({theorem.name: []})
    result = hammer_env.run_tactic(hammer_env.open(theorem), "hammer")
    replay = reconstruction(hammer_env.printed)
    assert replay is not None and result.outcome == "proved"
    assert result.replay == parse_coq_tactic(replay, automation=True) and result.replay != "hammer"
    assert hammer_env.check_proof(theorem, ProofStep(result.replay)).ok


def test_a_proof_citing_a_lemma_stated_after_the_theorem_is_refused_with_its_name(hammer_env):
    """The one premise rule: what precedes T may be cited, never T or a later lemma; at search and re-check."""
    theorem = Theorem("Coq.Arith.PeanoNat.Nat.add_0_r", "", "coq", module="Coq.Arith.PeanoNat")
    later = "Coq.Arith.PeanoNat.Nat.add_comm"
    hammer_env.set_premises(
        {theorem.name: ["Coq.Init.Peano.plus_n_O"], later: ["Coq.Init.Peano.plus_n_O", theorem.name]}
    )
    goal = hammer_env.open(theorem)
    ran = hammer_env.run_tactic(goal, "intros n; rewrite Nat.add_comm; reflexivity")
    assert ran.outcome == "error" and ran.error.endswith("not stated before the theorem: Nat.add_comm")
    check = hammer_env.check_proof(theorem, ProofStep("intros n; rewrite Nat.add_comm; reflexivity"))
    assert not check.ok and "Nat.add_comm" in check.message
    assert hammer_env.check_proof(theorem, ProofStep("intros n; symmetry; apply plus_n_O")).ok
    opening = hammer_env._opening(theorem)
    assert any(s.startswith("Add Search Blacklist") and f'"{later}"' in s for s in opening)
    assert not any("plus_n_O" in s for s in opening if s.startswith("Add Search Blacklist"))


def test_closing_tactics_are_validated_and_set_hammer_time(tmp_path):
    from aitp.loop.config import LoopConfig

    closing = [{"tactic": "sauto", "timeout": 2}, {"tactic": "hammer", "timeout": 8, "max_depth": 0}]
    on = LoopConfig.model_validate(
        {"environment": {"type": "proving", "automation_tactics": True, "closing_tactics": closing}}
    )
    job = on.build_environment(tmp_path).job(None, 1, train=False)
    assert job.hammer_timeout == 8 and [c.tactic for c in job.closing_tactics] == ["sauto", "hammer"]
    assert job.closing_tactics[1].max_depth == 0
    with pytest.raises(ValueError, match="automation_tactics: true"):  # sauto without CoqHammer's session
        LoopConfig.model_validate({"environment": {"type": "proving", "closing_tactics": closing[:1]}})
    with pytest.raises(ValueError, match="timeout must be > 0"):
        LoopConfig.model_validate(
            {"environment": {"type": "proving", "closing_tactics": [{"tactic": "auto", "timeout": 0}]}}
        )


def test_automation_tactics_config_is_opt_in_coq_only_and_reaches_the_searches(tmp_path):
    from aitp.loop.config import LoopConfig

    plain = LoopConfig.model_validate({"environment": {"type": "proving"}})
    assert plain.environment.automation_tactics is False
    on = LoopConfig.model_validate({"environment": {"type": "proving", "automation_tactics": True}})
    assert on.model_dump()["environment"]["automation_tactics"] is True
    assert on.build_environment(tmp_path).job(None, 1, train=True).automation
    assert not plain.build_environment(tmp_path).job(None, 1, train=False).automation
    with pytest.raises(ValueError, match="automation_tactics"):
        LoopConfig.model_validate(
            {"environment": {"type": "proving", "backend": "hol-light", "automation_tactics": True}}
        )


UIP_REFL_NAT = "Coq.Logic.Eqdep_dec.UIP_refl_nat"  # a train theorem: forall (n : nat) (x : n = n), x = eq_refl n


def test_hammer_shown_the_theorem_proves_it_from_itself(tmp_path):
    """Why the blacklist is needed: in a plain Coq file with `UIP_refl_nat` loaded (as any session proving it has),
    CoqHammer's premise search picks the lemma itself, and the ATPs' proof cites it."""
    import subprocess

    from aitp.proving.coq.prefix import prover_binary, prover_env

    require_hammer()
    source = tmp_path / "visible.v"
    source.write_text(
        "From Hammer Require Import Hammer.\nRequire Import Coq.Logic.Eqdep_dec.\nSet Hammer ATPLimit 10.\n"
        "Lemma visible : forall (n : nat) (x : n = n), x = eq_refl n.\nProof. hammer. Qed.\n"
    )
    run = subprocess.run(
        [prover_binary("coqc"), str(source)], cwd=tmp_path, env=prover_env(), capture_output=True, text=True
    )
    replay = reconstruction([run.stdout + run.stderr])
    assert replay is not None, run.stdout[-2000:]
    assert "UIP_refl_nat" in use_lemmas(parse_coq_tactic(replay, automation=True))


@pytest.fixture(scope="module")
def stdlib_hammer_env(coq_theorem_home):
    """A CoqHammer session under the premise rule of the real library order, as the loop and the peers open it."""
    require_hammer()
    from aitp.proving.coq.env import CoqEnv
    from aitp.proving.data.theorems import load_theorem_set

    library = load_theorem_set("coq-stdlib", home=coq_theorem_home)
    with CoqEnv(tactic_timeout=20.0, automation=True) as env:
        env.set_premises(library.premise_map())
        yield env, library


def test_with_the_theorem_blacklisted_hammer_proves_it_without_it(stdlib_hammer_env):
    """The loop's `hammer` action on the same train theorem: blacklisted, it is proved from earlier lemmas only
    (CoqHammer 1.3.2 reconstructs it as `srun eauto`, replayed as `srun (eauto)`), and the proof re-checks."""
    from aitp.proving.data.theorem_set import split_of

    env, library = stdlib_hammer_env
    theorem = library.get(UIP_REFL_NAT)
    assert split_of(theorem.name) == "train"
    # 20 s is the proving budget; a test on shared CI cores gives CoqHammer more, as its outcome is what is tested
    result = env.run_tactic(env.open(theorem), "hammer", timeout=60.0)
    assert result.outcome == "proved", result.error
    assert result.replay and "UIP_refl_nat" not in result.replay
    check = env.check_proof(theorem, ProofStep(result.replay))
    assert check.ok and "does not depend on the theorem" in check.message


def test_the_peers_portfolio_proves_it_within_the_budget_it_is_given(stdlib_hammer_env):
    """`prove_peers.py`'s portfolio (Coq's automation, `sauto`, then `hammer`) on the same theorem: proved by its
    `hammer` within 20 s; given 3 s it stops within them (each tactic's `Timeout` is whole seconds)."""
    from tests.benchmarks.test_prove_peers import _script

    script = _script()
    env, library = stdlib_hammer_env
    theorem = library.get(UIP_REFL_NAT)
    proved = script.try_peer(env, theorem, "portfolio", 20.0)
    assert proved.proved and proved.seconds <= 20.0 and "does not depend on the theorem" in proved.check
    assert "UIP_refl_nat" not in proved.proof
    short = script.try_peer(env, theorem, "portfolio", 3.0)
    assert short.seconds <= 3.0 + 1.5
