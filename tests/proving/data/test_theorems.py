"""Theorem sets extracted from the installed packages, with fixed splits and library-order premises."""

from __future__ import annotations

import pytest

from aitp.proving.data.theorems import TheoremSet, load_theorem_set, split_of
from aitp.proving.env import Theorem
from aitp.proving.errors import UnknownTheoremError
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


def test_coq_stdlib_set_covers_much_of_the_standard_library(coq_theorem_home):
    library = load_theorem_set("coq-stdlib", home=coq_theorem_home)
    modules = {t.module.split(".")[1] for t in library.theorems}
    assert {"Arith", "Lists", "Bool", "ZArith", "NArith", "PArith", "Sorting", "Logic", "QArith"} <= modules
    sizes = {s: len(library.split(s)) for s in ("train", "valid", "test")}
    assert sizes["valid"] >= 200 and sizes["train"] >= 3000, sizes
    app = library.get("Coq.Lists.List.app_nil_r")
    assert app.statement.startswith("forall") and app.proof
    assert library.get("List.app_nil_r") is app  # a unique suffix is enough
    # Splits are a hash of the name alone: fixed whatever else the set holds, and what the set says.
    assert all(split_of(t.name) == s for s in ("train", "valid", "test") for t in library.split(s))
    assert split_of("Coq.Lists.List.app_length") == "valid" and split_of("Coq.Lists.List.app_nil_r") == "train"
    # Premises are names before the theorem, in dependency order: arithmetic comes before lists.
    assert "Coq.Arith.Between.bet_eq" in library.premises("Coq.Lists.List.app_nil_r")
    assert "Coq.Lists.List.app_nil_r" not in library.premises("Coq.Arith.Between.bet_eq")


def test_a_cached_set_of_an_older_extraction_is_extracted_again(tmp_path):
    require("hol-light")  # the HOL Light set is extracted from its sources in a second, no prover needed
    from aitp.proving.data.theorems import theorem_set_cache

    stale = TheoremSet("hol-core", "hol-light", [Theorem("OLD", "T", "hol-light")], ["OLD"], version=0)
    stale.save(theorem_set_cache("hol-core", tmp_path))
    assert len(load_theorem_set("hol-core", home=tmp_path)) > 2000
    assert TheoremSet.load(theorem_set_cache("hol-core", tmp_path)).version >= 1


def test_unknown_names_are_one_line_errors(tmp_path):
    library = TheoremSet("s", "coq", [], [])
    with pytest.raises(UnknownTheoremError):
        library.get("nope")
    with pytest.raises(UnknownTheoremError, match="unknown theorem set"):
        load_theorem_set("no-such-set", home=tmp_path)
    with pytest.raises(UnknownTheoremError, match="unknown split"):
        library.split("dev")
