"""Allowlist parsers: what reaches the prover, and what never does."""

from __future__ import annotations

import pytest

from aitp.proving.coq.tactics import parse_coq_tactic
from aitp.proving.errors import TacticRejectedError
from aitp.proving.hol_light.tactics import parse_hol_tactic

COQ_OK = {
    "intros n.": "intros n",
    "induction n; simpl; auto": "induction n; simpl; auto",
    "destruct n as [|n]; [reflexivity | simpl; auto]": "destruct n as [|n]; [reflexivity | simpl; auto]",
    "rewrite <- Nat.add_comm at 1": "rewrite <- Nat.add_comm at 1",
    "assert (H : n = n) by reflexivity": "assert (H : n = n) by reflexivity",
    "first [lia | auto with arith]": "first [lia | auto with arith]",
    "do 3 (try intro)": "do 3 (try intro)",
}
COQ_REJECTED = [
    "admit",
    "intros. Qed.",
    'intros; Redirect "/tmp/x" Print nat',
    "exact_no_check I",
    "apply Nat.add_0_r",  # the theorem itself
    "1: auto",
    "all: auto",
    "intros (* comment *)",
    "ltac:(idtac)",
    "let x := 1 in idtac",
    "Require Import Coq.Init.Nat",
    "",
    "intros; ",
    "simpl.auto",
]


@pytest.mark.parametrize("text,expected", COQ_OK.items())
def test_coq_allowlist_accepts_and_normalises(text, expected):
    assert parse_coq_tactic(text, frozenset({"Nat.add_0_r", "add_0_r"})) == expected


@pytest.mark.parametrize("text", COQ_REJECTED)
def test_coq_allowlist_rejects(text):
    with pytest.raises(TacticRejectedError) as err:
        parse_coq_tactic(text, frozenset({"Nat.add_0_r", "add_0_r"}))
    assert "\n" not in str(err.value)


PREMISES = frozenset({"ADD", "ADD_0", "ADD_SUC", "ADD_SYM"})


def test_hol_tactic_is_parsed_into_an_interpreted_sexp():
    parsed = parse_hol_tactic("INDUCT_TAC THENL [ARITH_TAC; ASM_REWRITE_TAC[ADD; GSYM ADD_SUC]]", PREMISES)
    assert parsed.text == "INDUCT_TAC THENL [ARITH_TAC; ASM_REWRITE_TAC [ADD; GSYM ADD_SUC]]"
    assert parsed.sexp == (
        "(thenl (tac INDUCT_TAC) ((tac ARITH_TAC) (thms ASM_REWRITE_TAC ((name ADD) (gsym (name ADD_SUC))))))"
    )
    term = parse_hol_tactic('EXISTS_TAC `SUC "x"`', PREMISES)
    assert term.sexp == '(term EXISTS_TAC "SUC \\"x\\"")'  # a term is data, escaped


@pytest.mark.parametrize(
    "text",
    [
        'ARITH_TAC;; Sys.command "touch /tmp/x"',
        "REWRITE_TAC [ADD];; ARITH_TAC",
        "CHEAT_TAC",
        "REWRITE_TAC [mk_thm]",
        "ACCEPT_TAC (new_axiom `F`)",
        "REWRITE_TAC [LE_REFL]",  # not a premise of this theorem
        "MESON_TAC [ADD] THEN",
        "FIRST_X_ASSUM ARITH_TAC",
        "CONV_TAC (fun t -> mk_thm([], t))",
        "EXISTS_TAC `x",
        "",
    ],
)
def test_hol_allowlist_rejects(text):
    with pytest.raises(TacticRejectedError):
        parse_hol_tactic(text, PREMISES)
