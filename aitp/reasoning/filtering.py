"""Keep/drop rules for groups of rollouts, recorded on every row as `group_kept` and `keep_reason`.

The seed's rule (`rollout_save_score_threshold`, 0.7 there): a group is kept when any of its scores
is above the threshold. The seed also throws away groups whose scores are all equal; we keep
those and label them, since they carry no preference signal but are fine for supervised
fine-tuning. Reasons (the threshold that ran is recorded beside them, as `keep_threshold`):

- `above_threshold`          kept: scores differ, some above the threshold (SFT and DPO);
- `uniform_above_threshold`  kept: all scores equal and above it (SFT only, no preference signal);
- `below_threshold`          dropped: scores differ but none is above it;
- `uniform_below_threshold`  dropped: all scores equal and none above it (e.g. all failed).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from aitp.errors import BadInputError

SEED_THRESHOLD = 0.7
REASONS = ("above_threshold", "uniform_above_threshold", "below_threshold", "uniform_below_threshold")
SCORE_COLUMN = "final_score"


@dataclass(frozen=True)
class GroupDecision:
    """Whether a group goes to training, and why."""

    kept: bool
    reason: str
    uniform: bool
    threshold: float

    @property
    def preference_signal(self) -> bool:
        """Whether the group can give (chosen, rejected) pairs."""
        return self.kept and not self.uniform


def decide_group(scores: Iterable[float], threshold: float = SEED_THRESHOLD) -> GroupDecision:
    """Apply the keep/drop rule to one group's scores."""
    values = [float(s) for s in scores]
    if not values:
        raise BadInputError("a group has no scores: drop empty groups before filtering")
    uniform = len(set(values)) == 1
    kept = any(s > threshold for s in values)
    reason = ("uniform_" if uniform else "") + ("above_threshold" if kept else "below_threshold")
    return GroupDecision(kept=kept, reason=reason, uniform=uniform, threshold=float(threshold))


def filter_rows(
    rows: Iterable[Mapping[str, Any]], threshold: float = SEED_THRESHOLD, score: str = SCORE_COLUMN
) -> list[dict[str, Any]]:
    """Rollout rows with `group_kept`, `keep_reason` and `keep_threshold` set from their group's `score` column."""
    rows = [dict(r) for r in rows]
    groups: dict[tuple[Any, Any], list[float]] = {}
    for row in rows:
        if row.get(score) is None:
            raise BadInputError(f"a rollout row has no {score}: score rollouts before filtering them")
        groups.setdefault(_group_key(row), []).append(float(row[score]))
    decisions = {key: decide_group(scores, threshold) for key, scores in groups.items()}
    for row in rows:
        decision = decisions[_group_key(row)]
        row["group_kept"] = decision.kept
        row["keep_reason"] = decision.reason
        row["keep_threshold"] = decision.threshold
    return rows


def summarize(rows: Iterable[Mapping[str, Any]]) -> dict[str, int]:
    """Groups per keep reason (without the threshold suffix) in filtered rows."""
    seen: dict[tuple[Any, Any], str] = {}
    for row in rows:
        seen[_group_key(row)] = row.get("keep_reason") or "unfiltered"
    counts = dict.fromkeys(REASONS, 0)
    for reason in seen.values():
        counts[reason] = counts.get(reason, 0) + 1
    return counts


def _group_key(row: Mapping[str, Any]) -> tuple[Any, Any]:
    if "group_id" not in row:
        raise BadInputError("a rollout row has no group_id: filter rows produced by aitp.reasoning.rollouts")
    return row.get("item_id"), row["group_id"]
