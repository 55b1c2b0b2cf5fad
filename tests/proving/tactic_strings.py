"""Hypothesis strategies for tactic strings a model might write: noise, token soup near the grammar,
deep nesting and injections that would create a marker file if they ever ran."""

from __future__ import annotations

from hypothesis import strategies as st

from aitp.proving.coq.tactics import COQ_TACTICS
from aitp.proving.hol_light.tactics import HOL_CONVS, HOL_TACTICS

MARKER = "{marker}"  # replaced by a path whose existence would prove that something ran

COQ_WORDS = [
    *sorted(COQ_TACTICS),
    *"try repeat progress now do first solve by as in at with using eqn".split(),
    *"n m H H0 IHn x l Nat.add_comm Nat.add_0_r add_0_r aitp_goal eq_refl O S 0 1 3 1000000".split(),
    *"admit Admitted Qed Abort Require Import Drop Load Show Print Redirect Timeout exact_no_check".split(),
    *"give_up shelve vm_compute native_compute ltac fix Ltac Set Unset Eval Compute idtac fail".split(),
    *[";", "||", "|", "+", "(", ")", "[", "]", "{", "}", ":", ":=", "->", "<-", "=", ".", "..", ",", "*", "@"],
    *["1:", "all:", "(*", "*)", '"', "\n", "\t", "\x00", "é", "ltac:(idtac)", "%nat", "'"],
    f'Redirect "{MARKER}" Print nat.',
    f'intros. Redirect "{MARKER}" Print nat.',
]

HOL_WORDS = [
    *sorted(HOL_TACTICS),
    *sorted(HOL_CONVS),
    *"THEN THENL ORELSE REPEAT TRY GSYM SPEC SPECL CONJUNCT1 CONJUNCT2".split(),
    *"ADD ADD_SYM ADD_0 ADD_SUC ADD_CLAUSES ADD_ASSOC LE_REFL MULT_CLAUSES mk_thm new_axiom CHEAT_TAC".split(),
    *["`0`", "`x`", "`n + 0 = n`", "`(`", '`SUC "x"`', "`!n. n = n`", "``", "`a \\/ b`"],
    *["(", ")", "[", "]", ";", ";;", ",", "`", '"', "\\", "(*", "*)", "\n", "\x00", "é", "fun", "->", "let", "in"],
    *["#use", "#load", "Unix.system", "ignore", "failwith", "Obj.magic"],
    f'Sys.command "touch {MARKER}"',
    f'ARITH_TAC;; Sys.command "touch {MARKER}"',
    f'REWRITE_TAC [(Sys.command "touch {MARKER}"; ADD)]',
]


def _soup(words: list[str]) -> st.SearchStrategy[str]:
    """Sequences of grammar words, joined with spaces or not: mostly near-misses of the grammar."""
    sep = st.sampled_from([" ", " ", " ", "", "\n"])
    return st.builds(lambda parts, s: s.join(parts), st.lists(st.sampled_from(words), min_size=1, max_size=12), sep)


def _nested(cores: list[str], wrappers: list[tuple[str, str]]) -> st.SearchStrategy[str]:
    """A core tactic under 1 to 1,500 layers of one wrapper: parentheses, tacticals, theorem rules."""
    return st.builds(
        lambda core, wrap, depth: wrap[0] * depth + core + wrap[1] * depth,
        st.sampled_from(cores),
        st.sampled_from(wrappers),
        st.integers(1, 1500),
    )


def _composed(atoms: list[str], forms: list[str]) -> st.SearchStrategy[str]:
    """Well-formed tactics: atoms combined by tacticals (`forms` hold {a} and {b}), up to a few levels."""
    return st.recursive(
        st.sampled_from(atoms),
        lambda inner: st.builds(lambda f, a, b: f.format(a=a, b=b), st.sampled_from(forms), inner, inner),
        max_leaves=6,
    )


COQ_ATOMS = [
    *"intros auto simpl reflexivity trivial split constructor assumption discriminate lia".split(),
    *["intros n", "induction n", "destruct n", "rewrite Nat.add_comm", "apply f_equal", "exact eq_refl"],
]
COQ_FORMS = ["{a}; {b}", "try {a}", "({a})", "{a} || {b}", "first [{a} | {b}]", "do 2 {a}", "{a}; [{b} | {a}]"]
HOL_ATOMS = [
    *"ARITH_TAC CONJ_TAC GEN_TAC STRIP_TAC INDUCT_TAC DISCH_TAC".split(),
    *["REWRITE_TAC [ADD]", "ASM_REWRITE_TAC []", "MESON_TAC [ADD_SYM]", "CONV_TAC NUM_REDUCE_CONV", "MP_TAC ADD_SYM"],
    *["EXISTS_TAC `0`", "SIMP_TAC [ADD_0; GSYM ADD_SUC]", "FIRST_X_ASSUM MP_TAC", "X_GEN_TAC `k:num`"],
]
HOL_FORMS = ["{a} THEN {b}", "TRY {a}", "REPEAT {a}", "({a})", "{a} ORELSE {b}", "{a} THENL [{b}; {a}]"]


def coq_strings() -> st.SearchStrategy[str]:
    """Tactic strings aimed at the Coq validator and backend."""
    nested = _nested(
        ["auto", "intros", "reflexivity", "simpl; auto"],
        [("(", ")"), ("try ", ""), ("repeat ", ""), ("do 2 ", ""), ("first [", "]"), ("idtac; (", ")")],
    )
    return st.one_of(st.text(max_size=60), _soup(COQ_WORDS), nested, _composed(COQ_ATOMS, COQ_FORMS))


def hol_strings() -> st.SearchStrategy[str]:
    """Tactic strings aimed at the HOL Light validator and backend."""
    nested = _nested(
        ["ARITH_TAC", "REWRITE_TAC [ADD]", "MP_TAC ADD_SYM", "CONV_TAC NUM_REDUCE_CONV"],
        [("(", ")"), ("TRY ", ""), ("REPEAT ", ""), ("TRY (", ")"), ("ALL_TAC THEN (", ")")],
    )
    thm_nested = st.builds(lambda d: "MP_TAC " + "(GSYM " * d + "ADD_SYM" + ")" * d, st.integers(1, 700))
    long_term = st.builds(lambda d: "EXISTS_TAC `" + " + ".join(["x"] * d) + "`", st.integers(1, 1300))
    composed = _composed(HOL_ATOMS, HOL_FORMS)
    return st.one_of(st.text(max_size=60), _soup(HOL_WORDS), nested, thm_nested, long_term, composed)
