"""Theorem sets extracted from the installed packages, with fixed splits and library-order premises."""

from __future__ import annotations

import pytest

from aitp.proving.errors import UnknownTheoremError
from aitp.proving.theorems import TheoremSet, load_theorem_set, split_of
from tests.proving.cases import require


def test_split_is_a_stable_hash_of_the_name():
    assert split_of("ADD_CLAUSES") == split_of("ADD_CLAUSES")
    names = [f"T{i}" for i in range(2000)]
    shares = {s: sum(split_of(n) == s for n in names) / len(names) for s in ("train", "valid", "test")}
    assert 0.75 < shares["train"] < 0.85 and 0.07 < shares["test"] < 0.13


def test_hol_core_set_is_extracted_with_human_proofs(tmp_path):
    require("hol-light")
    library = load_theorem_set("hol-core", home=tmp_path)
    assert 2100 <= len(library) <= 2400
    add = library.get("ADD_CLAUSES")
    assert "m + 0 = m" in add.statement and "REWRITE_TAC" in add.proof
    premises = library.premises("ADD_CLAUSES")
    assert "ADD" in premises and "ADD_CLAUSES" not in premises and "ADD_SYM" not in premises
    assert sum(len(library.split(s)) for s in ("train", "valid", "test")) == len(library)
    again = TheoremSet.load(tmp_path / "proving" / "theorems" / "hol-core.jsonl")
    assert [t.name for t in again.theorems] == [t.name for t in library.theorems]


def test_coq_stdlib_set_covers_arith_lists_bool(tmp_path):
    require("coq")
    library = load_theorem_set("coq-stdlib", home=tmp_path)
    modules = {t.module.split(".")[1] for t in library.theorems}
    assert {"Arith", "Lists", "Bool"} <= modules and len(library) > 500
    app = library.get("Coq.Lists.List.app_nil_r")
    assert app.statement.startswith("forall") and app.proof
    assert library.get("List.app_nil_r") is app  # a unique suffix is enough


def test_unknown_names_are_one_line_errors(tmp_path):
    library = TheoremSet("s", "coq", [], [])
    with pytest.raises(UnknownTheoremError):
        library.get("nope")
    with pytest.raises(UnknownTheoremError, match="unknown theorem set"):
        load_theorem_set("no-such-set", home=tmp_path)
    with pytest.raises(UnknownTheoremError, match="unknown split"):
        library.split("dev")
