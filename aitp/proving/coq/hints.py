"""Keeping a lemma out of its own proof: one premise rule for every prover, and how Coq is made to keep it.

The rule: a proof of T may use what precedes T in the library's order, never T, its auxiliary constants, or a
library lemma stated after T. Every prover works under it alike (the loop's searches and their closing tactics,
CoqHammer's `hammer`, the peers of `benchmarks/prove_peers.py`, a user's `aitp prove`), because every one of them
runs inside `CoqEnv`, which applies it in three places:
- hints: T and the later library lemmas are removed from the hint databases (below);
- premise search: the same names go on Coq's `Search Blacklist` (`blacklist_sentence`), which CoqHammer's premise
  selection honours; hiding from hints alone leaves T in the environment `hammer` searches, so it "proves" T from
  T and its proofs are then refused;
- citations: a tactic that names a forbidden constant is refused with that name (`forbidden_citations`), before
  it runs and again when a found proof is re-checked.

The theorem sets are lemmas of Coq's standard library, which is loaded, so its hint databases
already hold many of them: `auto with arith` proves `Nat.max_l` by applying `Nat.max_l`. While a
theorem T is proved, T and every hinted library lemma that is not one of T's premises (the
library facts before it; a lemma depending on T comes after it in its file) are removed from
every database that holds them, with one `#[local] Remove Hints` sentence before the goal is
stated. Hints from outside the theorem set stay.

`Print Hint *` prints each database's entries by their shortest names; these are resolved to
full names with `Locate`, only for the names that could be a library lemma.

Hiding hints is not enough: a tactic can reach T through a library lemma proved from it (`lia`
proves `n + m = m + n` with `Nat.add_comm`). So the final check also lists the found proof's
dependencies (`Print Opaque Dependencies`, which follows every constant's body, opaque proofs
included, so a lemma proved from T brings T into the list) and refuses it when T is among them.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from functools import lru_cache

PREMISE_RULE = "before-T:hints+blacklist+citations"
"""The rule's version in every Coq evaluation's protocol hash: a number measured under another rule (before
2026-12-07 `hammer` saw T and a tactic could cite a later lemma) is another measurement, never compared with one
under this rule (an experiment pinned to the old name is refused: start a new one)."""

_DATABASE = re.compile(r"In the database (\S+):(.*?)(?=In the database |\Z)", re.S)
_ENTRY = re.compile(r"(?:apply|exact) @?([A-Za-z_][\w.']*)")
_CONSTANT = re.compile(r"\s*Constant (\S+)")
_DEPENDENCY = re.compile(r"^(\S+) :(?: |$)", re.M)  # an entry starts a line: `name : type`
_ABOUT = re.compile(r"\s*(\S+) :")


def parse_hint_dump(text: str) -> dict[str, frozenset[str]]:
    """Database name -> the names its `apply`/`exact` entries print, from `Print Hint *`."""
    return {m.group(1): frozenset(_ENTRY.findall(m.group(2))) for m in _DATABASE.finditer(text)}


def located_constant(locate_output: str) -> str | None:
    """The full name a `Locate` answer resolves to, when it is a constant (not a constructor)."""
    match = _CONSTANT.match(locate_output)
    return match.group(1) if match else None


@lru_cache(maxsize=8)  # the library is one frozenset per session: its suffixes are computed once
def name_suffixes(names: frozenset[str]) -> frozenset[str]:
    """Every dotted suffix of each name: the forms Coq may print it by (`Nat.max_l`, `max_l`)."""
    out: set[str] = set()
    for name in names:
        parts = name.split(".")
        out.update(".".join(parts[i:]) for i in range(len(parts)))
    return frozenset(out)


def hidden_hints(
    theorem: str,
    databases: dict[str, frozenset[str]],
    resolve: Callable[[str], str | None],
    library: frozenset[str],
    premises: frozenset[str],
) -> dict[str, set[str]]:
    """Full name -> databases, for T and the hinted library lemmas that are not T's premises."""
    candidates = name_suffixes(library) | name_suffixes(frozenset([theorem]))
    hidden: dict[str, set[str]] = {}
    for database, printed in databases.items():
        for name in printed:
            if name not in candidates:
                continue
            full = resolve(name)
            if full == theorem or (full in library and full not in premises):
                hidden.setdefault(full, set()).add(database)
    return hidden


def blacklist_sentence(forbidden: list[str]) -> str | None:
    """One `Add Search Blacklist` sentence for the forbidden names: premise search (`Search`, `hammer`) skips
    every constant whose full name contains one of them, which also covers T's auxiliary constants (`T_subproof`)."""
    if not forbidden:
        return None
    return "Add Search Blacklist " + " ".join(f'"{name}"' for name in forbidden) + "."


def forbidden_citations(cited: list[str], forbidden: frozenset[str], allowed: frozenset[str]) -> list[str]:
    """The names among `cited` (identifiers of a tactic) that can only mean a forbidden constant.

    A cited name means a library lemma when it is that lemma's full name or a dot-aligned suffix of it (Coq
    prints and accepts `Nat.add_comm` for `Coq.Arith.PeanoNat.Nat.add_comm`); a short name that is a suffix of an
    allowed lemma too is given the benefit of the doubt (the re-check's dependency listing still catches T).
    """
    if not forbidden:
        return []
    banned, permitted = name_suffixes(forbidden), name_suffixes(allowed)
    return [name for name in dict.fromkeys(cited) if name in banned and name not in permitted]


def remove_hints_sentence(hidden: dict[str, set[str]]) -> str | None:
    """One `Remove Hints` sentence for all of them (removing an absent entry is a no-op in Coq)."""
    if not hidden:
        return None
    names = " ".join(sorted(hidden))
    databases = " ".join(sorted(set().union(*hidden.values())))
    return f"#[local] Remove Hints {names} : {databases}."


def parse_about(text: str) -> tuple[str, bool]:
    """From `About T`: the name Coq prints T by in this context, and whether T is transparent."""
    match = _ABOUT.match(text)
    if match is None:
        raise ValueError(f"unexpected About output: {text[:200]!r}")
    return match.group(1), f"{match.group(1)} is transparent" in text


def dependency_names(listing: str) -> frozenset[str]:
    """The constants a `Print Opaque/All Dependencies` listing names (with its line breaks kept)."""
    return frozenset(_DEPENDENCY.findall(listing))
