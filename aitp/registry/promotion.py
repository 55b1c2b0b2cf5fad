"""The promotion gate: challenger vs champion on the same eval set, aliases moved only on a win.

Order of a promotion: every check first (versions exist, each eval belongs to its version, both
evals share one eval set); then the decision is tagged on the challenger's version and written to
the lake's `iterations` table; only then do the aliases move (`previous-champion` first, so a
failure in between leaves `champion` where it was). A first model becomes champion.
"""

from __future__ import annotations

from typing import Any

from aitp.registry.store import (
    CHALLENGER,
    CHAMPION,
    PREVIOUS,
    TAG,
    Decision,
    ModelVersion,
    PromotionConfig,
    PromotionError,
    Registry,
)


def _require(registry: Registry, experiment: str, ref: str) -> ModelVersion:
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


def promote(
    registry: Registry,
    experiment: str,
    iteration: int,
    challenger_version: str,
    challenger_eval: Any,
    champion_eval: Any | None,
    config: PromotionConfig | None = None,
) -> Decision:
    """Compare challenger and champion on one eval set; move `champion` only when the challenger wins."""
    config = config or PromotionConfig()
    challenger = _require(registry, experiment, challenger_version)
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
    row = {
        "mlflow_run_id": run_id,
        "model_in": champion.model_version if champion else None,
        "model_out": challenger.model_version,
        "promoted": promoted,
        "promote_reason": reason,
    }
    record_iteration(registry.home, experiment, iteration, row)
    if promoted:
        try:
            if champion is not None:
                registry.set_alias(experiment, PREVIOUS, champion.version)
                registry.tag_version(experiment, challenger.version, {TAG + "previous_champion": champion.version})
            registry.set_alias(experiment, CHAMPION, challenger.version)
        except Exception as exc:
            record_iteration(
                registry.home,
                experiment,
                iteration,
                {**row, "promoted": False, "promote_reason": f"registry error, not promoted: {exc}"},
            )
            raise
    return decision


def evaluate_version(
    registry: Registry, experiment: str, iteration: int, ref: str, eval_config: Any, role: str = "challenger"
) -> Any:
    """A version's eval on the experiment's eval set: from the lake if it was measured, else run and logged now."""
    from aitp.evaluate import build_eval_set, evaluate, load_eval

    mv = _require(registry, experiment, ref)
    found = load_eval(registry.home, experiment, mv.model_version, build_eval_set(eval_config).eval_name)
    if found is not None:
        return found
    result = evaluate(
        registry.home,
        experiment,
        iteration,
        registry.checkpoint_path(mv),
        eval_config,
        model_version=mv.model_version or None,
    )
    registry.log_eval(result, role)
    return result


def gate(
    registry: Registry,
    experiment: str,
    iteration: int,
    eval_config: Any,
    config: PromotionConfig | None = None,
    challenger: str = CHALLENGER,
) -> Decision:
    """Evaluate challenger and champion where needed (same eval set), then `promote`."""
    challenger_eval = evaluate_version(registry, experiment, iteration, challenger, eval_config, "challenger")
    champion = registry.get(experiment, CHAMPION)
    champion_eval = None
    if champion is not None and champion.version != _require(registry, experiment, challenger).version:
        champion_eval = evaluate_version(registry, experiment, iteration, CHAMPION, eval_config, "champion")
    return promote(registry, experiment, iteration, challenger, challenger_eval, champion_eval, config)


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


def record_iteration(home, experiment: str, iteration: int, fields: dict[str, Any]) -> None:
    """Merge fields into the iteration's row of the lake's `iterations` table (one row per iteration)."""
    from aitp.lake import read_partition, write_partition
    from aitp.lake.errors import UnknownPartitionError

    try:
        existing = read_partition(home, "iterations", experiment, iteration).to_pylist()
    except UnknownPartitionError:
        existing = []
    row = {k: v for k, v in (existing[0] if existing else {}).items() if k not in ("experiment", "iteration")}
    for key, value in fields.items():
        if key == "model_in" and row.get("model_in"):
            continue  # the iteration's starting model, set by whoever started it, wins
        row[key] = value
    row["created_at"] = None
    write_partition(home, "iterations", experiment, iteration, [row], shard="0")
