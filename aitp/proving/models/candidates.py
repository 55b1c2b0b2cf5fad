"""Tactic candidates for a goal, grouped into families so that no family crowds the others out.

A candidate is one filled template of the fixed tactic set: `induction n`, `rewrite IHn`,
`apply Nat.le_trans`. Its *family* is the template with the kind of argument it takes
(`induction:var`, `rewrite:hyp`, `rewrite:premise`): one goal with five variables and a long
premise list would otherwise fill every slot of the top-k cut with `destruct x1 … x5` and
`rewrite P1 … P5`. `cap_families` keeps the best `cap` of each family after ranking.

Arguments come from the goal itself (variables worth case analysis, hypotheses usable as rewrite
or apply arguments, e.g. an induction hypothesis) or from the library (premises ranked by the
premise ranker, only facts proved before the goal's theorem).

The templates are the backend record's: its fixed set, then its `hypothesis_tactics`. `automation=True`
adds its `automation_tactics` (CoqHammer's) after them, so a ranker can learn when to call them; off by
default, so the existing candidate orders stay as they were.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np

from aitp.proving.backends import BACKENDS
from aitp.proving.data.theorem_set import TheoremSet
from aitp.proving.env import Goal
from aitp.proving.models.fixed_policy import fixed_tactics, goal_variables, template_head
from aitp.proving.models.premises import PremiseScorer, short_name

_PLAIN_TYPE = re.compile(r"^(Type|Set|Prop|nat|bool|list \S+|[A-Za-z_][\w.]*)$")


@dataclass(frozen=True)
class Candidate:
    """One tactic for one goal, with what the ranker needs to know about how it was built."""

    tactic: str
    template: str
    kind: str  # none, var, hyp, premise, premises
    rank: int  # position of the template in the default order
    argument: str = ""
    arg_index: int = 0  # position of the argument among those of its kind (0: the first/best)
    arg_info: str = ""  # var: its type; hyp: the shape of its statement; premise: its short name
    premise_score: float = 0.0

    @property
    def head(self) -> str:
        """The tactic name."""
        return template_head(self.template)

    @property
    def family(self) -> str:
        """Template and argument kind: the unit capped by `cap_families`."""
        return f"{self.template}:{self.kind}"


def split_goal(text: str) -> tuple[list[tuple[str, str]], str]:
    """A printed goal as (hypothesis name, type) pairs and the conclusion (the text after ⊢)."""
    head, sep, concl = text.rpartition("⊢ ")
    if not sep:
        return [], text.strip()
    hyps = []
    for line in head.split("\n"):
        names, colon, typ = line.partition(" : ")
        if colon:
            hyps.extend((n.strip(), typ.strip()) for n in names.split(",") if n.strip())
    return hyps, concl.strip()


def statement_shape(typ: str) -> str:
    """A coarse shape of a hypothesis statement: which connective it is about."""
    body = re.sub(r"^forall [^,]*,\s*", "", typ)
    for symbol, shape in (("<->", "iff"), ("->", "implication"), ("=", "equation"), ("~", "negation")):
        if symbol in body:
            return shape
    return "other"


def goal_hypotheses(text: str) -> list[tuple[str, str]]:
    """Hypotheses that state facts (not variables): (name, shape), most recent first."""
    hyps, _ = split_goal(text)
    facts = [(n, statement_shape(t)) for n, t in hyps if not _PLAIN_TYPE.match(t)]
    return [(n, s) for n, s in reversed(facts) if re.fullmatch(r"[A-Za-z_][\w']*", n)]


def _variable_types(text: str) -> dict[str, str]:
    hyps, concl = split_goal(text)
    types = {n: t for n, t in hyps}
    if concl.startswith("forall "):
        binders = concl[len("forall ") :].split(",", 1)[0]
        for group in re.findall(r"\(([^()]*)\)", binders) or [binders]:
            lhs, _, typ = group.partition(":")
            for name in lhs.split():
                types.setdefault(name, typ.strip() or "?")
    return types


class CandidateGenerator:
    """Every candidate of the fixed tactic set (plus hypothesis templates) for a goal of a library."""

    def __init__(
        self,
        backend: str,
        library: TheoremSet | None = None,
        premise_scorer: PremiseScorer | None = None,
        top_premises: int = 3,
        max_variables: int = 4,
        automation: bool = False,
    ) -> None:
        self.backend = backend
        record = BACKENDS[backend]
        self.templates = fixed_tactics(backend) + list(record.hypothesis_tactics)
        if automation:
            self.templates = self.templates + list(record.automation_tactics)
        self.list_separator = record.list_separator
        self.hypotheses = record.goals_have_hypotheses  # whether goals name hypotheses to rewrite or apply with
        self.library = library
        statements = {t.name: t.statement for t in library.theorems} if library else {}
        self.premise_scorer = premise_scorer or PremiseScorer(statements)
        self.top_premises = top_premises
        self.max_variables = max_variables

    def premises(self, goal: Goal) -> list[tuple[str, float]]:
        """The goal's best library premises, with the premise ranker's scores."""
        if self.library is None:
            return []
        allowed = len(self.library.premises(goal.theorem))
        if not allowed:
            return []
        # A theorem's premises are a prefix of the library's names: scoring the whole list keeps
        # the ranker's per-list caches warm across theorems, and the prefix is cut afterwards.
        names = self.library.premise_names
        scores = np.asarray(self.premise_scorer.score(goal.text, names))[:allowed]
        top = np.argsort(-scores, kind="stable")[: self.top_premises]
        return [(names[i], float(scores[i])) for i in top]

    def candidates(self, goal: Goal) -> list[Candidate]:
        """All candidates for `goal`, in the default order (template order, then argument order)."""
        premises = self.premises(goal)
        variables = goal_variables(goal.text)[: self.max_variables]
        types = _variable_types(goal.text) if variables else {}
        hypotheses = goal_hypotheses(goal.text) if self.hypotheses else []
        out: list[Candidate] = []
        for rank, (template, kind) in enumerate(self.templates):
            if kind == "none":
                out.append(Candidate(template, template, kind, rank))
            elif kind == "var":
                out.extend(
                    Candidate(template.format(v), template, kind, rank, v, i, types.get(v, "?"))
                    for i, v in enumerate(variables)
                )
            elif kind == "hyp":
                out.extend(
                    Candidate(template.format(h), template, kind, rank, h, i, shape)
                    for i, (h, shape) in enumerate(hypotheses)
                    if shape in ("equation", "iff") or not template.startswith("rewrite")
                )
            elif kind == "premise":
                out.extend(
                    Candidate(template.format(p), template, kind, rank, p, i, short_name(p), s)
                    for i, (p, s) in enumerate(premises)
                )
            elif premises:
                joined = self.list_separator.join(p for p, _ in premises)
                best = max(s for _, s in premises)
                out.append(Candidate(template.format(joined), template, kind, rank, joined, 0, "", best))
        unique: dict[str, Candidate] = {}
        for cand in out:
            unique.setdefault(cand.tactic, cand)
        return list(unique.values())

    def candidate_for(self, goal: Goal, tactic: str) -> Candidate | None:
        """The candidate `tactic` would be on `goal` (even outside today's top premises), or None."""
        for cand in self.candidates(goal):
            if cand.tactic == tactic:
                return cand
        hypotheses = dict(goal_hypotheses(goal.text)) if self.hypotheses else {}
        for rank, (template, kind) in enumerate(self.templates):
            if kind == "none" or "{}" not in template:
                continue
            m = re.fullmatch(re.escape(template).replace(r"\{\}", "(.+)"), tactic)
            if not m:
                continue
            arg = m.group(1)
            if kind == "hyp" and arg in hypotheses:
                return Candidate(tactic, template, kind, rank, arg, self.max_variables, hypotheses[arg])
            if kind in ("premise", "premises") and arg not in hypotheses:
                return Candidate(tactic, template, kind, rank, arg, self.top_premises, short_name(arg))
            if kind == "var":
                types = _variable_types(goal.text)
                return Candidate(tactic, template, kind, rank, arg, self.max_variables, types.get(arg, "?"))
        return None


def cap_families(ranked: list[Candidate], cap: int) -> list[Candidate]:
    """Keep, in order, at most `cap` candidates of each family (0: no cap)."""
    if cap <= 0:
        return list(ranked)
    seen: dict[str, int] = {}
    out = []
    for cand in ranked:
        if seen.get(cand.family, 0) < cap:
            seen[cand.family] = seen.get(cand.family, 0) + 1
            out.append(cand)
    return out
