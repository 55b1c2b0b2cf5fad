"""Per-backend cases for the contract suite: a real theorem, tactics that do known things, proofs."""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest

from aitp.proving.backends import backend_available
from aitp.proving.env import ProofStep, Theorem


def require(backend: str) -> None:
    """Skip the test, with the reason and install command, when a backend is missing."""
    ok, why = backend_available(backend)
    if not ok:
        pytest.skip(f"{backend} unavailable: {why}")


@dataclass
class BackendCase:
    """What the contract suite needs to exercise one backend on a real theorem."""

    backend: str
    theorem: Theorem
    first_tactic: str  # opens the root into >= 1 goal
    failing_tactic: str  # a legal tactic that fails on the root
    proof: ProofStep  # a complete proof of the theorem
    wrong_proof: ProofStep  # a proof that must not check
    slow_tactic: str | None  # loops until interrupted
    injections: list[str] = field(default_factory=list)  # each would write {marker} if it ever ran
    give_up: list[str] = field(default_factory=list)  # admit-like tactics that must never count


COQ_CASE = BackendCase(
    backend="coq",
    theorem=Theorem("Coq.Arith.PeanoNat.Nat.add_0_r", "forall n : nat, n + 0 = n", "coq", module="Coq.Arith.PeanoNat"),
    first_tactic="intros n",
    failing_tactic="discriminate",
    proof=ProofStep(
        "intros n",
        [ProofStep("induction n", [ProofStep("reflexivity"), ProofStep("simpl; rewrite IHn; reflexivity")])],
    ),
    wrong_proof=ProofStep("intros n", [ProofStep("simpl")]),
    slow_tactic="do 1000000000 simpl",
    injections=[
        'intros. Redirect "{marker}" Print nat.',
        'intros; Redirect "{marker}" Print nat',
        "intros.\nRedirect {marker} Print nat.",
        "idtac. Admitted.",
    ],
    give_up=["admit", "give_up", "intros; admit", "Admitted", "exact_no_check I", "apply Nat.add_0_r"],
)

HOL_CASE = BackendCase(
    backend="hol-light",
    theorem=Theorem("ADD_CLAUSES", "", "hol-light"),
    first_tactic="REPEAT CONJ_TAC",
    failing_tactic="EXISTS_TAC `0`",
    proof=ProofStep("REPEAT CONJ_TAC", [ProofStep("ARITH_TAC")] * 4),
    wrong_proof=ProofStep("REPEAT CONJ_TAC", [ProofStep("ARITH_TAC")] * 3),
    slow_tactic="REPEAT (ONCE_REWRITE_TAC [ADD_SYM])",
    injections=[
        'ARITH_TAC;; Sys.command "touch {marker}"',
        'REWRITE_TAC [ADD];; ignore (Sys.command "touch {marker}");; ARITH_TAC',
        'EXISTS_TAC `x` ;; Sys.command "touch {marker}"',
        'REWRITE_TAC [(Sys.command "touch {marker}"; ADD)]',
        "MESON_TAC [mk_thm([], `F`)]",
        "ACCEPT_TAC (new_axiom `F`)",
    ],
    give_up=["CHEAT_TAC", "ACCEPT_TAC (mk_thm([], `F`))", "ACCEPT_TAC ADD_CLAUSES", "REWRITE_TAC [ADD_CLAUSES]"],
)

LEAN_CASE = BackendCase(
    backend="leandojo",
    theorem=Theorem(
        "hello_world",
        "theorem hello_world (a b c : Nat) : a + b + c = a + c + b",
        "leandojo",
        source="https://github.com/yangky11/lean4-example@7b6ecb9ad4829e4e73600a3329baeb3b5df8d23f:Lean4Example.lean",
    ),
    first_tactic="rw [Nat.add_assoc]",
    failing_tactic="exact rfl",
    proof=ProofStep("rw [Nat.add_assoc, Nat.add_comm b, ← Nat.add_assoc]"),
    wrong_proof=ProofStep("rw [Nat.add_assoc]"),
    slow_tactic=None,
    injections=['sorry\n#eval IO.FS.writeFile "{marker}" "x"'],
    give_up=["sorry", "admit"],
)

CASES = {"coq": COQ_CASE, "hol-light": HOL_CASE, "leandojo": LEAN_CASE}
