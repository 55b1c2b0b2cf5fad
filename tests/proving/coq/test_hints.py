"""A Coq lemma may not prove itself: hint databases lose it (and later library lemmas) while it is proved,
and the final check refuses a proof whose dependencies include it."""

from __future__ import annotations

import pytest

from aitp.proving.coq.hints import (
    dependency_names,
    hidden_hints,
    located_constant,
    name_suffixes,
    parse_about,
    parse_hint_dump,
    remove_hints_sentence,
)
from aitp.proving.env import ProofStep, Theorem
from tests.proving.cases import COQ_CASE, require

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


LISTING = (  # `Print Opaque Dependencies` with Coq's line breaks: entries start a line, types may wrap to column 0
    "Fetching opaque proofs from disk for Coq.Arith.PeanoNat\n"
    "Opaque constants:\n"
    "Morphisms.trans_sym_co_inv_impl_morphism_obligation_1 : \n"
    "forall (A : Type) (R : Relation_Definitions.relation A),\n"
    "RelationClasses.PER R ->\n"
    "Nat.add_comm : forall n m : nat, n + m = m + n\n"
    "Nat.succ_inj : forall n1 n2 : nat,\n"
    "               S n1 = S n2 -> n1 = n2"
)


def test_dependency_listing_and_about_are_parsed():
    assert dependency_names(LISTING) == {
        "Morphisms.trans_sym_co_inv_impl_morphism_obligation_1",
        "Nat.add_comm",
        "Nat.succ_inj",
    }
    assert dependency_names("Closed under the global context") == frozenset()
    about = (
        "Nat.add_comm : forall n m : nat, n + m = m + n Nat.add_comm is not universe polymorphic Arguments "
        "Nat.add_comm (n m)%nat_scope Nat.add_comm is opaque Expands to: Constant Coq.Arith.PeanoNat.Nat.add_comm"
    )
    assert parse_about(about) == ("Nat.add_comm", False)
    assert parse_about("le_dec : forall n m : nat, {n <= m} + {~ n <= m} le_dec is transparent") == ("le_dec", True)


MAX_L = Theorem(
    "Coq.Arith.PeanoNat.Nat.max_l", "forall n m : nat, m <= n -> Nat.max n m = n", "coq", module="Coq.Arith.PeanoNat"
)
ABSURD = Theorem("Coq.Bool.Bool.absurd_eq_true", "forall b : bool, False -> b = true", "coq", module="Coq.Bool.Bool")


def _raw_coq_closes(statement: str, tactic: str) -> bool:
    """Plain Coq with the backend's header, no hiding: does `tactic` close `statement`?"""
    from aitp.proving.coq.env import HEADER
    from aitp.proving.coq.protocol import CoqError, CoqIdeTop

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
def coq_env(coq_theorem_home):
    require("coq")
    from aitp.proving.coq.env import CoqEnv
    from aitp.proving.data.theorems import load_theorem_set

    library = load_theorem_set("coq-stdlib", home=coq_theorem_home)
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


ADD_COMM = Theorem(  # like Nat.add_0_r, not in coq-stdlib: Nat gets both from the NZAdd functor in Numbers/
    "Coq.Arith.PeanoNat.Nat.add_comm", "forall n m : nat, n + m = m + n", "coq", module="Coq.Arith.PeanoNat"
)
OUTSIDE_THE_SET = {t.name: t for t in (ADD_COMM, COQ_CASE.theorem)}


@pytest.mark.parametrize(
    "name,tactic,printed",
    [
        (ADD_COMM.name, "intros; lia", "Nat.add_comm"),  # lia's nat support is built from Nat.add_comm
        ("Coq.Arith.PeanoNat.Nat.add_0_r", "intros; lia", "Nat.add_0_r"),
    ],
)
def test_a_proof_through_the_theorem_itself_is_refused(coq_env, name, tactic, printed):
    env, library = coq_env
    theorem = OUTSIDE_THE_SET.get(name) or library.get(name)
    assert env.run_tactic(env.open(theorem), tactic).outcome == "proved"  # search finds it: only the check stops it
    check = env.check_proof(theorem, ProofStep(tactic))
    assert not check.ok
    assert check.message == f"proof depends on the theorem being proved: {printed}"


@pytest.mark.parametrize(
    "name,tactic,cited",
    [
        # app_assoc_reverse (later in List.v) is proved from app_assoc
        ("Coq.Lists.List.app_assoc", "intros; symmetry; apply app_assoc_reverse", "app_assoc_reverse"),
        # ge_dec (later in Compare_dec.v) is built from le_dec
        ("Coq.Arith.Compare_dec.le_dec", "intros n m; exact (ge_dec m n)", "ge_dec"),
    ],
)
def test_a_proof_citing_a_later_lemma_is_refused_with_its_name(coq_env, name, tactic, cited):
    """The premise rule: never a lemma stated after the theorem, refused before it runs and at the re-check."""
    env, library = coq_env
    theorem = library.get(name)
    assert env.premises(env.open(theorem))  # the session knows the library's order
    ran = env.run_tactic(env.open(theorem), tactic)
    assert ran.outcome == "error" and ran.error == f"rejected: cites what is not stated before the theorem: {cited}"
    check = env.check_proof(theorem, ProofStep(tactic))
    assert not check.ok and check.message.endswith(f"not stated before the theorem: {cited}")


@pytest.mark.parametrize(
    "name,proof",
    [
        (
            "Coq.Arith.PeanoNat.Nat.add_0_r",
            ProofStep("intros n", [ProofStep("induction n", [ProofStep("reflexivity"), ProofStep("simpl; auto")])]),
        ),
        ("Coq.Bool.Bool.negb_involutive", ProofStep("destruct b; reflexivity")),
        ("Coq.Lists.List.app_nil_r", ProofStep("induction l; simpl; [reflexivity | rewrite IHl; reflexivity]")),
        # lia itself is fine when its library does not lean on the theorem
        ("Coq.Arith.Compare_dec.le_dec", ProofStep("intros n m; destruct (le_gt_dec n m); [left; auto | right; lia]")),
    ],
)
def test_an_independent_proof_still_checks(coq_env, name, proof):
    env, library = coq_env
    check = env.check_proof(OUTSIDE_THE_SET.get(name) or library.get(name), proof)
    assert check.ok, check.message
    assert check.message.endswith("does not depend on the theorem")


def test_the_dependency_check_can_be_turned_off():
    require("coq")
    from aitp.proving.coq.env import CoqEnv

    with CoqEnv(check_dependencies=False) as env:
        check = env.check_proof(ADD_COMM, ProofStep("intros; lia"))
        assert check.ok and check.message == "Qed accepted; statement matches"
