"""A Coq lemma may not prove itself: hint databases lose it (and later library lemmas) while it is proved."""

from __future__ import annotations

import pytest

from aitp.proving.coq_hints import (
    hidden_hints,
    located_constant,
    name_suffixes,
    parse_hint_dump,
    remove_hints_sentence,
)
from aitp.proving.env import ProofStep, Theorem
from tests.proving.cases import require

DUMP = (
    "In the database arith: Non-discriminated database For eq -> simple apply Nat.max_l(level 1, id 0) "
    "simple apply Nat.mul_comm(level 0, id 0) For le -> simple eapply @Nat.le_trans(level 3, id 0) "
    "In the database core: For eq -> exact eq_refl(level 0, id 0) simple apply later_lemma ; trivial(level 1, id 0)"
)
FULL = {
    "Nat.max_l": "Coq.Arith.PeanoNat.Nat.max_l",
    "Nat.mul_comm": "Coq.Arith.PeanoNat.Nat.mul_comm",
    "later_lemma": "Coq.Lists.List.later_lemma",
}


def test_hint_dump_is_parsed_per_database():
    dbs = parse_hint_dump(DUMP)
    assert dbs["arith"] == {"Nat.max_l", "Nat.mul_comm", "Nat.le_trans"}
    assert dbs["core"] == {"eq_refl", "later_lemma"}
    assert located_constant("Constant Coq.Arith.PeanoNat.Nat.max_l (shorter ...)") == "Coq.Arith.PeanoNat.Nat.max_l"
    assert located_constant("Constructor Coq.Init.Peano.le_n") is None
    suffixes = name_suffixes(frozenset(["Coq.Arith.PeanoNat.Nat.max_l"]))
    assert {"max_l", "Nat.max_l", "Coq.Arith.PeanoNat.Nat.max_l"} <= suffixes


def test_the_theorem_and_later_library_lemmas_are_hidden_but_premises_stay():
    theorem = "Coq.Arith.PeanoNat.Nat.max_l"
    library = frozenset([*FULL.values()])
    premises = frozenset(["Coq.Arith.PeanoNat.Nat.mul_comm"])
    asked: list[str] = []

    def resolve(name: str) -> str | None:
        asked.append(name)
        return FULL.get(name)

    hidden = hidden_hints(theorem, parse_hint_dump(DUMP), resolve, library, premises)
    assert hidden == {theorem: {"arith"}, "Coq.Lists.List.later_lemma": {"core"}}
    assert "eq_refl" not in asked and "Nat.le_trans" not in asked  # not library names: never located
    sentence = remove_hints_sentence(hidden)
    assert sentence == f"#[local] Remove Hints {theorem} Coq.Lists.List.later_lemma : arith core."
    assert remove_hints_sentence({}) is None
    # Without a premise map only the theorem itself is hidden.
    assert hidden_hints(theorem, parse_hint_dump(DUMP), resolve, frozenset(), frozenset()) == {theorem: {"arith"}}


MAX_L = Theorem(
    "Coq.Arith.PeanoNat.Nat.max_l", "forall n m : nat, m <= n -> Nat.max n m = n", "coq", module="Coq.Arith.PeanoNat"
)
ABSURD = Theorem("Coq.Bool.Bool.absurd_eq_true", "forall b : bool, False -> b = true", "coq", module="Coq.Bool.Bool")


def _raw_coq_closes(statement: str, tactic: str) -> bool:
    """Plain Coq with the backend's header, no hiding: does `tactic` close `statement`?"""
    from aitp.proving.coq import HEADER
    from aitp.proving.coq_protocol import CoqError, CoqIdeTop

    coq = CoqIdeTop()
    try:
        state = coq.init_state
        for sentence in (*HEADER, f"Theorem raw : {statement}.", "Proof.", f"{tactic}."):
            state = coq.add(sentence, state)
        try:
            return not coq.goals().foreground
        except CoqError:
            return False
    finally:
        coq.kill()


@pytest.fixture(scope="module")
def coq_env(tmp_path_factory):
    require("coq")
    from aitp.proving.coq import CoqEnv
    from aitp.proving.theorems import load_theorem_set

    library = load_theorem_set("coq-stdlib", home=tmp_path_factory.mktemp("home"))
    with CoqEnv(tactic_timeout=5.0) as env:
        env.set_premises(library.premise_map())
        yield env, library


@pytest.mark.parametrize(
    "theorem,tactic",
    [(MAX_L, "auto with arith"), (MAX_L, "intuition"), (ABSURD, "auto"), (ABSURD, "intros; auto")],
)
def test_auto_no_longer_proves_a_lemma_by_applying_it(coq_env, theorem, tactic):
    env, _ = coq_env
    assert _raw_coq_closes(theorem.statement, tactic), "the hint database no longer holds the lemma: pick another"
    root = env.open(theorem)
    assert env.run_tactic(root, tactic).outcome != "proved"
    check = env.check_proof(theorem, ProofStep(tactic))
    assert not check.ok
    rejected = env.run_tactic(root, "apply Nat.max_l" if theorem is MAX_L else "apply absurd_eq_true")
    assert rejected.outcome == "error" and "theorem being proved" in rejected.error


def test_lemmas_after_the_theorem_are_hidden_too(coq_env):
    env, library = coq_env
    # app_assoc_reverse is proved from app_assoc, later in List.v: hiding app_assoc alone is not enough.
    statement = "forall (A : Type) (l m n : list A), l ++ m ++ n = (l ++ m) ++ n"
    assert _raw_coq_closes(statement, "intuition")
    root = env.open(library.get("Coq.Lists.List.app_assoc"))
    assert env.run_tactic(root, "intuition").outcome != "proved"


def test_hints_still_help_other_lemmas(coq_env):
    env, library = coq_env
    theorem = library.get("Coq.Lists.List.in_eq")
    root = env.open(theorem)
    assert env.run_tactic(root, "intros; simpl; auto").outcome == "proved"
    assert env.check_proof(theorem, ProofStep("intros; simpl; auto")).ok
