"""The promotion decision: challenger vs champion on the same eval set, aliases moved only on a win.

It takes evaluation results and decides; it runs no evaluation and writes no lake (the loop's
gate, `aitp.loop.evaluation`, does both around it). Order: every check first (versions exist, each
eval belongs to its version, both evals share one eval set); then the decision is tagged on the
challenger's version; only then do the aliases move (`previous-champion` first, so a failure in
between leaves `champion` where it was). A first model becomes champion.
"""

from __future__ import annotations

from typing import Any

from aitp.registry.store import (
    CHAMPION,
    PREVIOUS,
    TAG,
    Decision,
    ModelVersion,
    PromotionConfig,
    PromotionError,
    Registry,
)


def require_version(registry: Registry, experiment: str, ref: str) -> ModelVersion:
    mv = registry.get(experiment, ref)
    if mv is None:
        known = registry.aliases(experiment)
        raise PromotionError(
            f"model '{ref}' of experiment '{experiment}' is not registered (aliases: {known or 'none'}): "
            "register a checkpoint first (aitp train registers it)"
        )
    return mv


def _check_eval(mv: ModelVersion, result: Any, role: str) -> None:
    if result is None:
        raise PromotionError(f"no eval of the {role} (version {mv.version}): evaluate it on the same eval set first")
    if mv.model_version and result.model_version != mv.model_version:
        raise PromotionError(
            f"the {role}'s eval is of model {result.model_version}, but version {mv.version} holds model "
            f"{mv.model_version}: evaluate version {mv.version}'s checkpoint"
        )


def decide(challenger: float, champion: float | None, margin: float) -> tuple[bool, str]:
    """Whether a challenger score beats a champion score: by more than 0 and by at least the margin."""
    if champion is None:
        return True, "first model: becomes champion"
    delta = challenger - champion
    if delta > 0 and delta >= margin:
        return True, f"wins by {delta:+.4f} (margin {margin:g})"
    return False, f"does not win: {delta:+.4f} vs margin {margin:g}"


def judge(
    registry: Registry,
    experiment: str,
    iteration: int,
    challenger_version: str,
    challenger_eval: Any,
    champion_eval: Any | None,
    config: PromotionConfig | None = None,
) -> Decision:
    """Compare challenger and champion on one eval set and tag the decision; no alias moves yet."""
    config = config or PromotionConfig()
    challenger = require_version(registry, experiment, challenger_version)
    champion = registry.get(experiment, CHAMPION)
    _check_eval(challenger, challenger_eval, "challenger")
    if champion is not None and champion.version == challenger.version:
        score = challenger_eval.score(config.metric)
        return Decision(
            False,
            f"version {challenger.version} is already champion",
            challenger.version,
            champion.version,
            score,
            score,
            config.metric,
            config.margin,
            challenger_eval.eval_name,
        )
    champion_score = None
    if champion is not None:
        _check_eval(champion, champion_eval, "champion")
        if champion_eval.eval_name != challenger_eval.eval_name:
            raise PromotionError(
                f"champion and challenger were evaluated on different eval sets ({champion_eval.eval_name} vs "
                f"{challenger_eval.eval_name}): evaluate both on the experiment's pinned eval set"
            )
        champion_score = champion_eval.score(config.metric)
    score = challenger_eval.score(config.metric)
    promoted, why = decide(score, champion_score, config.margin)
    against = f"champion v{champion.version} {champion_score:.4f}" if champion else "no champion"
    verdict = "promoted" if promoted else "kept champion"
    reason = f"{verdict}: v{challenger.version} {config.metric} {score:.4f} vs {against}; {why}"
    decision = Decision(
        promoted,
        reason,
        challenger.version,
        champion.version if champion else None,
        score,
        champion_score,
        config.metric,
        config.margin,
        challenger_eval.eval_name,
    )

    registry.tag_version(
        experiment,
        challenger.version,
        {
            TAG + "decision": "promoted" if promoted else "rejected",
            TAG + "decision_reason": reason,
            TAG + "metric": config.metric,
            TAG + "margin": config.margin,
            TAG + "eval_name": decision.eval_name,
            TAG + "challenger_score": score,
            TAG + "champion_score": champion_score,
            TAG + "champion_version": decision.champion,
            TAG + "decided_at_iteration": iteration,
        },
    )
    run_id = registry.iteration_run(experiment, iteration)
    registry.log_metrics(
        run_id,
        {
            "promotion/challenger_score": score,
            "promotion/champion_score": champion_score,
            "promotion/promoted": float(promoted),
        },
    )
    registry.call("tag a run", registry.client.set_tag, run_id, TAG + "promotion", reason)
    return decision


def crown(registry: Registry, experiment: str, decision: Decision) -> None:
    """Move the aliases a decision calls for: `previous-champion` first, then `champion`."""
    if not decision.promoted:
        return
    if decision.champion is not None:
        registry.set_alias(experiment, PREVIOUS, decision.champion)
        registry.tag_version(experiment, decision.challenger, {TAG + "previous_champion": decision.champion})
    registry.set_alias(experiment, CHAMPION, decision.challenger)


def promote(
    registry: Registry,
    experiment: str,
    iteration: int,
    challenger_version: str,
    challenger_eval: Any,
    champion_eval: Any | None,
    config: PromotionConfig | None = None,
) -> Decision:
    """Judge challenger against champion on one eval set and move `champion` only when the challenger wins."""
    decision = judge(registry, experiment, iteration, challenger_version, challenger_eval, champion_eval, config)
    crown(registry, experiment, decision)
    return decision


def rollback(registry: Registry, experiment: str) -> Decision:
    """Make `previous-champion` the champion again; the one before it (if any) becomes `previous-champion`."""
    champion = registry.get(experiment, CHAMPION)
    previous = registry.get(experiment, PREVIOUS)
    if previous is None:
        raise PromotionError(f"experiment '{experiment}' has no previous champion to restore: nothing to roll back")
    older = previous.tags.get(TAG + "previous_champion") or None
    if older is not None and registry.get(experiment, older) is None:
        older = None
    registry.set_alias(experiment, CHAMPION, previous.version)
    if champion is not None:
        registry.tag_version(
            experiment, champion.version, {TAG + "rolled_back": "true", TAG + "rolled_back_to": previous.version}
        )
    if older is not None and older != previous.version:
        registry.set_alias(experiment, PREVIOUS, older)
    else:
        registry.set_alias(experiment, PREVIOUS, None)
    reason = f"rolled back: champion v{champion.version if champion else '-'} -> v{previous.version}"
    return Decision(
        True, reason, previous.version, champion.version if champion else None, None, None, "rollback", 0.0, None
    )
