"""Extract HOL Light's core library theorems and their human proofs from the .ml sources.

The core files are read in the order `hol.ml` loads them. Every top-level `let NAME = ...` whose
NAME the library's search database (`database.ml`) knows is a premise, in load order; those bound
by `prove(`term`, tactic)` are the provable theorems, with the term as statement and the tactic
text as human proof. No HOL Light process is needed.
"""

from __future__ import annotations

import re
from pathlib import Path

from aitp.proving.data.theorem_set import TheoremSet
from aitp.proving.env import Theorem
from aitp.proving.errors import ProverUnavailableError
from aitp.proving.hol_light.session import HOL_DIR, HOL_INSTALL_HINT

HOL_SET_VERSION = 1  # bump when the extraction changes what the set holds
_LOADS = re.compile(r'^loads\s+"([a-z_0-9]+\.ml)"', re.M)
_BINDING = re.compile(r"^let\s+([A-Z][A-Z0-9_']*)\s*=\s*", re.M)
_DATABASE_NAME = re.compile(r'^"([A-Z][A-Z0-9_\']*)",', re.M)


def strip_ml_comments(text: str) -> str:
    """Blank out (nested) OCaml comments, keeping offsets, strings and backquoted terms intact."""
    out = list(text)
    depth, i, quote = 0, 0, ""
    while i < len(text):
        c = text[i]
        if depth == 0 and quote == "" and c in '`"':
            quote = c
        elif depth == 0 and quote and c == quote:
            quote = ""
        elif quote == "" and text.startswith("(*", i):
            depth += 1
            out[i] = out[i + 1] = " "
            i += 2
            continue
        elif quote == "" and depth and text.startswith("*)", i):
            depth -= 1
            out[i] = out[i + 1] = " "
            i += 2
            continue
        if depth:
            out[i] = " " if c != "\n" else "\n"
        i += 1
    return "".join(out)


def _parse_prove(text: str, start: int) -> tuple[str, str] | None:
    """At `prove (`stmt`, tactic);;` starting at `start`: the statement and the tactic text."""
    m = re.compile(r"prove\s*\(\s*`").match(text, start)
    if not m:
        return None
    end_term = text.find("`", m.end())
    if end_term < 0:
        return None
    statement = text[m.end() : end_term]
    comma = re.compile(r"\s*,").match(text, end_term + 1)
    if not comma:
        return None
    depth, i, quote = 1, comma.end(), ""
    while i < len(text):
        c = text[i]
        if quote:
            quote = "" if c == quote else quote
        elif c in '`"':
            quote = c
        elif c in "([":
            depth += 1
        elif c in ")]":
            depth -= 1
            if depth == 0:
                return " ".join(statement.split()), " ".join(text[comma.end() : i].split())
        i += 1
    return None


def extract_hol_core(hol_dir: Path = HOL_DIR) -> TheoremSet:
    """The `hol-core` set: theorems proved in the core library, premises in load order."""
    hol_ml = hol_dir / "hol.ml"
    database = hol_dir / "database.ml"
    if not hol_ml.is_file() or not database.is_file():
        raise ProverUnavailableError(f"HOL Light sources not found under {hol_dir}; {HOL_INSTALL_HINT}")
    known = set(_DATABASE_NAME.findall(database.read_text(errors="replace")))
    premise_names: list[str] = []
    theorems: list[Theorem] = []
    seen: set[str] = set()
    for filename in _LOADS.findall(hol_ml.read_text(errors="replace")):
        path = hol_dir / filename
        if filename == "database.ml" or not path.is_file():
            continue
        text = strip_ml_comments(path.read_text(errors="replace"))
        for m in _BINDING.finditer(text):
            name = m.group(1)
            if name not in known or name in seen:
                continue
            seen.add(name)
            premise_names.append(name)
            parsed = _parse_prove(text, m.end())
            if parsed is None:
                continue
            statement, proof = parsed
            theorems.append(
                Theorem(
                    name=name,
                    statement=statement,
                    backend="hol-light",
                    proof=proof,
                    source=str(path),
                    position=len(premise_names) - 1,
                    module=filename,
                )
            )
    return TheoremSet("hol-core", "hol-light", theorems, premise_names, HOL_SET_VERSION)
