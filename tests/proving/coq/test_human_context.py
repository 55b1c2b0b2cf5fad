"""A lemma's file context read from the stdlib source: binders, section variables, imports, scoping."""

from __future__ import annotations

import pytest

from aitp.proving.coq.human_context import lemma_context, section_intros, typed_binders


@pytest.mark.parametrize(
    "text,want",
    [
        ("A B : Type", [("A", "Type"), ("B", "Type")]),
        ("(A : Type) (f : A -> (B -> C))", [("A", "Type"), ("f", "A -> (B -> C)")]),
        ("A (P:A->Type) (x y:A)", [("A", ""), ("P", "A->Type"), ("x", "A"), ("y", "A")]),
        ("{A} `{Equivalence A R} (l : list A)", [("A", ""), ("?", "Equivalence A R"), ("l", "list A")]),
        ("", []),
    ],
)
def test_binder_lists_give_each_name_its_type(text, want):
    assert typed_binders(text) == want


def test_a_section_lemma_knows_its_section_variables_binders_and_file_imports():
    from tests.proving.cases import require

    require("coq")
    from aitp.proving.coq.extract import coq_theories_dir

    source = str(coq_theories_dir() / "Lists" / "List.v")
    context = lemma_context("Coq.Lists.List.count_occ_cons_neq", source, "Coq.Lists.List")
    assert ("eq_dec", "forall x y : A, {x = y}+{x <> y}") in context.section_variables
    assert context.binders == ("l", "x", "y")
    assert any(s.startswith("Require Import") for s in context.imports)
    intros = section_intros(context)
    assert intros[0].startswith("intro A; ") and all("unify" in s for s in intros)
    # what a section declared ends with it: the next section's lemma has its own variables only
    in_map = lemma_context("Coq.Lists.List.map_length", source, "Coq.Lists.List")
    assert [name for name, _ in in_map.section_variables] == ["A", "B", "f"]


def test_an_unreadable_source_gives_an_empty_context():
    assert lemma_context("X.y", "/no/such/file.v", "X") == lemma_context("X.y", "", "X")
