"""The promotion decision: challenger vs champion on the same eval set, aliases moved only on a win.

It takes evaluation results and decides; it runs no evaluation and writes no lake (the loop's
gate, `aitp.loop.evaluation`, does both around it). `decide` is the rule, the one every promotion
of either world applies (`aitp.proving.learning.decide_promotion` too). Order: `weigh` makes every
check (versions exist, each eval belongs to its version, both evals share one eval set) and decides;
then `record_decision` tags it on the challenger's version (`judge` is these two); only then does
`crown` move the aliases (`previous-champion` first, so a failure in between leaves `champion` where
it was). A first model becomes champion.
"""

from __future__ import annotations

from typing import Any

from aitp.environment import Scored
from aitp.paired import PairedGain, gain_on_shared_items
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


def decide_paired(challenger: Scored, champion: Scored, margin: float) -> tuple[bool, str, PairedGain]:
    """Whether the challenger's gain over the champion is evidence: at least the margin, and its paired bootstrap
    95 % interval over the items both were evaluated on above zero."""
    gain = gain_on_shared_items(champion.item_pass, challenger.item_pass, "champion", "challenger")
    if gain is None:
        raise PromotionError(
            "promotion.rule paired needs both models' per-item results on the same items, and the lake holds none "
            "for one of them: evaluate both again on the experiment's eval set, or use promotion.rule: margin"
        )
    promoted, why = decide_on_gain(gain, margin)
    return promoted, why, gain


def decide_on_gain(gain: PairedGain, margin: float) -> tuple[bool, str]:
    """The paired rule on a measured gain: at least the margin, its 95 % interval above zero."""
    if gain.low > 0 and gain.gain >= margin:
        return True, f"paired gain {gain} above zero (margin {margin:g})"
    return False, f"paired gain {gain} not above zero (margin {margin:g})"


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
    decision = weigh(registry, experiment, challenger_version, challenger_eval, champion_eval, config)
    if decision.challenger != decision.champion:  # a version already champion was not judged: nothing to record
        record_decision(registry, experiment, iteration, decision)
    return decision


def weigh(
    registry: Registry,
    experiment: str,
    challenger_version: str,
    challenger_eval: Any,
    champion_eval: Any | None,
    config: PromotionConfig | None = None,
) -> Decision:
    """The decision for a challenger against the current champion on one eval set, every check made; writes nothing."""
    config = config or PromotionConfig()
    gain: PairedGain | None = None
    challenger = require_version(registry, experiment, challenger_version)
    champion = registry.get(experiment, CHAMPION)
    _check_eval(challenger, challenger_eval, "challenger")
    if champion is not None and champion.version == challenger.version:
        score = champion_score = challenger_eval.score(config.metric)
        promoted, reason = False, f"version {challenger.version} is already champion"
    else:
        champion_score = None if champion is None else _champion_score(champion, champion_eval, challenger_eval, config)
        score = challenger_eval.score(config.metric)
        promoted, why = decide(score, champion_score, config.margin)
        if champion_score is not None and config.rule == "paired":
            promoted, why, gain = decide_paired(challenger_eval, champion_eval, config.margin)
        against = f"champion v{champion.version} {champion_score:.4f}" if champion else "no champion"
        verdict = "promoted" if promoted else "kept champion"
        reason = f"{verdict}: v{challenger.version} {config.metric} {score:.4f} vs {against}; {why}"
    return Decision(
        promoted,
        reason,
        challenger.version,
        champion.version if champion else None,
        score,
        champion_score,
        config.metric,
        config.margin,
        challenger_eval.eval_name,
        config.rule,
        gain.low if gain else None,
        gain.high if gain else None,
    )


def _champion_score(champion: ModelVersion, champion_eval: Any, challenger_eval: Any, config: PromotionConfig) -> float:
    """The champion's score, once its eval is checked to be its own and on the challenger's eval set."""
    _check_eval(champion, champion_eval, "champion")
    if champion_eval.eval_name != challenger_eval.eval_name:
        raise PromotionError(
            f"champion and challenger were evaluated on different eval sets ({champion_eval.eval_name} vs "
            f"{challenger_eval.eval_name}): evaluate both on the experiment's pinned eval set"
        )
    return champion_eval.score(config.metric)


def record_decision(registry: Registry, experiment: str, iteration: int, decision: Decision) -> None:
    """Tag the decision on the challenger's version and log it in the iteration's run."""
    registry.tag_version(
        experiment,
        decision.challenger,
        {
            TAG + "decision": "promoted" if decision.promoted else "rejected",
            TAG + "decision_reason": decision.reason,
            TAG + "metric": decision.metric,
            TAG + "margin": decision.margin,
            TAG + "eval_name": decision.eval_name,
            TAG + "challenger_score": decision.challenger_score,
            TAG + "champion_score": decision.champion_score,
            TAG + "champion_version": decision.champion,
            TAG + "decided_at_iteration": iteration,
            TAG + "rule": decision.rule,
            **({TAG + "gain_ci95": f"{decision.gain_low:+.4f} {decision.gain_high:+.4f}"} if decision.paired else {}),
        },
    )
    run_id = registry.iteration_run(experiment, iteration)
    scores = {
        "promotion/challenger_score": decision.challenger_score,
        "promotion/champion_score": decision.champion_score,
        "promotion/promoted": float(decision.promoted),
        **(
            {"promotion/gain_ci95_low": decision.gain_low, "promotion/gain_ci95_high": decision.gain_high}
            if decision.paired
            else {}
        ),
    }
    registry.log_metrics(run_id, scores)
    registry.call("tag a run", registry.client.set_tag, run_id, TAG + "promotion", decision.reason)


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
