"""The gate around the promotion decision: evaluate both models on one fixed set, decide, record.

`aitp.registry.promote` only decides (and moves aliases); this module runs or reuses the two
evaluations it needs (from the lake when a model was already measured on the same eval set) and
writes the outcome into the iteration's row of the lake. The loop's promote stage, `aitp eval
--version` and `aitp promote` all come through here.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from aitp import faults
from aitp.environment import Evaluator, Scored
from aitp.lake import missing_shards, record_iteration
from aitp.policies.spec import PolicySpec
from aitp.registry import CHALLENGER, CHAMPION, Decision, PromotionConfig, Registry, crown, judge
from aitp.registry.promotion import require_version


def evaluate_version(
    registry: Registry, experiment: str, iteration: int, ref: str, evaluator: Evaluator, role: str = "challenger"
) -> Scored:
    """A registered version's evaluation: from the lake when it was measured and is whole, else run, committed and
    logged (an evaluation a repair took shards of is run again, so the lake is whole again)."""
    mv = require_version(registry, experiment, ref)
    found = evaluator.load(registry.home, experiment, mv.model_version)
    if found is not None:
        if not _lost_shards(registry, experiment, found.iteration, evaluator.shard(mv.model_version)):
            return found
        iteration = found.iteration  # regenerated where the repair took it from
    checkpoint = PolicySpec(path=str(registry.checkpoint_path(mv)))
    result = evaluator.run(registry.home, experiment, iteration, checkpoint, mv.model_version or None)
    registry.log_eval(result, role)
    return result


def _lost_shards(registry: Registry, experiment: str, iteration: int, shard: str) -> bool:
    """Whether a repair quarantined a shard of this name in the iteration, not committed again yet."""
    return any(gap.shard == shard for gap in missing_shards(registry.home, experiment, iteration))


def gate(
    registry: Registry,
    experiment: str,
    iteration: int,
    evaluator: Evaluator,
    config: PromotionConfig | None = None,
    challenger: str = CHALLENGER,
) -> Decision:
    """Evaluate challenger and champion where needed, decide, and record the decision in the iteration's row."""
    challenger_mv = require_version(registry, experiment, challenger)
    challenger_eval = evaluate_version(registry, experiment, iteration, challenger, evaluator, "challenger")
    champion = registry.get(experiment, CHAMPION)
    champion_eval = None
    if champion is not None and champion.version != challenger_mv.version:
        champion_eval = evaluate_version(registry, experiment, iteration, CHAMPION, evaluator, "champion")
    row: dict[str, Any] = {
        "mlflow_run_id": registry.iteration_run(experiment, iteration),
        "model_in": champion.model_version if champion else None,
        "model_out": challenger_mv.model_version,
    }
    decision = judge(
        registry, experiment, iteration, challenger, challenger_eval, champion_eval, config or PromotionConfig()
    )
    # Recorded before the aliases move: a crash in between is decided again the same way on resume.
    record_iteration(
        registry.home, experiment, iteration, {**row, "promoted": decision.promoted, "promote_reason": decision.reason}
    )
    faults.point(f"promote:recorded:{iteration}")
    try:
        crown(registry, experiment, decision)
    except Exception as exc:
        reason = f"registry error, not promoted: {exc}"
        record_iteration(registry.home, experiment, iteration, {**row, "promoted": False, "promote_reason": reason})
        raise
    answer = as_registry_says(registry, experiment, decision)
    if answer != decision:
        record_iteration(
            registry.home, experiment, iteration, {**row, "promoted": answer.promoted, "promote_reason": answer.reason}
        )
    return answer


def as_registry_says(registry: Registry, experiment: str, decision: Decision) -> Decision:
    """The decision as the registry holds it after the aliases moved: promoted iff `champion` is the challenger.

    The iteration's record is written from this answer, so record and registry cannot disagree.
    """
    champion = registry.get(experiment, CHAMPION)
    crowned = champion is not None and champion.version == decision.challenger
    if crowned == decision.promoted:
        return decision
    held = f"v{champion.version}" if champion else "none"
    reason = (
        f"{decision.reason}; but the registry's champion is {held}, so recorded as {'' if crowned else 'not '}promoted"
    )
    return replace(decision, promoted=crowned, reason=reason)
