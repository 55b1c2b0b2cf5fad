"""The fixed-tactic-set policy: tactic names from the allowlist, premise arguments ranked by a scorer.

As in HOList, a goal's candidates are every tactic of a fixed set (the backend record's `tactics`),
with theorem arguments filled from the top-ranked premises of the goal's theorem (only library facts
proved before it). A candidate's log-probability is a softmax over `prior(tactic) + premise score`;
the prior can be learned from the human proofs of a theorem set (`fit_prior`).
"""

from __future__ import annotations

import math
import re
from collections import Counter

from aitp.proving.backend import Template
from aitp.proving.backends import BACKENDS
from aitp.proving.data.theorem_set import TheoremSet
from aitp.proving.env import Goal, Theorem
from aitp.proving.errors import TacticRejectedError
from aitp.proving.models.premises import PremiseScorer, short_name
from aitp.proving.search.base import TacticSuggestion

_VAR_TYPE = re.compile(r"^(nat|bool|list \S+|[A-Za-z_][\w.]*)$")


def fixed_tactics(name: str) -> list[Template]:
    """The backend's fixed tactic set in its default order, or `TacticRejectedError` for a backend without one."""
    templates = BACKENDS[name].tactics if name in BACKENDS else ()
    if not templates:
        having = " or ".join(b.name for b in BACKENDS.values() if b.tactics)
        raise TacticRejectedError(f"no fixed tactic set for backend '{name}': use {having}")
    return list(templates)


def template_head(template: str) -> str:
    """The tactic name a template starts with (after REPEAT/TRY)."""
    words = [w for w in template.split() if w not in ("REPEAT", "TRY")]
    return words[0]


def goal_variables(text: str) -> list[str]:
    """Variables of a Coq goal worth case analysis: typed hypotheses and leading forall binders."""
    names: list[str] = []
    *hyps, concl = text.split("\n")
    for hyp in hyps:
        name, _, typ = hyp.partition(" : ")
        if _VAR_TYPE.match(typ.strip()):
            names.extend(n.strip() for n in name.split(","))
    concl = concl.removeprefix("⊢ ")
    if concl.startswith("forall "):
        binders = concl[len("forall ") :].split(",", 1)[0]
        for group in re.findall(r"\(([^()]*)\)", binders) or [binders]:
            lhs, _, typ = group.partition(":")
            if typ.strip() not in ("Type", "Set", "Prop"):
                names.extend(lhs.split())
    return list(dict.fromkeys(n for n in names if re.fullmatch(r"[A-Za-z_][\w']*", n)))


class FixedTacticPolicy:
    """Fixed tactic set plus ranked premises; deterministic, no sampling."""

    def __init__(
        self,
        backend: str,
        library: TheoremSet | None = None,
        scorer: PremiseScorer | None = None,
        tactics: list[str] | None = None,
        top_premises: int = 2,
        prior: dict[str, float] | None = None,
        premise_weight: float = 0.2,
        automation: bool = False,
    ) -> None:
        templates = fixed_tactics(backend)
        if automation:  # CoqHammer's tactics, for a session that loads them (`CoqEnv(automation=True)`)
            templates += list(BACKENDS[backend].automation_tactics)
        if tactics:
            known = {template_head(t) for t, _ in templates}
            unknown = [t for t in tactics if t not in known]
            if unknown:
                raise TacticRejectedError(
                    f"tactic '{unknown[0]}' is not in the {backend} fixed tactic set: "
                    f"choose from {', '.join(sorted(known))}"
                )
            templates = [(t, k) for t, k in templates if template_head(t) in tactics]
        self.backend = backend
        self.list_separator = BACKENDS[backend].list_separator
        self.templates = templates
        self.library = library
        statements = {t.name: t.statement for t in library.theorems} if library else {}
        self.scorer = scorer or PremiseScorer(statements)
        self.top_premises = top_premises
        # Default prior: the set's order, gently decreasing, so the cheap tactics are tried first.
        self.prior = prior or {template_head(t): -0.02 * i for i, (t, _) in enumerate(templates)}
        self.premise_weight = premise_weight

    def _premises(self, goal: Goal) -> tuple[list[str], list[float]]:
        names = self.library.premises(goal.theorem) if self.library is not None else []
        if not names:
            return [], []
        scores = self.scorer.score(goal.text, names)
        ranked = sorted(zip(scores, names), key=lambda sn: -sn[0])[: self.top_premises]
        return [n for _, n in ranked], [s for s, _ in ranked]

    def candidates(self, goal: Goal) -> list[tuple[str, float]]:
        """Every (tactic, unnormalised score) the fixed set offers for this goal."""
        premises, premise_scores = self._premises(goal)
        out: list[tuple[str, float]] = []
        for template, kind in self.templates:
            base = self.prior.get(template_head(template), -1.0)
            if kind == "none":
                out.append((template, base))
            elif kind == "var":
                out.extend((template.format(v), base) for v in goal_variables(goal.text)[:3])
            elif kind == "premise":
                out.extend(
                    (template.format(p), base + self.premise_weight * s) for p, s in zip(premises, premise_scores)
                )
            elif premises:
                joined = self.list_separator.join(p for p in premises)
                out.append((template.format(joined), base + self.premise_weight * max(premise_scores)))
        return out

    def suggest(self, goals: list[Goal], n: int) -> list[list[TacticSuggestion]]:
        """Top `n` candidates per goal, with log-probabilities from a softmax over all candidates."""
        out = []
        for goal in goals:
            cands = self.candidates(goal)
            if not cands:
                out.append([])
                continue
            top = max(s for _, s in cands)
            log_z = top + math.log(sum(math.exp(s - top) for _, s in cands))
            ranked = sorted(cands, key=lambda ts: -ts[1])[:n]
            out.append([TacticSuggestion(t, s - log_z) for t, s in ranked])
        return out


def fit_prior(theorems: list[Theorem], backend: str) -> dict[str, float]:
    """Log-frequency of each fixed-set tactic among the tactics of human proofs."""
    heads = {template_head(t) for t, _ in fixed_tactics(backend)}
    counts: Counter[str] = Counter()
    for theorem in theorems:
        for word in re.findall(r"[A-Za-z_][\w']*", theorem.proof):
            if word in heads:
                counts[word] += 1
    total = sum(counts.values()) + len(heads)
    return {h: math.log((counts[h] + 1) / total) for h in heads}


__all__ = ["FixedTacticPolicy", "TacticSuggestion", "fit_prior", "fixed_tactics", "goal_variables", "short_name"]
