"""Training data for the prover's models, selected from the lake's proof tables with SQL.

Only proofs the prover re-checked (`proofs.verified`) of train-split theorems count: the split is
both the stored column and recomputed from the theorem's name by the fixed hash, so a mislabelled
row cannot leak a valid or test theorem. Per theorem the shortest such proof across iterations
(up to the one asked) is the lesson; its edges (`proof_edges.in_proof`) give the tactic examples,
each on the goal it was applied to (`proof_nodes.goal`). On the same goals, tactics that errored or
timed out are the rejected side of preference pairs, and tactics that also worked (closed the goal
or left only proved goals) are recorded as alternatives: right too, so never a negative.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from aitp.proving.data.theorem_set import TheoremSet
from aitp.proving.data.trace_queries import TRAIN, query_lake, query_traces, theorem_name, train_only
from aitp.proving.models.premises import used_premises

if TYPE_CHECKING:
    from aitp.proving.data.critic_data import CriticExample


BEST_PROOFS_SQL = """
    SELECT theorem_id, iteration, search_id, proof_id, n_steps, proof_text FROM (
        SELECT *, row_number() OVER (PARTITION BY theorem_id ORDER BY n_steps, iteration, proof_id) AS r
        FROM proofs
        WHERE experiment = $experiment AND iteration <= $up_to AND verified
          AND split = 'train' AND aitp_split(theorem_id) = 'train')
    WHERE r = 1"""

PROOF_STEPS_SQL = f"""
    WITH best AS ({BEST_PROOFS_SQL}),
    steps AS (
        SELECT b.theorem_id, b.iteration, b.search_id, e.src_node_id, e.tactic, n.goal
        FROM best b
        JOIN proof_edges e ON e.experiment = $experiment AND e.iteration = b.iteration
                          AND e.search_id = b.search_id AND e.in_proof
        JOIN proof_nodes n ON n.experiment = $experiment AND n.iteration = b.iteration
                          AND n.search_id = b.search_id AND n.node_id = e.src_node_id),
    tried AS (
        SELECT s.src_node_id, s.search_id, e.edge_id, e.tactic, e.outcome, e.iteration, e.child_node_ids
        FROM steps s JOIN proof_edges e ON e.experiment = $experiment AND e.iteration = s.iteration
                                       AND e.search_id = s.search_id AND e.src_node_id = s.src_node_id
        WHERE e.tactic <> s.tactic),
    children_proved AS (
        SELECT c.edge_id, bool_and(n.status = 'proved') AS all_proved
        FROM (SELECT edge_id, search_id, iteration, unnest(child_node_ids) AS child FROM tried) c
        JOIN proof_nodes n ON n.experiment = $experiment AND n.iteration = c.iteration
                          AND n.search_id = c.search_id AND n.node_id = c.child
        GROUP BY c.edge_id)
    SELECT s.theorem_id, s.iteration, s.search_id, s.src_node_id, s.goal, s.tactic,
        list(t.tactic ORDER BY t.tactic) FILTER (
            WHERE t.outcome = 'proved' OR (t.outcome = 'success' AND coalesce(p.all_proved, false))) AS worked,
        list(t.tactic ORDER BY t.tactic) FILTER (WHERE t.outcome IN ('error', 'timeout')) AS erroring
    FROM steps s
    LEFT JOIN tried t ON t.search_id = s.search_id AND t.src_node_id = s.src_node_id
    LEFT JOIN children_proved p ON p.edge_id = t.edge_id
    GROUP BY ALL
    ORDER BY s.theorem_id, s.src_node_id"""


@dataclass(frozen=True)
class TacticExample:
    """A goal of a re-checked proof and the tactic the proof applied to it."""

    theorem: str
    split: str
    goal: str
    tactic: str
    iteration: int
    search_id: str
    node_id: str
    alternatives: tuple[str, ...] = ()  # other tactics that also worked on this goal
    erroring: tuple[str, ...] = ()  # tactics that errored or timed out on this goal
    source: str = "proof_step"  # proof_step: a re-checked proof of the loop's search; human_step: a library proof


@dataclass(frozen=True)
class PremiseExample:
    """A goal of a re-checked proof and the library premises its tactic used."""

    theorem: str
    goal: str
    premises: tuple[str, ...]


@dataclass(frozen=True)
class PreferencePair:
    """On one goal of a re-checked proof: the tactic that proved it over one that errored."""

    theorem: str
    goal: str
    chosen: str
    rejected: str


@dataclass(frozen=True)
class ProofRecord:
    """The shortest re-checked proof of a train theorem so far."""

    theorem: str
    iteration: int
    search_id: str
    n_steps: int
    proof_text: str


def best_proofs(home: str | Path, experiment: str, up_to_iteration: int) -> list[ProofRecord]:
    """The shortest re-checked proof of each train theorem found up to `up_to_iteration`."""
    rows = query_traces(home, BEST_PROOFS_SQL + " ORDER BY theorem_id", experiment, up_to_iteration)
    return [ProofRecord(train_only(theorem_name(r[0])), r[1], r[2], r[4], r[5]) for r in rows]


def tactic_examples(home: str | Path, experiment: str, up_to_iteration: int) -> list[TacticExample]:
    """One example per step of each theorem's shortest re-checked proof (train split only)."""
    rows = query_traces(home, PROOF_STEPS_SQL, experiment, up_to_iteration)
    out = []
    for theorem_id, iteration, search_id, node_id, goal, tactic, worked, erroring in rows:
        name = train_only(theorem_name(theorem_id))
        out.append(
            TacticExample(
                name, TRAIN, goal, tactic, iteration, search_id, node_id, tuple(worked or ()), tuple(erroring or ())
            )
        )
    return out


HUMAN_STEPS_SQL = """
    SELECT theorem_id, goal_before, tactic, step_index
    FROM human_steps
    WHERE allowlisted AND split = 'train' AND aitp_split(theorem_id) = 'train'
    ORDER BY theorem_id, step_index"""


def human_step_examples(home: str | Path) -> list[TacticExample]:
    """One example per allowlisted step of the library's human proofs of train theorems (`human_steps`), or none
    when the home has no replayed steps."""
    from aitp.lake import commits

    if not commits(home, "human_steps"):
        return []
    rows = query_lake(home, HUMAN_STEPS_SQL)
    return [
        TacticExample(train_only(theorem_name(tid)), TRAIN, goal, tactic, 0, "human", f"{tid}#{k}", source="human_step")
        for tid, goal, tactic, k in rows
    ]


def preference_pairs(examples: list[TacticExample]) -> list[PreferencePair]:
    """The proving tactic over each tactic that errored on the same goal."""
    return [PreferencePair(e.theorem, e.goal, e.tactic, bad) for e in examples for bad in e.erroring]


def premise_examples(examples: list[TacticExample], library: TheoremSet) -> list[PremiseExample]:
    """Goals whose proving tactic named library premises (only those the theorem may use)."""
    out = []
    for e in examples:
        used = used_premises(e.tactic, library.premises(e.theorem))
        if used:
            out.append(PremiseExample(e.theorem, e.goal, tuple(used)))
    return out


@dataclass
class TrainingData:
    """Everything one training step learns from, selected up to one iteration."""

    proofs: list[ProofRecord]
    tactics: list[TacticExample]
    premises: list[PremiseExample]
    pairs: list[PreferencePair]
    critic: list[CriticExample] = field(default_factory=list)

    def counts(self) -> dict[str, int]:
        """Sizes, for logs and metrics."""
        return {
            "proofs": len(self.proofs),
            "tactic_examples": len(self.tactics),
            "premise_examples": len(self.premises),
            "preference_pairs": len(self.pairs),
            "critic_examples": len(self.critic),
        }


def select_training_data(
    home: str | Path, experiment: str, up_to_iteration: int, library: TheoremSet, critic_min_visits: int | None = None
) -> TrainingData:
    """Tactic examples, premise examples and preference pairs from the re-checked train proofs so far, and the
    goal critic's labels when `critic_min_visits` is given (None: no critic is trained)."""
    from aitp.proving.data.critic_data import critic_examples

    tactics = tactic_examples(home, experiment, up_to_iteration)
    critic = [] if critic_min_visits is None else critic_examples(home, experiment, up_to_iteration, critic_min_visits)
    return TrainingData(
        best_proofs(home, experiment, up_to_iteration),
        tactics,
        premise_examples(tactics, library),
        preference_pairs(tactics),
        critic,
    )
