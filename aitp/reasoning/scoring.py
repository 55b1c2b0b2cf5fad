"""Scoring a completion with the task's own verifier: strict (the seed's rules) and lenient (audit).

Strict: the extracted answer is scored bare and wrapped in answer tags with the task's
`score_answer`; each is clamped to [0, 1], an exception counts 0, the higher wins.
Lenient: a forgiving extraction and normalisation (case, spacing, trailing period, numbers that are
equal as numbers); never lower than strict. It is stored beside the strict score so a verifier's
strictness can be audited later; it never feeds training by itself.
"""

from __future__ import annotations

import math
import re
import unicodedata
from dataclasses import dataclass
from typing import Any

from aitp.errors import BadInputError
from aitp.reasoning.extraction import extract, extract_lenient
from aitp.reasoning.items import Item, dataset_for, raw_entry


@dataclass(frozen=True)
class Scored:
    """The verdicts on one completion."""

    raw: float
    lenient: float
    format_error: str | None
    extracted: str | None


def _clamped_score(dataset: Any, answer: str, entry: dict[str, Any]) -> float:
    try:
        value = float(dataset.score_answer(answer=answer, entry=entry))
    except Exception:  # a verifier that raises on odd input counts as a wrong answer, as in the seed
        return 0.0
    if math.isnan(value):
        return 0.0
    return max(0.0, min(1.0, value))


def dual_format_score(dataset: Any, answer: str, entry: dict[str, Any]) -> float:
    """The higher of the bare answer's and the tag-wrapped answer's score."""
    return max(_clamped_score(dataset, answer, entry), _clamped_score(dataset, f"<answer>{answer}</answer>", entry))


# Verifiers that read tuples from the metadata, which JSON turns into lists: they get the entry
# regenerated from the item's identity. Every other task is scored from the stored item as is
# (a test checks both ways agree on every task), which spares regenerating costly items (sudoku).
RAW_ENTRY_TASKS: frozenset[str] = frozenset({"arc_agi", "rearc"})


def verifier_entry(item: Item, regenerate: bool = False) -> tuple[Any, dict[str, Any]]:
    """The dataset object and the entry its verifier expects (regenerated where JSON would not do)."""
    dataset = dataset_for(item.task, item.config, item.seed)
    if not regenerate and item.task not in RAW_ENTRY_TASKS:
        return dataset, item.entry()
    try:
        entry = raw_entry(item.task, item.config, item.seed, item.index)
    except Exception as exc:
        hint = "use lines from `aitp items`"
        raise BadInputError(f"cannot regenerate item {item.item_id} ({item.task}): {exc}; {hint}") from exc
    if entry["question"] != item.question or (entry.get("answer") is not None) != (item.answer is not None):
        raise BadInputError(
            f"item {item.item_id} ({item.task}) no longer matches its identity: regenerate it with `aitp items`"
        )
    return dataset, entry


_BOXED = re.compile(r"\\boxed\{(.*)\}", re.DOTALL)
_SPACES = re.compile(r"\s+")


def normalise(text: str) -> str:
    """Case, Unicode form, spacing, surrounding quotes/LaTeX boxes and a trailing period removed."""
    text = unicodedata.normalize("NFKC", text).strip()
    boxed = _BOXED.fullmatch(text)
    if boxed:
        text = boxed.group(1)
    text = text.strip().strip("$").strip().strip("\"'`").strip()
    text = _SPACES.sub(" ", text).rstrip(".").strip()
    return text.casefold()


def _as_number(text: str) -> float | None:
    try:
        return float(text.replace(",", ""))
    except ValueError:
        return None


def _lenient_equal(answer: str, gold: str) -> bool:
    a, g = normalise(answer), normalise(gold)
    if a == g or a.replace(" ", "") == g.replace(" ", ""):
        return True
    x, y = _as_number(a), _as_number(g)
    return x is not None and y is not None and math.isclose(x, y, rel_tol=1e-9, abs_tol=1e-9)


def lenient_score(dataset: Any, entry: dict[str, Any], completion: str, strict: float) -> float:
    """The forgiving score: max of strict, the verifier on forgiving extractions, and normalised equality."""
    answer = extract_lenient(completion)
    if answer is None:
        return strict
    best = max(strict, dual_format_score(dataset, answer, entry), dual_format_score(dataset, normalise(answer), entry))
    gold = entry.get("answer")
    if gold is not None and _lenient_equal(answer, str(gold)):
        best = 1.0
    return best


def score_completion(item: Item, completion: str, verifier: tuple[Any, dict[str, Any]] | None = None) -> Scored:
    """Strict and lenient scores of one completion, with the format rule that fired."""
    dataset, entry = verifier or verifier_entry(item)
    extraction = extract(completion)
    raw = 0.0 if extraction.answer is None else dual_format_score(dataset, extraction.answer, entry)
    return Scored(raw, lenient_score(dataset, entry, completion, raw), extraction.format_error, extraction.answer)
