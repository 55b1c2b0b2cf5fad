"""Goal-value labels for the critic, selected from the lake's proof tables with SQL.

A goal on the path of a proof the prover re-checked is provable: label 1. A goal the search visited
at least `min_visits` times (an expansion counts as a visit: BestFS keeps no other count) and left
unproved is, as far as this policy and budget can tell, not: label 0. A goal proved inside a tree
whose proof was never re-checked is neither. The same goal text met in several searches takes its
best label (proved once is provable). Training labels come from train-split theorems only, by the
stored split and the fixed hash of the name, as for the tactic data; the held-out labels (valid
split) exist only to measure the critic.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from aitp.errors import BadInputError
from aitp.proving.data.trace_queries import TRAIN, query_traces, theorem_name, train_only

GOAL_LABELS_SQL = """
    WITH rechecked AS (
        SELECT DISTINCT iteration, search_id FROM proofs
        WHERE experiment = $experiment AND iteration <= $up_to AND verified),
    seen AS (
        SELECT n.theorem_id, n.goal, n.status,
            coalesce(n.in_proof, false) AND r.search_id IS NOT NULL AS on_proof,
            greatest(coalesce(n.visits, 0), CASE WHEN n.expanded_at_step IS NULL THEN 0 ELSE 1 END) AS visits
        FROM proof_nodes n
        LEFT JOIN rechecked r ON r.iteration = n.iteration AND r.search_id = n.search_id
        WHERE n.experiment = $experiment AND n.iteration <= $up_to
          AND n.split = $split AND aitp_split(n.theorem_id) = $split)
    SELECT goal, min(theorem_id) AS theorem_id, max(CASE WHEN on_proof THEN 1 ELSE 0 END) AS label,
           max(visits) AS visits
    FROM seen
    WHERE on_proof OR (status <> 'proved' AND visits >= $min_visits)
    GROUP BY goal
    ORDER BY goal"""


@dataclass(frozen=True)
class CriticExample:
    """A goal and whether it was proved (1) or left unproved after enough visits (0)."""

    theorem: str
    goal: str
    label: int
    visits: int


def _labels(home: str | Path, experiment: str, up_to: int, split: str, min_visits: int) -> list[CriticExample]:
    if min_visits < 1:
        raise BadInputError(f"critic_min_visits must be at least 1, got {min_visits}: a goal never seen is no label")
    rows = query_traces(home, GOAL_LABELS_SQL, experiment, up_to, split=split, min_visits=min_visits)
    return [CriticExample(theorem_name(t), goal, int(label), int(v)) for goal, t, label, v in rows]


def critic_examples(
    home: str | Path, experiment: str, up_to_iteration: int, min_visits: int = 1
) -> list[CriticExample]:
    """Training labels of the goal critic from the searches up to an iteration (train split only)."""
    examples = _labels(home, experiment, up_to_iteration, TRAIN, min_visits)
    for e in examples:
        train_only(e.theorem)
    return examples


def held_out_goal_labels(
    home: str | Path, experiment: str, up_to_iteration: int, split: str = "valid", min_visits: int = 1
) -> list[CriticExample]:
    """Labels of valid- or test-split goals, to measure a critic (never to train one)."""
    if split == TRAIN:
        raise BadInputError("held-out goal labels are for valid or test: train labels come from critic_examples")
    return _labels(home, experiment, up_to_iteration, split, min_visits)
